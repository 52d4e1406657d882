"""Segment framing and batch headers (auditor.formats.batch) against independent sources.

Ground truth comes from:
* kafka-python 3.0.12's own encoder (DefaultRecordBatchBuilder, LegacyRecordBatchBuilder) and
  its own reader (MemoryRecords / DefaultRecordBatch / LegacyRecordBatch) over the same bytes;
* bytes assembled here with struct.pack (bad lengths, magic 7, patched attributes);
* real files of the external corpus (tests/conftest.py REAL_LOGS; tests marked real_logs), with
  the batch counts SOURCES.md states.
"""

from __future__ import annotations

import io
import json
import struct
import sys
from collections import Counter
from pathlib import Path

import crc32c
import kafka.codec
import pytest
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.memory_records import MemoryRecords

from auditor.formats.batch import (
    BatchHeader,
    LogProblem,
    increment_sequence,
    iter_segment,
    read_payload,
)
from auditor.formats.records import decode_control, iter_records
from builders import kp_batch, kp_legacy
from conftest import REAL_LOGS

KAFKA_GO = REAL_LOGS / "segmentio__kafka-go" / "fixtures"
KP_FIXTURES = REAL_LOGS / "dpkp__kafka-python" / "extracted" / "test" / "record" / "test_records.py"
INT32_MAX = 2**31 - 1

CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
CODECS = [0, 1, 2, 3, 4]  # snappy needs python-snappy: a dev dependency, so never skipped


# --------------------------------------------------------------------------- helpers
# kp_batch (a v2 batch written by kafka-python) comes from tests/builders.py
def payment_records(n: int, ts0: int = 1_700_000_000_000, *, headers: bool = False) -> list:
    """Compressible records: every codec pays off, so kafka-python keeps the codec."""
    out = []
    for i in range(n):
        key = None if i % 7 == 3 else f"customer-{i % 13:04d}".encode()
        value = None if i % 11 == 5 else (b'{"amount_cents": %d, "currency": "EUR", "status": "AUTHORIZED", "note": "%s"}' % (i * 37, b"padding " * 8))
        hdrs = [("trace-id", b"%016x" % i), ("nullable", None), ("caf\u00e9", b"\x00\xff")] if headers else []
        out.append((i, ts0 + i * 3, key, value, hdrs))
    return out


def decode(buf: bytes, **kw) -> list[BatchHeader | LogProblem]:
    return list(iter_segment(io.BytesIO(buf), file_size=len(buf), **kw))


def headers_only(items: list) -> list[BatchHeader]:
    assert all(isinstance(h, BatchHeader) for h in items), items
    return items


def recompute_crc(buf: bytearray) -> None:
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))


def kp_batches(buf: bytes) -> list:
    """kafka-python's shallow iteration over the same bytes."""
    mr = MemoryRecords(buf)
    out = []
    while mr.has_next():
        out.append(mr.next_batch())
    return out


def assert_matches_kafka_python(h: BatchHeader, kb: DefaultRecordBatch) -> None:
    """Every header field our decoder returns, against kafka-python's reader of the same bytes."""
    assert h.base_offset == kb.base_offset
    assert h.size == kb.size_in_bytes
    assert h.partition_leader_epoch == kb.leader_epoch
    assert h.magic == kb.magic == 2
    assert h.crc == kb.crc
    assert h.crc_valid == kb.validate_crc()
    assert h.attributes == kb.attributes
    assert h.last_offset_delta == kb.last_offset_delta
    assert h.last_offset == kb.last_offset
    assert h.codec == kb.compression_type
    assert h.timestamp_type == ("LogAppendTime" if kb.timestamp_type == 1 else "CreateTime")
    assert h.is_transactional == kb.is_transactional
    assert h.is_control == kb.is_control_batch
    assert h.base_timestamp == kb.first_timestamp
    assert h.max_timestamp == kb.max_timestamp
    assert h.producer_id == kb.producer_id
    assert h.producer_epoch == kb.producer_epoch
    assert h.base_sequence == kb.base_sequence
    assert h.last_sequence == kb.last_sequence
    assert h.record_count == kb.records_count


