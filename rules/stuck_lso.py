"""**What.** The LSO is the first offset of the earliest open transaction on the
partition (ProducerStateManager.firstUnstableOffset), or the high watermark when
none is open. The rule reports each replica whose LSO an open transaction holds
behind the high watermark (``replication-offset-checkpoint``; the log end offset
without one, and where the log dir was not cleanly stopped: there the broker had
not checkpointed its latest high watermark, so the checkpoint is only a lower
bound and the pin is judged against what the log holds):

* ``stuck`` — the pinning transaction will not close by itself: the model's
  verdict on it (``auditor/model/verdicts.py``) is hanging, late-write or
  unknown-to-coordinator, where the coordinator's record (or the absence of
  any, every coordinator partition given) shows it did not decide COMMIT;
* ``overdue`` — the pinning transaction is older than
  ``transaction.max.timeout.ms`` and the input holds no record of the
  coordinator's about it: hanging, or decided COMMIT with this partition's
  leader unreachable. The commands ask the coordinator first; the abort is
  guarded by what they show (``auditor/model/advice.py``);
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
* ``closed-on-another-replica`` — another copy of the partition in the input
  holds the pinning transaction's marker and this copy ends before it
  (``hanging-transaction``'s kind of the same name, whose message says why this
  copy may lag: a follower not caught up, a crashed broker, a ``-future`` replica,
  a reassignment's new replica): pinned in this copy only, until it has the
  marker. Info, no abort. Its message does not speak of consumers: they read
  the partition's leader, which has the marker;
* ``markers-undelivered`` / ``marker-skipped`` — the coordinator decided the
  pinning transaction and its marker for this partition is overdue, or was
  dropped with the transaction committed (``hanging-transaction``'s kinds of
  the same names): no abort command, since aborting a committed transaction
  tears it;
* ``undetermined`` — the input cannot tell (later segments or the coordinator's
  record not given, and not provably too old): the message says what is missing.

On a ``-future`` replica (the copy a move between the broker's log dirs builds;
``future_replica``) no kind says ``read_committed`` consumers stop at the LSO:
such a replica serves no client until it replaces the current one, whose own
finding speaks for the consumers.

The kind, the transaction's age (``duration_ms``: reference instant minus its
first batch) and its transactional id are those of the ``hanging-transaction``
finding at the same offset: one verdict per transaction. That age is how long the
LSO has been pinned, and the message says it. The span of data behind the LSO
(the newest batch's timestamp minus the pinning transaction's first batch's) is the
separate evidence field ``lag_ms``: 0 when the pin's own batches are the newest,
however long ago they were written. Where the log dir was not cleanly stopped, the
message says the high watermark is the log end and the checkpoint's entry
(``high_watermark_checkpoint``) only a lower bound, as ``txn-audit timeline`` does.

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
from auditor.rules._common import ABORT, CHECK_THEN_ABORT, COMPACTED, COORDINATOR_EPOCH

EVIDENCE = (
    Evidence("last_stable_offset", "bigint", "the partition's LSO as the broker computes it from this log"),
    Evidence("high_watermark", "bigint", "the high watermark: the replication checkpoint's, capped at the log end "
                                         "offset (the log end offset without a checkpoint, or where the log dir was "
                                         "not cleanly stopped: its checkpoint lags the log)"),
    Evidence("high_watermark_checkpoint", "bigint", "the replication-offset-checkpoint's entry where it is only a lower "
                                                    "bound (log dir not cleanly stopped: the high watermark is then the "
                                                    "log end offset); null otherwise"),
    Evidence("log_end_offset", "bigint", "next offset after the last batch of the log"),
    Evidence("lag_offsets", "bigint", "offsets between the LSO and the high watermark"),
    Evidence("lag_ms", "bigint", "the span of data behind the LSO: the newest batch's timestamp minus the pinning "
                                 "transaction's first batch's (0 when its batches are the newest; how long the LSO has "
                                 "been pinned is the finding's duration_ms)"),
    Evidence("verdict", "string", "the model's verdict on the pinning transaction (hanging-transaction's kind)"),
    Evidence("undetermined_reason", "string", "what the input lacks to classify it (undetermined), or which copy "
             "holds its marker and why this one may be behind (closed-on-another-replica)"),
    Evidence("future_replica", "boolean", "the replica is a -future one (a move between the broker's log dirs): it "
                                          "serves no client, so no consumer waits on its LSO"),
    Evidence("open_transactions", "bigint", "open transactions on the partition"),
    COMPACTED,
    Evidence("consumer_groups", "array<string>", "groups with committed offsets on the partition"),
    Evidence("pending_offset_commit_groups", "array<string>",
             "groups with a transactional offset commit of the pinning producer still open"),
    COORDINATOR_EPOCH,
)

_MESSAGE = ("LSO of {topic}-{partition} is pinned at {last_stable_offset} by producer {producer_id}"
            "[[ for {duration_ms:duration}]], {lag_offsets} offsets behind the high watermark {high_watermark}"
            "[[ (the log end: the replication-offset-checkpoint's {high_watermark_checkpoint} is only a lower bound, "
            "the log dir was not cleanly stopped)]][[!{future_replica:if}: read_committed consumers stop at the LSO]]"
            "[[{future_replica:if}: a -future replica (a move between the broker's log dirs), which serves no client]]"
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
    "closed-on-another-replica": Kind(
        "info", "LSO of {topic}-{partition} in this copy (log dir {log_dir}[[, broker {broker_id}]]) is pinned at "
        "{last_stable_offset} by producer {producer_id}, {lag_offsets} offsets behind its high watermark "
        "{high_watermark}, by a transaction another replica has closed: {undetermined_reason}",
        advice="no action, and never an abort: this copy's LSO moves once it has the marker (hanging-transaction's "
               "closed-on-another-replica finding on the same offset says how to check it)"),
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
        "partition's marker: the coordinator sends it no more markers)",
        advice="first the leader: make sure the partition has a live leader; a leader that was frozen may still write "
               "the marker and the LSO then moves by itself (scan again once it is back). Only if the marker is still "
               "missing then, an abort unblocks it, at the cost of this partition's records of the committed "
               "transaction: hanging-transaction's marker-skipped finding on the same offset says how to keep them"),
    "stuck": Kind("error", _MESSAGE + " (the pinning transaction is {verdict}: no marker will come)", ABORT,
                  "abort the pinning transaction (its partition's leader writes the marker: restore a leader first if "
                  "it has none), then audit again (hanging-transaction says why it hangs)"),
    "overdue": Kind("error", _MESSAGE + " (the pinning transaction is older than transaction.max.timeout.ms and the "
                    "input holds no record of the coordinator's about it: hanging, or decided with this partition's "
                    "leader unreachable)", CHECK_THEN_ABORT,
                    "ask the coordinator first (describe, find-hanging): where it decided COMMIT, bring back the "
                    "partition's leader and never abort; hanging-transaction's overdue finding on the same offset "
                    "says what each check shows"),
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
    v = ctx.transaction_evidence.select(*REPLICA, "producer_id", "first_offset", "transactional_id", "future_replica")
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
            future_replica=F.coalesce(F.col("future_replica"), F.lit(False)),
        ).alias("evidence"),
    )


# the pin's verdict -> this rule's kind: the verdicts after which the LSO will not move without an
# administrator (hanging, late-write, unknown-to-coordinator) are "stuck"; in-flight is "open"
KIND_OF_VERDICT = {"in-flight": "open", "undetermined": "undetermined", "two-phase-commit": "two-phase-commit",
                   "markers-undelivered": "markers-undelivered", "marker-skipped": "marker-skipped",
                   "closed-after-the-copy": "closed-after-the-copy", "overdue": "overdue",
                   "closed-on-another-replica": "closed-on-another-replica"}


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
