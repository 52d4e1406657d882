"""The fast path of ``txn-audit dump`` (columnar headers, vectorised JSON) writes
exactly the bytes of the per-object path, on every segment and KRaft snapshot
of sample_logs/ (and the real captures when present), with and without
--records, memory-mapped or read window by window. Any difference is a bug."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from conftest import PROJECT, REAL_LOGS
from auditor.dump import _columns as jc, _fast as dump_fast, _run as dump_run
from auditor.ingest.plan import make_plan


def _tasks(root):
    return [t for t in make_plan([str(root)], split_bytes=1 << 62).tasks if t["kind"] in ("segment", "kraft-snapshot")]


def _reference(task, records):
    lines, problems = [], []
    for o in dump_run._objects(task, records):
        if o["type"] == "problem":
            problems.append(o)
        else:
            lines.append((json.dumps(o, default=dump_run._json_default) + "\n").encode())
    return b"".join(lines), problems


def _fast(task, records):
    out, problems = io.BytesIO(), []
    for o in dump_run._fast_items(task, records, out):
        if o["type"] == "problem":
            problems.append(o)
        else:
            out.write((json.dumps(o, default=dump_run._json_default) + "\n").encode())
    return out.getvalue(), problems


def _check(tasks, monkeypatch=None, window=None):
    if window is not None:
        monkeypatch.setattr(dump_fast, "_WINDOW", window[0])
        monkeypatch.setattr(dump_fast, "_MAX_WINDOW", window[1])
    assert tasks
    for task in tasks:
        for records in (False, True):
            want, fast = _reference(task, records), _fast(task, records)
            assert fast[1] == want[1], f"{task['path']} records={records}: problems differ"
            if fast[0] != want[0]:
                for a, b in zip(want[0].splitlines(), fast[0].splitlines()):
                    assert b == a, f"{task['path']} records={records}"
                assert fast[0] == want[0], f"{task['path']} records={records}: line count differs"


def test_fast_dump_equals_per_object_dump_on_sample_logs():
    _check(_tasks(PROJECT / "sample_logs"))


@pytest.mark.parametrize("window", [(1000, 1 << 20), (300, 700), (64, 64)])
def test_plain_read_windows_change_nothing(monkeypatch, window):
    """Active segments are read window by window: entries across a window's end,
    entries bigger than the largest window and problems at a window's start."""
    _check([t for t in _tasks(PROJECT / "sample_logs") if t.get("active", True)], monkeypatch, window)


def test_memory_mapped_path_equals_per_object_dump(monkeypatch):
    tasks = [{**t, "active": False} for t in _tasks(PROJECT / "sample_logs") if t["kind"] == "segment"]
    _check(tasks)


def _walk_segment(tmp_path):
    """A segment made for the vectorised record walk (dump_fast._walk_records): runs of
    plain batches of 1 to 40 records (null, empty and real keys and values, negative
    timestamp deltas, sequences that wrap past INT32_MAX, none), and among them what it
    must leave to the exact decoder: record headers, a compressed batch, LogAppendTime,
    a record count that promises more records than the batch holds, a record length that
    does not add up, and one long batch left walking alone."""
    import random
    import struct

    from builders import CODECS, kp_batch

    rng = random.Random(7)
    out, offset = bytearray(), 0

    def blob():
        return rng.choice([None, b"", b"x" * rng.randrange(1, 300)])

    def add(b: bytes) -> None:
        nonlocal offset
        out.extend(b)
        offset += struct.unpack_from(">i", b, 23)[0] + 1  # last offset delta + 1

    for i in range(120):
        n = 200 if i == 60 else rng.randrange(1, 41)
        headers = [("h", b"v")] if i % 29 == 5 else []
        recs = [(j, 1_700_000_000_000 + rng.randrange(-5000, 5000), blob(), blob(), headers) for j in range(n)]
        seq = rng.choice([-1, 0, 1000, 0x7FFFFFFF - 10])
        b = bytearray(kp_batch(recs, producer_id=-1 if seq < 0 else 42, producer_epoch=0 if seq >= 0 else -1,
                               base_sequence=seq, base_offset=offset,
                               codec=CODECS["gzip"] if i % 37 == 3 else 0))
        if i % 31 == 7:  # LogAppendTime: the broker's max timestamp for every record
            struct.pack_into(">h", b, 21, struct.unpack_from(">h", b, 21)[0] | 0x08)
        if i == 50:  # more records promised than there are
            struct.pack_into(">i", b, 57, n + 1)
        if i == 70:  # the first record's length one byte short (its varint is one byte: lengths < 64)
            b[61] = max(b[61] - 2, 0)
        add(bytes(b))
    d = tmp_path / "walk-0"
    d.mkdir()
    (d / "00000000000000000000.log").write_bytes(bytes(out))
    return _tasks(tmp_path)


