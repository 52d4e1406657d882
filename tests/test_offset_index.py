"""Tests for auditor.formats.offset_index (``.index`` / ``.timeindex``).

Ground truth: entries assembled here with struct.pack following docs/on-disk-format.md §7,
the real index files in real_logs checked against the batch headers of the
``.log`` next to them (read with auditor.formats.batch, independent of this
module), file sizes (entry counts) and segment base offsets from file names.
"""

from __future__ import annotations

import io
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from auditor.errors import DecodeError
from auditor.formats.batch import BatchHeader, LogProblem, iter_segment, read_payload
from auditor.formats.offset_index import (
    COLUMNS,
    check_offset_index,
    check_time_index,
    iter_offset_index,
    iter_time_index,
)
from auditor.formats.records import iter_records
from conftest import CountingReader, REAL_LOGS

RONEM_META = REAL_LOGS / "ronem123__rupia-transaction-service" / "kafka-logs" / "__cluster_metadata-0"
LESTFEED = REAL_LOGS / "LestFeeD__online-shop-user" / "kafka" / "data"
DANIEL_META = (
    REAL_LOGS / "Danielowo2000__BigDataTechnologies-Version-2" / "kafka_2.13-3.5.0" / "kraft-combined-logs" / "__cluster_metadata-0"
)


def base_of(p: Path) -> int:
    return int(p.name.split(".")[0])


def offset_rows(p: Path) -> list:
    with open(p, "rb") as f:
        return list(iter_offset_index(f, p.stat().st_size, base_of(p)))


def time_rows(p: Path) -> list:
    with open(p, "rb") as f:
        return list(iter_time_index(f, p.stat().st_size, base_of(p)))


def batches_of(log: Path) -> list[BatchHeader]:
    with open(log, "rb") as f:
        out = list(iter_segment(f, file_size=log.stat().st_size, verify_crc=False))
    assert all(isinstance(b, BatchHeader) for b in out)
    return out


def oi(rel: int, pos: int) -> bytes:
    return struct.pack(">ii", rel, pos)


def ti(ts: int, rel: int) -> bytes:
    return struct.pack(">qi", ts, rel)


def test_columns_match_row_keys():
    names = [f.name for f in COLUMNS]
    data = oi(3, 0)
    assert names == list(next(iter_offset_index(io.BytesIO(data), 8, 0)).keys())
    data = ti(5, 3)
    assert names == list(next(iter_time_index(io.BytesIO(data), 12, 0)).keys())


# -- real files --------------------------------------------------------------------

@pytest.mark.real_logs
@pytest.mark.parametrize(
    "index",
    [
        RONEM_META / "00000000000001725413.index",
        LESTFEED / "__cluster_metadata-0" / "00000000000000116596.index",
        DANIEL_META / "00000000000000000000.index",
    ],
)
def test_real_offset_index_matches_log(index: Path):
    rows = offset_rows(index)
    assert len(rows) == index.stat().st_size // 8 > 100
    assert all(isinstance(r, dict) and r["index_kind"] == "offset" for r in rows)
    base = base_of(index)
    batches = batches_of(index.with_suffix(".log"))
    starts = {b.position: b for b in batches}
    for r in rows:
        assert r["offset"] >= base and r["timestamp"] is None
        assert starts[r["position"]].last_offset == r["offset"]
    assert check_offset_index(rows, batches) == []
    # dict rows from BatchHeader.as_row() work the same
    assert check_offset_index(rows, [b.as_row() for b in batches]) == []
    times = time_rows(index.with_suffix(".timeindex"))
    assert len(times) == index.with_suffix(".timeindex").stat().st_size // 12
    ts = [r["timestamp"] for r in times]
    assert ts == sorted(ts)
    assert all(r["position"] is None and r["offset"] >= base for r in times)
    assert check_time_index(times, batches) == []


