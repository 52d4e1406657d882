"""hanging-transaction: transactional data with no marker after it.

**What.** A producer's transactional batches on a partition that no COMMIT or
ABORT marker of that producer closes. While such a transaction is open the
partition's last stable offset (LSO) cannot pass its first offset, so
``read_committed`` consumers stop there and the log cleaner cannot compact past it.

**How it arises.** The coordinator writes markers only to partitions it knows
are in the transaction. A produce request delayed past the abort of its
transaction (KAFKA-12671) or a buggy client that writes to a partition it never
added (AddPartitionsToTxn) leaves data no marker will ever close; so do lost
markers after unclean leader elections. KIP-890 (part 1: broker-side
verification, 3.6; part 2: epoch bump per transaction, transaction.version 2)
closes these holes for new clients.

**Classification** (``evidence['classification']``):

* ``in-flight`` — the coordinator says Ongoing with this partition, and the
  transaction is younger than its timeout: normal, reported as info.
* ``late-write`` — the data belongs to a producer session (id, epoch) that has
  already had a marker on this partition and the coordinator does not list the
  partition in an ongoing, unexpired transaction (KAFKA-12671 pattern). With
  transaction.version 0/1 a producer keeps its epoch across transactions, so
  the same session writing again after a marker is normal *while* the
  coordinator has the partition in a new transaction.
* ``unknown-to-coordinator`` — no ``__transaction_state`` record names this
  producer id (the dump holds N of the coordinator's partitions: see evidence).
* ``hanging`` — the coordinator has completed, fenced or expired the
  transaction, does not list the partition, or the transaction is older than
  ``transaction.max.timeout.ms``.

Without ``__transaction_state`` in the dump the rule falls back to age (older
than ``transaction.max.timeout.ms`` = hanging) and says so in the evidence.

**Evidence.** first offset of the open transaction (the abort ``--start-offset``),
last data offset, producer id/epoch, transactional id, coordinator state,
timeout and listed partitions, the previous marker of the same producer, age.

**Remediation.** Abort it at the partition leader with ``kafka-transactions.sh
abort`` (KIP-664): ``--start-offset`` on brokers 3.0+, or the
``--producer-id/--producer-epoch/--coordinator-epoch`` form on older ones. Then
find the client that wrote it (transactional id) and upgrade it to a KIP-890 client.
"""

from __future__ import annotations

from auditor.engine.findings import evidence
from auditor.engine.rule import Rule
from auditor.engine.views import REPLICA
from rules._common import abort_command, ms_text


