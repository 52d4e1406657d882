"""The terminal report and ``dump --format table`` in a real pseudo-terminal, at 80 to 120
columns: the first screen holds the answer (the critical incident and the command that fixes
it), nothing is broken inside a word, no line is wider than the terminal, and a command broken
over lines (`` \\`` continuations) pastes back into the command the JSON report gives."""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from conftest import PROJECT, SAMPLE_LOGS
from auditor.dump._lines import MARKER_FIELDS, TABLE_FIELDS

TXN_AUDIT = str(Path(sys.executable).with_name("txn-audit"))
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
COMMAND = re.compile(r"^\s*(#\s.*: )?(kafka-transactions\.sh|txn-audit) ")
# what kafka-dump-log (DumpLogSegments.printBatchLevel) calls a batch's fields
DUMP_LOG_NAMES = ["baseOffset", "lastOffset", "count", "baseSequence", "lastSequence", "producerId", "producerEpoch",
                  "partitionLeaderEpoch", "isTransactional", "isControl", "position", "CreateTime", "size", "magic",
                  "compresscodec", "crc", "isvalid"]


def in_pty(args: list[str], columns: int, rows: int) -> tuple[list[str], str, int]:
    """(stdout lines, stderr, exit status) of ``args`` with stdout on a pseudo-terminal of
    ``columns`` x ``rows`` (COLUMNS/LINES unset: the window size is what the program sees)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["TERM"] = "xterm-256color"
    proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=subprocess.PIPE, env=env, cwd=PROJECT,
                            close_fds=True)
    os.close(slave)
    data = b""
    while True:
        ready, _, _ = select.select([master], [], [], 120)
        if not ready:
            break
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        data += chunk
    os.close(master)
    stderr = proc.stderr.read().decode(errors="replace")
    proc.wait(timeout=60)
    text = ANSI.sub("", data.decode("utf-8", errors="replace")).replace("\r\n", "\n")
    return text.splitlines(), stderr, proc.returncode


@pytest.fixture(scope="module")
def findings_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("terminal") / "findings"
    res = subprocess.run([TXN_AUDIT, "scan", str(SAMPLE_LOGS / "hanging-late-write"), "--out", str(out),
                          "--format", "json", "-q"], capture_output=True, text=True, cwd=PROJECT, timeout=600)
    assert out.joinpath("_audit.json").is_file(), res.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def findings(findings_dir) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(next(findings_dir.glob("part-*.parquet"))).to_pylist()


def _whole_on_a_line(lines: list[str], token: str) -> bool:
    return any(token in line for line in lines)


def logical_lines(lines: list[str]) -> list[str]:
    """``lines`` with shell continuations joined (as a shell reads them when pasted)."""
    out: list[str] = []
    joined = ""
    for ln in lines:
        if ln.endswith(" \\"):
            joined += ln[:-1]
            continue
        out.append((joined + ln.lstrip()) if joined else ln)
        joined = ""
    if joined:
        out.append(joined)
    return out


@pytest.mark.parametrize("columns,rows", [(80, 24), (100, 30), (120, 40)])
def test_report_fits_the_terminal_and_its_first_screen_is_the_answer(findings_dir, findings, columns, rows):
    lines, stderr, status = in_pty([TXN_AUDIT, "report", str(findings_dir)], columns, rows)
    assert status == 1 and lines, stderr  # a critical finding: exit status 1
    assert [ln for ln in lines if len(ln) > columns] == []  # commands too: broken with continuations
    # nothing split inside a word: every rule id, rule/kind, location, transactional id and time whole on a line
    for f in findings:
        for token in (f["rule"], f"{f['rule']}/{f['kind']}", f["transactional_id"],
                      f"{f['topic']}-{f['partition']}@{f['first_offset']}" if f.get("topic") else None):
            if token:
                assert _whole_on_a_line(lines, token), (token, columns)
    text = "\n".join(lines)
    for stamp in set(ISO.findall(json.dumps(findings, default=str))) & set(ISO.findall(text)):
        assert _whole_on_a_line(lines, stamp)
    assert all(not ln.rstrip().endswith("-") for ln in lines)  # never broken at a hyphen
    # the first screen: the critical finding's header and its abort command
    crit = next(f for f in findings if f["severity"] == "critical")
    screen = lines[:rows]
    header = next((i for i, ln in enumerate(screen) if ln.startswith("critical")
                   and f"{crit['rule']}/{crit['kind']}" in ln), None)
    assert header is not None, "\n".join(screen)
    abort = (f"kafka-transactions.sh --bootstrap-server <broker:port> abort --topic {crit['topic']} "
             f"--partition {crit['partition']} --start-offset {crit['first_offset']}")
    assert any(ln.strip() == abort for ln in logical_lines(screen[header:])), "\n".join(screen)
    assert f"{crit['topic']}-{crit['partition']}@{crit['first_offset']}" in "\n".join(screen[header:header + 2])
    # the next forensic command, unwrapped
    evidence = dict(crit["evidence"] or [])  # the findings table's map<string,string>: (key, value) pairs
    start = evidence.get("previous_marker_offset") if crit["kind"] == "late-write" else None
    start = crit["first_offset"] if start is None else start  # a late write's: the marker it follows
    # over the tables the scan kept: its findings directory names them (no <TABLES> placeholder)
    manifest = json.loads((findings_dir / "_audit.json").read_text())
    timeline = (f"txn-audit timeline {manifest['tables']} --topic {crit['topic']} --partition {crit['partition']} "
                f"--from {start}")
    assert Path(manifest["tables"], "batches").is_dir()
    assert any(ln.strip().startswith(timeline) for ln in logical_lines(lines))


@pytest.mark.parametrize("columns", [80, 120])
def test_dump_table_uses_kafka_dump_log_names_and_fits(columns):
    seg = SAMPLE_LOGS / "hanging-late-write" / "broker-1" / "transfers-0" / "00000000000000000000.log"
    lines, stderr, status = in_pty([TXN_AUDIT, "dump", "--format", "table", str(seg)], columns, 40)
    assert status == 0, stderr
    assert [ln for ln in lines if ln.startswith("Dumping ")] == [f"Dumping {seg}"]  # the file once, as a heading
    assert all(len(ln) <= columns for ln in lines[1:])
    names = [n for n, _ in TABLE_FIELDS]
    assert names == DUMP_LOG_NAMES and [n for n, _ in MARKER_FIELDS] == ["endTxnMarker", "coordinatorEpoch"]
    body = "\n".join(lines[1:])
    pairs = re.findall(r"(\w+): (\S+)", body)
    assert {n for n, _ in pairs} == set(DUMP_LOG_NAMES) | {"endTxnMarker", "coordinatorEpoch"}
    for old in ("baseSeq", "coordEpoch", "crcOk", "codec", "ctl", "txn"):
        assert not re.search(rf"(^|\s){old}:", body, re.M), old
    # one batch per row: a row starts with baseOffset, its continuation lines are indented
    rows = [ln for ln in lines[1:] if not ln.startswith("  ")]
    assert rows and all(ln.startswith("baseOffset: ") for ln in rows)
    assert sum(1 for n, _ in pairs if n == "baseOffset") == len(rows)
    assert [v for n, v in pairs if n == "endTxnMarker"] and {v for n, v in pairs if n == "endTxnMarker"} <= {"COMMIT", "ABORT"}


def _critical_captures() -> list[str]:
    """The captures of sample_logs/ whose expected anomalies are critical ones: a late write (data
    after its own session's marker, ``after_marker_offset``) or overlapping producer-id blocks
    (test_scenarios checks that every capture gives exactly its expected findings)."""
    out = []
    for exp in sorted(SAMPLE_LOGS.glob("*/expected.json")):
        anomalies = (json.loads(exp.read_text()).get("expect") or {}).get("anomalies") or []
        if any("after_marker_offset" in a or a.get("type") == "overlapping-producer-id-blocks" for a in anomalies):
            out.append(exp.parent.name)
    return out


@pytest.fixture(scope="module")
def incident_dirs(spark, tmp_path_factory) -> dict[str, Path]:
    """Each capture with a critical finding audited alone (one shared Spark session), its
    findings directory written as ``scan --out`` writes it."""
    from auditor.engine.runner import audit, write_findings
    from auditor.report.spark.data import ReportData
    from auditor.ingest.spark_job import ingest

    dirs = {}
    for name in _critical_captures():
        base = tmp_path_factory.mktemp(name)
        ingest(spark, [str(SAMPLE_LOGS / name)], str(base / "tables"))
        res = audit(spark, str(base / "tables"), report=ReportData())
        write_findings(spark, res, str(base / "findings"))
        dirs[name] = base / "findings"
    return dirs


def test_every_critical_capture_is_tested():
    assert len(_critical_captures()) >= 5


@pytest.mark.parametrize("columns,rows", [(80, 24), (100, 30)])
def test_the_critical_incident_is_whole_on_the_first_screen(incident_dirs, columns, rows):
    """Every capture of sample_logs/ with a critical finding: its worst incident, from its header
    to its advice, is on the first screen (the prompt takes a line); no line is wider than the
    terminal; each command, pasted, is the JSON report's command word for word; a finding of the
    same transaction (the stuck LSO it pins) is one line of that block, not a block of its own."""
    import shlex

    for name, findings_dir in incident_dirs.items():
        lines, stderr, status = in_pty([TXN_AUDIT, "report", str(findings_dir)], columns, rows)
        assert status == 1, (name, stderr)
        assert [ln for ln in lines if len(ln) > columns] == [], name
        report = json.loads(subprocess.run([TXN_AUDIT, "report", str(findings_dir), "--format", "json"],
                                           capture_output=True, text=True, cwd=PROJECT, timeout=120).stdout)
        lead = report["findings"][0]
        assert lead["severity"] == "critical"
        block = [f for f in report["findings"] if f["incident"] == lead["incident"]]
        screen = lines[:rows - 1]
        start = next(i for i, ln in enumerate(screen) if ln.startswith("critical"))
        end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
        assert end <= rows - 1, (name, "\n".join(lines[:end]))
        if len({f["incident"] for f in report["findings"]}) == 1:  # the whole report on one screen
            assert len(lines) <= rows - 1, (name, "\n".join(lines))
        text = "\n".join(screen[start:end])
        assert f"{lead['rule']}/{lead['kind']}" in text
        for other in block[1:]:  # one line each, not a block: no header of their own
            assert f"also {other['severity']} {other['rule']}/{other['kind']}" in text, name
            assert not any(ln.startswith(other["severity"]) for ln in lines), name
        pasted = [ln.strip() for ln in logical_lines(screen[start:end]) if COMMAND.match(ln)]
        want = [c["command"] for f in block for c in f["remediation_commands"] if not c["applies_to"]]
        for cmd in want:
            assert any(shlex.split(p) == shlex.split(cmd) for p in pasted), (name, cmd, pasted)
        for p in pasted:
            assert subprocess.run(["bash", "-n", "-c", p]).returncode == 0, p
