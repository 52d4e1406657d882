"""``txn-audit dump``: every object names its file (and the ``<topic>-<partition>`` it sits in),
``--records`` holds the control records (a transaction's COMMIT/ABORT marker in its place among
the records) and ``--format table --records`` prints the records under their batch as Kafka's
DumpLogSegments does with ``--deep-iteration`` (checked against the tool's own lines).

Whole processes, on files of sample_logs/: the plain ``dump`` takes the compiled path when the
extension is built, ``TXN_AUDIT_NATIVE=0`` the Python one; both must write the same bytes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PROJECT, SAMPLE_LOGS

BROKER = SAMPLE_LOGS / "hanging-late-write" / "broker-1"
# two partitions' first segments: both at base offset 0, both with markers (COMMIT in transfers-1,
# the late write's ABORT in transfers-0's second segment)
FIRST = [BROKER / "transfers-0" / "00000000000000000000.log", BROKER / "transfers-1" / "00000000000000000000.log"]
ABORTED = BROKER / "transfers-0" / "00000000000000000014.log"
OFFSETS = sorted((SAMPLE_LOGS / "consumer-offsets-hanging" / "broker-1").glob("__consumer_offsets-*/0*.log"))
TXN_LOG = SAMPLE_LOGS / "tiered-storage" / "broker-1" / "__transaction_state-0" / "00000000000000000000.log"


def _dump(*args: str, native: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, **({} if native else {"TXN_AUDIT_NATIVE": "0"})}
    res = subprocess.run([sys.executable, "-m", "auditor.cli.main", "dump", *map(str, args)],
                         capture_output=True, env=env, cwd=PROJECT, timeout=300)
    assert res.returncode == 0, res.stderr.decode()
    return res


def _objects(*args: str, native: bool = True) -> list[dict]:
    return [json.loads(line) for line in _dump(*args, native=native).stdout.splitlines()]


def test_every_object_names_its_file_topic_and_partition():
    """Segments of the same base offset, a producer snapshot, a transaction index and a log dir's
    checkpoint (outside any partition directory: no file's topic and partition), with and without
    --records: every object ends with the file it came from."""
    side = [BROKER / "transfers-0" / "00000000000000000014.snapshot", BROKER / "transfers-0" / "00000000000000000014.txnindex",
            BROKER / "recovery-point-offset-checkpoint"]
    assert all(p.stat().st_size for p in FIRST + side)
    for records in ([], ["--records"]):
        objs = _objects(*records, *FIRST, *side)
        by_file: dict[str, list[dict]] = {}
        for o in objs:
            by_file.setdefault(o["file"], []).append(o)
        assert set(by_file) == {str(p) for p in FIRST + side}, records
        for path, got in by_file.items():
            p = Path(path)
            if p.parent == BROKER:  # its entries' topic and partition are their own, there is no file's
                assert got and not any("log_topic" in o or "log_partition" in o for o in got), path
                assert all(list(o)[-1] == "file" for o in got)
            else:
                topic, partition = p.parent.name.rsplit("-", 1)
                assert {(o["topic"], o["partition"]) for o in got} == {(topic, int(partition))}, path
            assert all(list(o)[-3:] == ["file", "topic", "partition"] or p.parent == BROKER for o in got)
        # the two segments at base offset 0 are told apart: the same offsets, other files
        a, b = (sorted(o["base_offset"] for o in by_file[str(p)] if o["type"] == "batch") for p in FIRST)
        assert a[0] == b[0] == 0
        # only keys were added: a batch line is what it was, then the three
        batch = next(o for o in objs if o["type"] == "batch")
        assert list(batch)[:2] == ["type", "position"] and list(batch)[-5:-3] == ["segment_base_offset", "source"]


def test_markers_are_records_in_their_place():
    """--records of a transactional partition: one object per offset of every batch, in order --
    data records and, at each control batch's offset, its marker with the batch's control type and
    coordinator epoch; the compiled and the Python paths write the same bytes."""
    for seg in (*FIRST, ABORTED):
        objs = _objects("--records", seg)
        assert _dump("--records", seg, native=False).stdout == _dump("--records", seg).stdout
        batches = [o for o in objs if o["type"] == "batch"]
        recs = [o for o in objs if o["type"] in ("record", "marker")]
        assert [r["offset"] for r in recs] == [n for b in batches for n in range(b["base_offset"], b["last_offset"] + 1)]
        controls = {b["base_offset"]: b for b in batches if b["is_control"]}
        markers = [r for r in recs if r["type"] == "marker"]
        assert controls and [m["offset"] for m in markers] == sorted(controls), seg
        for m in markers:
            b = controls[m["offset"]]
            assert (m["control_type"], m["coordinator_epoch"], m["batch_base_offset"]) == (
                b["control_type"], b["coordinator_epoch"], b["base_offset"])
            assert (m["key_size"], m["value_size"], m["sequence"], m["header_keys"]) == (4, 6, -1, [])
        assert all("control_type" not in r for r in recs if r["type"] == "record")
    aborted = [o for o in _objects("--records", ABORTED) if o["type"] == "marker"]
    assert [(m["offset"], m["control_type"]) for m in aborted] == [(14, "ABORT")]


def test_internal_topics_keep_their_own_topic_and_name_the_file_s_as_log_topic():
    """A committed offset's ``topic``/``partition`` are the record's own: the file's are
    ``log_topic``/``log_partition`` there (the tables' own naming); a transactional offset
    commit's marker in __consumer_offsets is a marker object like any other."""
    objs = _objects("--records", *OFFSETS)
    commits = [o for o in objs if o["type"] == "offset_commits"]
    assert commits and {(o["topic"], o["partition"]) for o in commits} == {("input", 0)}
    for o in commits:
        assert Path(o["file"]).parent.name == f"{o['log_topic']}-{o['log_partition']}"
        assert o["log_topic"] == "__consumer_offsets"
    markers = [o for o in objs if o["type"] == "marker"]
    assert len(markers) == 1 and markers[0]["topic"] == "__consumer_offsets"
    assert markers[0]["control_type"] in ("COMMIT", "ABORT")
    others = [o for o in objs if o["type"] not in ("offset_commits", "problem")]
    assert all(o["topic"] == "__consumer_offsets" for o in others)
    assert _dump("--records", *OFFSETS, native=False).stdout == _dump("--records", *OFFSETS).stdout


def _table(*args: str) -> list[str]:
    return _dump("--format", "table", *args).stdout.decode().splitlines()


def test_table_records_follow_their_batch():
    """--format table --records: after each batch's line(s), one ``| offset:`` line per record and
    marker of the JSON lines, in the same order; without --records none."""
    lines = _table("--records", *FIRST)
    rec_lines = [ln for ln in lines if ln.startswith("| offset: ")]
    objs = [o for o in _objects("--records", *FIRST) if o["type"] in ("record", "marker")]
    assert [int(ln.split()[2]) for ln in rec_lines] == [o["offset"] for o in objs]
    markers = [ln for ln in rec_lines if " endTxnMarker: " in ln]
    assert len(markers) == sum(o["type"] == "marker" for o in objs) > 0
    assert all(ln.endswith("endTxnMarker: COMMIT coordinatorEpoch: 0") for ln in markers)
    # each record line comes after a batch line whose offsets hold it
    last_base = None
    for ln in lines:
        if ln.startswith("baseOffset: "):
            last_base, last_end = int(ln.split()[1]), int(ln.split()[3])
        elif ln.startswith("| offset: "):
            assert last_base is not None and last_base <= int(ln.split()[2]) <= last_end, ln
    assert not any(ln.startswith("| offset: ") for ln in _table(*FIRST))


def test_table_records_of_the_transaction_log_are_decoded():
    lines = [ln for ln in _table("--records", TXN_LOG) if ln.startswith("| offset: ")]
    rows = [o for o in _objects("--records", TXN_LOG) if o["type"] == "transaction_log"]
    assert rows and len(lines) == len(rows)
    for ln, row in zip(lines, rows):
        assert ln.startswith(f"| offset: {row['offset']} CreateTime: {row['timestamp']} keySize: ")
        decoded = json.loads(ln.split(" transaction_log: ", 1)[1])
        assert (decoded["transactional_id"], decoded["state"], decoded["producer_epoch"]) == (
            row["transactional_id"], row["state"], row["producer_epoch"])


@pytest.mark.parametrize("capture", ["hanging-late-write", "fencing-tv2", "timeout-abort"])
def test_table_record_lines_are_the_dump_tool_s(capture):
    """Differential: the ``| offset:`` lines of ``dump --format table --records`` of a capture's
    data segments are, character for character, what Kafka's DumpLogSegments --deep-iteration
    prints (markers included)."""
    from dumptool import run_dump

    segs = sorted(p for p in (SAMPLE_LOGS / capture).glob("broker-*/*-*/0*.log")
                  if p.stat().st_size and not p.parent.name.startswith("__"))
    assert segs
    theirs = [ln for ln in run_dump(segs, "--deep-iteration").splitlines() if ln.startswith("| offset: ")]
    ours = [ln for ln in _table("--records", *segs) if ln.startswith("| offset: ")]
    assert any(" endTxnMarker: " in ln for ln in theirs)
    assert ours == theirs
