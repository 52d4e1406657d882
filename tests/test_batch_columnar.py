"""Columnar batch-header decoder (auditor.formats.batch_columnar) against
iter_segment and against independent encoders.

Ground truth:
* row-by-row equality with auditor.formats.batch.iter_segment (all columns and
  the final LogProblem) on every real .log/.checkpoint of the external corpus (REAL_LOGS),
  on segments written here and on random/mutated bytes (hypothesis);
* concrete values from kafka-python's encoders (DefaultRecordBatchBuilder via
  tests/builders.py, LegacyRecordBatchBuilder) and bytes patched here with
  struct.pack + crc32c/zlib, which know nothing of either decoder.
"""

from __future__ import annotations

import atexit
import dataclasses
import io
import shutil
import struct
import tempfile
import tracemalloc
import zlib
from pathlib import Path

import crc32c
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from auditor.formats import batch_columnar
from auditor.formats.batch import BatchHeader, LogProblem, iter_segment
from auditor.formats.batch_columnar import COLUMNS, SCHEMA, iter_header_batches
from builders import data_batch, marker
from conftest import REAL_LOGS

INT32_MAX = 2**31 - 1


# --------------------------------------------------------------------------- helpers
def _wrap64(v: int) -> int:
    """Java long arithmetic: iter_segment's unbounded last_offset as an int64."""
    return ((v + 2**63) % 2**64) - 2**63


def reference(data: bytes, **kw) -> tuple[list[dict], list[LogProblem]]:
    rows, problems = [], []
    for e in iter_segment(io.BytesIO(data), file_size=kw.pop("file_size", len(data)), **kw):
        if isinstance(e, LogProblem):
            problems.append(e)
        else:
            row = e.as_row()
            row["last_offset"] = _wrap64(row["last_offset"])
            rows.append(row)
    return rows, problems


def columnar(source, **kw) -> tuple[list[dict], list[LogProblem], list[pa.RecordBatch]]:
    rows, problems, batches = [], [], []
    for item in iter_header_batches(source, **kw):
        if isinstance(item, LogProblem):
            problems.append(item)
        else:
            assert isinstance(item, pa.RecordBatch)
            assert item.schema == SCHEMA
            assert item.num_rows > 0
            batches.append(item)
            rows.extend(item.to_pylist())
    # the problem, if any, comes last and alone
    assert len(problems) <= 1
    return rows, problems, batches


@pytest.fixture
def seg(tmp_path):
    """Write bytes to a segment file and return its path."""
    counter = iter(range(10**6))

    def write(data: bytes) -> Path:
        p = tmp_path / f"{next(counter):020d}.log"
        p.write_bytes(data)
        return p

    return write


def assert_same(path: Path, chunk_batches: int = 65536, **kw) -> tuple[list[dict], list[LogProblem]]:
    """Columnar == iter_segment on a file, through a path, an open file and BytesIO."""
    data = path.read_bytes()
    exp_rows, exp_probs = reference(data, **kw)
    kw["chunk_batches"] = chunk_batches
    got_rows, got_probs, _ = columnar(path, **kw)
    assert got_rows == exp_rows
    assert got_probs == exp_probs
    with open(path, "rb") as f:
        assert columnar(f, **kw)[:2] == (exp_rows, exp_probs)
    assert columnar(io.BytesIO(data), **kw)[:2] == (exp_rows, exp_probs)
    return got_rows, got_probs


def legacy_message(magic: int, offset: int, *, timestamp: int = 1_600_000_000_000, value: bytes = b"old") -> bytes:
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 20)
    b.append(0, timestamp=timestamp if magic else None, key=b"k", value=value)
    raw = bytearray(b.build())
    struct.pack_into(">q", raw, 0, offset)  # the offset is outside the message CRC
    return bytes(raw)


