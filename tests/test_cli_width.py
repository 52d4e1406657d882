"""``rules``, ``explain``, ``timeline`` and ``coordinator`` in a real pseudo-terminal: what a
reader copies (a rule id, a kind) is never cut, prose wraps at spaces within the terminal's
width, and a forensic view's detail column takes the terminal's whole width (``--wide``: all of
it, whatever the width)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from conftest import PROJECT, SAMPLE_LOGS
from test_terminal import TXN_AUDIT, in_pty
from auditor.engine.rule import discover

RULES = discover()
UNWRAPPED = 4000  # columns at which nothing of a rule's page wraps: the reference rendering
RULE_LINE = re.compile(r"^[─━═]+$")  # a horizontal rule, as wide as the terminal: not a word


def _shown(args: list[str], columns: int) -> list[str]:
    lines, stderr, status = in_pty(args, columns, 40)
    assert status == 0, stderr[-2000:]
    return lines


def _too_wide(lines: list[str], columns: int) -> list[str]:
    return [ln for ln in lines if len(ln) > columns]


# -- rules ------------------------------------------------------------------------------------

@pytest.mark.parametrize("columns", [80, 120])
def test_rules_prints_every_id_kind_and_severity_whole(columns):
    lines = _shown([TXN_AUDIT, "rules"], columns)
    assert lines and _too_wide(lines, columns) == []
    assert not any("…" in ln for ln in lines)  # nothing ellipsised
    text = "\n".join(lines)
    for r in RULES:
        # a row of its own: the whole id in the first cell, the rule's severity in the second
        assert re.search(rf"^│ {re.escape(r.id)} +│ {r.severity} +│", text, re.M), (r.id, columns)
        for name, kind in r.kinds.items():
            assert re.search(rf"^│   {re.escape(name)} +│ {kind.severity} +│", text, re.M), (r.id, name, columns)


def test_rules_wraps_titles_at_spaces():
    """The description column is what wraps at 80 columns: every word of every title is whole on
    some line (no word split over two lines, none broken at its hyphen)."""
    lines = _shown([TXN_AUDIT, "rules"], 80)
    words = {w.strip("│ ") for ln in lines for w in ln.split()}
    for r in RULES:
        title_words = r.title.split()
        assert [w for w in title_words if w not in words and w.rstrip(",;") not in words] == [], r.id
        for p in r.proposals:
            assert any(p in ln for ln in lines), p


# -- explain ----------------------------------------------------------------------------------

@pytest.mark.parametrize("rule", [r.id for r in RULES])
def test_explain_fits_80_columns_and_wraps_at_spaces(rule):
    """No line wider than 80 columns, and nothing broken inside a word: every word shown at 80
    columns is a word of the same page rendered where nothing wraps (a word cut in two, at a
    hyphen or with an ellipsis, is not)."""
    narrow = _shown([TXN_AUDIT, "explain", rule], 80)
    assert _too_wide(narrow, 80) == []
    reference = {w for ln in _shown([TXN_AUDIT, "explain", rule], UNWRAPPED) for w in ln.split()}
    assert sorted({w for ln in narrow for w in ln.split() if not RULE_LINE.match(w)} - reference) == []
    assert [ln for ln in narrow if ln.rstrip().endswith("-")] == []
    r = next(x for x in RULES if x.id == rule)
    for name in (*r.kinds, *(e.name for e in r.evidence)):
        assert any(re.search(rf"(^|\s){re.escape(name)}(\s|$)", ln) for ln in narrow), name


# -- timeline and coordinator -----------------------------------------------------------------

@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> Path:
    """sample_logs/hanging-late-write's tables, kept by ``scan --tables``."""
    out = tmp_path_factory.mktemp("width") / "tables"
    res = subprocess.run([TXN_AUDIT, "scan", str(SAMPLE_LOGS / "hanging-late-write"), "--tables", str(out),
                          "--format", "json", "-q"], capture_output=True, text=True, cwd=PROJECT, timeout=600)
    assert json.loads(res.stdout)["tables"] == str(out), res.stderr[-2000:]
    return out


def _timeline(tables: Path, *extra: str) -> list[str]:
    return [TXN_AUDIT, "timeline", str(tables), "--topic", "transfers", "--partition", "0", *extra]


def _coordinator(tables: Path, *extra: str) -> list[str]:
    return [TXN_AUDIT, "coordinator", str(tables), "transfers-txn", *extra]


@pytest.fixture(scope="module")
def long_details(tables) -> list[str]:
    """The timeline's details longer than 60 characters (the late write's is ~170)."""
    res = subprocess.run(_timeline(tables, "--format", "jsonl"), capture_output=True, text=True, cwd=PROJECT,
                         timeout=300)
    details = [json.loads(ln)["detail"] or "" for ln in res.stdout.splitlines()]
    long = [d for d in details if len(d) > 60]
    assert any(len(d) > 150 for d in long), details
    return long


def test_timeline_detail_uses_a_wide_terminal(tables, long_details):
    lines = _shown(_timeline(tables), 250)
    assert _too_wide(lines, 250) == []
    for detail in long_details:  # each fits in 250 columns beside the fixed ones
        assert any(detail in ln for ln in lines), detail
    assert _shown(_timeline(tables, "--wide"), 250) == lines  # nothing was cut


def test_timeline_fits_80_columns_unless_wide(tables, long_details):
    lines = _shown(_timeline(tables), 80)
    assert _too_wide(lines, 80) == []
    assert not any(d in ln for d in long_details for ln in lines)  # cut to fit, then
    assert any(ln.endswith("…") for ln in lines)
    wide = _shown(_timeline(tables, "--wide"), 80)
    assert _too_wide(wide, 80) != []
    for detail in long_details:
        assert any(detail in ln for ln in wide), detail
    assert not any(ln.endswith("…") for ln in wide)


def test_coordinator_detail_uses_the_terminal_and_wide_prints_it_whole(tables):
    whole = _shown(_coordinator(tables, "--wide"), 80)
    records = [ln for ln in whole if re.match(r"^[ !] \d\d:\d\d:\d\d\.\d{3} ", ln)]
    assert records and not any("…" in ln for ln in whole)
    assert max(map(len, records)) > 80  # a detail the 80-column view has to cut
    at_250 = _shown(_coordinator(tables), 250)
    assert _too_wide(at_250, 250) == [] and [ln for ln in at_250 if ln in records] == records
    at_80 = _shown(_coordinator(tables), 80)
    assert _too_wide(at_80, 80) == []
    assert any(ln.endswith("…") for ln in at_80)
    shown = " ".join(" ".join(at_80).split())
    assert "transactional id transfers-txn" in shown and "__transaction_state-" in shown  # wrapped, whole
