"""**What.** The transaction coordinator writes one ``__transaction_state`` record
per state change of a transactional id, and only along the edges of its state
machine (``TransactionState``): ``Empty → Ongoing → PrepareCommit →
CompleteCommit`` or ``… → PrepareAbort → CompleteAbort``, then ``Empty`` or
``Ongoing`` again; with transaction.version 2 also ``PrepareAbort`` straight
from ``Empty``/``Complete*``. Replaying an id's records in offset order, the
rule reports:

* ``invalid-transition`` — two consecutive records whose states are not an
  edge of the machine (e.g. ``PrepareCommit → CompleteAbort``, ``Ongoing →
  CompleteCommit``). A record repeated verbatim (same state, producer id and
  epoch: a log append retried after a timeout) is not reported. A tombstone
  counts as ``Dead`` (expiry), after which only a fresh ``Empty`` may follow.
* ``epoch-regression`` — the producer epoch goes down while the producer id stays
  the same. The coordinator only ever bumps epochs (a new producer id restarts
  at 0, which is not a regression).
* ``in-memory-state`` — ``Dead`` or ``PrepareEpochFence`` written as a state:
  both are in-memory states Kafka never persists.
* ``prepare-never-completed`` — the id's last record is ``PrepareCommit`` or
  ``PrepareAbort`` and is older than ``transaction.max.timeout.ms`` at the audit's
  reference time: the coordinator decided the outcome but never finished
  writing the markers.
* ``ongoing-timed-out`` — the id's last record is ``Ongoing`` and the transaction
  is older than its own ``transaction.timeout.ms`` (plus the 10 s abort scan,
  ``transaction.abort.timed.out.transaction.cleanup.interval.ms``): the
  coordinator should have aborted it by now.

``__transaction_state`` is compacted, but the cleaner only drops records older
than a later record of the same id, so the records kept are a suffix of the
id's history and consecutive rows really are consecutive changes. Replicas of
the same partition (several brokers' dumps) are read once per offset.

**Why it matters.** A coordinator rebuilds its state from these records when it
loads the partition: a history that breaks the state machine (two coordinators
writing, an altered log) loads a state that may fence the wrong producer or
send the wrong markers. A transaction stuck in ``Prepare*`` keeps its
partitions' LSO pinned (``read_committed`` consumers stall) and its transactional
id blocked (CONCURRENT_TRANSACTIONS) until the markers are written; an
``Ongoing`` past its timeout holds LSOs longer than the coordinator should allow.

**How it arises.** Two brokers acting as coordinator for the same
``__transaction_state`` partition (a zombie coordinator after a leader change,
cf. KAFKA-9144 on the marker side), a restored or hand-edited log, or broker
bugs. Transactions stuck in ``Prepare*``: the coordinator lost track of pending
markers (KAFKA-16352), markers it cannot write (a partition without a leader,
or markers the partition leader rejects — KAFKA-19999, the transaction.version 2
marker epoch check), or a coordinator that stopped scheduling retries.
"""

from __future__ import annotations

from auditor.engine.findings import evidence
from auditor.engine.rule import Command, Evidence, Kind, Rule
from auditor.formats.txnlog import VALID_PREVIOUS_STATES
from auditor.model.coordinator import transaction_start

ABORT_SCAN_INTERVAL_MS = 10_000  # transaction.abort.timed.out.transaction.cleanup.interval.ms default
IN_MEMORY_STATES = ("Dead", "PrepareEpochFence")


EVIDENCE = (
    Evidence("state", "string", "the record's state (Dead for a tombstone)"),
    Evidence("previous_state", "string", "state of the id's record before it"),
    Evidence("previous_offset", "bigint", "offset of that record"),
    Evidence("previous_producer_id", "bigint", "its producer id"),
    Evidence("previous_producer_epoch", "int", "its producer epoch"),
    Evidence("allowed_previous_states", "array<string>", "the states Kafka allows before this one"),
    Evidence("partitions", "array<string>", "partitions the record lists in the transaction"),
    Evidence("transaction_timeout_ms", "int", "the transaction's timeout in the record"),
    Evidence("timeout_ms", "bigint", "the timeout the coordinator applies: the record's, capped at "
                                     "transaction.max.timeout.ms"),
    Evidence("start_timestamp_ms", "bigint", "the transaction's start in the record"),
    Evidence("age_ms", "bigint", "how long the record has stood unchanged (as of as_of_ms)"),
    Evidence("as_of_ms", "bigint", "the instant ages are measured against"),
)

