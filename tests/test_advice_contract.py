"""The safety contract of advice (auditor/model/advice.py), over generated evidence, without Spark.

An abort printed for a transaction the coordinator decided to COMMIT tears it. The contract: an
abort is a command only where the input shows the coordinator did not decide COMMIT; without its
record the checks that ask it come first and the abort is printed guarded by them (a shell
comment); where it decided COMMIT and dropped this partition's marker, the leader comes first and
the abort is a last resort in the advice, never a command; and no text claims what a coordinator
would have done without its record. Held here on the decision table (every combination of facts
hypothesis draws) and on every kind of every rule, rendered from drawn evidence.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from auditor.engine.messages import render
from auditor.engine.rule import catalog
from auditor.model import advice
from auditor.model import verdict_table as vt
from auditor.rules import stuck_lso

TRI = st.sampled_from((True, False, None))
#: (rule, kind) -> the verdict whose advice it prints (hanging-transaction's kinds are the verdicts)
VERDICT_OF_KIND = {("stuck-lso", k): v for v, k in {**stuck_lso.KIND_OF_VERDICT, "hanging": "stuck"}.items()}
#: kinds outside the verdicts that print an abort, and why that is safe
OTHER_ABORTS = {
    ("torn-transaction", "missing-abort-marker"): "command",  # the coordinator recorded CompleteAbort
    ("snapshot-log-mismatch", "open-txn-below-log-start"): "after-check",  # a snapshot, not the coordinator's record
    # the coordinator completed COMMIT without this partition's marker: the leader first, never an abort command
    ("torn-transaction", "missing-commit-marker"): "last-resort",
}


@st.composite
def facts(draw) -> dict:
    """Facts of an open transaction as the evidence can hold them: ``decided`` exactly when the
    decision is known (``decision_commit`` then true or false, else unknown)."""
    f = {name: draw(TRI) for name in (*vt.FACTS, *vt.CLOCK_FACTS)}
    f["decided"] = draw(st.booleans())
    f["decision_commit"] = draw(st.booleans()) if f["decided"] else None
    return f


def _advice_of(rule: str, kind: str) -> str:
    if rule == "hanging-transaction":
        return advice.abort_advice(kind)
    if (rule, kind) in VERDICT_OF_KIND:
        return advice.abort_advice(VERDICT_OF_KIND[(rule, kind)])
    return OTHER_ABORTS.get((rule, kind), "never")


@settings(max_examples=3000, deadline=None)
@given(facts())
def test_the_decision_table_offers_an_abort_only_where_the_input_shows_no_commit(f):
    verdict = vt.matching_arm(f).verdict
    how = advice.abort_advice(verdict)
    if f["decided"] and f["decision_commit"]:
        assert how in ("never", "last-resort"), (verdict, f)
    if how == "command":  # the coordinator's record read, or a decision of ABORT the input shows
        assert f["consulted"] is True or (f["decided"] and f["decision_commit"] is False), (verdict, f)
    if how == "last-resort":
        assert f["decided"] and f["decision_commit"], (verdict, f)


def _fields() -> st.SearchStrategy[dict]:
    """Values for any finding's template fields: absent (None) or a plausible value."""
    maybe = lambda s: st.one_of(st.none(), s)  # noqa: E731
    return st.tuples(st.fixed_dictionaries({
        "cluster_id": st.just("c1"), "broker_id": maybe(st.integers(0, 3)), "log_dir": maybe(st.just("/data/k")),
        "topic": st.just("orders"), "partition": st.integers(0, 3), "producer_id": st.integers(0, 9),
        "producer_epoch": st.integers(0, 5), "transactional_id": maybe(st.just("app-1")),
        "first_offset": st.integers(0, 99), "last_offset": st.integers(100, 199), "first_timestamp": st.just(1_000),
        "last_timestamp": st.just(2_000), "duration_ms": maybe(st.integers(0, 10**7)),
    }), st.dictionaries(st.sampled_from(("decision", "partition_leader", "partition_leaderless", "coordinator_state",
                                          "coordinator_record", "transaction_timeout_ms", "age_only",
                                          "undetermined_reason", "settled_by", "verdict")),
                         st.one_of(st.none(), st.sampled_from(("COMMIT", "ABORT")), st.integers(-1, 3), st.booleans())))