# --------------------------------------------------------------------------- kafka-python encoder
@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(
    "producer",
    [
        {"producer_id": -1, "producer_epoch": -1, "base_sequence": -1, "transactional": False},
        {"producer_id": 2000, "producer_epoch": 3, "base_sequence": 40, "transactional": False},
        {"producer_id": 1000, "producer_epoch": 7, "base_sequence": 0, "transactional": True},
    ],
    ids=["plain", "idempotent", "transactional"],
)
def test_headers_equal_what_kafka_python_was_given(codec: int, producer: dict) -> None:
    sizes = [1, 50, 7]
    batches, base = [], 100
    for i, n in enumerate(sizes):
        recs = payment_records(n, ts0=1_700_000_000_000 + i * 10_000, headers=(i == 1))
        seq = producer["base_sequence"] + sum(sizes[:i]) if producer["base_sequence"] >= 0 else -1
        batches.append(kp_batch(recs, codec=codec, **{**producer, "base_sequence": seq},
                                base_offset=base, leader_epoch=5 + i))
        base += n
    seg = b"".join(batches)
    got = headers_only(decode(seg))
    kbs = kp_batches(seg)
    assert len(got) == len(kbs) == 3
    pos, base = 0, 100
    for i, (h, kb, n, raw) in enumerate(zip(got, kbs, sizes, batches)):
        assert_matches_kafka_python(h, kb)
        # and against the inputs themselves
        ts0 = 1_700_000_000_000 + i * 10_000
        assert kb.compression_type == codec, "kafka-python dropped the codec: data not compressible enough"
        assert h.position == pos
        assert h.size == len(raw)
        assert h.base_offset == base and h.last_offset == base + n - 1
        assert h.last_offset_delta == n - 1
        assert h.partition_leader_epoch == 5 + i
        assert h.crc_valid is True
        assert h.crc == crc32c.crc32c(raw[21:])
        assert h.compression == CODEC_NAMES[codec]
        assert h.attributes == codec | (0x10 if producer["transactional"] else 0)
        assert h.is_transactional is producer["transactional"]
        assert h.is_control is False and h.has_delete_horizon is False and h.delete_horizon_ms is None
        assert h.timestamp_type == "CreateTime"
        assert h.base_timestamp == ts0 and h.max_timestamp == ts0 + (n - 1) * 3
        assert h.producer_id == producer["producer_id"]
        assert h.producer_epoch == producer["producer_epoch"]
        if producer["base_sequence"] >= 0:
            first = producer["base_sequence"] + sum(sizes[:i])
            assert (h.base_sequence, h.last_sequence) == (first, first + n - 1)
        else:
            assert (h.base_sequence, h.last_sequence) == (-1, -1)
        assert h.record_count == n
        assert h.payload_position == pos + 61
        assert read_payload(io.BytesIO(seg), h) == raw[61:]
        pos += len(raw)
        base += n


def test_partition_leader_epoch_and_base_offset_are_outside_the_crc() -> None:
    raw = bytearray(kp_batch(payment_records(3), base_offset=0, leader_epoch=0))
    struct.pack_into(">q", raw, 0, 987_654_321_012)
    struct.pack_into(">i", raw, 12, 42)
    (h,) = headers_only(decode(bytes(raw)))
    assert (h.base_offset, h.partition_leader_epoch, h.crc_valid) == (987_654_321_012, 42, True)
    assert h.last_offset == 987_654_321_014


def test_sequence_wraps_past_int32_max() -> None:
    # DefaultRecordBatch.incrementSequence: after 2147483647 comes 0
    raw = kp_batch(payment_records(5), producer_id=7, producer_epoch=0, base_sequence=INT32_MAX - 2)
    (h,) = headers_only(decode(raw))
    (kb,) = kp_batches(raw)
    assert h.base_sequence == INT32_MAX - 2
    assert h.last_sequence == 1 == kb.last_sequence
    assert increment_sequence(INT32_MAX, 1) == 0
    assert increment_sequence(INT32_MAX - 2, 2) == INT32_MAX
    assert increment_sequence(INT32_MAX - 2, 3) == 0
    assert increment_sequence(5, 3) == 8
    assert increment_sequence(-1, 3) == -1
    seqs = [r.sequence for r in iter_records(h, raw[61:])]
    assert seqs == [INT32_MAX - 2, INT32_MAX - 1, INT32_MAX, 0, 1]


def test_log_append_time_and_delete_horizon_bits() -> None:
    """kafka-python never sets these broker-side bits: patch them and recompute the CRC-32C."""
    raw = bytearray(kp_batch(payment_records(4)))
    struct.pack_into(">h", raw, 21, 0x08 | 0x40)
    recompute_crc(raw)
    (h,) = headers_only(decode(bytes(raw)))
    (kb,) = kp_batches(bytes(raw))
    assert_matches_kafka_python(h, kb)
    assert h.timestamp_type == "LogAppendTime"
    assert h.has_delete_horizon is True and h.delete_horizon_ms == 1_700_000_000_000
    # LogAppendTime: every record carries the batch max timestamp
    recs = list(iter_records(h, bytes(raw[61:])))
    assert [r.timestamp for r in recs] == [1_700_000_000_009] * 4 == [r.timestamp for r in kb]


