"""The decision table of an open transaction's verdict: evidence in, verdict and reason out.

:mod:`auditor.model.verdicts` gathers, per open transaction, what the input shows about
it (its replica's coverage, the coordinator's records, the coordinator's decision, other
copies of the partition) as named facts that do not depend on the reference instant. This
module turns those facts into the verdict, in one place a reader can follow:

* :data:`ARMS` — the arms in order, first match wins; each names the facts that must
  all hold (``~fact``: must not hold) and, for ``undetermined`` and ``closed-on-another-replica``,
  the reason code;
* :data:`REASONS` and :data:`SETTLE` — the prose of each reason code and what would
  settle it, rendered from the transaction's evidence;
* :class:`Verdicts` — the ages against the reference instant and the arms, over the
  collected evidence rows, looked up by transaction.

Why apart from Spark: the facts are the expensive part (joins over every table); the
decision is cheap and depends on the reference instant (``--as-of``) and
``transaction.max.timeout.ms``. Kept apart, a verdict can be decided again for another
instant from the same evidence, and the decision reads as a table rather than a chain of
column expressions.

A fact is true, false or unknown (null: a column the input does not fill), with SQL's
three-valued logic: an arm matches only when every fact it names is true, ``~unknown`` is
unknown, and a template naming an unknown value renders no reason at all (``{name?}``
renders ``?`` instead).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable

from auditor.model.coverage import SEGMENT_ALONE
from auditor.model.replica_key import REPLICA


# the facts the evidence holds (columns ``ev_<name>``), each true, false or null
FACTS = ("log_end_known", "gap_after_start", "closed_elsewhere", "log_moved", "consulted", "known", "ongoing_here", "two_phase",
         "moving", "coordinator_behind", "marker_maybe_later", "session_had_marker", "decided", "by_coordinator",
         "completed", "marker_after_read", "leader_then_known", "decision_commit", "moved_past")
# the facts measured against the reference instant (:func:`clock_facts`)
CLOCK_FACTS = ("old", "decision_old", "young", "view_short")


@dataclass(frozen=True)
class Arm:
    """One row of the decision table: ``verdict`` when every fact of ``when`` holds."""

    verdict: str
    when: tuple[str, ...]
    # for ``undetermined``: the code of what the input lacks; for ``closed-on-another-replica``: of why
    # this copy is behind the one holding the marker
    reason: str | None = None


ARMS: tuple[Arm, ...] = (
    # behind a copy in the input that holds the marker: closed, whatever else this copy lacks
    Arm("closed-on-another-replica", ("closed_elsewhere",), "copy-behind"),
    Arm("undetermined", ("~log_end_known",), "later-offsets"),
    Arm("undetermined", ("gap_after_start",), "segments-between"),
    # before the age test: the coordinator never times a two-phase-commit transaction out
    Arm("two-phase-commit", ("consulted", "known", "ongoing_here", "two_phase")),
    # decided: the markers are being written, are overdue, were dropped, or came after the read
    Arm("in-flight", ("decided", "~completed", "by_coordinator", "~decision_old")),
    Arm("markers-undelivered", ("decided", "~completed", "decision_old")),
    Arm("undetermined", ("decided", "~completed"), "deciding"),
    Arm("closed-after-the-copy", ("decided", "marker_after_read", "leader_then_known")),
    Arm("undetermined", ("decided", "marker_after_read"), "completed-after-read"),
    # read while moving, the coordinator's view ends before this data (a next transaction may have started
    # unseen: its data is not the decision's) or its marker may come after the read
    Arm("undetermined", ("decided", "view_short"), "read-while-moving"),
    Arm("marker-skipped", ("decided", "decision_commit")),
    Arm("hanging", ("decided",)),
    Arm("in-flight", ("consulted", "known", "ongoing_here", "young")),
    Arm("undetermined", ("consulted", "known", "view_short"), "read-while-moving"),
    Arm("late-write", ("consulted", "known", "session_had_marker")),
    Arm("undetermined", ("moved_past",), "coordinator-moved-past"),
    Arm("hanging", ("consulted", "known")),
    Arm("unknown-to-coordinator", ("consulted",)),
    # older than any timeout, but no coordinator record says what it decided: the check that asks it first
    Arm("overdue", ("old",)),
    Arm("undetermined", (), "no-coordinator-record"),
)

_NOT_STOPPED = "the log dirs were not all cleanly stopped (a broker may have written while they were read) and "
_NOT_GIVEN = "the marker may be in what was not given: "
# a copy behind another that holds the transaction's marker (``closed-on-another-replica``), and why (the variants)
_BEHIND = ("another copy of the partition in the input (log dir {closed_log_dir?}, broker {closed_broker_id?}) has the "
           "transaction's {closed_marker_type?} marker at offset {closed_marker_offset}, and this copy ends before it")
# reason code -> prose; a code with variants picks one by the evidence (:func:`_reason_variant`)
REASONS: dict[str, str] = {
    "copy-behind": _BEHIND + " (a follower not caught up, or a dump taken earlier)",
    "copy-behind/future": _BEHIND + ": it is a -future replica, the copy a move between the broker's log dirs "
                          "(AlterReplicaLogDirs, kafka-reassign-partitions with log_dirs) builds from the broker's "
                          "current replica; it serves no client until it has caught up and replaces that replica",
    "copy-behind/being-added": _BEHIND + ": the metadata log lists broker {broker_id} among the partition's adding "
                               "replicas (a reassignment not yet complete): a new replica still catching up",
    "copy-behind/earlier-dump": _BEHIND + ": both copies are broker {broker_id}'s, this one read before the marker was "
                                "written (a dump taken earlier)",
    "copy-behind/stopped": _BEHIND + ": its broker was stopped cleanly (its log dir holds .kafka_cleanshutdown) before "
                           "the marker reached it",
    "copy-behind/crashed": _BEHIND + ": its log dir was not cleanly stopped and holds nothing written after the marker "
                           "(its newest batch {copy_newest_time}, the marker {closed_marker_time}): its broker crashed, "
                           "was killed or stopped fetching before the marker reached it",
    "copy-behind/starts-later": _BEHIND + ": its log starts at offset {copy_log_start_offset}, after the other copy's "
                                "{closed_log_start_offset}: a replica created later (a reassignment's new replica starts "
                                "at its leader's log start) still catching up",
    "copy-behind/follower": _BEHIND + ": its broker wrote to this log dir after the marker (its newest batch "
                            "{copy_newest_time}, the marker {closed_marker_time}): a follower not caught up",
    "later-offsets/log-moved": "the log moved while it was read: its high watermark checkpoint ({high_watermark}), "
                               "written after the segment was read, lies past the last offset read ({last_offset_read}), "
                               "where the marker may be",
    "later-offsets/segment-alone": _NOT_GIVEN + "the partition of the segment is not known (given without its partition "
                                   "directory, or in a directory not named topic-N), so the segments after it are not "
                                   "known",
    "later-offsets/later-segments": _NOT_GIVEN + "{later_segments_not_given} later segment(s) of the partition's "
                                    "directory, from offset {next_not_given_offset}",
    "later-offsets/high-watermark": _NOT_GIVEN + "the high watermark {high_watermark} lies beyond the last given offset "
                                    "{last_offset_read}",
    "segments-between": _NOT_GIVEN + "{segments_not_given_between} segment(s) of the partition's directory between "
                        "the given ones, from offset {gap_from_offset?} (left out, or gone or replaced by the "
                        "broker while it ran and was read)",
    "segments-between/offsets-missing": "the marker may be in what the input lacks: no segment as read holds the offsets "
                                        "from {gap_from_offset} to the segment at {gap_to_offset?}, and the broker "
                                        "leaves no hole after an open transaction's first offset (a segment rolls at "
                                        "the log end; the cleaner stops at the last stable offset): a segment is "
                                        "missing from the directory, or was copied before the broker finished it",
    "deciding": "the transaction's {decision_marker} shows the coordinator decided {decision} less than "
                "its transaction timeout ago: this partition's marker may still come",
    "completed-after-read": _NOT_STOPPED + "the coordinator completed the transaction ({decision_record}) after the last "
                            "write this partition as read holds: its marker was probably written after the partition was "
                            "read, but without the metadata log (not given) the input cannot rule out a marker dropped "
                            "for a partition without a leader",
    "read-while-moving/coordinator-behind": _NOT_STOPPED + "the coordinator's __transaction_state partition as read ends "
                                            "before this transaction's first batch: a record written after it was read "
                                            "may list the partition",
    "read-while-moving/marker-after-read": _NOT_STOPPED + "the coordinator completed the transaction after the last "
                                           "write this partition as read holds: its marker may have been written after the "
                                           "partition was read",
    "coordinator-moved-past": "the coordinator has ended this transaction (its newest record of the producer, "
                              "{coordinator_state?} at epoch {coordinator_producer_epoch}, is past the data's epoch "
                              "{data_epoch_max}: transaction version 2 bumps it at every commit or abort) in a record "
                              "the input no longer holds, so whether it committed is unknown",
    "no-coordinator-record/none-given": "no __transaction_state partition of the cluster was given, and it is not older "
                                        "than transaction.max.timeout.ms",
    "no-coordinator-record/partly-given": "no record of the given __transaction_state partitions "
                                          "({_coordinator_given} of {_coordinator_expected?}) names "
                                          "the producer, and it is not older than transaction.max.timeout.ms",
}

_AGAIN = ("scan again once the brokers are stopped (or a copy taken while they were), or describe the transaction "
          "online (kafka-transactions.sh describe)")
_BROKER_STATE = ("this broker's state online: kafka-transactions.sh --bootstrap-server <broker:port> describe-producers "
                 "--topic {topic} --partition {partition} --broker-id {broker_id?} lists no producer with this "
                 "transaction's start offset once it has the marker")
_LEADER_STATE = ("the partition's leader online: kafka-transactions.sh --bootstrap-server <broker:port> describe-producers "
                 "--topic {topic} --partition {partition} lists no producer with this transaction's start offset (the "
                 "marker is written)")
# what would settle an ``undetermined`` verdict, or what to check of a copy behind another, by reason code (variant
# first, then the code)
SETTLE: dict[str, str] = {
    "copy-behind": _BROKER_STATE + "; a follower catches up by itself, and an earlier dump is superseded by the copy "
                   "holding the marker",
    "copy-behind/being-added": "the reassignment's progress: kafka-reassign-partitions.sh --bootstrap-server "
                               "<broker:port> --list; the new replica catches up by itself, and " + _BROKER_STATE,
    "copy-behind/future": "the move's progress: kafka-log-dirs.sh --bootstrap-server <broker:port> --describe "
                          "--broker-list {broker_id?} --topic-list {topic} (the -future replica's offset lag); the "
                          "broker swaps it in once it has caught up",
    "copy-behind/stopped": "once broker {broker_id?} starts again it fetches the marker from the partition's leader; "
                           "until then " + _LEADER_STATE,
    "copy-behind/crashed": "once broker {broker_id?} starts again it recovers its log, truncates it to the partition's "
                           "leader's and fetches the marker; until then " + _LEADER_STATE,
    "later-offsets/log-moved": _AGAIN,
    "later-offsets": "scan the whole partition directory",
    "segments-between/offsets-missing": "scan the broker's log dir itself, or a copy taken while the broker was "
                                        "stopped, or another replica of the partition",
    "segments-between": "scan the whole partition directory (of a running broker: again, or a copy taken while it "
                        "was stopped)",
    "deciding": "scan again after the transaction's timeout, or describe the transaction online (kafka-transactions.sh "
                "describe); never abort it while the coordinator decided COMMIT",
    "completed-after-read": "the cluster's __cluster_metadata log (the partition's leader when the coordinator "
                            "completed), or describe the producers online (kafka-transactions.sh describe-producers)",
    "read-while-moving": _AGAIN,
    "coordinator-moved-past": "the markers of this producer id with the next epoch on the transaction's other partitions "
                              "(give their logs), or the coordinator broker's log; an abort tears the transaction if it "
                              "committed",
    "no-coordinator-record": "scan with the log dirs holding the cluster's __transaction_state partitions, or ask the "
                             "coordinator online (kafka-transactions.sh describe, find-hanging); --as-of now ages it "
                             "if the broker still runs, but age alone cannot tell a hanging transaction from a "
                             "decided one waiting for its partition's leader",
}
# an overdue verdict (age alone): what would tell a two-phase-commit transaction from a hanging one
AGE_ONLY_CANNOT_RULE_OUT_2PC = ("the coordinator's record of the producer (__transaction_state): a two-phase-commit "
                                "transaction's has transaction timeout Integer.MAX_VALUE")
# the columns :func:`decide` adds
DECIDED = ("as_of_ms", "age_ms", "verdict", "undetermined_reason_code", "undetermined_reason", "settled_by")


def _and(values: Iterable[bool | None]) -> bool | None:
    """SQL's AND: false if any is false, else unknown if any is unknown."""
    vals = list(values)
    if any(v is False for v in vals):
        return False
    return None if any(v is None for v in vals) else True


