"""The compiled path of ``txn-audit dump`` (auditor/dump/_dumpv2.c, auditor/dump/_native.py)
writes exactly what the per-object path writes, and leaves to the Python path every entry it
cannot vouch for, so that the problems are the Python path's too. Any difference is a bug."""

from __future__ import annotations

import errno
import json
import os
import struct

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import data_batch, kp_batch, kp_legacy, marker
from conftest import PROJECT, REAL_LOGS
from test_dump_columnar import _reference, _tasks

from auditor.dump import _lines as dump_lines, _native as dump_native, _run as dump_run
from auditor.ingest.plan import make_plan


def test_the_extension_is_built_here_and_writes_the_fields_in_the_lines_order():
    """setup.py builds it wherever a C compiler is: where the tests run, it must be there."""
    from auditor.dump import _dumpv2

    assert dump_native.available()
    assert list(_dumpv2.FIELDS) == dump_lines.BATCH_KEYS[:len(_dumpv2.FIELDS)]
    assert dump_lines.BATCH_KEYS[len(_dumpv2.FIELDS):] == ["segment_base_offset", "source"]  # the tail, from Python


def _through_native(task, tmp_path, records=False):
    """What ``dump`` writes for ``task`` (compiled path, then the Python path from where it stopped),
    written as :func:`auditor.dump.run` writes it."""
    out_path = tmp_path / "out.jsonl"
    problems = []
    with open(out_path, "wb") as out:
        for o in dump_run._fast_items(task, records, out):
            if o["type"] == "problem":
                problems.append(o)
            else:  # an internal topic's table rows (--records)
                assert records
                out.flush()
                out.write((json.dumps(o, default=dump_run._json_default) + "\n").encode())
    return out_path.read_bytes(), problems


def _stop(task):
    with open(os.devnull, "wb") as null:
        return dump_native.write_batches(task, null.fileno())


def _check(tasks, tmp_path):
    """Headers, then ``--records`` (the record walk of auditor/dump/_dumpv2.c's ``records``)."""
    assert tasks
    for task in tasks:
        for records in (False, True):
            want = _reference(task, records)
            got = _through_native(task, tmp_path, records)
            assert got[1] == want[1], f"{task['path']} records={records}: problems differ"
            if got[0] != want[0]:
                for a, b in zip(want[0].splitlines(), got[0].splitlines()):
                    assert b == a, f"{task['path']} records={records}"
            assert got[0] == want[0], f"{task['path']} records={records}: lines differ"


def test_native_dump_equals_per_object_dump_on_sample_logs(tmp_path):
    tasks = [t for t in _tasks(PROJECT / "sample_logs") if t["kind"] == "segment"]
    _check(tasks, tmp_path)
    # and it did the work: most of these segments are written by the extension alone
    whole = [t for t in tasks if _stop(t) == t["size"]]
    assert len(whole) > len(tasks) // 2


@pytest.mark.real_logs
def test_native_dump_equals_per_object_dump_on_real_captures(tmp_path):
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


OWN_TAILS = {"leader-change control record", "kraft-version record"}


@pytest.mark.parametrize("name, tail", [
    ("whole", b""),
    ("bad crc", _bad_crc(data_batch(9, 2))),
    ("legacy entry", kp_legacy(1, 0, [(0, 1, b"k", b"v")], offset=9)),
    ("cut entry", data_batch(9, 2)[:-3]),
    ("cut header", data_batch(9, 2)[:30]),
    ("zero-filled tail", bytes(4096)),
    ("unknown magic", data_batch(9)[:16] + b"\x07" + data_batch(9)[17:]),
    ("leader-change control record", _control(9, struct.pack(">hh", 0, 2), b"\x00\x00")),
    ("kraft-version record", _control(9, struct.pack(">hh", 0, 5), struct.pack(">hhb", 0, 1, 0))),
    ("unknown control type", _control(9, struct.pack(">hh", 0, 7), b"\x00\x00")),
    ("marker with a header", _control(9, struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 1), headers=b"\x02\x02h\x00")),
    ("short marker value", _control(9, struct.pack(">hh", 0, 1), b"\x00\x00\x00")),
    ("negative key version", _control(9, struct.pack(">hh", -1, 1), struct.pack(">hi", 0, 1))),
    ("compressed control batch", _control(9, struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 1), codec=1)),
])
def test_the_extension_writes_plain_batches_and_leaves_the_rest_to_python(tmp_path, name, tail):
    task = _segment(tmp_path, *PLAIN, tail, data_batch(20))
    stop = _stop(task)
    # markers (COMMIT, ABORT), KRaft's control records, codecs, record headers and wrapping
    # sequences are its own; the other tails are not
    assert stop == (task["size"] if not tail or name in OWN_TAILS else PLAIN_BYTES), name
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