def run(ctx):
    from pyspark.sql import functions as F

    o = ctx.with_as_of(ctx.open_transactions)
    as_of = F.col("as_of_ms")
    max_timeout = F.lit(ctx.options.transaction_max_timeout_ms)
    age = as_of - F.col("first_timestamp")
    session_had_marker = F.col("prev_marker_epoch").isNotNull() & (F.col("data_epoch_min") <= F.col("prev_marker_epoch"))

    if ctx.has_coordinator_log:
        ids = ctx.producer_transactional_ids.groupBy("cluster_id", "producer_id").agg(F.min("transactional_id").alias("transactional_id"))
        coord = ctx.coordinator_latest.select(
            "cluster_id", "transactional_id",
            F.col("state").alias("coordinator_state"),
            F.col("producer_id").alias("coordinator_producer_id"),
            F.col("producer_epoch").alias("coordinator_producer_epoch"),
            F.col("transaction_timeout_ms"),
            F.col("start_timestamp_ms"),
            F.col("topic_partitions"),
        )
        o = o.join(ids, ["cluster_id", "producer_id"], "left").join(coord, ["cluster_id", "transactional_id"], "left")
        cp = ctx.coordinator_partitions.withColumnRenamed("cluster_id", "cp_cluster_id")
        o = o.join(cp, o["cluster_id"].eqNullSafe(cp["cp_cluster_id"]), "left").drop("cp_cluster_id")
        listed = F.exists(F.coalesce(F.col("topic_partitions"), F.array()),
                          lambda tp: (tp["topic"] == F.col("topic")) & (tp["partition"] == F.col("partition")))
        ongoing_here = (F.col("coordinator_state") == "Ongoing") & listed & (
            F.col("coordinator_producer_id") == F.col("producer_id"))
        timeout = F.least(F.coalesce(F.col("transaction_timeout_ms"), max_timeout), max_timeout)
        young = (as_of - F.coalesce(F.col("start_timestamp_ms"), F.col("first_timestamp"))) <= timeout
        cls = (
            F.when(F.col("transactional_id").isNull(), F.lit("unknown-to-coordinator"))
            .when(ongoing_here & young, F.lit("in-flight"))
            .when(session_had_marker & ~(ongoing_here & young), F.lit("late-write"))
            .otherwise(F.lit("hanging"))
        )
        basis = F.concat(F.lit("coordinator record ("), F.col("coordinator_partitions").cast("string"), F.lit(" __transaction_state partitions in the dump)"))
    else:
        o = o.withColumn("transactional_id", F.lit(None).cast("string"))
        for c, t in (("coordinator_state", "string"), ("transaction_timeout_ms", "int"), ("topic_partitions", "string")):
            o = o.withColumn(c, F.lit(None).cast(t))
        cls = F.when(age > max_timeout, F.lit("hanging")).otherwise(F.lit("in-flight"))
        basis = F.lit("age only: no __transaction_state in the dump")

    o = o.withColumn("classification", cls)
    sev = F.when(F.col("classification") == "in-flight", F.lit("info")).when(
        F.col("classification").isin("late-write", "unknown-to-coordinator"), F.lit("critical")).otherwise(F.lit("error"))
    why = (
        F.when(F.col("classification") == "in-flight", F.lit("coordinator has it Ongoing with this partition; within its timeout"))
        .when(F.col("classification") == "late-write", F.concat(
            F.lit("written by producer session "), F.col("producer_id").cast("string"), F.lit("/"),
            F.col("data_epoch_min").cast("string"), F.lit(" after that session's marker at offset "),
            F.col("prev_marker_offset").cast("string"), F.lit("; no marker will close it (KAFKA-12671)")))
        .when(F.col("classification") == "unknown-to-coordinator", F.lit("no __transaction_state record names this producer id"))
        .when(F.col("coordinator_state").isNotNull(), F.concat(
            F.lit("coordinator state is "), F.col("coordinator_state"),
            F.when(F.col("coordinator_state") == "Ongoing", F.lit(" but without this partition or past its timeout")).otherwise(F.lit(""))))
        .otherwise(F.concat(F.lit("open for "), ms_text(age), F.lit(", longer than transaction.max.timeout.ms")))
    )
    out = o.select(
        *REPLICA,
        "producer_id",
        F.col("data_epoch_max").alias("producer_epoch"),
        "transactional_id",
        "first_offset",
        F.col("last_data_offset").alias("last_offset"),
        "first_timestamp",
        F.col("last_data_timestamp").alias("last_timestamp"),
        age.alias("duration_ms"),
        sev.alias("severity"),
        F.concat(
            F.col("classification"), F.lit(" transaction on "), F.col("topic"), F.lit("-"), F.col("partition").cast("string"),
            F.lit(" from offset "), F.col("first_offset").cast("string"), F.lit(" (producer "), F.col("producer_id").cast("string"),
            F.lit(", epoch "), F.col("data_epoch_max").cast("string"), F.lit(", "),
            F.coalesce(F.concat(F.lit("transactional id "), F.col("transactional_id")), F.lit("no transactional id")),
            F.lit("), open for "), ms_text(age), F.lit(": "), why,
        ).alias("message"),
        evidence(
            classification=F.col("classification"),
            basis=basis,
            coordinator_state=F.col("coordinator_state"),
            coordinator_partitions=F.col("topic_partitions").cast("string"),
            transaction_timeout_ms=F.col("transaction_timeout_ms"),
            data_batches=F.col("data_batches"),
            previous_marker_offset=F.col("prev_marker_offset"),
            previous_marker_epoch=F.col("prev_marker_epoch"),
            coordinator_epoch=F.col("prev_coordinator_epoch"),
            as_of_ms=as_of,
        ).alias("evidence"),
        abort_command(F.col("topic"), F.col("partition"), F.col("first_offset"), F.col("producer_id"),
                      F.col("data_epoch_max"), F.col("prev_coordinator_epoch")).alias("remediation"),
    )
    return out


RULE = Rule(
    id="hanging-transaction",
    title="Transactional data that no marker closes (open, hanging, late write)",
    severity="error",
    run=run,
    proposals=("KIP-890", "KIP-664", "KAFKA-12671"),
    evidence=("classification", "basis", "coordinator_state", "coordinator_partitions",
        "transaction_timeout_ms", "data_batches", "previous_marker_offset", "previous_marker_epoch",
        "coordinator_epoch", "as_of_ms"),
    remediation="kafka-transactions.sh abort --topic T --partition N --start-offset O (or --producer-id/--producer-epoch/--coordinator-epoch before 3.0)",
    needs=("batches",),
)
