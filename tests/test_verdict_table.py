"""The decision table of an open transaction's verdict (auditor/model/verdict_table.py), without Spark.

The rule cases (tests/rules/hanging-transaction, stuck-lso) decide real evidence built by Spark;
these tests hold the table itself to its contract: no arm is shadowed by the arms before it, an
unknown fact never matches (SQL's three-valued logic, as the evidence's nulls mean), every
reason code renders and says what would settle it, and the reference instant alone moves a
transaction across the age arms.
"""

from __future__ import annotations

import pytest

from auditor.model import verdict_table as vt

MAX_TIMEOUT = 900_000


def _facts_for(arm: vt.Arm) -> dict:
    """Facts under which ``arm`` should be the first match: its own facts hold, every other is
    false (the log end known: its negation is an arm of its own), and each earlier arm that
    still matches is broken by flipping one of its facts that ``arm`` does not name."""
    facts = {f: False for f in (*vt.FACTS, *vt.CLOCK_FACTS)}
    facts["log_end_known"] = True
    own = {f.lstrip("~") for f in arm.when}
    for f in arm.when:
        facts[f.lstrip("~")] = not f.startswith("~")
    for earlier in vt.ARMS[:vt.ARMS.index(arm)]:
        free = [f for f in earlier.when if f.lstrip("~") not in own]
        if vt.matching_arm(facts) is earlier and free:
            facts[free[0].lstrip("~")] = free[0].startswith("~")
    return facts


@pytest.mark.parametrize("index", range(len(vt.ARMS)))
def test_every_arm_is_reachable(index):
    arm = vt.ARMS[index]
    assert vt.matching_arm(_facts_for(arm)) is arm


def test_an_unknown_fact_never_matches():
    # decided, not completed, by the coordinator, and no reference instant: whether the decision is old
    # is unknown, so neither in-flight nor markers-undelivered holds; the input cannot tell
    in_flight = next(a for a in vt.ARMS if a.verdict == "in-flight" and "decided" in a.when)
    facts = _facts_for(in_flight) | {"decision_old": None}
    arm = vt.matching_arm(facts)
    assert (arm.verdict, arm.reason) == ("undetermined", "deciding")
    # an unknown negated fact is unknown too: not "the later offsets were not given", the table's last arm
    later = next(a for a in vt.ARMS if a.reason == "later-offsets")
    assert vt.matching_arm(_facts_for(later) | {"log_end_known": None}).reason == "no-coordinator-record"


def test_every_reason_renders_and_says_what_settles_it():
    codes = {a.reason for a in vt.ARMS if a.reason}
    # a reason is what an undetermined verdict lacks, or where a copy behind another finds the marker
    assert all(a.verdict in ("undetermined", "closed-on-another-replica") for a in vt.ARMS if a.reason)
    for code in codes:
        variants = [k for k in vt.REASONS if k == code or k.startswith(code + "/")]
        assert variants, code
        assert code in vt.SETTLE or all(v in vt.SETTLE for v in variants), code
    # every template renders once its values are known
    import re

    for key, template in (*vt.REASONS.items(), *vt.SETTLE.items()):
        names = re.findall(r"\{(\w+)\??\}", template)
        text = vt.render(template, {n: 1 for n in names})
        assert text is not None and "{" not in text and "?" not in text.replace("?)", ")"), key


def test_render_unknown_values():
    assert vt.render("at {offset} of {dir?}", {"offset": 7}) == "at 7 of ?"
    assert vt.render("at {offset} of {dir?}", {"dir": "d"}) is None


def _evidence(**kw) -> dict:
    """An evidence row without a coordinator log: every fact false but the log end known."""
    row = {f"ev_{f}": False for f in vt.FACTS}
    row.update(ev_log_end_known=True, first_timestamp=1_000, _coordinator_given=0)
    row.update(kw)
    return row


def test_the_reference_instant_alone_moves_a_transaction_to_overdue():
    row = _evidence()
    young = vt.decide_one(row, 1_000 + MAX_TIMEOUT, MAX_TIMEOUT)
    old = vt.decide_one(row, 1_000 + MAX_TIMEOUT + 1, MAX_TIMEOUT)
    assert young["verdict"] == "undetermined" and young["age_ms"] == MAX_TIMEOUT
    assert young["undetermined_reason_code"] == "no-coordinator-record/none-given"
    assert young["undetermined_reason"].startswith("no __transaction_state partition of the cluster was given")
    assert "--as-of now" in young["settled_by"]
    # age alone: overdue, not hanging (the coordinator may have decided COMMIT and wait for the leader)
    assert old["verdict"] == "overdue" and old["undetermined_reason"] is None
    assert old["settled_by"] == vt.AGE_ONLY_CANNOT_RULE_OUT_2PC  # age alone cannot rule out 2PC


def test_coordinator_timeout_decides_in_flight_versus_hanging():
    row = _evidence(ev_consulted=True, ev_known=True, ev_ongoing_here=True, transaction_timeout_ms=60_000,
                    start_timestamp_ms=5_000)
    assert vt.decide_one(row, 65_000, MAX_TIMEOUT)["verdict"] == "in-flight"
    late = vt.decide_one(row, 65_001, MAX_TIMEOUT)
    assert late["verdict"] == "hanging" and late["settled_by"] is None  # the coordinator's record was consulted


