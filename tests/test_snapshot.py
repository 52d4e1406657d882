"""Tests for auditor.formats.snapshot (producer-state ``.snapshot`` files).

Ground truth: files assembled here with struct.pack following docs/on-disk-format.md §6
(CRC from the crc32c package, checked against the CRC-32C check value), the
entry counts / producer ids stated in real_logs/SOURCES.md, the git blob id of
the empty snapshot given there, and the batch headers of the log segments next
to the snapshots (read with auditor.formats.batch, not with this module).
"""

from __future__ import annotations

import hashlib
import io
import os
import struct

import crc32c
import pytest
from hypothesis import given, settings, strategies as st

from auditor.errors import DecodeError
from auditor.formats.batch import BatchHeader, iter_segment
from auditor.formats.snapshot import (
    COLUMNS,
    decrement_sequence,
    iter_snapshot,
    parse_snapshot_offset,
    read_snapshot_header,
)
from conftest import CountingReader, REAL_LOGS

NOVA = REAL_LOGS / "NOVA-RICS-Open-Lab__agentic-data-pipelines" / "broker" / "data"
ITUMELENG = REAL_LOGS / "ItumelengMogase__Real-Time-Data-Pipeline-for-Patient-Admissions" / "kafka-data"
DSCHNE = REAL_LOGS / "dschne27__kafka-streams" / "broker" / "data"
STARBUCKS = REAL_LOGS / "fiorotticaio__Starbucks-stocks" / "data" / "kafka"
EMPTY_SNAPSHOT = REAL_LOGS / "Jeong-Rae__KafkaDemo" / "kraft-combined-logs" / "__cluster_metadata-0" / "00000000000000000712.snapshot"
EMPTY_BLOB = "6099ecd6d026ab730c6c41bb9376313ed0a24b5d"  # SOURCES.md


def entry(pid=1, epoch=0, last_seq=0, last_off=0, delta=0, ts=0, coord=-1, txn_first=-1) -> bytes:
    return struct.pack(">qhiqiqiq", pid, epoch, last_seq, last_off, delta, ts, coord, txn_first)


def snapshot_bytes(entries: list[bytes], *, version=1, count=None, crc=None, extra=b"") -> bytes:
    body = struct.pack(">i", len(entries) if count is None else count) + b"".join(entries) + extra
    if crc is None:
        crc = crc32c.crc32c(body)
    return struct.pack(">hI", version, crc) + body


def rows_of(data: bytes, **kw) -> list[dict]:
    return list(iter_snapshot(io.BytesIO(data), len(data), **kw))


def read_real(path) -> list[dict]:
    with open(path, "rb") as f:
        return list(iter_snapshot(f, os.path.getsize(path), snapshot_offset=parse_snapshot_offset(path.name)))


def log_batches(path) -> list[BatchHeader]:
    with open(path, "rb") as f:
        out = list(iter_segment(f, file_size=os.path.getsize(path)))
    assert all(isinstance(b, BatchHeader) for b in out)
    return out


def test_crc32c_library_check_value():
    # The standard CRC-32C check value, so the hand-built files below are right.
    assert crc32c.crc32c(b"123456789") == 0xE3069283


def test_columns_match_row_keys():
    data = snapshot_bytes([entry()])
    assert [f.name for f in COLUMNS] == list(rows_of(data)[0].keys())


# -- real files ------------------------------------------------------------------

@pytest.mark.real_logs
def test_empty_snapshot_from_sources():
    data = EMPTY_SNAPSHOT.read_bytes()
    assert hashlib.sha1(b"blob 10\0" + data).hexdigest() == EMPTY_BLOB
    with open(EMPTY_SNAPSHOT, "rb") as f:
        header = read_snapshot_header(f, 10)
    assert header == {
        "version": 1,
        "crc": crc32c.crc32c(b"\0\0\0\0"),
        "computed_crc": crc32c.crc32c(b"\0\0\0\0"),
        "crc_valid": True,
        "entry_count": 0,
    }
    assert read_real(EMPTY_SNAPSHOT) == []


@pytest.mark.real_logs
@pytest.mark.parametrize("partition,count", [(0, 382), (1, 53), (2, 795)])
def test_starbucks_coffee_price_snapshots(partition, count):
    d = STARBUCKS / f"coffee_price-{partition}"
    snap = d / f"{count:020d}.snapshot"
    rows = read_real(snap)
    assert len(rows) == count
    assert [r["entry_index"] for r in rows] == list(range(count))
    assert all(r["snapshot_offset"] == count and r["crc_valid"] for r in rows)
    # Every batch came from its own idempotent producer: the snapshot's entries
    # are exactly the log's batches, keyed by producer id.
    by_pid = {b.producer_id: b for b in log_batches(d / "00000000000000000000.log")}
    assert len(by_pid) == count
    assert {r["producer_id"] for r in rows} == set(by_pid)
    for r in rows:
        b = by_pid[r["producer_id"]]
        assert (r["last_offset"], r["last_sequence"], r["producer_epoch"]) == (b.last_offset, b.last_sequence, b.producer_epoch)
        assert (r["first_offset"], r["first_sequence"]) == (b.base_offset, b.base_sequence)
        assert r["last_timestamp"] == b.max_timestamp
        assert r["coordinator_epoch"] == -1 and r["current_txn_first_offset"] is None


