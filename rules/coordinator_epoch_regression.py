"""**What.** Every COMMIT/ABORT marker carries the epoch of the transaction
coordinator that wrote it (the leader epoch of the producer's
``__transaction_state`` partition). The partition leader remembers, per producer
id, the coordinator epoch of the last marker and rejects a marker with a lower
one (TRANSACTION_COORDINATOR_FENCED): after a coordinator moves, the old one
is a zombie and must not decide transactions any more. Walking the markers of a
replica in offset order, the rule reports:

* ``same-producer`` — a marker whose coordinator epoch is lower than that of an
  earlier marker *of the same producer id*: exactly what the leader should have
  rejected;
* ``same-producer-expired-state`` — the same, where the producer was idle on the
  partition for longer than ``producer.id.expiration.ms`` before the marker: its
  state, and with it the remembered coordinator epoch, had been dropped
  (KAFKA-9144);
* ``same-coordinator-partition`` — a marker whose coordinator epoch is lower than
  an earlier marker of *another* producer whose transactional id lives on the
  same ``__transaction_state`` partition (known only with the coordinator log in
  the dump): an old coordinator still sending markers after its successor had
  written some. The leader accepts it (the check is per producer), so it is only
  a sign of a coordinator failover race; epochs of different coordinator
  partitions are never compared.

**Why it matters.** A zombie coordinator's marker decides a transaction that
the current coordinator may have decided the other way: ``read_committed``
consumers then see records the coordinator aborted, or lose records it
committed (``torn-transaction`` compares the two when ``__transaction_state`` is
in the dump). On brokers without the KAFKA-9144 fix the regression also makes
log recovery of the partition fail.

**How it arises.** KAFKA-9144 (fixed in 2.5, backported to older branches): producer state expired
using data timestamps only, so after a coordinator timed out a transaction the
broker forgot the coordinator epoch and later accepted a zombie coordinator's
marker; log recovery then failed on the regression. Since the fix only the
leader checks coordinator epochs — replication and log recovery just log a
warning — so a regression on disk can also come from a replica that took over
after an unclean leader election, or from a manual ``kafka-transactions.sh
abort`` given a stale ``--coordinator-epoch``.
"""

from __future__ import annotations

from auditor.engine.findings import evidence
from auditor.engine.rule import Evidence, Kind, Rule
from auditor.engine.views import REPLICA, join_replica

EVIDENCE = (
    Evidence("marker_type", "string", "COMMIT or ABORT: the late marker's decision"),
    Evidence("coordinator_epoch", "int", "coordinator epoch of the late marker"),
    Evidence("earlier_coordinator_epoch", "int", "the higher coordinator epoch of an earlier marker"),
    Evidence("earlier_marker_offset", "bigint", "offset of that earlier marker"),
    Evidence("earlier_marker_type", "string", "its decision"),
    Evidence("earlier_marker_producer_id", "bigint", "its producer"),
    Evidence("previous_marker_offset", "bigint", "the producer's marker right before the late one"),
    Evidence("previous_coordinator_epoch", "int", "that marker's coordinator epoch"),
    Evidence("idle_ms", "bigint", "how long the producer was idle before the late marker"),
    Evidence("producer_id_expiration_ms", "bigint", "producer.id.expiration.ms the idle time is compared with"),
    Evidence("coordinator_partition", "int", "__transaction_state partition of the producer's transactional id"),
)

_WHERE = ("{marker_type} marker at {topic}-{partition} offset {last_offset} (producer {producer_id}, epoch "
          "{producer_epoch}[[, transactional id {transactional_id}]]) was written by coordinator epoch "
          "{coordinator_epoch} after a marker of coordinator epoch {earlier_coordinator_epoch} at offset "
          "{earlier_marker_offset}")
_FENCED = " for the same producer: the leader should have fenced it (TRANSACTION_COORDINATOR_FENCED)"
_ADVICE = ("check the late marker's decision against the coordinator's record (torn-transaction) and reconcile the "
           "affected records downstream if it differs; upgrade brokers without the KAFKA-9144 fix (before 2.5)")
KINDS = {
    "same-producer": Kind("error", _WHERE + _FENCED, advice=_ADVICE),
    "same-producer-expired-state": Kind("error", _WHERE + _FENCED + "; the producer was idle {idle_ms:duration} "
                                        "before it, so its state had expired (KAFKA-9144)", advice=_ADVICE),
    "same-coordinator-partition": Kind("info", _WHERE + " from producer {earlier_marker_producer_id} coordinated by the "
                                       "same __transaction_state-{coordinator_partition}: an old coordinator was still "
                                       "sending markers after its successor",
                                       advice="none needed by itself: a coordinator failover race; check "
                                              "torn-transaction findings for this producer"),
}