def patch_v2(batch: bytes, *, attributes: int | None = None, base_timestamp: int | None = None,
             base_sequence: int | None = None, last_offset_delta: int | None = None) -> bytes:
    """Change fields under the CRC and write a new CRC-32C, as a producer would."""
    raw = bytearray(batch)
    if attributes is not None:
        struct.pack_into(">h", raw, 21, attributes)
    if last_offset_delta is not None:
        struct.pack_into(">i", raw, 23, last_offset_delta)
    if base_timestamp is not None:
        struct.pack_into(">q", raw, 27, base_timestamp)
    if base_sequence is not None:
        struct.pack_into(">i", raw, 53, base_sequence)
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))
    return bytes(raw)


def mixed_segment() -> bytes:
    """Transactional data, markers, idempotent and plain batches, every codec."""
    out = bytearray()
    off = 0
    for i, codec in enumerate(["none", "gzip", "snappy", "lz4", "zstd"]):
        out += data_batch(off, 3, producer_id=1000 + i, producer_epoch=2, base_sequence=7 * i,
                          transactional=True, codec=codec, leader_epoch=i, value=b"compressible " * 40)
        off += 3
        out += marker(off, 1000 + i, 2, commit=i % 2 == 0, coordinator_epoch=9)
        off += 1
        out += data_batch(off, 2, codec=codec, value=b"compressible " * 40)
        off += 2
    return bytes(out)


# --------------------------------------------------------------------------- schema
def test_columns_are_batch_header_fields_with_table_types():
    from auditor.ingest.segments import BATCH_COLUMNS

    names = [f.name for f in dataclasses.fields(BatchHeader)]
    assert [f.name for f in COLUMNS] == names
    table = {f.name: f for f in BATCH_COLUMNS}
    for f in COLUMNS:
        if f.name == "attributes":
            # 0..65535 in iter_segment: int16 cannot hold bit 15, so int32 here
            assert f.type == pa.int32()
        else:
            assert table[f.name] == f, f.name


# --------------------------------------------------------------------------- real files
def _real_files() -> list[Path]:
    return sorted(p for p in REAL_LOGS.rglob("*") if p.suffix in (".log", ".checkpoint") and p.is_file())


@pytest.mark.real_logs
def test_real_logs_equal_iter_segment():
    files = _real_files()
    total = 0
    kinds: dict[str, int] = {}
    for p in files:
        data = p.read_bytes()
        exp_rows, exp_probs = reference(data)
        got_rows, got_probs, _ = columnar(p, chunk_batches=5)  # small chunks: many chunk boundaries
        assert got_rows == exp_rows, p
        assert got_probs == exp_probs, p
        total += len(got_rows)
        for r in got_rows:
            kinds[r["compression"]] = kinds.get(r["compression"], 0) + 1
    assert len(files) > 1000
    assert total > 100_000
    # SOURCES.md: gzip, snappy and lz4 batches occur in the real files
    assert {"none", "gzip", "snappy", "lz4"} <= set(kinds)


