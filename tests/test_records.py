"""Records inside v2 batches and control records (auditor.formats.records).

Ground truth: what kafka-python's DefaultRecordBatchBuilder was given, kafka-python's reader over
the same bytes, and records/batches assembled here with struct.pack and the test varint writer
of tests/builders.py.
"""

from __future__ import annotations

import io
import struct

import crc32c
import kafka.codec
import pytest
from kafka.record.memory_records import MemoryRecords

from auditor.errors import DecodeError
from auditor.formats.batch import BatchHeader, iter_segment
from auditor.formats.records import CONTROL_TYPES, ControlRecord, Record, decode_control, iter_records
from builders import kp_batch, zigzag_varint as zz

INT32_MAX = 2**31 - 1
CODECS = [0, 1, 2, 3, 4]  # snappy needs python-snappy: a dev dependency, so never skipped


# --------------------------------------------------------------------------- helpers
# kp_batch (a v2 batch written by kafka-python) and zz (zig-zag varint) come from tests/builders.py
def header_of(raw: bytes) -> BatchHeader:
    (h,) = iter_segment(io.BytesIO(raw), file_size=len(raw))
    assert isinstance(h, BatchHeader)
    return h


def records_of(raw: bytes, **kw) -> list[Record]:
    return list(iter_records(header_of(raw), raw[61:], **kw))


def raw_record(*, attrs=0, ts_delta=0, off_delta=0, key=None, value=None, headers=(), length_adjust=0) -> bytes:
    body = bytes([attrs]) + zz(ts_delta) + zz(off_delta)
    body += zz(-1) if key is None else zz(len(key)) + key
    body += zz(-1) if value is None else zz(len(value)) + value
    body += zz(len(headers))
    for hk, hv in headers:
        body += zz(len(hk)) + hk + (zz(-1) if hv is None else zz(len(hv)) + hv)
    return zz(len(body) + length_adjust) + body


def hand_batch(payload: bytes, *, count: int, attrs: int = 0, last_delta: int | None = None,
               base_offset: int = 0, base_ts: int = 1000, base_seq: int = -1, pid: int = -1, epoch: int = -1) -> bytes:
    lod = count - 1 if last_delta is None else last_delta
    after = struct.pack(">hiqqqhii", attrs, lod, base_ts, base_ts, pid, epoch, base_seq, count) + payload
    return struct.pack(">qiibI", base_offset, 9 + len(after), 0, 2, crc32c.crc32c(after)) + after


# --------------------------------------------------------------------------- kafka-python round trips
def varied_records(n: int) -> list:
    out = []
    for i in range(n):
        key = None if i % 5 == 0 else b"order-%d" % (i % 17)
        value = None if i % 9 == 4 else b"value-" + bytes([65 + i % 26]) * (i % 40) + b"|common suffix for compression"
        headers = []
        if i % 3 == 0:
            headers = [("h\u00e9ader", b"v%d" % i), ("null", None), ("empty", b"")]
        ts = 1_650_000_000_000 + (i * 7 if i % 4 else -i)  # some records older than the first
        out.append((i, ts, key, value, headers))
    return out


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("n", [1, 3, 300])
def test_records_equal_what_kafka_python_was_given(codec: int, n: int) -> None:
    given = varied_records(n)
    raw = kp_batch(given, codec=codec, producer_id=77, producer_epoch=2, base_sequence=10,
                   transactional=True, base_offset=5_000)
    h = header_of(raw)
    if n > 1:
        assert h.codec == codec  # else kafka-python found the codec useless and wrote none
    got = records_of(raw)
    assert len(got) == n
    for r, (delta, ts, key, value, headers) in zip(got, given):
        assert r.offset == 5_000 + delta
        assert r.offset_delta == delta
        assert r.timestamp == ts
        assert r.sequence == 10 + delta
        assert r.key == key
        assert r.value == value
        assert r.headers == headers
    # kafka-python's reader over the same bytes
    kb = MemoryRecords(raw).next_batch()
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in got] == [
        (k.offset, k.timestamp, k.key, k.value, k.headers) for k in kb
    ]


@pytest.mark.parametrize("codec", [1, 3, 4])
def test_large_values_and_multi_byte_varints(codec: int) -> None:
    """Values over 64 KiB (several lz4 blocks, 3-byte length varints) and 20,000 records."""
    big = (b"0123456789abcdef" * 8192)[:131_071]
    given = [(0, 1, b"k" * 200, big, [("x" * 130, big[:300])]), (1, 2, None, big[::-1], [])]
    got = records_of(kp_batch(given, codec=codec))
    assert [(r.key, r.value, r.headers) for r in got] == [(g[2], g[3], g[4]) for g in given]

    many = [(i, 5 + i, None, b"m%d" % (i % 10), []) for i in range(20_000)]
    got = records_of(kp_batch(many, codec=codec, base_offset=2**40))
    assert len(got) == 20_000
    assert got[-1].offset == 2**40 + 19_999 and got[-1].value == b"m9" and got[-1].timestamp == 20_004