def test_marker_batch_assembled_by_hand() -> None:
    key, value = struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 17)
    body = b"\x00\x00\x00" + bytes([len(key) * 2]) + key + bytes([len(value) * 2]) + value + b"\x00"
    after_crc = struct.pack(">hiqqqhii", 0x30, 0, 1234, 1234, 1000, 4, -1, 1) + bytes([len(body) * 2]) + body
    raw = struct.pack(">qiibI", 55, 9 + len(after_crc), 3, 2, crc32c.crc32c(after_crc)) + after_crc
    (h,) = headers_only(decode(raw))
    (kb,) = kp_batches(raw)
    assert_matches_kafka_python(h, kb)
    assert (h.base_offset, h.is_control, h.is_transactional, h.producer_id, h.producer_epoch) == (55, True, True, 1000, 4)
    assert (h.base_sequence, h.last_sequence, h.record_count, h.crc_valid) == (-1, -1, 1, True)
    (rec,) = iter_records(h, raw[61:])
    ctl = decode_control(rec.key, rec.value)
    assert (ctl.control_type, ctl.control_type_id, ctl.coordinator_epoch) == ("COMMIT", 1, 17)


def test_start_and_end_select_entries_by_start_position() -> None:
    raws = [kp_batch(payment_records(n), base_offset=o) for n, o in ((3, 0), (4, 3), (5, 7), (6, 12))]
    seg = b"".join(raws)
    starts = [sum(len(r) for r in raws[:i]) for i in range(4)]
    f = io.BytesIO(seg)
    # from batch 1 up to (not including) the start of batch 3: batches 1 and 2
    got = list(iter_segment(f, start=starts[1], end=starts[3], file_size=len(seg)))
    assert [h.base_offset for h in got] == [3, 7]
    # an entry straddling `end` is read whole: end one byte into batch 2
    got = list(iter_segment(f, start=starts[1], end=starts[2] + 1, file_size=len(seg)))
    assert [(h.base_offset, h.size) for h in got] == [(3, len(raws[1])), (7, len(raws[2]))]
    assert list(iter_segment(f, start=starts[3], end=starts[3], file_size=len(seg))) == []


def test_verify_crc_false_skips_the_check() -> None:
    raw = bytearray(kp_batch(payment_records(3)))
    raw[-1] ^= 0xFF
    assert headers_only(decode(bytes(raw)))[0].crc_valid is False
    assert headers_only(decode(bytes(raw), verify_crc=False))[0].crc_valid is True


# --------------------------------------------------------------------------- legacy v0 / v1
def test_legacy_entries_read_as_kafka_reads_them() -> None:
    """v0 and v1 messages (plain and gzip wrappers) before a v2 batch, as one partition can hold.
    A wrapper's first offset, record count and first timestamp are its inner messages'."""
    v0 = kp_legacy(0, 0, [(0, 0, b"k0", b"v0"), (1, 0, None, b"v1")])  # two v0 entries
    v1 = kp_legacy(1, 0, [(2, 1_500_000_000_000, b"k2", b"v2"), (3, 1_500_000_000_005, b"k3", None)])
    v0gz = bytearray(kp_legacy(0, 1, [(4, 0, b"a", b"x" * 50), (5, 0, b"b", b"y" * 50)]))
    v1gz = bytearray(kp_legacy(1, 1, [(0, 1_500_000_000_010, b"c", b"z" * 50), (1, 1_500_000_000_011, b"d", b"w" * 50)]))
    # kafka-python leaves wrapper offsets 0 (the broker assigns them); a v1 wrapper carries its
    # LAST inner offset. The offset field is outside the legacy CRC (which starts at magic).
    struct.pack_into(">q", v0gz, 0, 5)
    struct.pack_into(">q", v1gz, 0, 7)
    v2 = kp_batch(payment_records(3), base_offset=8)
    seg = v0 + v1 + bytes(v0gz) + bytes(v1gz) + v2
    got = headers_only(decode(seg))
    kbs = kp_batches(seg)
    assert len(got) == len(kbs) == 7
    assert [h.magic for h in got] == [0, 0, 1, 1, 0, 1, 2]
    assert [h.last_offset for h in got] == [0, 1, 2, 3, 5, 7, 10]
    assert [h.compression for h in got] == ["none"] * 4 + ["gzip", "gzip", "none"]
    assert [h.timestamp_type for h in got[:6]] == ["NoTimestampType"] * 2 + ["CreateTime"] * 2 + ["NoTimestampType", "CreateTime"]
    # the v1 wrapper's inner offsets are relative (0, 1): absolute 7 - 1 + (0, 1)
    assert [h.base_offset for h in got] == [0, 1, 2, 3, 4, 6, 8]
    assert [h.record_count for h in got] == [1, 1, 1, 1, 2, 2, 3]
    assert [h.base_timestamp for h in got[:6]] == [-1, -1, 1_500_000_000_000, 1_500_000_000_005, -1, 1_500_000_000_010]
    assert [h.max_timestamp for h in got[:6]] == [-1, -1, 1_500_000_000_000, 1_500_000_000_005, -1, 0]  # the wrapper's
    pos = 0
    for h, kb in zip(got, kbs):
        assert h.position == pos
        assert h.size == kb.size_in_bytes
        assert h.crc_valid is True and kb.validate_crc() is True
        assert h.codec == kb.compression_type
        if h.magic < 2:
            inner = [r.offset for r in kb]  # kafka-python's reader of the same bytes
            assert (h.base_offset, h.record_count) == (inner[0], len(inner))
            assert h.producer_id == -1 and h.is_transactional is False and h.is_control is False
            assert h.crc == struct.unpack_from(">I", seg, pos + 12)[0]
        pos += h.size
    assert_matches_kafka_python(got[6], kbs[6])
    # a flipped value byte breaks the legacy CRC-32 (IEEE) but not the framing
    bad = bytearray(seg)
    bad[got[2].position + got[2].size - 1] ^= 0x01
    again = headers_only(decode(bytes(bad)))
    assert [h.crc_valid for h in again] == [True, True, False, True, True, True, True]