@pytest.mark.real_logs
def test_nova_ksql_command_topic_snapshot():
    rows = read_real(NOVA / "_confluent-ksql-agentic_ksql__command_topic-0" / "00000000000000000018.snapshot")
    assert len(rows) == 1
    r = rows[0]
    assert (r["producer_id"], r["producer_epoch"], r["coordinator_epoch"]) == (0, 8, 0)
    assert r["snapshot_offset"] == 18
    # 9 committed transactions: nothing open.
    assert r["current_txn_first_offset"] is None
    # The last data batch of producer 0 in the log is the entry's batch.
    batches = log_batches(NOVA / "_confluent-ksql-agentic_ksql__command_topic-0" / "00000000000000000000.log")
    data = [b for b in batches if b.producer_id == 0 and not b.is_control]
    assert data[-1].last_offset == r["last_offset"]
    assert data[-1].last_sequence == r["last_sequence"]
    assert data[-1].producer_epoch == 8


@pytest.mark.real_logs
def test_itumeleng_command_topic_snapshot():
    rows = read_real(ITUMELENG / "_confluent-ksql-default__command_topic-0" / "00000000000000000002.snapshot")
    assert len(rows) == 1
    assert rows[0]["producer_id"] == 0
    assert rows[0]["coordinator_epoch"] == 0
    assert rows[0]["snapshot_offset"] == 2


@pytest.mark.real_logs
def test_dschne27_snapshots():
    rows = read_real(DSCHNE / "_confluent-ksql-default__command_topic-0" / "00000000000000000002.snapshot")
    assert [(r["producer_id"], r["coordinator_epoch"]) for r in rows] == [(3, 0)]
    rep = [p for p in DSCHNE.iterdir() if p.name.endswith("MetricsAggregateStore-repartition-0")]
    assert len(rep) == 1
    assert len(read_real(rep[0] / "00000000000000085902.snapshot")) == 11


@pytest.mark.real_logs
def test_opcua_snapshot_agrees_with_log():
    d = NOVA / "OPCUA_KUKA_RAW_CLEANSED-0"
    snap = d / "00000000000000011685.snapshot"
    rows = read_real(snap)
    assert len(rows) == 24
    # State at offset 11685 = each producer's last batch below that offset.
    last: dict[int, BatchHeader] = {}
    for b in log_batches(d / "00000000000000000000.log"):
        if b.last_offset < 11685:
            last[b.producer_id] = b
    assert {r["producer_id"] for r in rows} == set(last)
    for r in rows:
        b = last[r["producer_id"]]
        assert r["last_offset"] == b.last_offset
        assert r["last_sequence"] == b.last_sequence
        assert r["producer_epoch"] == b.producer_epoch
        assert r["offset_delta"] == b.last_offset_delta
        assert r["first_sequence"] == b.base_sequence
        assert r["last_timestamp"] == b.max_timestamp


@pytest.mark.real_logs
def test_every_real_snapshot_decodes():
    files = sorted(REAL_LOGS.rglob("*.snapshot"))
    assert len(files) >= 150
    total = 0
    for p in files:
        size = p.stat().st_size
        assert (size - 10) % 46 == 0
        rows = read_real(p)
        assert len(rows) == (size - 10) // 46
        assert all(r["crc_valid"] for r in rows)
        total += len(rows)
    assert total > 1400


# -- hand-built files ----------------------------------------------------------------

def test_hand_built_entries_and_derived_columns():
    data = snapshot_bytes(
        [
            entry(pid=42, epoch=3, last_seq=9, last_off=1009, delta=4, ts=1_700_000_000_000, coord=7, txn_first=1000),
            entry(pid=43, epoch=0, last_seq=2, last_off=50, delta=5, ts=5, coord=-1, txn_first=-1),
            entry(pid=44, epoch=-1, last_seq=-1, last_off=-1, delta=0, ts=-1, coord=2, txn_first=-1),
        ]
    )
    rows = rows_of(data, snapshot_offset=1010)
    assert rows[0] == {
        "snapshot_offset": 1010,
        "entry_index": 0,
        "producer_id": 42,
        "producer_epoch": 3,
        "last_sequence": 9,
        "first_sequence": 5,
        "last_offset": 1009,
        "offset_delta": 4,
        "first_offset": 1005,
        "last_timestamp": 1_700_000_000_000,
        "coordinator_epoch": 7,
        "current_txn_first_offset": 1000,
        "crc_valid": True,
        "remote_segment_id": None,  # a local .snapshot file
    }
    # first sequence wraps below zero to Integer.MAX_VALUE: 2 - 5 -> MAX - 2
    assert rows[1]["first_sequence"] == 2**31 - 1 - 2
    assert rows[1]["first_offset"] == 45
    assert rows[1]["current_txn_first_offset"] is None
    # marker-only producer: no batch known
    assert (rows[2]["first_sequence"], rows[2]["first_offset"]) == (-1, -1)
    assert rows[2]["coordinator_epoch"] == 2