@pytest.mark.real_logs
def test_real_logs_byte_ranges_partition_the_file():
    """Ranges split at arbitrary bytes: each entry is decoded by the one range its start lies in."""
    biggest = max(_real_files(), key=lambda p: p.stat().st_size)
    size = biggest.stat().st_size
    whole, _, _ = columnar(biggest)
    cuts = [0, size // 5 + 3, size // 2 + 11, size - 100, size]
    parts = []
    for a, b in zip(cuts, cuts[1:]):
        begin = _next_start(whole, a)
        rows, probs, _ = columnar(biggest, start=begin, end=b)
        exp_rows, exp_probs = reference(biggest.read_bytes(), start=begin, end=b)
        assert rows == exp_rows and probs == exp_probs
        assert all(a <= r["position"] < b for r in rows)
        parts.extend(rows)
    assert parts == whole


def _next_start(rows: list[dict], at: int) -> int:
    """First entry start >= at (what an index lookup gives a Spark task)."""
    return next((r["position"] for r in rows if r["position"] >= at), rows[-1]["position"] + rows[-1]["size"])


# --------------------------------------------------------------------------- written segments
def test_kafka_python_batches_concrete_values(seg):
    data = mixed_segment()
    rows, probs = assert_same(seg(data))
    assert probs == []
    assert len(rows) == 15
    first, mark, plain = rows[0], rows[1], rows[2]
    assert (first["position"], first["base_offset"], first["last_offset"], first["last_offset_delta"]) == (0, 0, 2, 2)
    assert first["size"] == len(data_batch(0, 3, producer_id=1000, producer_epoch=2, base_sequence=0,
                                           transactional=True, value=b"compressible " * 40))
    assert (first["producer_id"], first["producer_epoch"], first["base_sequence"], first["last_sequence"]) == (1000, 2, 0, 2)
    assert first["is_transactional"] and not first["is_control"] and first["crc_valid"]
    assert first["record_count"] == 3 and first["magic"] == 2 and first["compression"] == "none"
    assert first["base_timestamp"] == 1_700_000_000_000 and first["max_timestamp"] == 1_700_000_000_002
    assert first["delete_horizon_ms"] is None and first["timestamp_type"] == "CreateTime"
    assert mark["attributes"] == 0x30 and mark["is_control"] and mark["base_offset"] == 3
    assert mark["crc"] == struct.unpack_from(">I", data, mark["position"] + 17)[0]
    assert plain["producer_id"] == -1 and plain["last_sequence"] == -1 and not plain["is_transactional"]
    assert [r["compression"] for r in rows[::3]] == ["none", "gzip", "snappy", "lz4", "zstd"]
    assert [r["compression"] for r in rows[2::3]] == ["none", "gzip", "snappy", "lz4", "zstd"]
    assert [r["partition_leader_epoch"] for r in rows[::3]] == [0, 1, 2, 3, 4]
    # positions are contiguous
    assert all(a["position"] + a["size"] == b["position"] for a, b in zip(rows, rows[1:]))


def test_attribute_bits_sequence_wrap_and_delete_horizon(seg):
    b = data_batch(100, 5, producer_id=7, producer_epoch=1, base_sequence=INT32_MAX - 1)
    dh = patch_v2(data_batch(105, 1), attributes=0x40 | 0x08, base_timestamp=1_650_000_000_000)
    high = patch_v2(data_batch(106, 1), attributes=-0x8000 | 0x04)  # bit 15 (unused) + zstd
    negative_delta = patch_v2(data_batch(107, 1, producer_id=7, base_sequence=5), last_offset_delta=-10)
    rows, probs = assert_same(seg(b + dh + high + negative_delta))
    assert probs == []
    # 2147483646 + 4 wraps past Integer.MAX_VALUE: ..., 2147483647, 0, 1, 2
    assert rows[0]["last_sequence"] == 2 and rows[0]["last_offset"] == 104
    assert rows[1]["has_delete_horizon"] and rows[1]["delete_horizon_ms"] == 1_650_000_000_000
    assert rows[1]["timestamp_type"] == "LogAppendTime" and rows[1]["crc_valid"]
    assert rows[2]["attributes"] == 0x8004 and rows[2]["compression"] == "zstd"
    assert rows[3]["last_sequence"] == -5 and rows[3]["last_offset"] == 97


def test_unknown_codec_name_and_last_offset_wraps_like_java(seg):
    b = bytearray(patch_v2(data_batch(0, 1), attributes=0x07, last_offset_delta=10))
    struct.pack_into(">q", b, 0, 2**63 - 5)  # base offset is outside the CRC
    rows, _ = assert_same(seg(bytes(b)))
    assert rows[0]["compression"] == "unknown(7)"
    assert rows[0]["last_offset"] == -(2**63) + 5  # (2**63 - 5) + 10 in 64-bit arithmetic


def test_legacy_entries_interleaved_with_v2(seg):
    v0 = legacy_message(0, 10)
    v1 = legacy_message(1, 11, timestamp=1_600_000_000_123)
    data = data_batch(0, 2) + v0 + data_batch(1, 1) + v1 + v1 + data_batch(12, 1)
    for chunk in (1, 2, 3, 100):
        rows, probs = assert_same(seg(data), chunk_batches=chunk)
        assert probs == []
        assert [r["magic"] for r in rows] == [2, 0, 2, 1, 1, 2]
        assert rows[1]["timestamp_type"] == "NoTimestampType" and rows[1]["base_timestamp"] == -1
        assert rows[3]["base_timestamp"] == 1_600_000_000_123 and rows[3]["timestamp_type"] == "CreateTime"
        assert rows[3]["crc"] == zlib.crc32(v1[16:]) and rows[3]["crc_valid"]
        assert rows[1]["size"] == len(v0) and rows[1]["base_offset"] == 10 and rows[1]["producer_id"] == -1


def test_legacy_and_v2_alternating_cost_linear_work(seg, monkeypatch):
    """Legacy entries do not stop the fast walk: size fields are read a bounded
    number of times per entry (a walk restarted at every legacy entry would
    read thousands per entry)."""
    n = 1500
    data = b"".join(data_batch(2 * i, 1) + legacy_message(1, 2 * i + 1) for i in range(n))
    calls = 0
    real = batch_columnar._SIZE

    class Counting:
        def unpack_from(self, buf, offset):
            nonlocal calls
            calls += 1
            return real.unpack_from(buf, offset)

    monkeypatch.setattr(batch_columnar, "_SIZE", Counting())
    rows, probs = assert_same(seg(data), chunk_batches=1000)
    assert [r["base_offset"] for r in rows] == list(range(2 * n)) and probs == []
    assert [r["magic"] for r in rows[:4]] == [2, 1, 2, 1]
    assert calls <= 3 * 3 * 2 * n  # three decodes in assert_same


def test_bad_crc_is_flagged_and_decoding_goes_on(seg, monkeypatch):
    good = data_batch(0, 2)
    bad = bytearray(data_batch(2, 2))
    bad[-1] ^= 0xFF
    bad_legacy = bytearray(legacy_message(1, 4))
    bad_legacy[-1] ^= 0x01
    data = good + bytes(bad) + bytes(bad_legacy) + data_batch(5, 1)
    rows, probs = assert_same(seg(data))
    assert [r["crc_valid"] for r in rows] == [True, False, False, True]
    assert probs == []
    unchecked, _ = assert_same(seg(data), verify_crc=False)
    assert all(r["crc_valid"] for r in unchecked)
    # the per-batch CRC paths (copied slice / zero-copy view) give the same answer
    monkeypatch.setattr(batch_columnar, "_VEC_CRC_MAX", 0)
    assert [r["crc_valid"] for r in columnar(seg(data))[0]] == [True, False, False, True]
    monkeypatch.setattr(batch_columnar, "_COPY_CRC_BELOW", 0)
    assert [r["crc_valid"] for r in columnar(seg(data))[0]] == [True, False, False, True]


@pytest.mark.parametrize("chunk_bytes", [1, 100, 1 << 20])
def test_chunk_bounds_do_not_change_rows(seg, monkeypatch, chunk_bytes):
    monkeypatch.setattr(batch_columnar, "_CHUNK_BYTES", chunk_bytes)
    data = mixed_segment() + legacy_message(1, 99) + data_batch(100, 1) + b"\x00" * 40
    rows, probs = assert_same(seg(data), chunk_batches=4)
    assert len(rows) == 17 and probs[0].kind == "zero-tail"


def _numbered(template: bytes, first: int, count: int) -> bytes:
    out = bytearray(template * count)
    for i in range(count):
        struct.pack_into(">q", out, i * len(template), first + i)
    return bytes(out)


def test_runs_of_one_length_with_breaks(seg):
    """The vectorised run guessing must stop exactly where a run ends or turns bad."""
    a, b = data_batch(0, 1), data_batch(0, 1, value=b"longer value")
    assert len(a) != len(b)

    def b_at(offset: int) -> bytes:
        return data_batch(offset, 1, value=b"longer value")

    base = _numbered(a, 0, 300) + b_at(300) + _numbered(a, 301, 200) + b_at(501) + b_at(502) + _numbered(a, 503, 400)
    rows, probs = assert_same(seg(base))
    assert probs == [] and [r["base_offset"] for r in rows] == list(range(903))
    assert [r["size"] for r in rows[299:302]] == [len(a), len(b), len(a)]
    # a bad CRC, an unknown magic and a wrong length in the middle of a run
    raw = bytearray(base)
    raw[100 * len(a) + 70] ^= 0x40
    rows, probs = assert_same(seg(bytes(raw)))
    assert [r["crc_valid"] for r in rows].count(False) == 1 and not rows[100]["crc_valid"]
    at = 697 * len(a) + 3 * len(b)  # entry 700: 697 entries of a and 3 of b before it
    assert struct.unpack_from(">q", raw, at)[0] == 700
    raw[at + 16] = 9
    rows, probs = assert_same(seg(bytes(raw)))
    assert len(rows) == 700 and probs == [LogProblem("unknown-magic", at + 16, "unknown magic byte 9")]
    raw = bytearray(base)
    struct.pack_into(">i", raw, 50 * len(a) + 8, len(a) - 12 + 7)  # 7 bytes too long: garbage after it
    assert_same(seg(bytes(raw)))


# --------------------------------------------------------------------------- problems
def test_truncated_tail(seg):
    whole = data_batch(0, 3) + data_batch(3, 3)
    rows, probs = assert_same(seg(whole[:-5]))
    assert len(rows) == 1
    first_len = len(data_batch(0, 3))
    assert probs == [LogProblem("truncated", first_len, f"entry of {len(whole) - first_len} bytes is cut off: only {len(whole) - first_len - 5} bytes left")]
    rows, probs = assert_same(seg(whole + b"\x01\x02\x03"))
    assert len(rows) == 2 and probs[0].kind == "truncated" and probs[0].position == len(whole)


def test_zero_tails(seg):
    b = data_batch(0, 1)
    _, probs = assert_same(seg(b + bytes(16)))
    assert probs == [LogProblem("zero-tail", len(b), "16 zero bytes after the last entry")]
    _, probs = assert_same(seg(b + bytes(4096)))
    assert probs == [LogProblem("zero-tail", len(b), "zero-filled (preallocated) tail of 4096 bytes")]
    # zeros that end in something else are not a preallocated tail
    _, probs = assert_same(seg(b + bytes(100) + b"\x01"))
    assert probs[0].kind == "bad-length" and probs[0].position == len(b) + 8


def test_bad_lengths_and_unknown_magic(seg):
    b = data_batch(0, 1)
    small = struct.pack(">qib", 5, 13, 2) + bytes(20)
    _, probs = assert_same(seg(b + small))
    assert probs == [LogProblem("bad-length", len(b) + 8, "entry size field 13 is below the minimum 14")]
    absurd = struct.pack(">qiib", 5, 200 * 1024 * 1024, 0, 2) + bytes(60)
    _, probs = assert_same(seg(b + absurd))
    assert probs[0].kind == "bad-length" and probs[0].position == len(b) + 8
    for length in (30, 48):  # 48: one byte short of a 61-byte entry
        short_v2 = struct.pack(">qiib", 5, length, 0, 2) + bytes(length - 5)
        _, probs = assert_same(seg(b + short_v2 + b * 3))
        assert probs == [LogProblem("bad-length", len(b) + 8, f"v2 batch length {length} is shorter than the 61-byte header")]
    for magic in (3, -1, 127, -128):
        weird = bytearray(data_batch(1, 1))
        struct.pack_into(">b", weird, 16, magic)
        rows, probs = assert_same(seg(b + bytes(weird) + b))
        assert len(rows) == 1
        assert probs == [LogProblem("unknown-magic", len(b) + 16, f"unknown magic byte {magic}")]


def test_negative_size_after_good_batches(seg):
    """The fast walk trusts sizes and checks afterwards: a negative size must still stop it exactly."""
    b = data_batch(0, 1)
    for size in (-12, -1000, -(2**31)):
        rows, probs = assert_same(seg(b * 3 + struct.pack(">qiib", 0, size, 0, 2) + bytes(80) + b))
        assert len(rows) == 3
        assert probs[0].kind == "bad-length" and probs[0].position == 3 * len(b) + 8


def test_empty_and_tiny_files(seg):
    assert columnar(seg(b""))[:2] == ([], [])
    _, probs = assert_same(seg(b"\x00" * 5))
    assert probs == [LogProblem("zero-tail", 0, "5 zero bytes after the last entry")]
    _, probs = assert_same(seg(b"\x07" * 16))
    assert probs == [LogProblem("truncated", 0, "16 trailing bytes, too few for an entry header")]


@settings(max_examples=150, deadline=None)
@given(
    runs=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 40)), min_size=1, max_size=8),
    mutate=st.one_of(st.none(), st.tuples(st.integers(0, 10**6), st.integers(0, 255))),
    chunk=st.integers(1, 70),
)
def test_fuzz_runs(runs, mutate, chunk):
    """Runs of batches of a few lengths (the guessing's domain), one byte maybe changed."""
    templates = [data_batch(0, 1), data_batch(0, 1, value=b"v" * 9), data_batch(0, 2), legacy_message(1, 0)]
    raw = bytearray(b"".join(templates[t] * n for t, n in runs))
    if mutate is not None:
        raw[mutate[0] % len(raw)] = mutate[1]
    _fuzz_check(bytes(raw), 0, None, chunk, True)


