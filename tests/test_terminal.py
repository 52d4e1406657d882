"""The terminal report and ``dump --format table`` in a real pseudo-terminal, at 80 and 120
columns: the first screen holds the answer (the critical finding and the command that fixes
it), nothing is broken inside a word, and only commands (which are to be copied) may be wider
than the terminal."""

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


@pytest.mark.parametrize("columns,rows", [(80, 24), (120, 40)])
def test_report_fits_the_terminal_and_its_first_screen_is_the_answer(findings_dir, findings, columns, rows):
    lines, stderr, status = in_pty([TXN_AUDIT, "report", str(findings_dir)], columns, rows)
    assert status == 1 and lines, stderr  # a critical finding: exit status 1
    # only commands (to be copied whole) may be wider than the terminal
    wide = [ln for ln in lines if len(ln) > columns and not COMMAND.match(ln)]
    assert wide == []
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
    assert any(ln.strip() == abort for ln in screen[header:]), "\n".join(screen)
    assert f"{crit['topic']}-{crit['partition']}@{crit['first_offset']}" in "\n".join(screen[header:header + 2])
    # the next forensic command, unwrapped
    evidence = dict(crit["evidence"] or [])  # the findings table's map<string,string>: (key, value) pairs
    start = evidence.get("previous_marker_offset") if crit["kind"] == "late-write" else None
    start = crit["first_offset"] if start is None else start  # a late write's: the marker it follows
    timeline = f"txn-audit timeline <TABLES> --topic {crit['topic']} --partition {crit['partition']} --from {start}"
    assert any(ln.strip().startswith(timeline) for ln in lines)


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