def test_record_iteration_of_an_uncompressed_legacy_entry_is_the_entry() -> None:
    raw = bytearray(kp_legacy(1, 0, [(0, 1, b"k", b"v")]))
    struct.pack_into(">q", raw, 0, 41)
    (h,) = headers_only(decode(bytes(raw)))
    (rec,) = iter_records(h, bytes(raw[12:]))
    assert (rec.offset, rec.timestamp, rec.key, rec.value, rec.sequence, rec.headers) == (41, 1, b"k", b"v", -1, [])


# --------------------------------------------------------------------------- real fixtures
@pytest.mark.real_logs
def test_kafka_python_fixture_v2() -> None:
    """record_batch_data_v2: 4 v2 batches from a Kafka 0.11 broker (SOURCES.md), pid -1."""
    raw = (KP_FIXTURES / "record_batch_data_v2.bin").read_bytes()
    got = headers_only(decode(raw))
    kbs = kp_batches(raw)
    assert len(got) == 4 == len(kbs)
    for h, kb in zip(got, kbs):
        assert_matches_kafka_python(h, kb)
        assert h.producer_id == -1 and h.crc_valid
        recs = list(iter_records(h, raw[h.payload_position: h.position + h.size]))
        kr = list(kb)
        assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in recs] == [
            (k.offset, k.timestamp, k.key, k.value, k.headers) for k in kr
        ]
    assert sum(1 for h in got for r in iter_records(h, raw[h.payload_position: h.position + h.size]) if r.headers) == 1


@pytest.mark.real_logs
@pytest.mark.parametrize("name,magic", [("record_batch_data_v1.bin", 1), ("record_batch_data_v0.bin", 0)])
def test_kafka_python_fixture_legacy(name: str, magic: int) -> None:
    raw = (KP_FIXTURES / name).read_bytes()
    got = headers_only(decode(raw))
    kbs = kp_batches(raw)
    assert len(got) == 4 == len(kbs)
    assert [h.magic for h in got] == [magic] * 4
    assert [h.base_offset for h in got] == [kb.base_offset for kb in kbs]
    assert all(h.crc_valid and kb.validate_crc() for h, kb in zip(got, kbs))
    assert sum(h.size for h in got) == len(raw)


@pytest.mark.real_logs
def test_kafka_python_fixture_control_batch() -> None:
    """control_batch_data_v2: one ABORT control batch (attributes 0x20). Its CRC does not match
    (kafka-python's own validate_crc says so too): hand-made, not from a broker."""
    raw = (KP_FIXTURES / "control_batch_data_v2.bin").read_bytes()
    (h,) = headers_only(decode(raw))
    (kb,) = kp_batches(raw)
    assert_matches_kafka_python(h, kb)
    assert (h.attributes, h.is_control, h.is_transactional, h.producer_id, h.crc_valid) == (0x20, True, False, -1, False)
    (rec,) = iter_records(h, raw[61:])
    assert rec.value == b"opaque-control-message"
    ctl = decode_control(rec.key, rec.value)
    # value version is b"op" (> 0 is read as v0), coordinator epoch is the next 4 bytes
    assert (ctl.control_type, ctl.coordinator_epoch) == ("ABORT", struct.unpack(">i", b"aque")[0])