def test_reason_variants_read_the_evidence():
    later = _evidence(ev_log_end_known=False, later_segments_not_given=2, next_not_given_offset=40,
                      high_watermark=50, log_end_offset=30)
    d = vt.decide_one(later, 2_000, MAX_TIMEOUT)
    assert d["undetermined_reason"] == ("the marker may be in what was not given: 2 later segment(s) of the "
                                        "partition's directory, from offset 40")
    assert d["settled_by"] == "scan the whole partition directory"
    moved = vt.decide_one(later | {"ev_log_moved": True}, 2_000, MAX_TIMEOUT)
    assert "(50), written after the segment was read, lies past the last offset read (29)" in moved["undetermined_reason"]
    assert moved["settled_by"].startswith("scan again once the brokers are stopped")
    copy = vt.decide_one(_evidence(ev_closed_elsewhere=True, _closed={"marker_offset": 12, "log_dir": "/b/2",
                                                                      "broker_id": None, "marker_type": "COMMIT"}),
                         2_000, MAX_TIMEOUT)
    assert copy["verdict"] == "closed-on-another-replica"
    assert copy["undetermined_reason"].startswith("another copy of the partition in the input (log dir /b/2, broker ?) "
                                                  "has the transaction's COMMIT marker at offset 12")


@pytest.mark.parametrize("copy, closed, variant", [
    ({}, {}, "copy-behind"),  # nothing shows why (hand-made tables)
    ({"future_replica": True, "log_dir_stopped": False, "log_dir_newest_ms": 500}, {}, "copy-behind/future"),
    ({"being_added": True, "log_dir_stopped": False, "log_dir_newest_ms": 500}, {}, "copy-behind/being-added"),
    ({"log_dir_stopped": False}, {"broker_id": 2}, "copy-behind/earlier-dump"),
    ({"log_dir_stopped": True, "log_dir_newest_ms": 5_000}, {}, "copy-behind/stopped"),
    ({"log_dir_stopped": False, "log_dir_newest_ms": 500}, {}, "copy-behind/crashed"),
    # newest data older than the marker, but whether the log dir was stopped is unknown: not called a crash
    ({"log_dir_newest_ms": 500}, {}, "copy-behind"),
    ({"log_dir_stopped": False, "log_dir_newest_ms": 5_000, "log_start_offset": 10}, {}, "copy-behind/starts-later"),
    ({"log_dir_stopped": False, "log_dir_newest_ms": 1_000}, {}, "copy-behind/follower"),
])
def test_a_copy_behind_says_why_as_far_as_the_input_shows(copy, closed, variant):
    """A copy ending before another copy's marker is closed on another replica (info), and its reason
    names the most specific sign the input holds of why it lags (auditor/model/copies.py)."""
    other = {"marker_offset": 12, "log_dir": "/b/1", "broker_id": 1, "marker_type": "COMMIT",
             "marker_timestamp": 1_000, "log_start_offset": 0} | closed
    row = _evidence(ev_closed_elsewhere=True, broker_id=2, topic="t", partition=0, _closed=other,
                    _copy={"future_replica": False, "log_dir_stopped": None, "log_dir_newest_ms": None,
                           "log_start_offset": 0, "being_added": None} | copy)
    d = vt.decide_one(row, 10 * MAX_TIMEOUT, MAX_TIMEOUT)  # old: still closed elsewhere, not overdue
    assert (d["verdict"], d["undetermined_reason_code"]) == ("closed-on-another-replica", variant)
    assert d["undetermined_reason"] and "?" not in d["undetermined_reason"], d["undetermined_reason"]
    assert d["settled_by"] and "abort" not in d["settled_by"], d["settled_by"]


def test_verdicts_look_up_each_transaction_under_the_run_clock():
    from auditor.model.clock import Clock

    key = {"cluster_id": "c", "broker_id": 1, "log_dir": "/d", "topic": "t", "partition": 0}
    rows = [_evidence(**key, producer_id=1, first_offset=0), _evidence(**key, producer_id=2, first_offset=5,
                                                                       first_timestamp=1_000 + MAX_TIMEOUT)]
    newest = Clock(MAX_TIMEOUT, newest_ms={"c": 2_000 + MAX_TIMEOUT})
    v = vt.Verdicts(rows, newest)
    assert len(v) == 2
    assert v.of({**key, "producer_id": 1, "first_offset": 0})["verdict"] == "overdue"
    assert v.of({**key, "producer_id": 2, "first_offset": 5})["verdict"] == "undetermined"
    assert v.of({**key, "producer_id": 3, "first_offset": 0}) is None
    # --as-of: one instant for every cluster, whatever its newest record
    later = vt.Verdicts(rows, Clock(MAX_TIMEOUT, given_ms=10 * MAX_TIMEOUT, newest_ms={"c": 0}))
    assert [later.of({**key, "producer_id": p, "first_offset": o})["verdict"] for p, o in ((1, 0), (2, 5))] == [
        "overdue", "overdue"]
    assert later.of({**key, "producer_id": 1, "first_offset": 0})["as_of_ms"] == 10 * MAX_TIMEOUT