# --------------------------------------------------------------------------- --records
# The extension's record walk (``records`` in auditor/dump/_dumpv2.c: lz4 decompressed in C, the other
# codecs through auditor.formats.codecs.decompress, header keys escaped as json.dumps escapes them)
# must write what the per-object path writes, and hand every batch it cannot vouch for to Python.

def _record(delta: int, ts_delta: int, key: "bytes | None", value: "bytes | None", headers) -> bytes:
    from builders import zigzag_varint as zz

    def blob(b):
        return zz(-1) if b is None else zz(len(b)) + b

    body = bytes([0]) + zz(ts_delta) + zz(delta) + blob(key) + blob(value) + zz(len(headers))
    for hk, hv in headers:
        body += zz(len(hk)) + hk + blob(hv)
    return zz(len(body)) + body


def _raw_batch(base_offset: int, records: "list[bytes]", *, codec: str = "none", count: "int | None" = None,
               log_append: bool = False, base_ts: int = 1_700_000_000_000, base_seq: int = -1,
               control: bool = False, trailing: bytes = b"", payload: "bytes | None" = None) -> bytes:
    """A v2 batch around hand-made record bytes, compressed as a producer does (kafka-python's codecs:
    xerial snappy, LZ4 frames, gzip, zstd frames), or around ``payload`` as given."""
    from kafka import codec as kc

    from builders import CODECS

    data = b"".join(records) + trailing
    enc = payload if payload is not None else {
        "none": lambda d: d, "gzip": kc.gzip_encode, "snappy": lambda d: kc.snappy_encode(d, xerial_compatible=True),
        "lz4": kc.lz4_encode, "zstd": kc.zstd_encode}[codec](data)
    attrs = CODECS[codec] | (0x08 if log_append else 0) | (0x20 if control else 0)
    n = len(records) if count is None else count
    after_crc = struct.pack(">hiqqqhii", attrs, max(n - 1, 0), base_ts, base_ts + 99, 7 if base_seq >= 0 else -1,
                            0 if base_seq >= 0 else -1, base_seq, n) + enc
    crc = crc32c.crc32c(after_crc)
    return struct.pack(">qiibI", base_offset, 4 + 1 + 4 + len(after_crc), 0, 2, crc) + after_crc


ODD_KEYS = ["plain", "quote\"back\\slash", "ctl\n\t\r\b\f\x00\x01\x1f\x7f", "é ü ß", "中文", "emoji 😀 𝄞",
            "\u2028\u2029", ""]