def fetch_record_set(raw: bytes) -> bytes:
    """The record set of a one-topic, one-partition Fetch v7-v10 response (kafka-go fixtures):
    session id present, no preferred-read-replica field."""
    pos = 4 + 4 + 4 + 2 + 4  # size, correlation id, throttle ms, error code, session id
    (ntopics,) = struct.unpack_from(">i", raw, pos)
    assert ntopics == 1
    (tlen,) = struct.unpack_from(">h", raw, pos + 4)
    pos += 4 + 2 + tlen
    (nparts,) = struct.unpack_from(">i", raw, pos)
    assert nparts == 1
    pos += 4 + 4 + 2 + 8 + 8 + 8  # count, partition, error, high watermark, last stable, log start
    (aborted,) = struct.unpack_from(">i", raw, pos)
    assert aborted == -1  # null aborted-transactions array
    pos += 4  # aborted txns
    (size,) = struct.unpack_from(">i", raw, pos)
    assert size == len(raw) - pos - 4 and struct.unpack_from(">i", raw, 0)[0] == len(raw) - 4
    return raw[pos + 4:]


@pytest.mark.real_logs
@pytest.mark.parametrize("path", sorted(KAFKA_GO.glob("*.bin")), ids=lambda p: p.stem)
def test_kafka_go_fetch_responses(path: Path) -> None:
    rs = fetch_record_set(path.read_bytes())
    got = headers_only(decode(rs))
    kbs = kp_batches(rs)
    assert len(got) == len(kbs) > 0
    assert sum(h.size for h in got) == len(rs)
    tokens = path.stem.split("-")
    # each name token is one produce call: v1 / v2 = magic, "c" = gzip
    assert {h.magic for h in got} == {int(t[1]) for t in tokens}
    assert any(h.compression == "gzip" for h in got) == any("c" in t for t in tokens)
    offsets = []
    for h, kb in zip(got, kbs):
        assert h.crc_valid and kb.validate_crc()
        assert h.producer_id == -1
        assert h.codec == kb.compression_type
        if h.magic == 2:
            assert_matches_kafka_python(h, kb)
            recs = list(iter_records(h, rs[h.payload_position: h.position + h.size]))
            assert [(r.offset, r.timestamp, r.key, r.value) for r in recs] == [
                (k.offset, k.timestamp, k.key, k.value) for k in kb
            ]
            offsets += [r.offset for r in recs]
        else:
            inner = [k.offset for k in kb]
            # a legacy entry's offset is its last (for a wrapper: last inner) offset, its first offset
            # and count those of its records (a wrapper's inner messages)
            assert (h.base_offset, h.last_offset, h.record_count) == (inner[0], inner[-1], len(inner))
            recs = list(iter_records(h, rs[h.payload_position: h.position + h.size]))
            assert [(r.offset, r.timestamp, r.key, r.value) for r in recs] == [
                (k.offset, k.timestamp, k.key, k.value) for k in kb
            ]
            offsets += inner
    assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
    if path.stem == "v1-v1c-v2-v2c-v2b-v2b-v2b-v2bc-v1b-v1bc":
        assert offsets == list(range(20))  # SOURCES.md: offsets 0-19 in that order
        assert [h.magic for h in got] == [1] * 4 + [2] * 8 + [1] * 3


# --------------------------------------------------------------------------- bad input
def two_batches() -> tuple[bytes, bytes]:
    a = kp_batch(payment_records(4), base_offset=0, producer_id=9, producer_epoch=0, base_sequence=0)
    b = kp_batch(payment_records(6, headers=True), codec=1, base_offset=4)
    return a, b


def test_truncated_tail_at_every_cut_point() -> None:
    a, b = two_batches()
    full = headers_only(decode(a + b))
    assert len(full) == 2
    for cut in range(1, len(b)):
        items = decode(a + b[:cut])
        assert len(items) == 2, cut
        assert items[0] == full[0], cut
        prob = items[1]
        assert isinstance(prob, LogProblem), cut
        assert prob.position == len(a), cut
        tail = b[:cut]
        # a tail shorter than an entry header that is all zero bytes cannot be told from a
        # zero-filled tail (base offset 4 starts with 7 zero bytes); everything else is a cut entry
        want = "zero-tail" if cut < 17 and tail.count(0) == len(tail) else "truncated"
        assert prob.kind == want, cut
    assert sum(1 for cut in range(1, len(b)) if decode(a + b[:cut])[1].kind == "truncated") == len(b) - 8


def test_zero_filled_tail() -> None:
    a, b = two_batches()
    for zeros in (1, 16, 17, 61, 4096, (1 << 20) * 2 + 5):
        items = decode(a + b + bytes(zeros))
        assert [type(i) for i in items] == [BatchHeader, BatchHeader, LogProblem]
        assert (items[2].kind, items[2].position) == ("zero-tail", len(a) + len(b))


def test_zero_tail_with_garbage_after_is_not_a_zero_tail() -> None:
    a, _ = two_batches()
    items = decode(a + bytes(100) + b"\x01")
    assert isinstance(items[1], LogProblem)
    assert (items[1].kind, items[1].position) == ("bad-length", len(a) + 8)


