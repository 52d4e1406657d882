"""**What.** The LSO is the first offset of the earliest open transaction on the
partition (ProducerStateManager.firstUnstableOffset), or the high watermark when
none is open. The rule reports each replica whose LSO an open transaction holds
behind the high watermark (``replication-offset-checkpoint``; the log end offset
without one):

* ``stuck`` — the pinning transaction is older than ``transaction.max.timeout.ms``:
  the coordinator would have aborted a live transaction by then;
* ``open`` — it is younger: ``hanging-transaction`` says whether it can still
  complete.

**Why it matters.** ``read_committed`` consumers never read past the LSO and the
log cleaner never compacts past it, so one open transaction that nobody will
ever close stops both for good: the groups reading the partition stall while
its log grows. On ``__consumer_offsets`` an open transactional offset commit
(``sendOffsetsToTransaction``) keeps the group's offsets *pending*: offset
fetches with ``require_stable`` (KIP-447) answer UNSTABLE_OFFSET_COMMIT and the
group's consumers cannot start.

**How it arises.** Any hanging transaction (see ``hanging-transaction``): late
writes after an abort, writes to partitions never added to a transaction,
markers lost after an unclean leader election.
"""

from __future__ import annotations

from auditor.engine.findings import evidence
from auditor.engine.rule import Evidence, Kind, Rule
from auditor.engine.views import REPLICA
from rules._common import ABORT, COMPACTED, COORDINATOR_EPOCH

EVIDENCE = (
    Evidence("last_stable_offset", "bigint", "the partition's LSO as the broker computes it from this log"),
    Evidence("high_watermark", "bigint", "the high watermark: the replication checkpoint's, capped at the log end "
                                         "offset (the log end offset without a checkpoint)"),
    Evidence("log_end_offset", "bigint", "next offset after the last batch of the log"),
    Evidence("lag_offsets", "bigint", "offsets between the LSO and the high watermark"),
    Evidence("lag_ms", "bigint", "time between the pinning transaction's first batch and the newest batch"),
    Evidence("open_transactions", "bigint", "open transactions on the partition"),
    COMPACTED,
    Evidence("consumer_groups", "array<string>", "groups with committed offsets on the partition"),
    Evidence("pending_offset_commit_groups", "array<string>",
             "groups with a transactional offset commit of the pinning producer still open"),
    COORDINATOR_EPOCH,
)

_MESSAGE = ("LSO of {topic}-{partition} is pinned at {last_stable_offset} by producer {producer_id}, {lag_offsets} offsets "
            "({lag_ms:duration}) behind the high watermark {high_watermark}: read_committed consumers stop at the LSO"
            "[[; groups reading it: {consumer_groups:list}]]"
            "[[{compacted:if}; the log cleaner cannot compact past the LSO]]"
            "[[; pending transactional offset commits block offset fetches (KIP-447) of groups: "
            "{pending_offset_commit_groups:list}]]")
KINDS = {
    "open": Kind("info", _MESSAGE + " (the transaction is younger than transaction.max.timeout.ms)",
                 advice="the pinning transaction is younger than transaction.max.timeout.ms: the hanging-transaction "
                        "finding on the same offset says whether it can still complete (in-flight) or must be aborted"),
    "stuck": Kind("error", _MESSAGE, ABORT, "abort the pinning transaction, then audit again (hanging-transaction "
                                            "says why it hangs)"),
}


def run(ctx):
    from pyspark.sql import functions as F

    # the model's LSO per replica (auditor.producer_state): pinned by its earliest open transaction
    lso = ctx.last_stable_offsets.where("pin IS NOT NULL AND pin.first_offset < hw")
    pin = lso.select(
        *REPLICA, "high_watermark", "log_end_offset", "max_timestamp", "is_compacted", "hw", "open_transactions",
        "last_stable_offset", F.col("pin.producer_id").alias("producer_id"), F.col("pin.first_offset").alias("first_offset"),
        F.col("pin.producer_epoch").alias("data_epoch_max"), F.col("pin.first_timestamp").alias("first_timestamp"),
        F.col("pin.prev_coordinator_epoch").alias("prev_coordinator_epoch"))

    oc = ctx.table("offset_commits").where("NOT is_tombstone")
    readers = oc.groupBy("cluster_id", "topic", "partition").agg(F.sort_array(F.collect_set("group_id")).alias("groups"))
    pin = pin.join(readers, ["cluster_id", "topic", "partition"], "left")
    pending = (
        oc.withColumnRenamed("log_topic", "o_topic").withColumnRenamed("log_partition", "o_partition")
        .where("o_topic = '__consumer_offsets' AND batch_is_transactional")
        .select("cluster_id", "broker_id", F.col("o_topic").alias("topic"), F.col("o_partition").alias("partition"),
                F.col("batch_producer_id").alias("producer_id"), F.col("offset").alias("commit_offset"), "group_id")
    )
    keys = ["cluster_id", "broker_id", "topic", "partition", "producer_id"]
    p = pending.withColumnRenamed("group_id", "pending_group")
    on = [pin[k].eqNullSafe(p[k]) for k in keys] + [p["commit_offset"] >= pin["first_offset"]]
    pin = pin.join(p, on, "left").select(pin["*"], p["pending_group"]).groupBy(*pin.columns).agg(
        F.sort_array(F.collect_set("pending_group")).alias("pending_groups"))

    lag_ms = F.col("max_timestamp") - F.col("first_timestamp")
    pin = ctx.with_as_of(pin)
    old = (F.col("as_of_ms") - F.col("first_timestamp")) > F.lit(ctx.options.transaction_max_timeout_ms)
    return pin.select(
        *REPLICA,
        "producer_id",
        F.col("data_epoch_max").alias("producer_epoch"),
        F.col("first_offset"),
        (F.col("hw") - 1).alias("last_offset"),
        "first_timestamp",
        F.col("max_timestamp").alias("last_timestamp"),
        lag_ms.alias("duration_ms"),
        F.when(old, F.lit("stuck")).otherwise(F.lit("open")).alias("kind"),
        evidence(
            EVIDENCE,
            last_stable_offset=F.col("last_stable_offset"),
            high_watermark=F.col("hw"),
            log_end_offset=F.col("log_end_offset"),
            lag_offsets=F.col("hw") - F.col("last_stable_offset"),
            lag_ms=lag_ms,
            open_transactions=F.col("open_transactions"),
            compacted=F.col("is_compacted"),
            consumer_groups=F.coalesce("groups", F.array()),
            pending_offset_commit_groups=F.coalesce("pending_groups", F.array()),
            coordinator_epoch=F.col("prev_coordinator_epoch"),
        ).alias("evidence"),
    )


RULE = Rule(
    id="stuck-lso",
    title="Last stable offset pinned behind the high watermark by an open transaction",
    run=run,
    kinds=KINDS,
    evidence=EVIDENCE,
    proposals=("KIP-98", "KIP-447", "KIP-890"),
    views=("as_of", "last_stable_offsets"),
    needs=("batches",),
)