def _records_segment(codec: str) -> "list[bytes]":
    """Batches of every shape the walk meets, in ``codec``: header keys needing every JSON escape,
    null keys and values, LogAppendTime, wrapping sequences, and the odd ones Python must decide."""
    recs = [_record(i, i * 7 - 3, None if i % 4 == 0 else b"k%d" % i, None if i % 5 == 0 else b"v" * i,
                    [(k.encode(), None if j % 2 else b"x") for j, k in enumerate(ODD_KEYS[i % len(ODD_KEYS):][:3])])
            for i in range(12)]
    big = 2**63 - 5
    return [
        _raw_batch(0, recs, codec=codec),
        _raw_batch(12, recs[:3], codec=codec, log_append=True, base_seq=2**31 - 2),
        _raw_batch(15, [_record(0, 0, b"k", b"v", [(b"\xff\xfe", b"")])], codec=codec),  # not UTF-8: Python
        _raw_batch(16, [_record(0, 0, b"k", b"v", [(b"\xed\xa0\x80", b"")])], codec=codec),  # a surrogate: Python
        _raw_batch(17, recs[:2], codec=codec, count=3),  # a record promised, not there: the two before it
        _raw_batch(20, recs[:2], codec=codec, trailing=b"\x00"),  # a byte left over: records, then a problem
        _raw_batch(big, [_record(0, 0, b"k", b"v", []), _record(9, 0, b"k", b"v", [])], codec=codec),  # past int64
        _raw_batch(30, [_record(0, 2**62, b"k", b"v", [])], codec=codec, base_ts=2**62),  # a timestamp past int64
        _raw_batch(31, [], codec=codec),
        _raw_batch(31, recs[:1], codec=codec, count=-1),
        _raw_batch(32, [_record(0, 0, b"k", b"v", [(b"k" * 70000, b"")])], codec=codec),  # a long header key: Python
        marker(33, 7, 0, commit=True, coordinator_epoch=1),
        _raw_batch(34, recs[:4], codec=codec),
    ]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_the_record_walk_writes_what_python_writes(tmp_path, codec):
    entries = _records_segment(codec)
    task = _segment(tmp_path, *entries)
    with open(os.devnull, "wb") as null:
        assert dump_native.write_records(task, null.fileno()) == task["size"]
    _check([task], tmp_path)
    # and a legacy entry after them ends the walk there: the numpy path writes the rest
    task = _segment(tmp_path, *entries, kp_legacy(1, 0, [(0, 1, b"k", b"v")], offset=40), _raw_batch(41, []))
    with open(os.devnull, "wb") as null:
        assert dump_native.write_records(task, null.fileno()) == sum(len(e) for e in entries)
    _check([task], tmp_path)


@pytest.mark.parametrize("codec", ["lz4", "gzip"])
def test_the_record_walk_writes_its_lines_itself(codec):
    """Most of a batch's records are the walk's, not the Python fallback's: an accidental fallback
    for every batch would pass the equality checks above while taking the old path's time. lz4 and
    gzip are decompressed in C (the ``lz4`` and ``deflate`` packages' decoders, both dependencies)."""
    from auditor.dump import _dumpv2

    assert all(dump_native._libraries()), "a decoder library is missing"
    calls = []
    entries = _records_segment(codec)[:2]
    data = b"".join(entries)
    r, w = os.pipe()
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"walk-{os.getpid()}.log")
    with open(path, "wb") as f:
        f.write(data)
    try:
        fd = os.open(path, os.O_RDONLY)
        keys = tuple(dump_lines.RKEYS[k] for k in dump_lines.RECORD_KEYS)
        keys = (keys[0] + dump_lines.RECORD_TYPE, *keys[1:])
        got = _dumpv2.records(fd, 0, len(data), len(data), w, keys, dump_lines.END,
                              lambda c, p: calls.append(("inflate", c)) or b"",
                              lambda pos: calls.append(("fallback", pos)) or b"", dump_native._libraries)
        os.close(fd)
        os.close(w)
        out = os.read(r, 1 << 20)
    finally:
        os.close(r)
        os.unlink(path)
    assert got == len(data) and calls == []
    assert out.count(b"\n") == 15 and out.startswith(b'{"type": "record", "offset": 0, ')


def _gzip_member(data: bytes, *, flags: int = 0, fields: bytes = b"", crc: "int | None" = None,
                 isize: "int | None" = None, level: int = 6) -> bytes:
    """One gzip member (RFC 1952) around ``data``, its header fields and trailer as given."""
    import zlib

    c = zlib.compressobj(level, zlib.DEFLATED, -15)
    body = c.compress(data) + c.flush()
    return (b"\x1f\x8b\x08" + bytes([flags]) + b"\x00\x00\x00\x00\x00\xff" + fields + body
            + struct.pack("<II", zlib.crc32(data) if crc is None else crc, len(data) if isize is None else isize))