def test_flipped_payload_byte_keeps_decoding() -> None:
    a, b = two_batches()
    c = kp_batch(payment_records(2), base_offset=10)
    bad = bytearray(a + b + c)
    bad[len(a) + 70] ^= 0x40  # inside batch b's compressed payload
    items = headers_only(decode(bytes(bad)))
    assert [h.crc_valid for h in items] == [True, False, True]
    assert [h.base_offset for h in items] == [0, 4, 10]
    # a flip inside the CRC-covered header (producer id) is caught too
    bad = bytearray(a + b)
    bad[50] ^= 0x01
    assert [h.crc_valid for h in headers_only(decode(bytes(bad)))] == [False, True]


@pytest.mark.parametrize("size", [0x7FFFFFFF, 200 * 1024 * 1024, -5, 13, 0, 1])
def test_bad_size_field(size: int) -> None:
    a, b = two_batches()
    bad = bytearray(a + b)
    struct.pack_into(">i", bad, len(a) + 8, size)
    items = decode(bytes(bad))
    assert isinstance(items[0], BatchHeader) and len(items) == 2
    assert (items[1].kind, items[1].position) == ("bad-length", len(a) + 8)


def test_size_past_eof_but_plausible_is_truncated() -> None:
    a, b = two_batches()
    bad = bytearray(a + b)
    struct.pack_into(">i", bad, len(a) + 8, len(b) - 12 + 1000)
    items = decode(bytes(bad))
    assert (items[1].kind, items[1].position) == ("truncated", len(a))


def test_v2_entry_shorter_than_header() -> None:
    a, _ = two_batches()
    short = struct.pack(">qiib", 4, 40, 0, 2) + bytes(40 - 5)
    items = decode(a + short)
    assert (items[1].kind, items[1].position) == ("bad-length", len(a) + 8)


@pytest.mark.parametrize("magic", [7, 3, -1, 0x7F])
def test_unknown_magic(magic: int) -> None:
    a, b = two_batches()
    bad = bytearray(a + b)
    struct.pack_into(">b", bad, len(a) + 16, magic)
    items = decode(bytes(bad))
    assert isinstance(items[0], BatchHeader)
    assert (items[1].kind, items[1].position) == ("unknown-magic", len(a) + 16)
    assert "magic" in items[1].message


def test_empty_file() -> None:
    assert decode(b"") == []


def test_short_nonzero_tail_is_truncated() -> None:
    a, _ = two_batches()
    items = decode(a + b"\x00\x00\x01")
    assert (items[1].kind, items[1].position) == ("truncated", len(a))


# --------------------------------------------------------------------------- real-log sweep
def real_segment_files() -> list[Path]:
    return sorted(p for p in REAL_LOGS.rglob("*") if p.suffix in (".log", ".checkpoint") and p.is_file())


def sweep(path: Path) -> tuple[list[BatchHeader], list[LogProblem], int]:
    size = path.stat().st_size
    headers, problems, records = [], [], 0
    with open(path, "rb") as f:
        for item in iter_segment(f, file_size=size):
            if isinstance(item, LogProblem):
                problems.append(item)
                continue
            headers.append(item)
            if item.magic == 2:
                for rec in iter_records(item, read_payload(f, item)):
                    records += 1
                    if item.is_control:
                        decode_control(rec.key, rec.value)
    return headers, problems, records


@pytest.mark.real_logs
def test_real_log_sweep_has_no_problems() -> None:
    files = real_segment_files()
    assert len(files) > 1000
    batches = records = 0
    for p in files:
        headers, problems, n = sweep(p)
        assert all(pr.kind in ("zero-tail", "truncated") for pr in problems), (p, problems)
        assert all(h.crc_valid for h in headers), p
        batches += len(headers)
        records += n
    assert batches > 100_000 and records > 250_000


def _summary(rel: str) -> tuple[list[BatchHeader], Counter]:
    headers, problems, _ = sweep(REAL_LOGS / rel)
    assert problems == []
    return headers, Counter(h.compression for h in headers)