@settings(max_examples=200, deadline=None)
@given(
    data=st.binary(min_size=128, max_size=700),
    spans=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 128)), min_size=1, max_size=40),
    block=st.sampled_from([1, 3, 8192]),
)
def test_vectorised_crc32c_matches_crc32c(data, spans, block):
    """The table-driven CRC-32C against the crc32c package, for any lengths and ends."""
    import numpy as np

    ends = np.array([128 + e % (len(data) - 127) for e, _ in spans], dtype=np.int64)
    lengths = np.array([m for _, m in spans], dtype=np.int64)
    old = batch_columnar._VEC_CRC_BLOCK
    batch_columnar._VEC_CRC_BLOCK = block
    try:
        got = batch_columnar._crc32c_right_aligned(np.frombuffer(data, np.uint8), ends, lengths)
    finally:
        batch_columnar._VEC_CRC_BLOCK = old
    assert got.tolist() == [crc32c.crc32c(data[e - m:e]) for e, m in zip(ends.tolist(), lengths.tolist())]


# --------------------------------------------------------------------------- ranges
def test_byte_ranges_take_entries_starting_inside(seg):
    batches = [data_batch(i * 2, 2) for i in range(6)]
    data = b"".join(batches)
    starts = [sum(len(x) for x in batches[:i]) for i in range(6)]
    p = seg(data)
    # end in the middle of entry 3: entries 1..3 start in [starts[1], starts[3] + 5)
    rows, probs = assert_same(p, start=starts[1], end=starts[3] + 5)
    assert [r["base_offset"] for r in rows] == [2, 4, 6] and probs == []
    # an end exactly at an entry start excludes that entry (all six have one length)
    rows, _ = assert_same(p, start=starts[1], end=starts[3])
    assert [r["base_offset"] for r in rows] == [2, 4]
    rows, _ = assert_same(p, end=starts[5])
    assert [r["base_offset"] for r in rows] == [0, 2, 4, 6, 8]
    rows, _ = assert_same(p, start=starts[2], end=starts[2] + 1)
    assert [r["base_offset"] for r in rows] == [4]
    assert assert_same(p, start=starts[2], end=starts[2]) == ([], [])
    assert assert_same(p, start=len(data) + 10) == ([], [])
    # a start inside an entry reads garbage the same way
    assert_same(p, start=starts[1] + 3)
    assert_same(p, start=starts[4] + 17, end=starts[5])
    # an entry straddling the end of the file_size window is cut off
    rows, probs = assert_same(p, file_size=starts[5] + 10)
    assert len(rows) == 5 and probs[0].kind == "truncated" and probs[0].position == starts[5]