def test_offset_holes_as_after_compaction() -> None:
    given = [(0, 10, b"a", b"1", []), (3, 11, b"b", b"2", []), (9, 12, b"c", None, [])]
    raw = kp_batch(given, base_offset=100, producer_id=5, producer_epoch=0, base_sequence=50)
    h = header_of(raw)
    assert (h.last_offset_delta, h.last_offset, h.record_count, h.last_sequence) == (9, 109, 3, 59)
    got = records_of(raw)
    assert [(r.offset, r.sequence) for r in got] == [(100, 50), (103, 53), (109, 59)]


def test_record_sequences_wrap() -> None:
    given = [(i, 1, None, b"v", []) for i in range(4)]
    raw = kp_batch(given, producer_id=5, producer_epoch=0, base_sequence=INT32_MAX - 1)
    assert [r.sequence for r in records_of(raw)] == [INT32_MAX - 1, INT32_MAX, 0, 1]
    raw = kp_batch(given)  # no producer id: no sequences
    assert [r.sequence for r in records_of(raw)] == [-1] * 4


def test_empty_batch_left_by_the_cleaner() -> None:
    # count 0, baseTimestamp -1, header only: kept to preserve the producer's last sequence
    raw = hand_batch(b"", count=0, last_delta=4, base_ts=-1, base_seq=10, pid=3, epoch=1)
    h = header_of(raw)
    assert (h.record_count, h.last_offset_delta, h.last_sequence, h.crc_valid) == (0, 4, 14, True)
    assert records_of(raw) == []


# --------------------------------------------------------------------------- hand-assembled records
def test_hand_assembled_records() -> None:
    payload = raw_record(ts_delta=-5, off_delta=0, key=b"k", value=None, headers=[(b"a", None), (b"b", b"xy")])
    payload += raw_record(ts_delta=300, off_delta=1, key=None, value=b"\x00" * 130)
    raw = hand_batch(payload, count=2, base_offset=7, base_ts=10_000, base_seq=3, pid=1, epoch=0)
    got = records_of(raw)
    assert got == [
        Record(7, 0, 9_995, 3, b"k", None, [("a", None), ("b", b"xy")]),
        Record(8, 1, 10_300, 4, None, b"\x00" * 130, []),
    ]


def _err(raw: bytes, **kw) -> DecodeError:
    with pytest.raises(DecodeError) as ei:
        records_of(raw, **kw)
    return ei.value


def test_record_length_disagreeing_with_body() -> None:
    rec = raw_record(key=b"k", value=b"v", length_adjust=+1)
    e = _err(hand_batch(rec + b"\x00", count=1))
    assert e.kind == "corrupt" and e.position == 61 + 1  # body starts after the 1-byte length varint


def test_record_length_past_payload() -> None:
    rec = raw_record(key=b"k", value=b"v", length_adjust=+50)
    e = _err(hand_batch(rec, count=1))
    assert e.kind == "bad-length" and e.position == 62


def test_bytes_left_after_the_last_record() -> None:
    recs = raw_record(value=b"a") + raw_record(off_delta=1, value=b"b")
    e = _err(hand_batch(recs + b"\x07\x07", count=2))
    assert e.kind == "corrupt" and e.position == 61 + len(recs)


def test_fewer_records_than_the_count() -> None:
    e = _err(hand_batch(raw_record(value=b"a"), count=2))
    assert e.kind == "truncated" and e.position == 61 + len(raw_record(value=b"a"))


def test_negative_count_and_header_problems() -> None:
    e = _err(hand_batch(b"", count=-1, last_delta=0))
    assert e.kind == "corrupt" and e.position == 57
    body = b"\x00" + zz(0) + zz(0) + zz(-1) + zz(-1) + zz(-2)
    e = _err(hand_batch(zz(len(body)) + body, count=1))
    assert e.kind == "corrupt" and "header count" in e.message
    body = b"\x00" + zz(0) + zz(0) + zz(-1) + zz(-1) + zz(1) + zz(-1) + zz(-1)
    e = _err(hand_batch(zz(len(body)) + body, count=1))
    assert e.kind == "corrupt" and "header key" in e.message


