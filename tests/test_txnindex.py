"""Tests for auditor.formats.txnindex (``.txnindex`` aborted-transaction entries).

No real ``.txnindex`` exists in real_logs (SOURCES.md: none was found), so the
ground truth is entries assembled here with struct.pack following docs/on-disk-format.md §7
(AbortedTxn: version int16, producerId, firstOffset, lastOffset,
lastStableOffset as int64, 34 bytes).
"""

from __future__ import annotations

import io
import struct

import pytest
from hypothesis import given, settings, strategies as st

from auditor.errors import DecodeError
from auditor.formats.batch import LogProblem
from auditor.formats.txnindex import COLUMNS, iter_txn_index
from conftest import CountingReader


def aborted(pid, first, last, lso, version=0) -> bytes:
    return struct.pack(">hqqqq", version, pid, first, last, lso)


def decode(data: bytes) -> list:
    return list(iter_txn_index(io.BytesIO(data), len(data)))


def test_entry_layout_is_34_bytes():
    assert len(aborted(1, 2, 3, 4)) == 34


def test_columns_match_row_keys():
    assert [f.name for f in COLUMNS] == list(decode(aborted(1, 2, 3, 4))[0].keys())


def test_two_entries():
    data = aborted(1000, 5, 9, 5) + aborted(1001, 12, 20, 10)
    assert decode(data) == [
        {"entry_index": 0, "version": 0, "producer_id": 1000, "first_offset": 5, "last_offset": 9,
         "last_stable_offset": 5, "in_order": True},
        {"entry_index": 1, "version": 0, "producer_id": 1001, "first_offset": 12, "last_offset": 20,
         "last_stable_offset": 10, "in_order": True},
    ]


def test_empty_file():
    assert decode(b"") == []


def test_out_of_order_is_flagged_not_raised():
    data = aborted(1, 0, 10, 0) + aborted(2, 3, 10, 0) + aborted(3, 4, 7, 0) + aborted(4, 11, 15, 11)
    rows = decode(data)
    assert [r["in_order"] for r in rows] == [True, False, False, True]
    assert [r["producer_id"] for r in rows] == [1, 2, 3, 4]


def test_trailing_partial_entry_is_reported():
    data = aborted(1, 0, 10, 0) + aborted(2, 11, 20, 11)[:17]
    items = decode(data)
    assert len(items) == 2
    assert items[0]["producer_id"] == 1
    note = items[1]
    assert isinstance(note, LogProblem)
    assert note.kind == "truncated" and note.position == 34
    assert "17" in note.message


def test_only_partial_entry():
    items = decode(b"\0" * 33)
    assert len(items) == 1 and isinstance(items[0], LogProblem) and items[0].position == 0


def test_version_checks_byte_zero_only():
    # version byte 0 with a non-zero low byte: the broker reads byte 0 only -> accepted
    rows = decode(aborted(1, 0, 1, 0, version=5))
    assert rows[0]["version"] == 5
    # byte 0 = 0x80 is a negative byte, not "> 0": accepted too
    rows = decode(aborted(1, 0, 1, 0, version=-32768))
    assert rows[0]["version"] == -32768
    # byte 0 = 1 -> unknown version, raised at that entry after the earlier rows
    data = aborted(1, 0, 1, 0) + aborted(2, 2, 3, 2, version=0x0100)
    it = iter_txn_index(io.BytesIO(data), len(data))
    assert next(it)["producer_id"] == 1
    with pytest.raises(DecodeError) as e:
        next(it)
    assert e.value.kind == "unknown-version" and e.value.position == 34


def test_many_entries_stream_in_chunks():
    n = 7000  # several read chunks
    data = b"".join(aborted(i, 2 * i, 2 * i + 1, 2 * i) for i in range(n))

    f = CountingReader(data)
    count = 0
    for r in iter_txn_index(f, len(data)):
        assert r["entry_index"] == count and r["producer_id"] == count
        assert r["last_offset"] == 2 * count + 1 and r["in_order"]
        count += 1
    assert count == n
    assert f.max_read < len(data) // 2


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_only_raise_decode_error(data):
    try:
        items = decode(data)
    except DecodeError as e:
        assert e.kind == "unknown-version" and e.position % 34 == 0
        return
    rows = [i for i in items if isinstance(i, dict)]
    assert len(rows) == len(data) // 34


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_mutated_index_only_raises_decode_error(data):
    buf = bytearray(aborted(1, 0, 10, 0) + aborted(2, 11, 20, 11) + aborted(3, 21, 30, 21))
    for _ in range(data.draw(st.integers(1, 4))):
        buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buf)))
    try:
        decode(bytes(buf[:cut]))
    except DecodeError:
        pass