def run(ctx):
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    # one row per marker (ctx.transactions: each transaction row holds at most one marker)
    m = ctx.transactions.where("marker_offset IS NOT NULL AND coordinator_epoch IS NOT NULL AND coordinator_epoch >= 0").select(
        *REPLICA, "producer_id", "marker_offset", "marker_type", "marker_epoch", "coordinator_epoch", "marker_timestamp",
        "last_data_timestamp",
    )
    mark = F.struct(F.col("coordinator_epoch").alias("coordinator_epoch"), F.col("marker_offset").alias("offset"),
                    F.col("marker_type").alias("type"), F.col("producer_id").alias("producer_id"))
    w = Window.partitionBy(*REPLICA, "producer_id").orderBy("marker_offset")
    before = w.rowsBetween(Window.unboundedPreceding, -1)
    p = (m.withColumn("top", F.max(mark).over(before))
         .withColumn("prev_offset", F.lag("marker_offset").over(w))
         .withColumn("prev_coordinator_epoch", F.lag("coordinator_epoch").over(w))
         .withColumn("prev_marker_timestamp", F.lag("marker_timestamp").over(w))
         .where(F.col("coordinator_epoch") < F.col("top.coordinator_epoch")))
    # idle before this marker: since its own transaction's last data, else since the previous marker
    idle = F.col("marker_timestamp") - F.greatest("last_data_timestamp", "prev_marker_timestamp")  # greatest skips nulls
    expired = idle >= F.lit(ctx.options.producer_id_expiration_ms)
    p = p.select("*", F.lit("producer").alias("scope"), idle.alias("idle_ms"),
                 F.when(expired, F.lit("producer-state-expired")).otherwise(F.lit("unexplained")).alias("cause"))
    cols = [*REPLICA, "producer_id", "marker_offset", "marker_type", "marker_epoch", "coordinator_epoch", "marker_timestamp",
            "top", "prev_offset", "prev_coordinator_epoch", "scope", "idle_ms", "cause", "transactional_id", "coordinator_partition"]

    if ctx.has_rows("transaction_log"):
        owner = ctx.table("transaction_log").where("record_type = 'transaction' AND producer_id >= 0").groupBy(
            "cluster_id", "producer_id").agg(F.min("transactional_id").alias("transactional_id"),
                                             F.min("partition").alias("coordinator_partition"))
        p = p.join(owner, ["cluster_id", "producer_id"], "left")
        mo = m.join(owner, ["cluster_id", "producer_id"])
        wc = Window.partitionBy(*REPLICA, "coordinator_partition").orderBy("marker_offset")
        c = mo.withColumn("top", F.max(mark).over(wc.rowsBetween(Window.unboundedPreceding, -1))).where(
            (F.col("coordinator_epoch") < F.col("top.coordinator_epoch")) & (F.col("top.producer_id") != F.col("producer_id")))
        c = c.select("*", F.lit(None).cast("long").alias("prev_offset"), F.lit(None).cast("int").alias("prev_coordinator_epoch"),
                     F.lit("coordinator-partition").alias("scope"), F.lit(None).cast("long").alias("idle_ms"),
                     F.lit(None).cast("string").alias("cause"))
        # a regression already reported for the producer itself is not repeated partition-wide
        c = join_replica(c, p.select(*REPLICA, "producer_id", "marker_offset"), "left_anti", on=["producer_id", "marker_offset"])
        f = p.select(*cols).unionByName(c.select(*cols))
    else:
        f = p.withColumn("transactional_id", F.lit(None).cast("string")).withColumn(
            "coordinator_partition", F.lit(None).cast("int")).select(*cols)

    kind = F.when(F.col("scope") != "producer", F.lit("same-coordinator-partition")).when(
        F.col("cause") == "producer-state-expired", F.lit("same-producer-expired-state")).otherwise(F.lit("same-producer"))
    return f.select(
        *REPLICA, "producer_id", F.col("marker_epoch").alias("producer_epoch"), "transactional_id",
        F.col("top.offset").alias("first_offset"), F.col("marker_offset").alias("last_offset"),
        F.col("marker_timestamp").alias("last_timestamp"),
        F.col("idle_ms").alias("duration_ms"),
        kind.alias("kind"),
        evidence(
            EVIDENCE,
            marker_type=F.col("marker_type"),
            coordinator_epoch=F.col("coordinator_epoch"),
            earlier_coordinator_epoch=F.col("top.coordinator_epoch"),
            earlier_marker_offset=F.col("top.offset"),
            earlier_marker_type=F.col("top.type"),
            earlier_marker_producer_id=F.col("top.producer_id"),
            previous_marker_offset=F.col("prev_offset"),
            previous_coordinator_epoch=F.col("prev_coordinator_epoch"),
            idle_ms=F.col("idle_ms"),
            producer_id_expiration_ms=F.lit(ctx.options.producer_id_expiration_ms),
            coordinator_partition=F.col("coordinator_partition"),
        ).alias("evidence"),
    )


RULE = Rule(
    id="coordinator-epoch-regression",
    title="Transaction marker from an older coordinator epoch after a newer one",
    run=run,
    kinds=KINDS,
    evidence=EVIDENCE,
    proposals=("KIP-98", "KAFKA-9144"),
    views=("transactions",),
    needs=("batches",),
    tables=("transaction_log",),
)
