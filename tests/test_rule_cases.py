"""Every rule case of ``tests/rules/<rule-id>/<case>.yaml`` (format: ``tests/rule_cases.py``).

All cases go into one table set, each in its own cluster, and one audit of every
rule runs over it (cases with ``options`` are audited apart, one audit per set of
options); each case then requires the findings of its rule in its cluster to be
exactly its expected findings, every column.

``REGEN_RULE_CASES=1`` (or a glob of case ids, ``hanging-transaction/*``) first
writes each selected case's actual findings into its file, from an audit of that
case *alone*: the shared audit that follows then also checks that no case's
findings depend on another case. Expectations written so must be reviewed by
hand against the rule's documentation before they are committed.
"""

from __future__ import annotations

import fnmatch
import json
import os
from collections import defaultdict

import pytest

from auditor.engine.runner import audit
from auditor.engine.rule import catalog
from auditor.engine.context import AuditOptions
from torn_abort import commit_decided, torn_by_advice
from rule_cases import COLUMNS, add_case, canonical, load_cases, time_value, write_findings
from tables_builder import TableSet

pytestmark = pytest.mark.spark

CASES = load_cases()
REGEN = os.environ.get("REGEN_RULE_CASES", "")


def _groups(cases) -> dict[str, list]:
    """Cases by their audit options (JSON text; ``{}``: the shared audit)."""
    out: dict[str, list] = defaultdict(list)
    for c in cases:
        out[json.dumps(c.options, sort_keys=True)].append(c)
    return out


def _audit(spark, root, cases, without_broker_ids: bool = False) -> list[dict]:
    t = TableSet(root, without_broker_ids=without_broker_ids)
    for c in cases:
        add_case(t, c)
    t.write()
    options = AuditOptions(**time_value(cases[0].options))
    rules = sorted({c.rule for c in cases}) if len(cases) == 1 or cases[0].options else ()
    return audit(spark, str(root), options=options, only=rules).findings


def _regenerate(spark, tmp_path_factory) -> None:
    pattern = "*" if REGEN in ("1", "true", "yes") else REGEN
    for c in CASES:
        if fnmatch.fnmatch(c.id, pattern):
            got = _audit(spark, tmp_path_factory.mktemp("regen") / "tables", [c])
            write_findings(c, [f for f in got if f["rule"] == c.rule and f["cluster_id"] == c.cluster])


@pytest.fixture(scope="module")
def actual(spark, tmp_path_factory) -> dict[str, list[dict]]:
    """Findings per cluster, from one audit per group of cases."""
    global CASES
    if REGEN:
        _regenerate(spark, tmp_path_factory)
        CASES = load_cases()
    by_cluster: dict[str, list[dict]] = defaultdict(list)
    for i, cases in enumerate(_groups(CASES).values()):
        root = tmp_path_factory.mktemp(f"cases{i}") / "tables"
        TABLE_ROOTS.append(root)
        for f in _audit(spark, root, cases):
            by_cluster[f["cluster_id"]].append(f)
    return by_cluster


TABLE_ROOTS: list = []  # the tables :func:`actual` audited (read by the no-torn-abort property)


@pytest.fixture(scope="module")
def actual_without_broker_ids(spark, tmp_path_factory) -> dict[str, list[dict]]:
    """As :func:`actual`, every log dir's rows without a broker id (handed over without meta.properties)."""
    by_cluster: dict[str, list[dict]] = defaultdict(list)
    for i, cases in enumerate(_groups(CASES).values()):
        for f in _audit(spark, tmp_path_factory.mktemp(f"nobroker{i}") / "tables", cases, without_broker_ids=True):
            by_cluster[f["cluster_id"]].append(f)
    return by_cluster


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_case(case, actual):
    expected = [f for c in CASES if c.id == case.id for f in c.findings]  # as reloaded after REGEN
    for f in expected:
        assert list(f) == COLUMNS, f"{case.path}: a finding must give every column, in order: {COLUMNS}"
        assert (f["rule"], f["cluster_id"]) == (case.rule, case.cluster)
    got = [f for f in actual.get(case.cluster, []) if f["rule"] == case.rule]
    assert canonical(got) == canonical(expected)


def _without_broker_id(f: dict) -> dict:
    out = {**f, "broker_id": None}
    if f.get("replicas") is not None:  # a replica entry with neither a broker id nor a log dir is left out
        out["replicas"] = [{**r, "broker_id": None} for r in f["replicas"] if r.get("log_dir") is not None]
    return out


def _one_log_dir(case) -> bool:
    """Whether the case's rows all come from one log dir (one broker, and none of its other log dirs)."""
    calls = [kw or {} for call in (*case.input, *case.other_cluster) for kw in call.values()]
    return len({(kw.get("broker_id", 1), kw.get("log_dir")) for kw in calls}) == 1


@pytest.mark.parametrize("case", [c for c in CASES if _one_log_dir(c)], ids=lambda c: c.id)
def test_case_without_broker_ids(case, actual_without_broker_ids):
    """A log dir without its meta.properties has no broker id: every rule joins on the replica
    and broker keys null-safe (auditor.model.replica_key), so the case's findings are the same,
    with no broker id. Cases of one log dir only: without meta.properties a log dir has no
    cluster id either, and is a cluster of its own (auditor.model.clusters), so the replicas of
    a cluster never lack a broker id but one."""
    expected = [_without_broker_id(f) for c in CASES if c.id == case.id for f in c.findings]
    got = [f for f in actual_without_broker_ids.get(case.cluster, []) if f["rule"] == case.rule]
    assert canonical(got) == canonical(expected)


def test_every_finding_belongs_to_a_case(actual):
    clusters = {c.cluster for c in CASES} | {c.other for c in CASES}
    assert set(actual) <= clusters


def test_every_kind_of_every_rule_has_a_case():
    assert {c.rule for c in CASES} <= set(catalog()), "a directory of tests/rules/ that is no rule id"
    seen: dict[str, set] = defaultdict(set)
    for c in CASES:
        seen[c.rule] |= {f["kind"] for f in c.findings}
    for rule in catalog().values():
        assert seen[rule.id] == set(rule.kinds), f"{rule.id}: kinds without a case {sorted(set(rule.kinds) - seen[rule.id])}"


def test_every_rule_has_a_negative_case_and_one_example():
    for rule in catalog():
        mine = [c for c in CASES if c.rule == rule]
        assert any(not c.findings for c in mine), f"{rule}: no case where nothing must be reported"
        examples = [c for c in mine if c.example]
        assert len(examples) == 1 and examples[0].findings, f"{rule}: needs exactly one example case, with findings"


def test_no_abort_for_a_transaction_the_coordinator_committed(actual):
    """No case's findings advise an abort where the coordinator decided COMMIT (tests/torn_abort.py,
    an oracle over the raw tables): that abort tears the transaction. The oracle is not vacuous: it
    forbids the abort of the transactions the markers-undelivered and marker-skipped cases hold."""
    every = [f for fs in actual.values() for f in fs]
    assert [t for root in TABLE_ROOTS for t in torn_by_advice(root, every)] == []
    decided = [f for f in every if f["rule"] == "hanging-transaction" and f["kind"] in ("markers-undelivered",
                                                                                      "marker-skipped")]
    assert len(decided) >= 4
    for f in decided:
        target = (f["cluster_id"], f["topic"], f["partition"], f["producer_id"], f["first_offset"])
        if f["evidence"]["decision_record"] is not None:  # a coordinator decision: the oracle sees it too
            assert any(commit_decided(root, target) for root in TABLE_ROOTS), target
