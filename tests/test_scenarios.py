"""Every captured scenario in sample_logs/: findings equal its expected.json.

Ground truth comes from what each scenario did (scripts/capture_scenarios.py
records producer ids, offsets and outcomes from the clients), never from the
auditor. All scenarios are ingested and audited in one run (each is its own
cluster id), and the findings are split back per scenario. Precision and recall
are both required to be 100%: every expected anomaly is found by the rules
listed for its type below, and no other finding appears — at any severity; the
clean scenarios therefore yield no findings at all.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import SAMPLE_LOGS
from auditor.engine.runner import audit
from auditor.report.spark.data import ReportData
from auditor.ingest.spark_job import ingest
from auditor.formats.checkpoints import read_meta_properties
from torn_abort import torn_by_advice

pytestmark = pytest.mark.spark

SCENARIOS = sorted(p.parent for p in SAMPLE_LOGS.glob("*/expected.json") if "expect" in json.loads(p.read_text()))

# which rules must report an expected anomaly type (at its topic-partition / producer)
RULES_FOR = {
    "open-transaction": {"hanging-transaction", "stuck-lso"},
    "hanging-transaction": {"hanging-transaction", "stuck-lso"},
    "pending-transactional-offset-commit": {"hanging-transaction", "stuck-lso"},
    "hanging-transactional-offset-commit": {"hanging-transaction", "stuck-lso"},
    "two-phase-commit-transaction": {"hanging-transaction", "stuck-lso"},  # KIP-939: info, never hanging
    "unknown-producer": {"unknown-producer-gap"},
    "out-of-order-sequence": {"out-of-order-sequence"},
    "overlapping-producer-id-blocks": {"pid-block-overlap"},
}


def _cluster_of(scenario: Path) -> str:
    metas = list(scenario.glob("*/meta.properties"))
    assert metas, f"{scenario} has no meta.properties"
    return read_meta_properties(metas[0].read_bytes())["cluster_id"]


@pytest.fixture(scope="module")
def results(spark, tmp_path_factory):
    """Scenarios are audited together, in as few runs as keep cluster ids apart
    (a mutated capture keeps the cluster id of the capture it was derived from,
    and must not be mixed with it: rules compare everything within a cluster)."""
    assert len(SCENARIOS) >= 12
    groups: list[dict[str, Path]] = []
    for s in SCENARIOS:
        cid = _cluster_of(s)
        for g in groups:
            if cid not in g:
                g[cid] = s
                break
        else:
            groups.append({cid: s})
    per: dict[str, list[dict]] = defaultdict(list)
    bad: list[dict] = []
    modes: dict[bool, object] = {}
    for i, g in enumerate(groups):
        out = tmp_path_factory.mktemp(f"scenarios{i}") / "tables"
        TABLE_ROOTS.append(out)
        ing = ingest(spark, [str(s) for s in g.values()], str(out))
        bad += ing.bad_files
        if i == 0:
            # test_audit_modes_agree: the small-input settings with every partition's plot series
            # collected with the rules (the cap raised: whatever the rows this group's plots come to),
            # with them collected after the findings, and the same tables with a large input's
            res = audit(spark, str(out), report=ReportData(early_plot_rows=10**6))
            late = audit(spark, str(out), report=ReportData(early_plot_rows=0))
            modes = {True: res, "late": late, False: audit(spark, str(out), report=ReportData(), small=False),
                     "tables": str(out), "inputs": [str(s) for s in g.values()]}
        else:
            res = audit(spark, str(out))
        for f in res.findings:
            per[g[f["cluster_id"]].name].append(f)
    return bad, per, modes


TABLE_ROOTS: list[Path] = []  # what :func:`results` ingested, per group


def test_no_abort_for_a_transaction_the_coordinator_committed(results):
    """No capture's findings advise an abort where the coordinator decided COMMIT
    (tests/torn_abort.py: an oracle over the raw tables, apart from the model)."""
    _, per, _ = results
    every = [f for fs in per.values() for f in fs]
    assert [t for root in TABLE_ROOTS for t in torn_by_advice(root, every)] == []


def _key(f: dict) -> tuple:
    return (f["rule"], f.get("topic"), f.get("partition"), f.get("producer_id"))


@pytest.mark.parametrize("scenario", [s.name for s in SCENARIOS])
def test_findings_equal_expected(results, scenario):
    _, per, _ = results
    exp = json.loads((SAMPLE_LOGS / scenario / "expected.json").read_text())["expect"]
    expected: dict[tuple, dict] = {}
    for a in exp["anomalies"]:
        for rule in RULES_FOR[a["type"]]:
            topic = None if rule == "pid-block-overlap" else a.get("topic")
            part = None if rule == "pid-block-overlap" else a.get("partition")
            expected[(rule, topic, part, a.get("producer_id") if topic else None)] = a
    found = per.get(scenario, [])
    got = {}
    for f in found:
        k = _key(f)
        if k[0] == "pid-block-overlap":
            k = (k[0], None, None, None)
        got.setdefault(k, f)
    missing = sorted(set(expected) - set(got), key=str)
    extra = sorted(set(got) - set(expected), key=str)
    assert not missing, f"{scenario}: expected but not found: {missing}"
    assert not extra, f"{scenario}: found but not expected: {[got[k]['message'] for k in extra]}"
    for k, a in expected.items():
        f = got[k]
        if k[0] in ("hanging-transaction", "stuck-lso", "unknown-producer-gap"):
            assert f["first_offset"] == a["first_offset"], f"{scenario} {k}: {f['message']}"
        if k[0] == "hanging-transaction":
            assert f.get("transactional_id") == a.get("transactional_id"), f"{scenario}: {f['message']}"
            if a["type"] == "hanging-transaction":
                assert f["kind"] != "in-flight", f["message"]
        if k[0] == "out-of-order-sequence":
            assert a["first_offset"] in (f["first_offset"], f["last_offset"]), f["message"]
        if a["type"] == "two-phase-commit-transaction":
            assert (f["kind"], f["severity"], f["remediation_commands"]) == ("two-phase-commit", "info", []), f["message"]


def test_plot_rows_bound_covers_every_series(spark, results):
    """The early plots are chosen by a bound on the rows they collect (``plot_rows_bound``):
    collected for every partition of real captures, each series stays within its part of it."""
    from auditor.engine.collect import collect_many
    from auditor.engine.context import AuditContext
    from auditor.engine.runner import _reader_context
    from auditor.report.spark.data import LSO_BUCKETS, plot_queries, plot_rows_bound, summary_queries

    spark.catalog.clearCache()  # what earlier tests of this session left cached is not this test's heap
    ctx = AuditContext(spark, results[2]["tables"])
    try:
        rc = _reader_context(ctx, ReportData())
        stats = collect_many(summary_queries(rc))["replica_stats"]
        got = collect_many(plot_queries(rc, stats))
    finally:
        ctx.close()
    plotted = [r for r in stats if r.get("t0") is not None]
    assert len(plotted) > 20 and got["pins"] and got["sessions"]
    assert len(got["ends"]) <= sum(min(int(r["segment_batches"]), LSO_BUCKETS) for r in plotted)
    assert len(got["pins"]) <= LSO_BUCKETS * len(plotted)
    assert len(got["sessions"]) <= sum(int(r["batches"]) for r in plotted)
    assert len(got["hw"]) <= len(plotted)
    assert sum(len(v) for v in got.values()) <= plot_rows_bound(stats)
    # rows without a plot range add nothing
    assert plot_rows_bound([*stats, {"t0": None, "t1": None, "segment_batches": 10**6}]) == plot_rows_bound(stats)


def test_a_second_copy_of_every_capture_changes_no_finding(spark, results, tmp_path):
    """Two dumps of the same brokers given together (REPLICA keeps log dirs apart: a dump taken later
    is another log dir of the same broker): every capture of the first group and a copy of each, in
    one audit, give the findings of the captures alone -- no copy is compared with its original as if
    it were another replica, nor read into its original's log. (Two copies made the metadata log's
    producer-id grants look like steps back, and each remote segment be read twice.)"""
    import shutil

    inputs = results[2]["inputs"]
    copies = []
    for i, src in enumerate(inputs):
        dst = tmp_path / f"copy{i}" / Path(src).name
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("expected.json"))
        copies.append(str(dst))
    tables = tmp_path / "tables"
    ingest(spark, inputs + copies, str(tables))
    both = audit(spark, str(tables))

    def keys(findings):
        return sorted({(f["rule"], f["kind"], f["severity"], f.get("cluster_id"), f.get("topic"), f.get("partition"),
                        f.get("producer_id"), f.get("first_offset")) for f in findings}, key=str)

    alone = results[2][True].findings
    assert len(inputs) >= 10 and alone
    assert keys(both.findings) == keys(alone)


def test_audit_modes_agree(results):
    """A small dump's rules are collected under the small-input settings, its tables read as
    one partition; a large one's under Spark's own, its views released as their readers finish.
    Same tables, same findings, summary, plot series and reference time either way."""
    _, _, modes = results
    small, large = modes[True], modes[False]
    assert small.phase_seconds.keys() >= {"plan", "run"} and large.phase_seconds.keys() >= {"plan", "run"}
    # each rule's job timed, either way
    assert set(small.rule_seconds) == set(large.rule_seconds) >= {"hanging-transaction", "stuck-lso"}

    def canon(res):
        return sorted(json.dumps(f, sort_keys=True, default=str) for f in res.findings)

    assert small.findings, "the first group of scenarios has findings"
    assert canon(small) == canon(large)
    assert small.summary == large.summary and small.summary["batches"] > 0
    assert small.plots == large.plots and small.plots["partitions"]
    # every partition's series collected with the rules, those with findings kept: the same plots
    late = modes["late"]
    assert small.plots_with_rules and not late.plots_with_rules
    assert late.plots == small.plots and late.summary == small.summary
    assert canon(late) == canon(small)
    assert small.as_of_ms == large.as_of_ms > 0
    assert small.skipped == large.skipped
    # a large input's persisted view is released once its readers' jobs are done; what the report
    # data reads stays
    assert "sequence_breaks" in large.released_views and "transactions" not in large.released_views
    assert small.released_views == []  # small: everything is released at the end


def test_inputs_ingest_cleanly(results):
    bad, _, _ = results
    assert bad == [], [(f["path"], f["status"], f["error_message"]) for f in bad][:5]


def test_one_verdict_per_transaction(results):
    """Every stuck-lso finding has the age, transactional id and verdict of the
    hanging-transaction finding at its offset (auditor.model.verdicts: one row per transaction)."""
    from partial_inputs import disagreements

    _, per, _ = results
    assert any(f["rule"] == "stuck-lso" for fs in per.values() for f in fs)
    assert {s: d for s, fs in per.items() if (d := disagreements(fs))} == {}