# --------------------------------------------------------------------------- memory / lifetime
def test_chunks_bound_rows_and_heap(seg):
    one = data_batch(0, 1)
    n = 50_000
    raw = bytearray(one * n)
    for i in range(n):
        struct.pack_into(">q", raw, i * len(one), i)
    p = seg(bytes(raw))
    tracemalloc.start()
    try:
        sizes = []
        last = -1
        for b in iter_header_batches(p, chunk_batches=2048):
            sizes.append(b.num_rows)
            offs = b.column("base_offset").to_numpy()
            assert offs[0] == last + 1 and (offs[1:] - offs[:-1] == 1).all()
            assert b.column("crc_valid").to_numpy(zero_copy_only=False).all()
            last = int(offs[-1])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sum(sizes) == n and max(sizes) == 2048
    assert peak < len(raw) // 4  # far less than one Python object per batch


def test_batches_outlive_the_mapping(seg):
    p = seg(mixed_segment())
    gen = iter_header_batches(p, chunk_batches=4)
    first = next(gen)
    gen.close()  # the mmap is closed here; the batch must not point into it
    assert first.column("base_offset").to_pylist() == [0, 3, 4, 6]
    assert first.column("compression").to_pylist() == ["none", "none", "none", "gzip"]


def test_bad_arguments():
    with pytest.raises(ValueError):
        next(iter_header_batches(io.BytesIO(b""), start=-1))
    with pytest.raises(ValueError):
        next(iter_header_batches(io.BytesIO(b""), chunk_batches=0))


