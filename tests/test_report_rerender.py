"""``report FINDINGS`` renders each stored finding's text again from its kind's templates.

A findings directory keeps the text rendered when it was written; an older release's wording (or a
template fixed since) must not outlive the upgrade. The rule cases' findings are what the engine
renders today: stored with other text, ``load_report`` gives their text back. No Spark.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from auditor.engine.findings import findings_arrow_schema, stored_evidence
from auditor.report.model import load_report
from rule_cases import COLUMNS, load_cases

STALE = "text an older release wrote"


def _write_findings_dir(path, findings: list[dict]) -> None:
    path.mkdir()
    rows = [{**f, "evidence": stored_evidence(f.get("evidence"))} for f in findings]
    pq.write_table(pa.Table.from_pylist(rows, schema=findings_arrow_schema()), path / "part-00000.parquet")
    (path / "_audit.json").write_text(json.dumps({"run_id": "rerender", "summary": {}}))


def _key(f: dict) -> tuple:
    return (f["cluster_id"], f["rule"], f["kind"], f["topic"] or "", f["partition"] or -1, f["first_offset"] or -1,
            f["producer_id"] or -1, f["broker_id"] or -1, f["log_dir"] or "")


def test_every_case_finding_stored_with_stale_text_reads_back_with_todays(tmp_path):
    expected = [f for c in load_cases() for f in c.findings]
    assert len(expected) > 100 and len({f["rule"] for f in expected}) >= 10
    stale = [{**f, "message": STALE, "remediation": STALE,
              "remediation_commands": [{"command": STALE, "applies_to": None}]} for f in expected]
    _write_findings_dir(tmp_path / "findings", stale)
    got = {_key(f): f for f in load_report(tmp_path / "findings").findings}
    assert len(got) == len({_key(f) for f in expected})
    for f in expected:
        g = got[_key(f)]
        assert (g["message"], g["remediation"], g["remediation_commands"]) == (
            f["message"], f["remediation"], f["remediation_commands"]), f["cluster_id"]
        assert g["severity"] == f["severity"] and list(g)[:len(COLUMNS)] == COLUMNS


def test_a_kind_the_catalog_no_longer_has_keeps_its_stored_text(tmp_path):
    (case,) = [c for c in load_cases() if c.id == "torn-transaction/missing-commit-marker"]
    retired = {**case.findings[0], "kind": "retired-kind", "message": STALE}
    unknown_rule = {**case.findings[0], "rule": "retired-rule", "message": STALE}
    _write_findings_dir(tmp_path / "findings", [retired, unknown_rule])
    got = load_report(tmp_path / "findings").findings
    assert sorted(f["message"] for f in got) == [STALE, STALE]