def test_decrement_sequence_matches_kafka_rule():
    assert decrement_sequence(10, 3) == 7
    assert decrement_sequence(0, 1) == 2**31 - 1
    assert decrement_sequence(3, 3) == 0
    assert decrement_sequence(1, 5) == 2**31 - 1 - 3


def test_many_entries_stream_across_chunks():
    n = 10_000
    data = snapshot_bytes([entry(pid=i, last_off=i, last_seq=i) for i in range(n)])
    rows = rows_of(data)
    assert len(rows) == n
    assert rows[-1]["producer_id"] == n - 1 and rows[-1]["entry_index"] == n - 1


def test_reads_are_chunked():
    data = snapshot_bytes([entry(pid=i) for i in range(20_000)])  # 920 KB
    f = CountingReader(data)
    assert sum(1 for _ in iter_snapshot(f, len(data))) == 20_000
    assert f.max_read <= 1 << 20


def test_crc_mismatch_raises_or_flags():
    good = snapshot_bytes([entry(pid=7, epoch=1), entry(pid=8, epoch=2)])
    bad = bytearray(good)
    bad[10 + 46 + 7] ^= 0x01  # producer id of entry 1: 8 -> 9
    bad = bytes(bad)
    with pytest.raises(DecodeError) as e:
        rows_of(bad)
    assert e.value.kind == "bad-crc" and e.value.position == 2
    header = read_snapshot_header(io.BytesIO(bad), len(bad))
    assert header["crc_valid"] is False and header["crc"] == struct.unpack(">I", good[2:6])[0]
    rows = rows_of(bad, raise_on_bad_crc=False)
    assert [r["producer_id"] for r in rows] == [7, 9]
    assert not any(r["crc_valid"] for r in rows)
    # a wrong stored CRC alone is also detected
    wrong = snapshot_bytes([entry()], crc=12345)
    with pytest.raises(DecodeError) as e:
        rows_of(wrong)
    assert e.value.kind == "bad-crc"


def test_unknown_version():
    for v in (0, 2, -1):
        with pytest.raises(DecodeError) as e:
            rows_of(snapshot_bytes([entry()], version=v))
        assert e.value.kind == "unknown-version" and e.value.position == 0


def test_count_disagreeing_with_length():
    with pytest.raises(DecodeError) as e:
        rows_of(snapshot_bytes([entry()], count=2))
    assert e.value.kind == "truncated" and e.value.position == 6
    with pytest.raises(DecodeError) as e:
        rows_of(snapshot_bytes([entry(), entry()], count=1))
    assert e.value.kind == "bad-length" and e.value.position == 6
    with pytest.raises(DecodeError) as e:
        rows_of(snapshot_bytes([], count=-1))
    assert e.value.kind == "bad-length" and e.value.position == 6
    with pytest.raises(DecodeError) as e:
        rows_of(snapshot_bytes([entry()], extra=b"\0" * 5))
    assert e.value.kind == "bad-length"


@pytest.mark.parametrize("size,position", [(0, 0), (1, 0), (2, 2), (5, 2), (6, 6), (9, 6)])
def test_short_files(size, position):
    data = snapshot_bytes([])[:size]
    with pytest.raises(DecodeError) as e:
        rows_of(data)
    assert e.value.kind == "truncated" and e.value.position == position


def test_parse_snapshot_offset():
    assert parse_snapshot_offset("00000000000000011685.snapshot") == 11685
    assert parse_snapshot_offset("/x/y/00000000000000000002.snapshot") == 2
    assert parse_snapshot_offset("00000000000000000712.snapshot.deleted") == 712
    for bad in ("00000000000000000000.log", "00000000000000004758-0000000001.checkpoint", "x.snapshot", "12.snapshotx",
                "12.snapshot\n", "\u0663.snapshot", "99999999999999999999.snapshot"):
        with pytest.raises(DecodeError) as e:
            parse_snapshot_offset(bad)
        assert e.value.kind == "foreign"


# -- robustness --------------------------------------------------------------------

def _all(data: bytes) -> None:
    for flag in (True, False):
        try:
            list(iter_snapshot(io.BytesIO(data), len(data), raise_on_bad_crc=flag))
        except DecodeError:
            pass
    try:
        read_snapshot_header(io.BytesIO(data), len(data))
    except DecodeError:
        pass


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_only_raise_decode_error(data):
    _all(data)
    _all(b"\x00\x01" + data)


_SEED = snapshot_bytes([entry(pid=5, epoch=1, last_seq=3, last_off=9, delta=1), entry(pid=6)])


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_mutated_snapshots_only_raise_decode_error(data):
    buf = bytearray(_SEED)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buf)))
    _all(bytes(buf[:cut]))
    _all(bytes(buf))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_parse_name_only_raises_decode_error(name):
    try:
        assert parse_snapshot_offset(name) >= 0
    except DecodeError:
        pass