# --------------------------------------------------------------------------- fuzz
_TMP = Path(tempfile.mkdtemp(prefix="batch-columnar-fuzz-"))
atexit.register(shutil.rmtree, _TMP, True)


def _fuzz_check(data: bytes, start: int, end: int | None, chunk: int, verify: bool) -> None:
    exp = reference(data, start=start, end=end, verify_crc=verify)
    via_bytes = columnar(io.BytesIO(data), start=start, end=end, chunk_batches=chunk, verify_crc=verify)[:2]
    assert via_bytes == exp
    p = _TMP / "fuzz.log"
    p.write_bytes(data)
    assert columnar(p, start=start, end=end, chunk_batches=chunk, verify_crc=verify)[:2] == exp


_SEED = mixed_segment()[:600] + legacy_message(1, 50) + data_batch(51, 2) + legacy_message(0, 53)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=400), start=st.integers(0, 40), chunk=st.integers(1, 4), verify=st.booleans())
def test_fuzz_random_bytes(data, start, chunk, verify):
    _fuzz_check(data, start, None, chunk, verify)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    edits=st.lists(st.tuples(st.integers(0, len(_SEED) - 1), st.integers(0, 255)), max_size=6),
    cut=st.integers(0, len(_SEED)),
    start=st.sampled_from([0, 0, 0, 1, 17, 61]),
    end=st.one_of(st.none(), st.integers(0, len(_SEED))),
    chunk=st.integers(1, 5),
    verify=st.booleans(),
)
def test_fuzz_mutated_segments(edits, cut, start, end, chunk, verify):
    raw = bytearray(_SEED)
    for at, value in edits:
        raw[at] = value
    _fuzz_check(bytes(raw[:cut]), start, end, chunk, verify)


@settings(max_examples=150, deadline=None)
@given(
    size_field=st.one_of(st.integers(-(2**31), 2**31 - 1), st.integers(-80, 200)),
    where=st.integers(0, 5),
    chunk=st.integers(1, 8),
)
def test_fuzz_size_fields(size_field, where, chunk):
    """Any size field anywhere in a run of good batches: same rows, same problem."""
    one = data_batch(0, 1)
    raw = bytearray(one * 6 + legacy_message(1, 6))
    struct.pack_into(">i", raw, where * len(one) + 8, size_field)
    _fuzz_check(bytes(raw), 0, None, chunk, True)