def _gzip_shapes() -> "dict[str, tuple[list[bytes], bytes]]":
    """Payloads the C gzip path must read as ``codecs._gzip`` does, or leave to it: several members,
    what follows the last, header fields, damaged trailers, output far larger than the input."""
    recs = [_record(i, i, b"key-%d" % i, b"value %d " % i * 20, [(b"h", b"v")]) for i in range(6)]
    data = b"".join(recs)
    k = len(recs[0]) + len(recs[1])
    big = [_record(i, i, b"k", b"x" * 60_000, []) for i in range(5)]  # ~1000:1
    big_data = b"".join(big)
    return {
        "one member": (recs, _gzip_member(data)),
        "stored blocks": (recs, _gzip_member(data, level=0)),
        "two members": (recs, _gzip_member(data[:k]) + _gzip_member(data[k:])),
        "a member per record": (recs, b"".join(_gzip_member(r) for r in recs)),
        "trailing bytes": (recs, _gzip_member(data) + b"\x00junk"),
        "one trailing magic byte": (recs, _gzip_member(data) + b"\x1f"),
        "trailing magic, then no member": (recs, _gzip_member(data) + b"\x1f\x8b\x08\x00junk"),
        "an empty member": (recs, _gzip_member(b"") + _gzip_member(data)),
        "a file name (FNAME)": (recs, _gzip_member(data, flags=0x08, fields=b"orders.json\x00")),
        "a wrong header CRC (FHCRC)": (recs, _gzip_member(data, flags=0x02, fields=b"\x00\x00")),
        "a wrong CRC-32": (recs, _gzip_member(data, crc=0x12345678)),
        "a wrong length": (recs, _gzip_member(data, isize=len(data) + 1)),
        "a cut trailer": (recs, _gzip_member(data)[:-3]),
        "second member damaged": (recs, _gzip_member(data[:k]) + _gzip_member(data[k:], crc=1)),
        "1000:1 in two members": (big, _gzip_member(big_data[:70_000]) + _gzip_member(big_data[70_000:])),
        "1000:1 in one member": (big, _gzip_member(big_data)),
        "past the inflate limit": ([_record(0, 0, b"k", b"x" * (65 << 20), [])],
                                   _gzip_member(b"".join([_record(0, 0, b"k", b"x" * (65 << 20), [])]))),
    }


def test_gzip_payloads_dump_as_python_reads_them(tmp_path):
    """The C gzip path (libdeflate) against codecs._gzip (zlib), batch by batch: the same lines
    and problems, whether C reads the batch or hands it back."""
    shapes = _gzip_shapes()
    for i, (name, (recs, payload)) in enumerate(shapes.items()):
        task = _segment(tmp_path, _raw_batch(10 * i, recs, codec="gzip", payload=payload), _raw_batch(10 * i + 8, []))
        try:
            _check([task], tmp_path)
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from None


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(codec=st.sampled_from(["none", "gzip", "snappy", "lz4", "zstd"]), data=st.data())
def test_damaged_compressed_batches_dump_their_records_as_python_does(tmp_path, codec, data):
    """A differential fuzz target of the record walk and its LZ4 frame reader: bytes changed, cut
    or appended anywhere in a segment of compressed batches."""
    buf = bytearray(b"".join(_records_segment(codec)[:2] + _records_segment(codec)[4:6]))
    for _ in range(data.draw(st.integers(1, 3))):
        op = data.draw(st.sampled_from(["flip", "cut", "append"]))
        if op == "flip" and buf:
            buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
        elif op == "cut":
            del buf[data.draw(st.integers(0, len(buf))):]
        elif op == "append":
            buf += data.draw(st.binary(min_size=1, max_size=64))
    _check([_segment(tmp_path, bytes(buf))], tmp_path)