@pytest.mark.real_logs
def test_real_counts_from_sources_md() -> None:
    h, codecs = _summary("hermag__kafkademo/kafka/data/test-0/00000000000000000000.log")
    assert len(h) == 529 and codecs == {"lz4": 529} and {b.producer_id for b in h} == {-1}
    assert sum(b.size for b in h) == 67_836

    h, codecs = _summary("NOVA-RICS-Open-Lab__agentic-data-pipelines/broker/data/OPCUA_KUKA_RAW_CLEANSED-0/00000000000000000000.log")
    assert len(h) == 12_389 and codecs == {"none": 12_389}
    assert all(b.producer_id >= 0 for b in h) and len({b.producer_id for b in h}) == 25

    h, codecs = _summary("seanorth__kafka-server/kafka-logs/some-topic-0/00000000000000000000.log")
    assert len(h) == 9 and codecs == {"snappy": 9} and {b.producer_id for b in h} == {-1}

    h, codecs = _summary("BiggerBrain__kafka/data/lsx1-0/00000000000000000000.log")
    assert len(h) == 14 and codecs == {"none": 12, "gzip": 2}
    pids = [b.producer_id for b in h if b.producer_id >= 0]
    assert len(pids) == 13 and len(set(pids)) == 13

    h, codecs = _summary("ArthurArutunyan04__Backend_labs/kafka-data/oms_order_created-0/00000000000000000000.log")
    assert len(h) == 1_190 and codecs == {"snappy": 1_190}
    h, codecs = _summary("ArthurArutunyan04__Backend_labs/kafka-data/oms_order_status_changed-0/00000000000000000000.log")
    assert len(h) == 1_194 and codecs == {"snappy": 1_194}

    h, codecs = _summary("macsakini__KafkaCluster/kafka/data/test-0/00000000000000000000.log")
    assert len(h) == 109 and codecs == {"gzip": 103, "none": 6}

    h, _ = _summary("Danielowo2000__BigDataTechnologies-Version-2/kafka_data/__cluster_metadata-0/00000000000000000000.log")
    assert len(h) == 16_210 and sum(b.is_control for b in h) == 1
    h, _ = _summary("Danielowo2000__BigDataTechnologies-Version-2/kafka_2.13-3.5.0/kraft-combined-logs/__cluster_metadata-0/00000000000000000000.log")
    assert len(h) == 28_511 and sum(b.is_control for b in h) == 5
    h, _ = _summary("LestFeeD__online-shop-user/kafka/data/__cluster_metadata-0/00000000000000116596.log")
    assert len(h) == 32_276 and sum(b.is_control for b in h) == 22 and h[0].base_offset == 116_596

    h, _ = _summary("NOVA-RICS-Open-Lab__agentic-data-pipelines/broker/data/_confluent-ksql-agentic_ksql__command_topic-0/00000000000000000000.log")
    assert len(h) == 18
    assert [b.attributes for b in h] == [0x10, 0x30] * 9
    assert [b.producer_epoch for b in h] == [e for e in range(9) for _ in (0, 1)]
    assert {b.producer_id for b in h} == {0}

    for fixture, count in (("coffee_price-0", 382), ("coffee_price-1", 53), ("coffee_price-2", 795)):
        h, _ = _summary(f"fiorotticaio__Starbucks-stocks/data/kafka/{fixture}/00000000000000000000.log")
        assert len(h) == count == len({b.producer_id for b in h})


@pytest.mark.real_logs
def test_real_kraft_snapshots_have_three_batches() -> None:
    snaps = sorted((REAL_LOGS / "ronem123__rupia-transaction-service").rglob("*.checkpoint"))
    assert len(snaps) >= 125
    for p in snaps:
        h, problems, _ = sweep(p)
        assert problems == []
        assert [b.is_control for b in h] == [True, False, True], p


@pytest.mark.real_logs
def test_real_commit_markers() -> None:
    path = REAL_LOGS / "ItumelengMogase__Real-Time-Data-Pipeline-for-Patient-Admissions/kafka-data/_confluent-ksql-default__command_topic-0/00000000000000000000.log"
    raw = path.read_bytes()
    h = headers_only(decode(raw))
    assert [b.attributes for b in h] == [0x10, 0x30]
    (marker,) = iter_records(h[1], raw[h[1].payload_position: h[1].position + h[1].size])
    ctl = decode_control(marker.key, marker.value)
    assert (ctl.control_type, ctl.coordinator_epoch) == ("COMMIT", 0)
    assert (h[1].producer_id, h[1].producer_epoch, h[1].base_sequence) == (0, 0, -1)
    for b, kb in zip(h, kp_batches(raw)):
        assert_matches_kafka_python(b, kb)


# --------------------------------------------------------------------------- the shipped sample
SAMPLE = Path(__file__).resolve().parents[1] / "sample_logs" / "synthetic-kafka-python"