_WHO = ("transactional id {transactional_id} (producer {producer_id}, epoch {producer_epoch}) at {topic}-{partition} "
        "offset {last_offset}")
_TWO_COORDINATORS = ("check the leader history (leader-epoch-checkpoint) of the __transaction_state partition around "
                     "these offsets for two coordinators, compare its replicas, and re-initialise the producer "
                     "(initTransactions) so the coordinator writes a fresh state")
KINDS = {
    "invalid-transition": Kind(
        "error", "invalid coordinator transition {previous_state} -> {state} for " + _WHO + " (previous record at offset "
        "{previous_offset}, producer {previous_producer_id} epoch {previous_producer_epoch}); {state} may only follow: "
        "[[{allowed_previous_states:list}]][[!{allowed_previous_states:if}(fresh metadata only)]]",
        advice=_TWO_COORDINATORS),
    "epoch-regression": Kind(
        "error", "producer epoch went back from {previous_producer_epoch} (offset {previous_offset}) to {producer_epoch} "
        "for " + _WHO + " with the same producer id", advice=_TWO_COORDINATORS),
    "in-memory-state": Kind(
        "warning", "in-memory state {state} persisted for " + _WHO + "; Kafka never writes it to __transaction_state",
        advice=_TWO_COORDINATORS),
    "prepare-never-completed": Kind(
        "error", "{state} never completed for " + _WHO + ": the coordinator decided {age_ms:duration} ago (longer than "
        "transaction.max.timeout.ms) and never wrote the Complete record; partitions waiting for markers: "
        "[[{partitions:list}]][[!{partitions:if}none listed]]",
        advice="check that every listed partition has a leader; then move leadership of {topic}-{partition} "
               "(preferred-leader election or restart of the coordinator broker) so the new coordinator reloads the "
               "state and resends the markers; upgrade brokers affected by KAFKA-16352; never abort a PrepareCommit "
               "transaction by hand (that tears it)"),
    "ongoing-timed-out": Kind(
        "warning", "transaction of " + _WHO + " is still Ongoing after {age_ms:duration}, past its timeout of "
        "{timeout_ms:duration}: the coordinator should have aborted it; partitions: [[{partitions:list}]]"
        "[[!{partitions:if}none]]",
        (Command("kafka-transactions.sh --bootstrap-server <broker:port> describe --transactional-id {transactional_id}"),),
        "check the coordinator for failed writes to __transaction_state (min.insync.replicas, leadership); "
        "re-initialising the producer (initTransactions) fences and aborts the transaction"),
}


def allowed_pairs() -> list[tuple[str, str]]:
    """Kafka's edges (previous state, state), plus Dead → Empty: an id that expired
    (tombstone) and is initialised again starts from fresh metadata."""
    pairs = {(p, s) for s, prevs in VALID_PREVIOUS_STATES.items() for p in prevs}
    pairs.add(("Dead", "Empty"))
    return sorted(pairs)