# --------------------------------------------------------------------------- internal topics
# ``dump --records`` of an internal topic's segment: the extension frames it (``data_records``) and
# auditor.dump._run._record_lines writes each table's lines; the per-object path goes on where it stops.

INTERNAL_SAMPLES = {
    "metadata": PROJECT / "sample_logs/cluster-rf3/broker-1/__cluster_metadata-0/00000000000000000000.log",
    "offsets": PROJECT / "sample_logs/group-protocols/broker-1/__consumer_offsets-4/00000000000000000000.log",
    "transactions": PROJECT / "sample_logs/compacted-transactions/broker-1/__transaction_state-4/00000000000000000000.log",
}


def _internal_segment(tmp_path, name: str, data: bytes):
    d = tmp_path / INTERNAL_SAMPLES[name].parent.name
    d.mkdir(exist_ok=True)
    (d / "00000000000000000000.log").write_bytes(data)
    (task,) = [t for t in make_plan([str(d)], split_bytes=1 << 62).tasks if t["kind"] == "segment"]
    return task


def test_internal_topic_lines_come_from_the_extension(tmp_path):
    """Each table of a clean internal-topic segment is written whole by the record-line path (an
    accidental fallback to the per-object path would pass the equality checks), and the metadata
    log's producer-id grants are collected for ``producer_id_blocks``."""
    from auditor.dump._run import _record_lines, _registry

    tables = _registry()
    for name, path in INTERNAL_SAMPLES.items():
        task = _internal_segment(tmp_path, name, path.read_bytes())
        specs = [(n, s) for n, s in tables.items() if s.record_decoder and s.accepts(task)]
        assert specs, name
        for table, spec in specs:
            grants = []
            with open(os.devnull, "wb") as null:
                assert _record_lines(task, table, spec, null, lambda row: row.get("api_key") == 15, grants) == task["size"]
            if table == "metadata_records":
                assert grants and {g["record_type"] for g in grants} == {"PRODUCER_IDS_RECORD"}
        _check([task], tmp_path)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(INTERNAL_SAMPLES)), data=st.data())
def test_damaged_internal_topic_segments_dump_as_python_does(tmp_path, name, data):
    """A differential fuzz target of the internal topics' record-line path: bytes changed, cut or
    appended anywhere (bad CRCs, records that do not decode, cut batches) give the per-object
    path's lines and problems."""
    buf = bytearray(INTERNAL_SAMPLES[name].read_bytes())
    for _ in range(data.draw(st.integers(1, 3))):
        op = data.draw(st.sampled_from(["flip", "flip-body", "cut", "append"]))
        if op == "flip" and buf:
            buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
        elif op == "flip-body" and buf:  # a record's bytes changed and the batch's CRC made right again
            _flip_in_batch(buf, data)
        elif op == "cut":
            del buf[data.draw(st.integers(0, len(buf))):]
        elif op == "append":
            buf += data.draw(st.binary(min_size=1, max_size=64))
    _check([_internal_segment(tmp_path, name, bytes(buf))], tmp_path)


def _flip_in_batch(buf: bytearray, data) -> None:
    """Change a byte after some batch's header and store the CRC-32C of its new bytes (a record
    the table decoder refuses, in a batch the framing accepts)."""
    starts, pos = [], 0
    while pos + 61 <= len(buf):
        size = struct.unpack_from(">i", buf, pos + 8)[0]
        if size < 49 or pos + 12 + size > len(buf):
            break
        starts.append((pos, 12 + size))
        pos += 12 + size
    if not starts:
        return
    at, entry = data.draw(st.sampled_from(starts))
    if entry <= 61:
        return
    buf[at + data.draw(st.integers(61, entry - 1))] = data.draw(st.integers(0, 255))
    struct.pack_into(">I", buf, at + 17, crc32c.crc32c(bytes(buf[at + 21:at + entry])))
