"""``--baseline PREV``: a re-scan says which findings are new, still open or resolved, from a
JSON report, a JSON-lines report or a findings directory; exit status 3 when only findings the
baseline had remain (the fix has not taken), 1 when a new one reaches --fail-on, 0 when none."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from test_report_model import SAMPLE, T0, _write, finding
from auditor.cli.main import cli
from auditor.report import build_report, render
from auditor.report.baseline import compare, finding_identity, load_baseline


def _json_report(tmp_path: Path, findings: list[dict], name: str = "before.json") -> Path:
    p = tmp_path / name
    p.write_text(render(build_report(findings, run={"as_of_ms": T0}), "json"))
    return p


def test_new_still_open_and_resolved(tmp_path):
    before = _json_report(tmp_path, SAMPLE)
    fixed = [f for f in SAMPLE if f["topic"] != "payments"]  # the payments abort worked
    arrived = finding(topic="orders", partition=9, first_offset=500)  # a new hang
    rep = build_report(fixed + [arrived])
    b = compare(rep, load_baseline(before))
    assert b.counts() == {"new": 1, "still_open": len(fixed), "resolved": 1}
    assert [f["topic"] for f in b.resolved] == ["payments"]
    assert rep.baseline_status(next(f for f in rep.findings if f["partition"] == 9)) == "new"
    data = json.loads(render(rep, "json"))
    assert {f["baseline"] for f in data["findings"]} == {"new", "still-open"}
    assert [f["topic"] for f in data["resolved"]] == ["payments"] and data["resolved"][0]["incident"].startswith("i-")
    assert data["summary"]["baseline"] == {"source": str(before.absolute()), "as_of_ms": T0,
                                           "new": 1, "still_open": len(fixed), "resolved": 1}


def test_a_kind_that_changed_is_the_same_open_transaction():
    """hanging first, late-write once the coordinator's records were given: still open, not new + resolved."""
    late = dict(SAMPLE[0], kind="late-write")
    assert finding_identity(late) == finding_identity(SAMPLE[0])
    other = dict(SAMPLE[0], first_offset=SAMPLE[0]["first_offset"] + 1)
    assert finding_identity(other) != finding_identity(SAMPLE[0])


def test_terminal_and_markdown_say_what_changed(tmp_path):
    before = _json_report(tmp_path, SAMPLE)
    rep = build_report([f for f in SAMPLE if f["topic"] != "payments"])
    compare(rep, load_baseline(before))
    from auditor.report.render_table import render_table

    text = render_table(rep, width=100)
    assert "Since the baseline (as of 2024-05-01T12:00:00.000Z): 1 resolved, 0 new, 3 still open" in text
    assert "[still open]" in text and "Resolved since the baseline:" in text
    assert "resolved critical hanging-transaction/hanging payments-3@10 producer 8, open 20s then" in text
    md = render(rep, "markdown")
    assert "## Resolved since the baseline" in md and "payments-3\\@10" in md.split("## Resolved since the baseline")[1]


def test_cli_exit_status_and_every_baseline_form(tmp_path):
    """report DIR --baseline: a JSON report, a JSON-lines report and a findings directory give the same
    comparison; 3 while the baseline's findings remain, 0 once they are gone, 1 for a new one."""
    now = _write(tmp_path / "now", SAMPLE)
    forms = [_json_report(tmp_path, SAMPLE), _write(tmp_path / "dir", SAMPLE)]
    jsonl = tmp_path / "before.jsonl"
    jsonl.write_text(render(build_report(SAMPLE), "jsonl"))
    forms.append(jsonl)
    run = CliRunner().invoke
    for base in forms:
        res = run(cli, ["report", str(now), "--baseline", str(base), "--format", "json"])
        assert res.exit_code == 3, (base, res.output)
        assert json.loads(res.stdout)["summary"]["baseline"]["still_open"] == len(SAMPLE)
    empty = _json_report(tmp_path, [], "empty.json")
    assert run(cli, ["report", str(now), "--baseline", str(empty), "--format", "json"]).exit_code == 1
    gone = _write(tmp_path / "gone", [f for f in SAMPLE if f["severity"] in ("warning", "info")])
    res = run(cli, ["report", str(gone), "--baseline", str(forms[0]), "--format", "json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["summary"]["baseline"]["resolved"] == 2
    # the filters apply to the baseline too: only the payments finding compared
    res = run(cli, ["report", str(gone), "--baseline", str(forms[0]), "--topic", "payments", "--format", "json"])
    assert json.loads(res.stdout)["summary"]["baseline"] == {**json.loads(res.stdout)["summary"]["baseline"],
                                                             "resolved": 1, "new": 0, "still_open": 0}


def test_a_baseline_that_is_no_report_is_refused_before_anything_runs(tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_text("hello\n")
    res = CliRunner().invoke(cli, ["report", str(tmp_path), "--baseline", str(bad)])
    assert res.exit_code == 2 and "not a txn-audit report" in res.output and str(bad) in res.output


def test_html_and_markdown_for_a_terminal_go_to_a_file(tmp_path):
    """--report-file writes the report whole (temp file + rename) and says where."""
    now = _write(tmp_path / "now", SAMPLE)
    target = tmp_path / "r.html"
    res = CliRunner().invoke(cli, ["report", str(now), "--format", "html", "--report-file", str(target)])
    assert res.exit_code == 1 and res.stdout == ""
    assert target.read_text().startswith("<!DOCTYPE html>") and f"report written to {target}" in res.stderr
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".r.html")] == []