def run(ctx):
    from pyspark.sql import functions as F

    h = ctx.coordinator_history
    allowed = ctx.small_df(allowed_pairs(), "prev_state_label string, state_label string").withColumn(
        "allowed", F.lit(True))
    h = h.join(F.broadcast(allowed), ["prev_state_label", "state_label"], "left")
    repeat = (
        (F.col("state_label") == F.col("prev_state_label"))
        & F.col("producer_id").eqNullSafe(F.col("prev_producer_id"))
        & F.col("producer_epoch").eqNullSafe(F.col("prev_producer_epoch"))
    )
    started = transaction_start()
    # the last two kinds are candidates here: decide() keeps them once old enough at the reference instant
    kind = (
        F.when(F.col("state").isin(*IN_MEMORY_STATES), F.lit("in-memory-state"))
        .when(F.col("prev_state_label").isNotNull() & F.col("allowed").isNull() & ~repeat, F.lit("invalid-transition"))
        .when((F.col("producer_id") == F.col("prev_producer_id")) & (F.col("producer_epoch") < F.col("prev_producer_epoch")),
              F.lit("epoch-regression"))
        .when(F.col("is_last") & F.col("state").isin("PrepareCommit", "PrepareAbort"), F.lit("prepare-never-completed"))
        .when(F.col("is_last") & (F.col("state") == "Ongoing"), F.lit("ongoing-timed-out"))
    )
    f = h.withColumn("kind", kind).where("kind IS NOT NULL")

    before = F.create_map(*[x for s_, prevs in sorted(VALID_PREVIOUS_STATES.items())
                            for x in (F.lit(s_), F.array(*[F.lit(v) for v in sorted(prevs)]))])
    parts = F.transform(F.coalesce(F.col("topic_partitions"), F.array()),
                        lambda tp: F.concat(tp["topic"], F.lit("-"), tp["partition"].cast("string")))
    return f.select(
        "cluster_id", "broker_id", "topic", "partition", "producer_id", "producer_epoch", "transactional_id",
        F.coalesce(F.col("prev_offset"), F.col("offset")).alias("first_offset"),
        F.col("offset").alias("last_offset"),
        F.when(F.col("kind").isin("invalid-transition", "epoch-regression"), F.col("prev_last_update_timestamp_ms"))
        .when(F.col("kind") == "ongoing-timed-out", started)
        .otherwise(F.col("last_update_timestamp_ms")).alias("first_timestamp"),
        F.col("last_update_timestamp_ms").alias("last_timestamp"),
        "kind",
        evidence(
            EVIDENCE,
            state=F.col("state_label"),
            previous_state=F.col("prev_state_label"),
            previous_offset=F.col("prev_offset"),
            previous_producer_id=F.col("prev_producer_id"),
            previous_producer_epoch=F.col("prev_producer_epoch"),
            allowed_previous_states=before[F.col("state_label")],
            partitions=parts,
            transaction_timeout_ms=F.col("transaction_timeout_ms"),
            start_timestamp_ms=F.col("start_timestamp_ms"),
        ).alias("evidence"),
    )


AGED = ("prepare-never-completed", "ongoing-timed-out")


def decide(finding: dict, verdicts) -> dict | None:
    """The ages against the audit's reference instant (:class:`auditor.model.clock.Clock`): a last
    ``Prepare*`` record is reported once older than ``transaction.max.timeout.ms``, a last
    ``Ongoing`` one once older than its timeout (at most that) plus the coordinator's abort scan
    interval; every finding carries the timeout and the instant it was judged at."""
    clock = verdicts.clock
    as_of, max_timeout = clock.as_of(finding.get("cluster_id")), clock.max_timeout_ms
    ev = dict(finding["evidence"])
    t = ev.get("transaction_timeout_ms")
    ev.update(timeout_ms=max_timeout if t is None else min(t, max_timeout), as_of_ms=as_of, age_ms=None)
    kind, age = finding["kind"], None
    if kind in AGED:
        # prepare: since its last update (the finding's last_timestamp); ongoing: since it started (first_timestamp)
        since = finding.get("last_timestamp") if kind == "prepare-never-completed" else finding.get("first_timestamp")
        age = None if as_of is None or since is None else as_of - since
        limit = max_timeout if kind == "prepare-never-completed" else ev["timeout_ms"] + ABORT_SCAN_INTERVAL_MS
        if age is None or age <= limit:
            return None
        ev["age_ms"] = age
    return {**finding, "duration_ms": age, "evidence": ev}


RULE = Rule(
    id="transaction-state-violation",
    title="Coordinator state changes that break the transaction state machine, or never complete",
    run=run,
    kinds=KINDS,
    evidence=EVIDENCE,
    proposals=("KIP-98", "KIP-890", "KAFKA-16352", "KAFKA-19999"),
    views=("coordinator_history",),
    needs=("transaction_log",),
    decide=decide,
)