@pytest.mark.real_logs
def test_every_real_index_file():
    """Every .index/.timeindex in real_logs: whole entries, no zero tail, and
    (where the .log exists) no DumpLogSegments offset-index mismatch."""
    files = sorted(list(REAL_LOGS.rglob("*.index")) + list(REAL_LOGS.rglob("*.timeindex")))
    assert len(files) > 600
    entries = 0
    checked = 0
    for p in files:
        rows = offset_rows(p) if p.suffix == ".index" else time_rows(p)
        size = 8 if p.suffix == ".index" else 12
        assert not any(isinstance(r, LogProblem) for r in rows), p
        assert len(rows) == p.stat().st_size // size, p
        offsets = [r["offset"] for r in rows]
        assert offsets == sorted(offsets) and all(o >= base_of(p) for o in offsets), p
        if p.suffix == ".timeindex":
            ts = [r["timestamp"] for r in rows]
            assert ts == sorted(ts), p
        else:
            pos = [r["position"] for r in rows]
            assert pos == sorted(set(pos)), p
            log = p.with_suffix(".log")
            if log.exists():
                assert check_offset_index(rows, batches_of(log)) == [], p
                checked += 1
        entries += len(rows)
    assert checked >= 20
    assert entries > 50_000


@pytest.mark.real_logs
def test_index_without_log_ends_before_next_segment():
    # ronem123: segment 839130's index survived without its .log; the next
    # segment starts at 1725413, so every indexed offset lies in between.
    rows = offset_rows(RONEM_META / "00000000000000839130.index")
    assert len(rows) == 124344 // 8
    assert 839130 <= rows[0]["offset"] and rows[-1]["offset"] < 1725413


@pytest.mark.real_logs
def test_time_index_points_inside_batch_like_dump_tool_reports():
    # Makaksik13 posts-0: time-index entry 6 names offset 70, a record inside
    # batch 69..72 whose first record with the max timestamp is offset 70.
    # DumpLogSegments reports such an entry as "indexed offset not found".
    d = REAL_LOGS / "Makaksik13__Yanwit" / "kafka-data" / "posts-0"
    log = d / "00000000000000000000.log"
    times = time_rows(d / "00000000000000000000.timeindex")
    entry = times[6]
    assert entry["offset"] == 70
    with open(log, "rb") as f:
        batch = next(b for b in iter_segment(f, file_size=log.stat().st_size) if b.base_offset <= 70 <= b.last_offset)
        records = list(iter_records(batch, read_payload(f, batch)))
    assert (batch.base_offset, batch.last_offset) == (69, 72)
    best = max(r.timestamp for r in records)
    assert entry["timestamp"] == best
    assert min(r.offset for r in records if r.timestamp == best) == 70
    problems = check_time_index(times, batches_of(log))
    assert problems == [
        {"problem": "offset-not-found", "entry_index": 6, "index_offset": 70, "index_timestamp": best,
         "log_offset": 72, "log_timestamp": None}
    ]


# -- hand-built files --------------------------------------------------------------------

def test_offset_index_stops_at_preallocated_zeros():
    data = oi(0, 0) + oi(10, 4200) + oi(25, 8400) + b"\0" * (8 * 1000)
    items = list(iter_offset_index(io.BytesIO(data), len(data), 500))
    rows, notes = items[:3], items[3:]
    assert [(r["entry_index"], r["offset"], r["position"]) for r in rows] == [(0, 500, 0), (1, 510, 4200), (2, 525, 8400)]
    assert len(notes) == 1 and notes[0].kind == "zero-tail" and notes[0].position == 24
    assert "8000" in notes[0].message


def test_time_index_stops_at_preallocated_zeros():
    data = ti(1000, 0) + ti(2000, 7) + b"\0" * 120
    items = list(iter_time_index(io.BytesIO(data), len(data), 100))
    assert [(r["offset"], r["timestamp"], r["position"]) for r in items[:2]] == [(100, 1000, None), (107, 2000, None)]
    assert items[2].kind == "zero-tail" and items[2].position == 24 and "120" in items[2].message
    assert len(items) == 3


