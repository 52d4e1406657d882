"""An audit decided again from what an earlier audit collected equals a full audit with those options.

``txn-audit scan`` keeps what an audit's queries collected (nothing of it depends on the
reference instant or ``transaction.max.timeout.ms``); a later scan with another ``--as-of``
or ``--max-timeout-ms`` decides the verdicts, the ages and the age-bound findings again from
it without Spark (:func:`auditor.engine.runner.finish_again`). That is only sound if it is the
same audit: here every capture of ``sample_logs/`` (mutated copies left out: they share their
original's cluster id) is audited in full under several options, and decided again under the
same options from the first audit's collected rows; findings, summary and plots must be equal.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SAMPLE_LOGS
from auditor.engine.context import AuditOptions
from auditor.engine.runner import Collected, audit, finish_again
from auditor.report.spark.data import ReportData

pytestmark = pytest.mark.spark

HOUR = 3_600_000
OPTIONS = {
    "newest-record": AuditOptions(),
    # a few days after the captures: the timeout alone decides which open transactions are too old
    "given-near": AuditOptions(as_of_ms=1_795_500_000_000),
    "short-timeout": AuditOptions(as_of_ms=1_795_500_000_000, transaction_max_timeout_ms=60_000),
    "given-early": AuditOptions(as_of_ms=1_700_000_000_000),  # before most captures: negative ages
    "given-late": AuditOptions(as_of_ms=1_900_000_000_000),  # every open transaction older than any timeout
}


@pytest.fixture(scope="module")
def tables(spark, tmp_path_factory) -> str:
    from auditor.ingest.spark_job import ingest

    out = tmp_path_factory.mktemp("decide-again") / "tables"
    dirs = [str(d) for d in sorted(SAMPLE_LOGS.iterdir()) if d.is_dir() and not d.name.startswith("mutated-")]
    ingest(spark, dirs, str(out))
    return str(out)


@pytest.fixture(scope="module")
def first(spark, tables):
    return audit(spark, tables, options=OPTIONS["newest-record"], report=ReportData())


def _comparable(res) -> dict:
    """What a report shows of an audit, in an order that does not depend on Spark's."""
    def canon(x):
        return json.dumps(x, sort_keys=True, default=str)

    return {"findings": sorted(canon(f) for f in res.findings), "summary": canon(res.summary),
            "plots": canon(res.plots), "as_of_ms": res.as_of_ms, "skipped": res.skipped,
            "report_error": res.report_error}


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_decided_again_equals_a_full_audit(spark, tables, first, name):
    assert first.collected is not None and first.collected.complete  # the plot rows came with the rules
    full = audit(spark, tables, options=OPTIONS[name], report=ReportData()) if name != "newest-record" else first
    again = finish_again(first.collected, OPTIONS[name], report=ReportData())
    assert full.report_error is None and full.findings
    assert _comparable(again) == _comparable(full)


def test_the_options_change_the_verdicts(first):
    """Not a vacuous equality: the options move transactions between verdicts and ages."""
    def kinds(res):
        return sorted((f["rule"], f["kind"]) for f in res.findings)

    decided = {name: finish_again(first.collected, opts, report=ReportData()) for name, opts in OPTIONS.items()}
    outcomes = {name: kinds(res) for name, res in decided.items()}
    assert outcomes["newest-record"] != outcomes["given-late"]
    # each option gives its own audit (the ages, the timeouts judged against, at least)
    assert len({json.dumps(_comparable(res)["findings"]) for res in decided.values()}) == len(OPTIONS)
    late = dict.fromkeys(k for _, k in outcomes["given-late"])
    assert "in-flight" not in late  # nothing is younger than its timeout that late
    assert ("transaction-state-violation", "ongoing-timed-out") in outcomes["given-late"] or \
        ("transaction-state-violation", "prepare-never-completed") in outcomes["given-late"]


def test_a_subset_of_the_rules(first):
    again = finish_again(first.collected, OPTIONS["given-late"], ["stuck-lso"], report=ReportData())
    assert again.findings and {f["rule"] for f in again.findings} == {"stuck-lso"}
    assert set(again.skipped) <= {"stuck-lso"}


def test_collected_rows_survive_their_file(first, tmp_path):
    path = tmp_path / "collected.json"
    first.collected.save(path)
    assert not list(tmp_path.glob(".*.tmp"))  # written whole: no temporary file left
    loaded = Collected.load(path)
    assert _comparable(finish_again(loaded, OPTIONS["given-late"], report=ReportData())) == _comparable(
        finish_again(first.collected, OPTIONS["given-late"], report=ReportData()))
    path.write_text(path.read_text()[:100])  # cut short: the audit runs instead
    assert Collected.load(path) is None


def test_scan_with_another_as_of_decides_again_without_spark(tmp_path):
    """The CLI: a second scan of unchanged inputs with another --as-of says it decides again, and
    reports what a scan that audits reports (here: a fresh tables cache, the same option)."""
    capture = str(SAMPLE_LOGS / "hanging-late-write")

    def scan(home: Path, *extra: str) -> tuple[dict, str]:
        env = {"TXN_AUDIT_TABLES_HOME": str(home), "PATH": "/usr/bin:/bin"}
        p = subprocess.run([sys.executable, "-m", "auditor.cli.main", "scan", capture, "--format", "json", *extra],
                           capture_output=True, text=True, env=env)
        assert p.returncode in (0, 1), p.stderr[-2000:]
        return json.loads(p.stdout), p.stderr

    later = ("--as-of", "2026-11-27T00:00:00Z")  # four days after the capture
    scan(tmp_path / "a")
    again, err = scan(tmp_path / "a", *later)
    assert "deciding the verdicts again" in err and "(no Spark)" in err
    full, err = scan(tmp_path / "b", *later)
    assert "deciding the verdicts again" not in err
    assert again["findings"] == full["findings"]
    assert [f["duration_ms"] for f in again["findings"]] and all(
        f["duration_ms"] > 24 * HOUR for f in again["findings"])