def _abort_positions(commands: list[dict]) -> list[int]:
    return [i for i, c in enumerate(commands) if advice.is_abort(c["command"])]


@settings(max_examples=400, deadline=None)
@given(_fields())
def test_every_kind_holds_its_aborts_to_the_contract(fields):
    loc, drawn = fields
    for rule in catalog().values():
        for kind in rule.kinds:
            ev = {e.name: drawn.get(e.name) for e in rule.evidence}
            f = render(rule, {**loc, "kind": kind, "evidence": ev})
            how = _advice_of(rule.id, kind)
            cmds = f["remediation_commands"]
            aborts = _abort_positions(cmds)
            assert advice.COORDINATOR_CLAIM not in (f["message"] or ""), (rule.id, kind)
            if how in ("never", "last-resort"):
                assert aborts == [], (rule.id, kind, cmds)
            elif how == "after-check":
                checks = [i for i, c in enumerate(cmds) if advice.is_check(c["command"])]
                assert aborts and checks and max(checks) < min(aborts), (rule.id, kind, cmds)
                assert all(cmds[i]["applies_to"] == advice.GUARD for i in aborts), (rule.id, kind, cmds)
            if how == "last-resort":
                text = f["remediation"] or ""
                assert "leader" in text and text.index("leader") < text.index("abort"), (rule.id, kind, text)


def test_every_kind_that_aborts_is_classified():
    """A new kind printing an abort must say which clause of the contract makes it safe."""
    for rule in catalog().values():
        for name, kind in rule.kinds.items():
            if any(" abort " in f" {c.template} " for c in kind.commands):
                assert _advice_of(rule.id, name) in ("command", "after-check"), (rule.id, name)


def test_a_decided_commit_with_a_frozen_leader_never_gets_an_abort_at_any_age():
    """The frozen-leader case: the coordinator decided COMMIT (its record, or the same transaction's
    COMMIT marker on another partition) and this partition has no marker. However late the
    reference instant, and whether or not the coordinator's record was read, no verdict prints an
    abort command."""
    for completed in (True, False, None):
        for consulted in (True, False):
            for as_of in (10_000, 10**9):
                ev = {"ev_decided": True, "ev_decision_commit": True, "ev_completed": completed,
                      "ev_consulted": consulted, "ev_log_end_known": True, "ev_by_coordinator": consulted,
                      "first_timestamp": 0, "decision_ms": 5_000, "transaction_timeout_ms": 60_000}
                verdict = vt.decide_one(ev, as_of, 900_000)["verdict"]
                assert advice.abort_advice(verdict) in ("never", "last-resort"), (verdict, ev, as_of)


def test_without_the_coordinators_record_age_makes_it_overdue_not_hanging():
    """Older than transaction.max.timeout.ms with no coordinator record read: overdue (the checks
    first), never hanging (an abort command)."""
    ev = {"ev_consulted": False, "ev_log_end_known": True, "first_timestamp": 0}
    v = vt.decide_one(ev, 20 * 60_000, 900_000)
    assert v["verdict"] == "overdue" and v["settled_by"] == vt.AGE_ONLY_CANNOT_RULE_OUT_2PC
    assert advice.abort_advice(v["verdict"]) == "after-check"


def test_markers_overdue_past_the_transactions_own_timeout():
    """A decision whose markers are older than the transaction's own timeout (its coordinator
    record's 60 s) is markers-undelivered under the default 15-minute maximum, and in flight
    within it."""
    ev = {"ev_decided": True, "ev_decision_commit": True, "ev_completed": False, "ev_by_coordinator": True,
          "ev_consulted": True, "ev_known": True, "ev_log_end_known": True, "first_timestamp": 0,
          "decision_ms": 2_000, "transaction_timeout_ms": 60_000}
    assert vt.decide_one(ev, 2_000 + 106_000, 900_000)["verdict"] == "markers-undelivered"
    assert vt.decide_one(ev, 2_000 + 59_000, 900_000)["verdict"] == "in-flight"
    # the maximum caps the transaction's own timeout; without a record the maximum decides
    assert vt.decide_one({**ev, "transaction_timeout_ms": None}, 2_000 + 106_000, 900_000)["verdict"] == "in-flight"
    assert vt.decide_one({**ev, "transaction_timeout_ms": None}, 2_000 + 106_000, 60_000)["verdict"] == \
        "markers-undelivered"
