"""**What.** A producer's transactional batches on a partition that no COMMIT or
ABORT marker of that producer closes, classified with the coordinator's record
of the transaction (``__transaction_state``):

* ``in-flight`` — the coordinator has the transaction Ongoing with this
  partition, and it is younger than its timeout: normal;
* ``late-write`` — the data belongs to a producer session (id, epoch) that has
  already had a marker on this partition, and the coordinator does not list the
  partition in an ongoing, unexpired transaction (the KAFKA-12671 pattern). With
  transaction.version 0/1 a producer keeps its epoch across transactions, so the
  same session writing again after a marker is normal *while* the coordinator
  has the partition in a new transaction;
* ``unknown-to-coordinator`` — no ``__transaction_state`` record of the cluster
  names this producer id;
* ``hanging`` — the coordinator has completed, fenced or expired the
  transaction, does not list the partition, or the transaction is older than its
  timeout (at most ``transaction.max.timeout.ms``).

A cluster whose ``__transaction_state`` is not in the dump is judged by age
alone: ``hanging`` when older than ``transaction.max.timeout.ms``, else
``in-flight``.

**Why it matters.** While the transaction is open the partition's last stable
offset (LSO) cannot pass its first offset: ``read_committed`` consumers stop
there and see nothing written after it, the log cleaner cannot compact past it,
and on ``__consumer_offsets`` the group's pending offsets keep its consumers from
starting. Only a marker closes it, and for a hanging transaction none will come:
it stays until an administrator aborts it.

**How it arises.** The coordinator writes markers only to partitions it knows
are in the transaction. A produce request delayed past the abort of its
transaction (KAFKA-12671) or a buggy client that writes to a partition it never
added (AddPartitionsToTxn) leaves data no marker will ever close; so do lost
markers after unclean leader elections. KIP-890 (part 1: broker-side
verification, 3.6; part 2: epoch bump per transaction, transaction.version 2)
closes these holes for new clients.
"""

from __future__ import annotations

from auditor.engine.findings import evidence
from auditor.engine.rule import Evidence, Kind, Rule
from auditor.engine.views import REPLICA
from rules._common import ABORT, COORDINATOR_EPOCH

EVIDENCE = (
    Evidence("age_only", "boolean", "true when the dump has no __transaction_state: classified by age alone"),
    Evidence("coordinator_partitions_in_dump", "int", "how many __transaction_state partitions the dump holds"),
    Evidence("coordinator_state", "string", "state of the transactional id's latest coordinator record"),
    Evidence("coordinator_topic_partitions", "array<string>", "partitions that record lists in the transaction"),
    Evidence("transaction_timeout_ms", "int", "the transaction's timeout in that record"),
    Evidence("data_batches", "bigint", "transactional data batches of the open transaction"),
    Evidence("previous_marker_offset", "bigint", "offset of the producer's last marker on the partition before it"),
    Evidence("previous_marker_epoch", "int", "producer epoch of that marker"),
    COORDINATOR_EPOCH,
    Evidence("as_of_ms", "bigint", "the instant ages are measured against"),
)

_WHERE = ("on {topic}-{partition} from offset {first_offset} (producer {producer_id}, epoch {producer_epoch}"
          "[[, transactional id {transactional_id}]]), open for {duration_ms:duration}")
_FIND_CLIENT = ("after the abort, find the client of the transactional id (or producer id) and upgrade it to a KIP-890 client "
                "(3.6+ brokers verify partitions; transaction.version 2 bumps the epoch per transaction)")
KINDS = {
    "in-flight": Kind("info", "open transaction " + _WHERE + ": [[the coordinator has it {coordinator_state} with this "
                      "partition, within its timeout]][[{age_only:if}younger than transaction.max.timeout.ms (no "
                      "__transaction_state in the dump)]]"),
    "late-write": Kind("critical", "late write " + _WHERE + ": written by producer session {producer_id}/{producer_epoch} "
                       "after that session's marker at offset {previous_marker_offset}; no marker will close it (KAFKA-12671)",
                       ABORT, _FIND_CLIENT),
    "unknown-to-coordinator": Kind("critical", "transaction unknown to the coordinator " + _WHERE + ": no "
                                   "__transaction_state record names producer {producer_id} ({coordinator_partitions_in_dump} "
                                   "coordinator partitions in the dump)", ABORT, _FIND_CLIENT),
    "hanging": Kind("error", "hanging transaction " + _WHERE + ": [[the coordinator's state is {coordinator_state}, "
                    "without this partition in an unexpired transaction]][[{age_only:if}older than "
                    "transaction.max.timeout.ms (no __transaction_state in the dump)]]", ABORT, _FIND_CLIENT),
}