def _not(v: bool | None) -> bool | None:
    return None if v is None else not v


def _minus(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a - b


def _cmp(a: int | None, b: int | None, op: str) -> bool | None:
    if a is None or b is None:
        return None
    return a > b if op == ">" else a <= b


def own_timeout_ms(ev: dict[str, Any], max_timeout_ms: int) -> int:
    """The transaction's own timeout as the coordinator's record gives it (``transaction.timeout.ms``
    of its producer), capped at ``transaction.max.timeout.ms`` (the coordinator refuses a larger
    one); the maximum where the input has no such record."""
    timeout = ev.get("transaction_timeout_ms")
    return max_timeout_ms if timeout is None else min(timeout, max_timeout_ms)


def clock_facts(ev: dict[str, Any], as_of_ms: int | None, max_timeout_ms: int) -> dict[str, bool | None]:
    """The facts measured against the reference instant ``as_of_ms``: ``old`` (the
    transaction began longer than ``transaction.max.timeout.ms`` ago), ``decision_old`` (the
    coordinator decided longer ago than the transaction's own timeout, :func:`own_timeout_ms`:
    markers take milliseconds once every leader answers, so a decision older than the time the
    coordinator gives the whole transaction has overdue markers), ``young`` (within its own
    timeout, counted from the coordinator's start time), ``view_short`` (a log that may
    have moved, not old, and a view of the coordinator that may not reach far enough)."""
    old = _cmp(_minus(as_of_ms, ev.get("first_timestamp")), max_timeout_ms, ">")
    timeout = own_timeout_ms(ev, max_timeout_ms)
    start = ev.get("start_timestamp_ms")
    started = ev.get("first_timestamp") if start is None else start
    behind = ev.get("ev_coordinator_behind"), ev.get("ev_marker_maybe_later")
    either = True if True in behind else (None if None in behind else False)
    return {
        "old": old,
        "decision_old": _cmp(_minus(as_of_ms, ev.get("decision_ms")), timeout, ">"),
        "young": _cmp(_minus(as_of_ms, started), timeout, "<="),
        "view_short": _and((ev.get("ev_moving"), _not(old), either)),
    }


def _holds(arm: Arm, facts: dict[str, bool | None]) -> bool:
    return _and(_not(facts[f[1:]]) if f.startswith("~") else facts[f] for f in arm.when) is True


def matching_arm(facts: dict[str, bool | None]) -> Arm:
    """The first arm of :data:`ARMS` whose facts all hold (the last arm has none: always)."""
    return next(a for a in ARMS if _holds(a, facts))


def _reason_variant(code: str, ev: dict[str, Any]) -> str:
    """The variant of reason ``code`` the evidence picks (its key in :data:`REASONS`)."""
    if code == "later-offsets":
        if ev.get("ev_log_moved"):
            return "later-offsets/log-moved"
        if ev.get("given_as") == SEGMENT_ALONE:
            return "later-offsets/segment-alone"
        later = ev.get("later_segments_not_given")
        return "later-offsets/later-segments" if later is not None and later > 0 else "later-offsets/high-watermark"
    if code == "read-while-moving":
        return "read-while-moving/" + ("coordinator-behind" if ev.get("ev_coordinator_behind") else "marker-after-read")
    if code == "segments-between" and not ev.get("segments_not_given_between"):
        return "segments-between/offsets-missing"
    if code == "no-coordinator-record":
        return "no-coordinator-record/" + ("none-given" if ev.get("_coordinator_given") == 0 else "partly-given")
    if code == "copy-behind":
        return _copy_behind_variant(ev)
    return code


def _copy_behind_variant(ev: dict[str, Any]) -> str:
    """Why this copy may be behind the one holding the marker, as far as the input shows
    (:func:`auditor.model.verdicts._with_closed_elsewhere`'s ``_copy``): the most specific sign first,
    a ``-future`` directory or a reassignment the metadata log shows; the plain ``copy-behind`` when
    the input shows none (hand-made tables, a copy without its log dir)."""
    copy, closed = ev.get("_copy") or {}, ev.get("_closed") or {}
    newest, marker_ts = copy.get("log_dir_newest_ms"), closed.get("marker_timestamp")
    start, other_start = copy.get("log_start_offset"), closed.get("log_start_offset")
    if copy.get("future_replica"):
        return "copy-behind/future"
    if copy.get("being_added"):
        return "copy-behind/being-added"
    if ev.get("broker_id") is not None and ev.get("broker_id") == closed.get("broker_id"):
        return "copy-behind/earlier-dump"
    if copy.get("log_dir_stopped"):
        return "copy-behind/stopped"
    if copy.get("log_dir_stopped") is False and _cmp(marker_ts, newest, ">"):
        return "copy-behind/crashed"
    if _cmp(start, other_start, ">"):
        return "copy-behind/starts-later"
    if _cmp(marker_ts, newest, "<="):
        return "copy-behind/follower"
    return "copy-behind"


_FIELD = re.compile(r"\{(\w+)(\??)\}")


def render(template: str, values: dict[str, Any]) -> str | None:
    """``template`` with each ``{name}`` replaced by its value; None when a ``{name}`` value is
    unknown (``{name?}``: ``?`` instead)."""
    missing = False

    def sub(m: re.Match) -> str:
        nonlocal missing
        v = values.get(m.group(1))
        if v is None:
            missing = missing or not m.group(2)
            return "?"
        return str(v)

    text = _FIELD.sub(sub, template)
    return None if missing else text


def _iso(ms: int | None) -> str | None:
    """Epoch ms as ISO-8601 UTC (as the reports print instants), None when unknown."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _values(ev: dict[str, Any]) -> dict[str, Any]:
    """The evidence as the templates name it (the other copy's marker and this copy's facts flattened,
    their times as text, the last offset read)."""
    closed, copy = ev.get("_closed") or {}, ev.get("_copy") or {}
    end = ev.get("log_end_offset")
    return {**ev, **{f"closed_{k}": v for k, v in closed.items()}, **{f"copy_{k}": v for k, v in copy.items()},
            "closed_marker_time": _iso(closed.get("marker_timestamp")), "copy_newest_time": _iso(
                copy.get("log_dir_newest_ms")), "last_offset_read": None if end is None else end - 1}


def decide_one(ev: dict[str, Any], as_of_ms: int | None, max_timeout_ms: int) -> dict[str, Any]:
    """The verdict of one evidence row: the :data:`DECIDED` columns."""
    facts = {f: ev.get(f"ev_{f}") for f in FACTS}
    facts.update(clock_facts(ev, as_of_ms, max_timeout_ms))
    arm = matching_arm(facts)
    code = variant = reason = settle = None
    if arm.reason is not None:  # undetermined, or closed on another replica: what the verdict rests on
        code = arm.reason
        variant = _reason_variant(code, ev)
        values = _values(ev)
        reason = render(REASONS[variant], values)
        settle = render(SETTLE.get(variant, SETTLE[code]), values)
    elif arm.verdict == "overdue":
        settle = AGE_ONLY_CANNOT_RULE_OUT_2PC
    return {"as_of_ms": as_of_ms, "age_ms": _minus(as_of_ms, ev.get("first_timestamp")), "verdict": arm.verdict,
            "undetermined_reason_code": variant, "undetermined_reason": reason, "settled_by": settle}


# a transaction's key: the replica, the producer id and the transaction's first offset
KEY = (*REPLICA, "producer_id", "first_offset")
# the evidence columns the decision reads (:func:`auditor.model.verdicts.open_transaction_evidence`)
INPUTS = (*KEY, *(f"ev_{f}" for f in FACTS), "first_timestamp", "decision_ms", "transaction_timeout_ms",
          "start_timestamp_ms", "_closed", "_copy", "high_watermark", "log_end_offset", "given_as", "later_segments_not_given",
          "next_not_given_offset", "segments_not_given_between", "gap_from_offset",
          "gap_to_offset", "decision_marker", "decision", "decision_record", "coordinator_state",
          "coordinator_producer_epoch", "data_epoch_max", "_coordinator_given", "_coordinator_expected")


def key_of(row: dict[str, Any]) -> tuple:
    """The transaction ``row`` (a finding, a plot's session, an evidence row) is about."""
    return tuple(row.get(k) for k in KEY)


class Verdicts:
    """Every open transaction's verdict, decided once per audit from the collected evidence
    (:data:`INPUTS` rows) and the run's :class:`auditor.model.clock.Clock`; rules and the report
    look a transaction's up by its key (:meth:`of`)."""

    def __init__(self, evidence: Iterable[dict[str, Any]], clock) -> None:
        self.clock = clock
        self._by_key = {key_of(ev): decide_one(ev, clock.as_of(ev.get("cluster_id")), clock.max_timeout_ms)
                        for ev in evidence}

    def of(self, row: dict[str, Any]) -> dict[str, Any] | None:
        """The :data:`DECIDED` values of the transaction ``row`` names (None: no open transaction there)."""
        return self._by_key.get(key_of(row))

    def __len__(self) -> int:
        return len(self._by_key)