def test_synthetic_sample_matches_its_ground_truth() -> None:
    """sample_logs/synthetic-kafka-python: kafka-python wrote the data batches, the generator
    recorded what it asked for in expected.json; the decoder must read back exactly that."""
    exp = json.loads((SAMPLE / "expected.json").read_text())
    assert set(exp["partitions"]) == {"payments-0", "payments-1", "__transaction_state-36"}
    for name, part in exp["partitions"].items():
        d = SAMPLE / "broker-1" / name
        got = []
        for seg in part["segments"]:
            raw = (d / seg["file"]).read_bytes()
            assert len(raw) == seg["size"]
            hs = headers_only(decode(raw))
            assert len(hs) == seg["batches"]
            assert all(kb.validate_crc() for kb in kp_batches(raw))
            got += [(seg["file"], h, raw) for h in hs]
        assert len(got) == part["batch_count"]
        for (file, h, raw), e in zip(got, part["batches"]):
            assert (file, h.position, h.size) == (e["segment"], e["position"], e["size"])
            assert (h.base_offset, h.last_offset, h.partition_leader_epoch) == (e["base_offset"], e["last_offset"], e["partition_leader_epoch"])
            assert (h.compression, h.crc_valid, h.record_count) == (e["codec"], True, e["record_count"])
            assert (h.producer_id, h.producer_epoch) == (e["producer_id"], e["producer_epoch"])
            assert (h.base_sequence, h.last_sequence) == (e["base_sequence"], e["last_sequence"])
            assert (h.is_transactional, h.is_control) == (e["is_transactional"], e["is_control"])
            assert (h.base_timestamp, h.max_timestamp) == (e["base_timestamp"], e["max_timestamp"])
            recs = list(iter_records(h, raw[h.payload_position: h.position + h.size]))
            assert len(recs) == e["record_count"]
            if e["kind"] == "marker":
                ctl = decode_control(recs[0].key, recs[0].value)
                assert (ctl.control_type, ctl.coordinator_epoch) == (e["control_type"], e["coordinator_epoch"])
            elif e["kind"] == "data":
                assert sum(r.key is None for r in recs) == e["keys_null"]
                assert sum(r.value is None for r in recs) == e["values_null"]
                assert sum(bool(r.headers) for r in recs) == e["records_with_headers"]
        assert [h.base_offset for _, h, _ in got if h.is_control] == [m["offset"] for m in part["markers"]]
        for rec_exp in part.get("transaction_state_records", []):
            (_, h, raw) = got[rec_exp["offset"]]
            (rec,) = iter_records(h, raw[h.payload_position: h.position + h.size])
            assert (rec.key.hex(), rec.value.hex()) == (rec_exp["key_hex"], rec_exp["value_hex"])
    p1 = exp["partitions"]["payments-1"]
    assert p1["open_transactions"] == [{"producer_id": 1000, "producer_epoch": 0, "first_offset": 113,
                                        "last_timestamp": p1["open_transactions"][0]["last_timestamp"]}]
    want = ["none", "gzip", "snappy", "lz4", "zstd"]  # python-snappy is a dev dependency
    assert exp["codecs_written"] == want
    assert exp["transaction_state_partition"] == 36


def _without_layout(obj):
    """expected.json minus byte positions and sizes, which follow the compressor's output."""
    if isinstance(obj, dict):
        return {k: _without_layout(v) for k, v in obj.items() if k not in ("position", "size")}
    if isinstance(obj, list):
        return [_without_layout(v) for v in obj]
    return obj


def _sample_content(root: Path) -> dict:
    """Every file of a sample dir; segments as decoded content, so that a newer zlib / lz4 /
    zstd / snappy library that compresses differently does not count as a stale sample."""
    out = {}
    for p in sorted(root.rglob("*")):
        if not p.is_file():
            continue
        rel = str(p.relative_to(root))
        raw = p.read_bytes()
        if p.suffix == ".log":
            rows = []
            for h in headers_only(decode(raw)):
                recs = iter_records(h, raw[h.payload_position: h.position + h.size])
                rows.append((h.base_offset, h.last_offset, h.attributes, h.partition_leader_epoch, h.producer_id,
                             h.producer_epoch, h.base_sequence, h.record_count, h.base_timestamp, h.max_timestamp,
                             h.crc_valid, [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in recs]))
            out[rel] = rows
        elif p.name == "expected.json":
            out[rel] = _without_layout(json.loads(raw))
        else:
            out[rel] = raw
    return out


def test_synthetic_sample_is_what_the_generator_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The committed sample is up to date: regenerating gives the same content
    (if this fails: .venv/bin/python scripts/make_sample_logs.py)."""
    import importlib.util

    script = Path(__file__).resolve().parents[1] / "scripts" / "make_sample_logs.py"
    spec = importlib.util.spec_from_file_location("make_sample_logs", script)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "make_sample_logs", mod)  # dataclasses look their module up
    spec.loader.exec_module(mod)
    monkeypatch.setattr(kafka.codec, "gzip", kafka.codec.gzip)  # the generator pins gzip's mtime: undo after
    monkeypatch.setattr(mod, "ROOT", tmp_path / "out")
    monkeypatch.setattr(mod, "BROKER", tmp_path / "out" / "broker-1")
    mod.main()
    fresh, shipped = _sample_content(tmp_path / "out"), _sample_content(SAMPLE)
    assert sorted(fresh) == sorted(shipped)
    assert [k for k in fresh if fresh[k] != shipped[k]] == []
    # the generator's Java String.hashCode agrees with the partitions real brokers chose (SOURCES.md)
    assert mod.txn_state_partition("default_") == 44 and mod.txn_state_partition("agentic_ksql_") == 4