def test_overlong_varint() -> None:
    e = _err(hand_batch(b"\xff" * 6 + b"\x01", count=1))
    assert e.kind == "corrupt" and e.position == 61


def test_corrupt_compressed_payload_points_at_payload_start() -> None:
    raw = bytearray(kp_batch(varied_records(50), codec=1, base_offset=0))
    raw[61 + 30] ^= 0xFF
    h = header_of(bytes(raw))
    assert h.crc_valid is False
    with pytest.raises(DecodeError) as ei:
        list(iter_records(h, bytes(raw[61:])))
    assert ei.value.position == 61 and ei.value.kind in ("corrupt", "truncated")


def test_records_inside_compressed_stream_point_at_payload_start() -> None:
    # a valid gzip stream holding one bad record
    import gzip as _gzip

    inner = raw_record(key=b"k", value=b"v", length_adjust=+1) + b"\x00"
    raw = hand_batch(_gzip.compress(inner, mtime=0), count=1, attrs=1)
    e = _err(raw)
    assert e.kind == "corrupt" and e.position == 61


def test_inflate_limit_is_passed_through() -> None:
    raw = kp_batch([(i, 1, None, bytes(1000), []) for i in range(100)], codec=4)
    e = _err(raw, limit=10_000)
    assert e.kind == "inflate-limit" and e.position == 61
    assert len(records_of(raw, limit=200_000)) == 100


def test_positions_are_absolute_in_a_segment() -> None:
    first = kp_batch(varied_records(3))
    bad = hand_batch(raw_record(value=b"a") + b"\x01", count=1, base_offset=3)
    seg = first + bad
    items = list(iter_segment(io.BytesIO(seg), file_size=len(seg)))
    with pytest.raises(DecodeError) as ei:
        list(iter_records(items[1], seg[items[1].payload_position:]))
    assert ei.value.position == len(first) + 61 + len(raw_record(value=b"a"))


# --------------------------------------------------------------------------- control records
@pytest.mark.parametrize("type_id,name", [(0, "ABORT"), (1, "COMMIT")])
def test_decode_marker(type_id: int, name: str) -> None:
    ctl = decode_control(struct.pack(">hh", 0, type_id), struct.pack(">hi", 0, 123_456))
    assert ctl == ControlRecord(name, type_id, 123_456)


def test_decode_control_other_types() -> None:
    assert CONTROL_TYPES == {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER",
                             4: "SNAPSHOT_FOOTER", 5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}
    # KRaft control values are flexible messages the auditor does not interpret: no coordinator epoch
    assert decode_control(struct.pack(">hh", 0, 3), b"\x00\x00\x01\x02") == ControlRecord("SNAPSHOT_HEADER", 3, None)
    assert decode_control(struct.pack(">hh", 0, 99), None) == ControlRecord("UNKNOWN(99)", 99, None)
    # a key longer than 4 bytes: Kafka reads the first 4
    assert decode_control(struct.pack(">hhi", 0, 1, 5), struct.pack(">hi", 0, 9)).coordinator_epoch == 9
    # versions above 0 are read as v0
    assert decode_control(struct.pack(">hh", 3, 0), struct.pack(">hih", 2, 77, 0)) == ControlRecord("ABORT", 0, 77)


@pytest.mark.parametrize(
    "key,value",
    [
        (None, b"\x00\x00\x00\x00\x00\x00"),
        (b"\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00"),
        (struct.pack(">hh", -1, 0), struct.pack(">hi", 0, 1)),
        (struct.pack(">hh", 0, 1), None),
        (struct.pack(">hh", 0, 0), b"\x00\x00\x00\x01\x02"),
        (struct.pack(">hh", 0, 1), struct.pack(">hi", -2, 1)),
    ],
)
def test_decode_control_rejects(key, value) -> None:
    with pytest.raises(DecodeError) as ei:
        decode_control(key, value)
    assert ei.value.kind == "corrupt"


def test_kafka_python_agrees_on_marker_records() -> None:
    key, value = struct.pack(">hh", 0, 0), struct.pack(">hi", 0, 4)
    rec = raw_record(key=key, value=value)
    raw = hand_batch(rec, count=1, attrs=0x30, base_offset=41, pid=1000, epoch=2)
    (r,) = records_of(raw)
    (k,) = list(MemoryRecords(raw).next_batch())
    assert (k.offset, k.type, k.abort) == (r.offset, 0, True)
    ctl = decode_control(r.key, r.value)
    assert (ctl.control_type, ctl.coordinator_epoch) == ("ABORT", 4)