def run(ctx):
    from pyspark.sql import functions as F

    o = ctx.with_as_of(ctx.open_transactions)
    as_of = F.col("as_of_ms")
    max_timeout = F.lit(ctx.options.transaction_max_timeout_ms)
    age = as_of - F.col("first_timestamp")
    session_had_marker = F.col("prev_marker_epoch").isNotNull() & (F.col("data_epoch_min") <= F.col("prev_marker_epoch"))
    by_age = F.when(age > max_timeout, F.lit("hanging")).otherwise(F.lit("in-flight"))

    if ctx.has_coordinator_log:
        ids = ctx.producer_transactional_ids.groupBy("cluster_id", "producer_id").agg(F.min("transactional_id").alias("transactional_id"))
        coord = ctx.coordinator_latest.select(
            "cluster_id", "transactional_id",
            F.col("state").alias("coordinator_state"),
            F.col("producer_id").alias("coordinator_producer_id"),
            F.col("transaction_timeout_ms"),
            F.col("start_timestamp_ms"),
            F.col("topic_partitions"),
        )
        o = o.join(ids, ["cluster_id", "producer_id"], "left").join(coord, ["cluster_id", "transactional_id"], "left")
        # per cluster: a cluster whose __transaction_state is not in the dump is judged by age alone
        o = o.join(F.broadcast(ctx.coordinator_partitions), "cluster_id", "left")
        has_log = F.col("coordinator_partitions").isNotNull()
        listed = F.exists(F.coalesce(F.col("topic_partitions"), F.array()),
                          lambda tp: (tp["topic"] == F.col("topic")) & (tp["partition"] == F.col("partition")))
        ongoing_here = (F.col("coordinator_state") == "Ongoing") & listed & (
            F.col("coordinator_producer_id") == F.col("producer_id"))
        timeout = F.least(F.coalesce(F.col("transaction_timeout_ms"), max_timeout), max_timeout)
        young = (as_of - F.coalesce(F.col("start_timestamp_ms"), F.col("first_timestamp"))) <= timeout
        kind = (
            F.when(~has_log, by_age)
            .when(F.col("transactional_id").isNull(), F.lit("unknown-to-coordinator"))
            .when(ongoing_here & young, F.lit("in-flight"))
            .when(session_had_marker, F.lit("late-write"))
            .otherwise(F.lit("hanging"))
        )
        listed_names = F.transform(F.col("topic_partitions"), lambda tp: F.concat(tp["topic"], F.lit("-"), tp["partition"].cast("string")))
        age_only, in_dump = ~has_log, F.col("coordinator_partitions")
    else:
        o = o.withColumn("transactional_id", F.lit(None).cast("string"))
        for c, t in (("coordinator_state", "string"), ("transaction_timeout_ms", "int")):
            o = o.withColumn(c, F.lit(None).cast(t))
        kind = by_age
        listed_names, age_only, in_dump = F.lit(None), F.lit(True), F.lit(None)

    return o.select(
        *REPLICA,
        "producer_id",
        F.col("data_epoch_max").alias("producer_epoch"),
        "transactional_id",
        "first_offset",
        F.col("last_data_offset").alias("last_offset"),
        "first_timestamp",
        F.col("last_data_timestamp").alias("last_timestamp"),
        age.alias("duration_ms"),
        kind.alias("kind"),
        evidence(
            EVIDENCE,
            age_only=age_only,
            coordinator_partitions_in_dump=in_dump,
            coordinator_state=F.col("coordinator_state"),
            coordinator_topic_partitions=listed_names,
            transaction_timeout_ms=F.col("transaction_timeout_ms"),
            data_batches=F.col("data_batches"),
            previous_marker_offset=F.col("prev_marker_offset"),
            previous_marker_epoch=F.col("prev_marker_epoch"),
            coordinator_epoch=F.col("prev_coordinator_epoch"),
            as_of_ms=as_of,
        ).alias("evidence"),
    )


RULE = Rule(
    id="hanging-transaction",
    title="Transactional data that no marker closes (open, hanging, late write)",
    run=run,
    kinds=KINDS,
    evidence=EVIDENCE,
    proposals=("KIP-890", "KIP-664", "KAFKA-12671"),
    views=("as_of", "coordinator_latest", "coordinator_partitions", "open_transactions", "producer_transactional_ids"),
    needs=("batches",),
)