@pytest.mark.parametrize("group_bytes", [None, 65536, 40000])
def test_record_walk_equals_per_object_dump(tmp_path, monkeypatch, group_bytes):
    """--records of plain batches is walked vectorised, a group of bytes at a time (small groups:
    many groups, some too few batches to walk, some spanning more than twice a group); every
    batch it cannot vouch for goes the exact way."""
    from auditor.dump import _fast as dump_fast

    if group_bytes is not None:
        monkeypatch.setattr(dump_fast, "_WALK_GROUP_BYTES", group_bytes)
    tasks = _walk_segment(tmp_path)
    walked = []
    real = dump_fast._walk_records
    monkeypatch.setattr(dump_fast, "_walk_records", lambda *a: walked.append(real(*a)) or walked[-1])
    for active in (True, False):
        _check([{**t, "active": active} for t in tasks])
    ok = [x for w in walked if w is not None for x in w.ok]
    assert sum(ok) > (80 if group_bytes is None else 16) and not all(ok)  # batches walked, the odd ones not


def test_only_internal_topics_have_segment_tables_besides_batches():
    """``dump`` skips the table registry for other topics' segments (dump_run._fast_items)."""
    from auditor.dump._run import _INTERNAL
    from auditor.ingest.tables import TABLES

    for name, spec in TABLES.items():
        if name != "batches" and "segment" in spec.kinds:
            assert spec.topic in _INTERNAL, name


@pytest.mark.real_logs
def test_fast_dump_equals_per_object_dump_on_real_logs():
    _check(_tasks(REAL_LOGS))


def test_int_part_formats_as_json_does():
    rng = np.random.default_rng(3)
    edge = [0, 1, -1, 9, 10, -10, 99, 100, 9999, 10000, -9999, -10000, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)]
    values = np.array(edge + rng.integers(-(2**63), 2**63 - 1, 500, dtype=np.int64).tolist()
                      + rng.integers(-1000, 1000, 500).tolist(), dtype=np.int64)
    null = rng.random(len(values)) < 0.2
    for v, nl in ((values, None), (values, null), (np.full(5, -7, np.int64), None), (values[:1], None)):
        got = jc.render(len(v), [b"[", jc.int_part(v, null=nl), b"]\n"]).splitlines()
        want = [json.dumps([None if nl is not None and nl[i] else int(x)]).encode() for i, x in enumerate(v)]
        assert got == want


def test_choice_and_object_parts():
    vals = [None, "COMMIT", "ABORT", "UNKNOWN(7)", "é\n\x00", True, False, 5]
    got = jc.render(len(vals), [b"{\"x\": ", jc.object_part(vals), b"}\n"]).splitlines()
    assert got == [json.dumps({"x": v}).encode() for v in vals]
    flags = np.array([True, False, False, True])
    assert jc.render(4, [jc.bool_part(flags), b"\n"]).splitlines() == [b"true", b"false", b"false", b"true"]


@pytest.mark.parametrize("fail", [OSError(5, "Input/output error"), ValueError("boom")])
def test_a_read_failure_after_small_chunks_writes_them_first(monkeypatch, fail):
    """Small chunks wait to be formatted together (``_FORMAT_ROWS``); a failure while
    reading the next one still gets every line decoded before it, then the problem --
    what formatting each chunk at once writes."""
    task = max((t for t in _tasks(PROJECT / "sample_logs") if t["kind"] == "segment"), key=lambda t: t["size"])
    real = dump_fast._columns
    chunks = [c for c in real(task, open(task["path"], "rb")) if isinstance(c, dict)]
    assert sum(len(c["position"]) for c in chunks) >= 3

    def failing(task, f, verify_crc=True):
        for c in real(task, f, verify_crc):
            if not isinstance(c, dict):
                break
            for i in range(len(c["position"])):  # one-row chunks, then the failure
                yield {k: v[i:i + 1] for k, v in c.items()}
        raise fail

    monkeypatch.setattr(dump_fast, "_columns", failing)
    runs = []
    for rows in (1, 1 << 20):
        monkeypatch.setattr(dump_fast, "_FORMAT_ROWS", rows)
        out = io.BytesIO()
        problems = list(dump_fast.write_batches(task, out))
        runs.append((out.getvalue(), problems))
    assert runs[0] == runs[1]
    assert runs[0][0].count(b"\n") == sum(len(c["position"]) for c in chunks)
    assert runs[0][1][-1]["kind"] == ("io-error" if isinstance(fail, OSError) else "internal-error")
