"""**What.** The LSO is the first offset of the earliest open transaction on the
partition (ProducerStateManager.firstUnstableOffset), or the high watermark when
none is open. The rule reports each replica whose LSO an open transaction holds
behind the high watermark (``replication-offset-checkpoint``; the log end offset
without one, and where the log dir was not cleanly stopped: there the broker had
not checkpointed its latest high watermark, so the checkpoint is only a lower
bound and the pin is judged against what the log holds):

* ``stuck`` — the pinning transaction will not close by itself: the model's
  verdict on it (``auditor/model/verdicts.py``) is hanging, late-write or
  unknown-to-coordinator;
* ``open`` — it is in flight (the coordinator has it Ongoing with this
  partition, within its timeout);
* ``two-phase-commit`` — it is a two-phase-commit transaction (KIP-939: the
  coordinator has it Ongoing with a transaction timeout of
  ``Integer.MAX_VALUE`` and never times it out): the LSO is pinned by design
  until the external transaction coordinator commits or aborts it;
* ``closed-after-the-copy`` — the log dirs were read while the brokers ran and
  the coordinator completed the pinning transaction after the partition was
  read (``hanging-transaction``'s kind of the same name): pinned in the copy
  only;
* ``markers-undelivered`` / ``marker-skipped`` — the coordinator decided the
  pinning transaction and its marker for this partition is overdue, or was
  dropped with the transaction committed (``hanging-transaction``'s kinds of
  the same names): no abort command, since aborting a committed transaction
  tears it;
* ``undetermined`` — the input cannot tell (later segments or the coordinator's
  record not given, and not provably too old): the message says what is missing.

The kind, the transaction's age (``duration_ms``: reference instant minus its
first batch) and its transactional id are those of the ``hanging-transaction``
finding at the same offset: one verdict per transaction. How long the LSO has
trailed the newest data is the separate evidence field ``lag_ms``.

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
from auditor.engine.views import REPLICA, join_replica
from auditor.rules._common import ABORT, COMPACTED, COORDINATOR_EPOCH

EVIDENCE = (
    Evidence("last_stable_offset", "bigint", "the partition's LSO as the broker computes it from this log"),
    Evidence("high_watermark", "bigint", "the high watermark: the replication checkpoint's, capped at the log end "
                                         "offset (the log end offset without a checkpoint, or where the log dir was "
                                         "not cleanly stopped: its checkpoint lags the log)"),
    Evidence("high_watermark_checkpoint", "bigint", "the replication-offset-checkpoint's entry where it is only a lower "
                                                    "bound (log dir not cleanly stopped); null otherwise"),
    Evidence("log_end_offset", "bigint", "next offset after the last batch of the log"),
    Evidence("lag_offsets", "bigint", "offsets between the LSO and the high watermark"),
    Evidence("lag_ms", "bigint", "how long the LSO has trailed the newest data: the newest batch's timestamp minus the "
                                 "pinning transaction's first batch's"),
    Evidence("verdict", "string", "the model's verdict on the pinning transaction (hanging-transaction's kind)"),
    Evidence("undetermined_reason", "string", "what the input lacks to classify it (undetermined only)"),
    Evidence("open_transactions", "bigint", "open transactions on the partition"),
    COMPACTED,
    Evidence("consumer_groups", "array<string>", "groups with committed offsets on the partition"),
    Evidence("pending_offset_commit_groups", "array<string>",
             "groups with a transactional offset commit of the pinning producer still open"),
    COORDINATOR_EPOCH,
)

_MESSAGE = ("LSO of {topic}-{partition} is pinned at {last_stable_offset} by producer {producer_id}, {lag_offsets} offsets "
            "({lag_ms:duration} of data) behind the high watermark {high_watermark}: read_committed consumers stop at the LSO"
            "[[; groups reading it: {consumer_groups:list}]]"
            "[[{compacted:if}; the log cleaner cannot compact past the LSO]]"
            "[[; pending transactional offset commits block offset fetches (KIP-447) of groups: "
            "{pending_offset_commit_groups:list}]]")
KINDS = {
    "open": Kind("info", _MESSAGE + " (the transaction is in flight: the coordinator has it Ongoing, within its timeout)",
                 advice="no action while it is in flight: the hanging-transaction finding on the same offset follows it"),
    "two-phase-commit": Kind("info", _MESSAGE + " (by design: the pinning transaction is a two-phase-commit "
                             "transaction, KIP-939, which the coordinator never times out; the LSO moves when its "
                             "external transaction coordinator commits or aborts it)",
                             advice="no action while the external transaction coordinator has not decided: the "
                                    "hanging-transaction finding on the same offset says what completes it and when "
                                    "an abort is safe"),
    "undetermined": Kind("warning", _MESSAGE + "; whether the transaction can still complete the input cannot tell: "
                         "{undetermined_reason}",
                         advice="not an all-clear: the hanging-transaction finding on the same offset says what would "
                                "settle it; abort the transaction only once it proves hanging"),
    "closed-after-the-copy": Kind(
        "info", _MESSAGE + " (in the copy only: the coordinator completed the pinning transaction after this "
        "partition was read, so its marker, and the LSO with it, moved on after the copy)",
        advice="no action (hanging-transaction's closed-after-the-copy finding on the same offset names the "
               "coordinator's record)"),
    "markers-undelivered": Kind(
        "error", _MESSAGE + " (the coordinator decided the pinning transaction and cannot deliver this partition's "
        "marker: the LSO moves when the partition's leader is back)",
        advice="bring back the partition's leader; never abort it by hand (hanging-transaction's markers-undelivered "
               "finding on the same offset names the decision and the broker)"),
    "marker-skipped": Kind(
        "critical", _MESSAGE + " (the coordinator committed the pinning transaction and completed it without this "
        "partition's marker: no marker will come)",
        advice="only an abort unblocks it, at the cost of this partition's records of the committed transaction: "
               "hanging-transaction's marker-skipped finding on the same offset says how to keep them first"),
    "stuck": Kind("error", _MESSAGE + " (the pinning transaction is {verdict}: no marker will come)", ABORT,
                  "abort the pinning transaction, then audit again (hanging-transaction says why it hangs; when "
                  "only its age says so, the input cannot rule out a two-phase-commit transaction: check it first)"),
}


def run(ctx):
    from pyspark.sql import functions as F

    # the model's LSO per replica (auditor.model.producer_state): pinned by its earliest open transaction
    lso = ctx.last_stable_offsets.where("pin IS NOT NULL AND pin.first_offset < hw")
    pin = lso.select(
        *REPLICA, "high_watermark", "log_end_offset", "max_timestamp", "is_compacted", "hw", "hw_checkpoint",
        "hw_lower_bound", "open_transactions",
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

    # the pin's transactional id is the model's; its verdict and age come in decide(), as hanging-transaction's
    v = ctx.transaction_evidence.select(*REPLICA, "producer_id", "first_offset", "transactional_id")
    pin = join_replica(pin, v, "left", on=["producer_id", "first_offset"])
    lag_ms = F.col("max_timestamp") - F.col("first_timestamp")
    return pin.select(
        *REPLICA,
        "producer_id",
        F.col("data_epoch_max").alias("producer_epoch"),
        "transactional_id",
        F.col("first_offset"),
        (F.col("hw") - 1).alias("last_offset"),
        "first_timestamp",
        F.col("max_timestamp").alias("last_timestamp"),
        F.lit(None).cast("string").alias("kind"),  # the pin's verdict: decide()
        evidence(
            EVIDENCE,
            last_stable_offset=F.col("last_stable_offset"),
            high_watermark=F.col("hw"),
            high_watermark_checkpoint=F.when(F.col("hw_lower_bound"), F.col("hw_checkpoint")),
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


# the pin's verdict -> this rule's kind: the verdicts after which the LSO will not move without an
# administrator (hanging, late-write, unknown-to-coordinator) are "stuck"; in-flight is "open"
KIND_OF_VERDICT = {"in-flight": "open", "undetermined": "undetermined", "two-phase-commit": "two-phase-commit",
                   "markers-undelivered": "markers-undelivered", "marker-skipped": "marker-skipped",
                   "closed-after-the-copy": "closed-after-the-copy"}


def decide(finding: dict, verdicts) -> dict:
    """The pinning transaction's verdict (the kind), age and reason, as of the audit's reference
    instant: the same as ``hanging-transaction`` reports for it."""
    v = verdicts.of(finding) or {}
    ev = {**finding["evidence"], "verdict": v.get("verdict"), "undetermined_reason": v.get("undetermined_reason")}
    return {**finding, "kind": KIND_OF_VERDICT.get(v.get("verdict"), "stuck"), "duration_ms": v.get("age_ms"),
            "evidence": ev}


RULE = Rule(
    id="stuck-lso",
    title="Last stable offset pinned behind the high watermark by an open transaction",
    run=run,
    kinds=KINDS,
    evidence=EVIDENCE,
    proposals=("KIP-98", "KIP-447", "KIP-890"),
    views=("last_stable_offsets", "transaction_evidence"),
    needs=("batches",),
    tables=("offset_commits",),
    decide=decide,
)
