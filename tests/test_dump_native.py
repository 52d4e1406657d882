"""The compiled path of ``txn-audit dump`` (auditor/cli/_dumpv2.c, auditor/cli/dump_native.py)
writes exactly what the per-object path writes, and leaves to the Python path every entry it
cannot vouch for, so that the problems are the Python path's too. Any difference is a bug."""

from __future__ import annotations

import errno
import os
import struct

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import data_batch, kp_batch, kp_legacy, marker
from conftest import PROJECT, REAL_LOGS
from test_dump_columnar import _reference, _tasks

from auditor.cli import dump_lines, dump_native, dump_run
from auditor.ingest.plan import make_plan


def test_the_extension_is_built_here_and_writes_the_fields_in_the_lines_order():
    """setup.py builds it wherever a C compiler is: where the tests run, it must be there."""
    from auditor.cli import _dumpv2

    assert dump_native.available()
    assert list(_dumpv2.FIELDS) == dump_lines.BATCH_KEYS[:len(_dumpv2.FIELDS)]
    assert dump_lines.BATCH_KEYS[len(_dumpv2.FIELDS):] == ["segment_base_offset", "source"]  # the tail, from Python


def _through_native(task, tmp_path):
    """What ``dump`` writes for ``task`` (compiled path, then the Python path from where it stopped)."""
    out_path = tmp_path / "out.jsonl"
    problems = []
    with open(out_path, "wb") as out:
        for o in dump_run._fast_items(task, False, out):
            assert o["type"] == "problem"
            problems.append(o)
    return out_path.read_bytes(), problems


def _stop(task):
    with open(os.devnull, "wb") as null:
        return dump_native.write_batches(task, null.fileno())


def _check(tasks, tmp_path):
    assert tasks
    for task in tasks:
        want = _reference(task, False)
        got = _through_native(task, tmp_path)
        assert got[1] == want[1], f"{task['path']}: problems differ"
        assert got[0] == want[0], f"{task['path']}: lines differ"


def test_native_dump_equals_per_object_dump_on_sample_logs(tmp_path):
    tasks = [t for t in _tasks(PROJECT / "sample_logs") if t["kind"] == "segment"]
    _check(tasks, tmp_path)
    # and it did the work: most of these segments are written by the extension alone
    whole = [t for t in tasks if _stop(t) == t["size"]]
    assert len(whole) > len(tasks) // 2


def test_native_dump_equals_per_object_dump_on_real_captures(tmp_path):
    assert REAL_LOGS.is_dir(), f"{REAL_LOGS} is missing: the real captures sit beside the clone (shared/real_logs)"
    _check([t for t in _tasks(REAL_LOGS) if t["kind"] == "segment"], tmp_path)


def _segment(tmp_path, *entries: bytes):
    d = tmp_path / "t-0"
    d.mkdir(exist_ok=True)
    p = d / "00000000000000000000.log"
    p.write_bytes(b"".join(entries))
    (task,) = [t for t in make_plan([str(d)], split_bytes=1 << 62).tasks if t["kind"] == "segment"]
    return task


def _bad_crc(batch: bytes) -> bytes:
    b = bytearray(batch)
    b[-1] ^= 0xFF
    return bytes(b)


def _control(offset: int, key: bytes, value: bytes, *, headers: bytes = b"\x00", codec: int = 0) -> bytes:
    """A control batch whose first record has this key and value (and header bytes)."""
    from builders import zigzag_varint as zz

    body = bytes([0]) + zz(0) + zz(0) + zz(len(key)) + key + zz(len(value)) + value + headers
    after_crc = struct.pack(">hiqqqhii", 0x30 | codec, 0, 1, 1, 7, 0, -1, 1) + zz(len(body)) + body
    crc = crc32c.crc32c(after_crc)
    return struct.pack(">qiibI", offset, 4 + 1 + 4 + len(after_crc), 0, 2, crc) + after_crc


PLAIN = [data_batch(0, 3, producer_id=7, producer_epoch=0, base_sequence=0, transactional=True),
         marker(3, 7, 0, commit=True, coordinator_epoch=5),
         data_batch(4, 2, producer_id=7, producer_epoch=0, base_sequence=2147483646, transactional=True),
         marker(6, 7, 0, commit=False, coordinator_epoch=2**31 - 1),
         data_batch(7, 1, codec="gzip"),
         kp_batch([(0, 5, None, b"v", [("h", b"x")])], base_offset=8)]
PLAIN_BYTES = sum(len(b) for b in PLAIN)


@pytest.mark.parametrize("name, tail", [
    ("whole", b""),
    ("bad crc", _bad_crc(data_batch(9, 2))),
    ("legacy entry", kp_legacy(1, 0, [(0, 1, b"k", b"v")], offset=9)),
    ("cut entry", data_batch(9, 2)[:-3]),
    ("cut header", data_batch(9, 2)[:30]),
    ("zero-filled tail", bytes(4096)),
    ("unknown magic", data_batch(9)[:16] + b"\x07" + data_batch(9)[17:]),
    ("leader-change control record", _control(9, struct.pack(">hh", 0, 2), b"\x00\x00")),
    ("marker with a header", _control(9, struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 1), headers=b"\x02\x02h\x00")),
    ("short marker value", _control(9, struct.pack(">hh", 0, 1), b"\x00\x00\x00")),
    ("negative key version", _control(9, struct.pack(">hh", -1, 1), struct.pack(">hi", 0, 1))),
    ("compressed control batch", _control(9, struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 1), codec=1)),
])
def test_the_extension_writes_plain_batches_and_leaves_the_rest_to_python(tmp_path, name, tail):
    task = _segment(tmp_path, *PLAIN, tail, data_batch(20))
    stop = _stop(task)
    # markers (COMMIT, ABORT), codecs, record headers and wrapping sequences are its own; the tail is not
    assert stop == (task["size"] if not tail else PLAIN_BYTES), name
    _check([task], tmp_path)


def test_a_write_error_is_raised_not_swallowed(tmp_path):
    task = _segment(tmp_path, *PLAIN)
    r, w = os.pipe()
    os.close(r)
    with pytest.raises(BrokenPipeError) as info:
        dump_native.write_batches(task, w)
    os.close(w)
    assert info.value.errno == errno.EPIPE


def test_a_file_that_shrank_since_it_was_sized_is_left_to_python(tmp_path):
    task = _segment(tmp_path, *PLAIN)
    with open(task["path"], "r+b") as f:
        f.truncate(PLAIN_BYTES - 10)
    assert _stop(task) == PLAIN_BYTES - len(PLAIN[-1])
    _check([task], tmp_path)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.tuples(st.integers(0, PLAIN_BYTES - 1), st.integers(0, 255)), max_size=3),
       length=st.integers(0, PLAIN_BYTES))
def test_damaged_segments_dump_the_same_with_and_without_the_extension(tmp_path, cuts, length):
    data = bytearray(b"".join(PLAIN))
    for at, byte in cuts:
        data[at] = byte
    task = _segment(tmp_path, bytes(data[:length]))
    _check([task], tmp_path)


def test_a_fifo_in_place_of_the_segment_is_refused_without_blocking(tmp_path):
    task = _segment(tmp_path, *PLAIN)
    os.unlink(task["path"])
    os.mkfifo(task["path"])
    assert _stop(task) == 0  # the Python path then reports it as unreadable
    out, problems = _through_native(task, tmp_path)
    assert out == b"" and [p["kind"] for p in problems] == ["unreadable"]