def test_fully_zero_file_has_no_entries():
    """Pure preallocation (an empty or crashed active segment): no entries, one zero-tail note
    from byte 0. (Kafka 4.3.1's DumpLogSegments throws on such a file next to an empty .log.)"""
    data = b"\0" * 80
    items = list(iter_offset_index(io.BytesIO(data), len(data), 7))
    assert len(items) == 1 and items[0].kind == "zero-tail" and items[0].position == 0
    t = list(iter_time_index(io.BytesIO(b"\0" * 48), 48, 7))
    assert len(t) == 1 and t[0].kind == "zero-tail" and t[0].position == 0


def test_non_zero_after_stop_is_corrupt():
    data = oi(4, 0) + oi(0, 99) + oi(9, 200)
    items = list(iter_offset_index(io.BytesIO(data), len(data), 0))
    assert len(items) == 2 and items[0]["offset"] == 4
    assert items[1].kind == "corrupt" and items[1].position == 8


def test_length_not_multiple_of_entry_size():
    data = oi(1, 0) + oi(2, 100) + b"\x01\x02\x03"
    items = list(iter_offset_index(io.BytesIO(data), len(data), 0))
    assert [r["offset"] for r in items[:2]] == [1, 2]
    assert items[2].kind == "bad-length" and items[2].position == 16
    data = ti(5, 1) + b"\0" * 5
    items = list(iter_time_index(io.BytesIO(data), len(data), 0))
    assert items[0]["timestamp"] == 5 and items[1].kind == "bad-length" and items[1].position == 12


def test_empty_index():
    assert list(iter_offset_index(io.BytesIO(b""), 0, 0)) == []
    assert list(iter_time_index(io.BytesIO(b""), 0, 0)) == []


def test_large_index_reads_in_chunks():
    n = 100_000
    data = b"".join(oi(i + 1, i * 10) for i in range(n))

    f = CountingReader(data)
    count = 0
    for r in iter_offset_index(f, len(data), 1000):
        assert r["offset"] == 1000 + count + 1
        count += 1
    assert count == n and f.max_read <= 8 * 8192


def test_check_offset_index_reports_mismatches():
    batches = [
        {"position": 0, "last_offset": 4},
        {"position": 500, "last_offset": 9},
        {"position": 900, "last_offset": 15},
    ]
    data = oi(4, 0) + oi(8, 500) + oi(15, 700) + oi(15, 900)
    rows = list(iter_offset_index(io.BytesIO(data), len(data), 0))
    assert check_offset_index(rows, batches) == [
        {"entry_index": 1, "position": 500, "index_offset": 8, "log_offset": 9},
        {"entry_index": 2, "position": 700, "index_offset": 15, "log_offset": None},
    ]


def test_check_time_index_rules():
    batches = [
        {"position": 0, "last_offset": 4, "max_timestamp": 100},
        {"position": 500, "last_offset": 9, "max_timestamp": 300},
        {"position": 900, "last_offset": 15, "max_timestamp": 250},
    ]
    data = ti(100, 4) + ti(299, 9) + ti(250, 15) + ti(400, 20)
    rows = list(iter_time_index(io.BytesIO(data), len(data), 0))
    got = [(p["problem"], p["entry_index"]) for p in check_time_index(rows, batches)]
    assert got == [("timestamp-mismatch", 1), ("out-of-order", 2), ("offset-not-found", 3)]


# -- robustness ----------------------------------------------------------------------------

@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 2**40))
def test_random_bytes_never_raise_other_errors(data, base):
    for fn, size in ((iter_offset_index, 8), (iter_time_index, 12)):
        try:
            items = list(fn(io.BytesIO(data), len(data), base))
        except DecodeError:
            continue
        rows = [i for i in items if isinstance(i, dict)]
        assert len(rows) <= len(data) // size
        try:
            check_offset_index(items, [{"position": 0, "last_offset": base, "max_timestamp": 0}])
            check_time_index(items, [{"position": 0, "last_offset": base, "max_timestamp": 0}])
        except DecodeError:
            pass
