"""``txn-audit scan / rules / explain`` through click, on a captured scenario."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import SAMPLE_LOGS
from auditor.cli.main import cli
from auditor.engine.rule import discover

SCENARIO = SAMPLE_LOGS / "hanging-late-write"


def test_rules_lists_the_catalog():
    res = CliRunner().invoke(cli, ["rules"])
    assert res.exit_code == 0
    ids = [r.id for r in discover()]
    assert len(ids) == 12 and all(i in res.stdout for i in ids)


def test_explain():
    """The rule's page (tests/test_docs.py checks its sections), with the example of its own case."""
    res = CliRunner().invoke(cli, ["explain", "stuck-lso"])
    assert res.exit_code == 0 and "KIP-447" in res.stdout and "last stable offset" in res.stdout.lower()
    assert "From the case tests/rules/stuck-lso/stuck.yaml" in res.stdout and "LSO of hang-0 is pinned" in res.stdout
    bad = CliRunner().invoke(cli, ["explain", "no-such-rule"])
    assert bad.exit_code == 2


@pytest.mark.spark
def test_scan_json_and_exit_status(spark, tmp_path):
    exp = json.loads((SCENARIO / "expected.json").read_text())["expect"]["anomalies"][0]
    res = CliRunner().invoke(cli, ["scan", str(SCENARIO), "--tables", str(tmp_path / "t"), "--out", str(tmp_path / "f"),
                                   "--format", "json", "--quiet"])
    assert res.exit_code == 1, res.output  # an error-severity finding: --fail-on error
    findings = json.loads(res.stdout)["findings"]
    hang = [f for f in findings if f["rule"] == "hanging-transaction"]
    assert [(f["topic"], f["partition"], f["producer_id"], f["first_offset"]) for f in hang] == [
        (exp["topic"], exp["partition"], exp["producer_id"], exp["first_offset"])]
    assert hang[0]["severity"] == "critical" and hang[0]["remediation_commands"][0]["command"].startswith("kafka-transactions.sh")
    assert (tmp_path / "f" / "part-00000.parquet").exists()
    lenient = CliRunner().invoke(cli, ["audit", str(tmp_path / "t"), "--fail-on", "critical", "--rule", "stuck-lso", "--quiet"])
    assert lenient.exit_code == 0, lenient.output  # stuck-lso is "error": below --fail-on critical
