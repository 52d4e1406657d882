"""Tests for auditor.formats.txnlog (__transaction_state records).

Ground truth: bytes assembled here with struct.pack following docs/on-disk-format.md §4,
Java String.hashCode values known independently of this code, and the real
__transaction_state partitions listed in real_logs/SOURCES.md (their directory
names give the expected partition; the matching COMMIT markers in the ksqlDB
command topic give the expected producer id / epoch).
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from auditor.errors import DecodeError
from auditor.formats.batch import BatchHeader, iter_segment, read_payload
from auditor.formats.records import decode_control, iter_records
from auditor.formats.txnlog import COLUMNS, decode_txn_record, java_string_hash, partition_for
from builders import txn_log_key_v0 as key_v0, txn_log_value_v0 as value_v0, uvarint
from conftest import REAL_LOGS, SAMPLE_LOGS

ITUMELENG = REAL_LOGS / "ItumelengMogase__Real-Time-Data-Pipeline-for-Patient-Admissions" / "kafka-data"
NOVA = REAL_LOGS / "NOVA-RICS-Open-Lab__agentic-data-pipelines" / "broker" / "data"
DSCHNE = REAL_LOGS / "dschne27__kafka-streams" / "broker" / "data"
SEG0 = "00000000000000000000.log"

# docs/on-disk-format.md §4: which states may directly precede each persisted state
PRECEDING = {
    "Empty": {"Empty", "CompleteCommit", "CompleteAbort"},
    "Ongoing": {"Ongoing", "Empty", "CompleteCommit", "CompleteAbort"},
    "PrepareCommit": {"Ongoing"},
    "PrepareAbort": {"Ongoing", "PrepareEpochFence"},
    "CompleteCommit": {"PrepareCommit"},
    "CompleteAbort": {"PrepareAbort"},
}


# ---------------------------------------------------------------- helpers
# key_v0 / value_v0 (TransactionLogKey/Value v0 assembled by hand) come from tests/builders.py
def read_segment(path: Path):
    """(BatchHeader, Record) pairs of every record of a segment."""
    out = []
    with open(path, "rb") as f:
        for h in iter_segment(f, file_size=os.path.getsize(path)):
            assert isinstance(h, BatchHeader), h
            for r in iter_records(h, read_payload(f, h)):
                out.append((h, r))
    return out


def test_columns_match_row_keys():
    row = decode_txn_record(key_v0("x"), value_v0(1, 0, 60000, 0, None, 5, -1))
    assert [c.name for c in COLUMNS] == list(row)


# ---------------------------------------------------------------- hand-built v0
def test_v0_ongoing_value():
    v = value_v0(4242, 7, 60000, 1, [("orders", [0, 3]), ("payments", [2])], 1700000000123, 1700000000000)
    row = decode_txn_record(key_v0("my-txn"), v)
    assert row["record_type"] == "transaction"
    assert row["key_version"] == 0
    assert row["transactional_id"] == "my-txn"
    assert row["value_version"] == 0
    assert row["is_tombstone"] is False
    assert row["producer_id"] == 4242
    assert row["producer_epoch"] == 7
    assert row["transaction_timeout_ms"] == 60000
    assert row["state_id"] == 1 and row["state"] == "Ongoing"
    assert row["topic_partitions"] == [
        {"topic": "orders", "partition": 0},
        {"topic": "orders", "partition": 3},
        {"topic": "payments", "partition": 2},
    ]
    assert row["last_update_timestamp_ms"] == 1700000000123
    assert row["start_timestamp_ms"] == 1700000000000
    # v0 cannot carry these
    assert row["previous_producer_id"] is None
    assert row["next_producer_id"] is None
    assert row["client_transaction_version"] is None
    assert row["unknown_tags_json"] is None


@pytest.mark.parametrize(
    "state_id,name",
    [(0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"), (4, "CompleteCommit"),
     (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence")],
)
def test_every_state_id(state_id, name):
    row = decode_txn_record(key_v0("t"), value_v0(1, 0, 100, state_id, [], 2, 1))
    assert row["state"] == name and row["state_id"] == state_id
    assert row["topic_partitions"] == []


def test_null_partition_array_is_null_not_empty():
    row = decode_txn_record(key_v0("t"), value_v0(1, 0, 100, 0, None, 2, -1))
    assert row["topic_partitions"] is None


@pytest.mark.parametrize("bad", [8, 9, 100, -1, -128])
def test_bad_state_id(bad):
    with pytest.raises(DecodeError) as ei:
        decode_txn_record(key_v0("t"), value_v0(1, 0, 100, bad, None, 2, -1))
    assert ei.value.kind == "corrupt"
    assert ei.value.position == 16  # 2 prefix + 8 pid + 2 epoch + 4 timeout


def test_tombstone():
    row = decode_txn_record(key_v0("gone"), None)
    assert row["record_type"] == "transaction"
    assert row["transactional_id"] == "gone"
    assert row["is_tombstone"] is True
    assert row["value_version"] is None
    assert row["producer_id"] is None and row["state"] is None and row["topic_partitions"] is None


def test_unknown_key_version_is_not_an_error():
    row = decode_txn_record(struct.pack(">h", 3) + b"\x01\x02\x03", b"\xff\xff\xff")
    assert row["record_type"] == "unknown"
    assert row["key_version"] == 3
    assert row["transactional_id"] is None
    assert row["producer_id"] is None


def test_unknown_value_version():
    v = value_v0(1, 0, 100, 0, None, 2, -1)
    with pytest.raises(DecodeError) as ei:
        decode_txn_record(key_v0("t"), struct.pack(">h", 2) + v[2:])
    assert ei.value.kind == "unknown-version"
    assert ei.value.position == 0


def test_null_key_and_trailing_bytes():
    with pytest.raises(DecodeError):
        decode_txn_record(None, value_v0(1, 0, 100, 0, None, 2, -1))
    with pytest.raises(DecodeError) as ei:
        decode_txn_record(key_v0("t"), value_v0(1, 0, 100, 0, None, 2, -1) + b"\x00")
    assert ei.value.position == 2 + 8 + 2 + 4 + 1 + 4 + 8 + 8
    with pytest.raises(DecodeError) as ei:
        decode_txn_record(key_v0("t") + b"\x00", None)
    assert ei.value.position == 5


def test_truncation_at_every_byte_v0():
    k = key_v0("txn-1")
    v = value_v0(99, 3, 60000, 2, [("a", [0, 1])], 1700000000123, 1700000000000)
    assert decode_txn_record(k, v)["state"] == "PrepareCommit"
    for n in range(len(v)):
        with pytest.raises(DecodeError) as ei:
            decode_txn_record(k, v[:n])
        assert 0 <= ei.value.position <= n
    for n in range(len(k)):
        with pytest.raises(DecodeError):
            decode_txn_record(k[:n], v)


# ---------------------------------------------------------------- hand-built v1 (flexible)
def value_v1(tagged: bytes) -> bytes:
    out = struct.pack(">hqhib", 1, 5000, 12, 30000, 3)  # PrepareAbort
    out += uvarint(2 + 1)  # 2 topics, compact array
    t = b"topic-a"
    out += uvarint(len(t) + 1) + t + uvarint(2 + 1) + struct.pack(">ii", 0, 7) + uvarint(0)
    t = b"b"
    out += uvarint(len(t) + 1) + t + uvarint(1 + 1) + struct.pack(">i", 4) + uvarint(0)
    out += struct.pack(">qq", 1710000000999, 1710000000500)
    return out + tagged


def test_v1_without_tags_uses_kafka_defaults():
    row = decode_txn_record(key_v0("flex"), value_v1(uvarint(0)))
    assert row["value_version"] == 1
    assert row["producer_id"] == 5000
    assert row["producer_epoch"] == 12
    assert row["transaction_timeout_ms"] == 30000
    assert row["state"] == "PrepareAbort"
    assert row["topic_partitions"] == [
        {"topic": "topic-a", "partition": 0},
        {"topic": "topic-a", "partition": 7},
        {"topic": "b", "partition": 4},
    ]
    assert row["last_update_timestamp_ms"] == 1710000000999
    assert row["start_timestamp_ms"] == 1710000000500
    assert row["previous_producer_id"] == -1
    assert row["next_producer_id"] == -1
    assert row["client_transaction_version"] == 0
    assert row["unknown_tags_json"] is None


def v1_all_tags() -> bytes:
    return (
        uvarint(4)
        + uvarint(0) + uvarint(8) + struct.pack(">q", 4999)
        + uvarint(1) + uvarint(8) + struct.pack(">q", 5001)
        + uvarint(2) + uvarint(2) + struct.pack(">h", 2)
        + uvarint(9) + uvarint(3) + b"\xab\xcd\xef"
    )


def test_v1_tagged_fields_and_unknown_tag():
    v = value_v1(v1_all_tags())
    row = decode_txn_record(key_v0("flex"), v)
    assert row["previous_producer_id"] == 4999
    assert row["next_producer_id"] == 5001
    assert row["client_transaction_version"] == 2
    assert json.loads(row["unknown_tags_json"]) == {"9": "abcdef"}
    assert row["producer_id"] == 5000


def test_v1_unknown_tag_in_partition_entry_kept():
    out = struct.pack(">hqhib", 1, 1, 0, 1000, 1) + uvarint(2)
    t = b"x"
    out += uvarint(2) + t + uvarint(2) + struct.pack(">i", 0)
    out += uvarint(1) + uvarint(5) + uvarint(1) + b"\x07"  # element tag 5 = 07
    out += struct.pack(">qq", 10, 9) + uvarint(0)
    row = decode_txn_record(key_v0("n"), out)
    assert row["topic_partitions"] == [{"topic": "x", "partition": 0}]
    assert json.loads(row["unknown_tags_json"]) == {"TransactionPartitions[0].5": "07"}


def test_v1_tags_out_of_order_rejected():
    tags = (uvarint(2) + uvarint(1) + uvarint(8) + struct.pack(">q", 1)
            + uvarint(0) + uvarint(8) + struct.pack(">q", 2))
    with pytest.raises(DecodeError):
        decode_txn_record(key_v0("flex"), value_v1(tags))


def test_truncation_at_every_byte_v1():
    k = key_v0("flex")
    v = value_v1(v1_all_tags())
    for n in range(len(v)):
        with pytest.raises(DecodeError) as ei:
            decode_txn_record(k, v[:n])
        assert 0 <= ei.value.position <= n


# ---------------------------------------------------------------- hash / partition
def test_java_string_hash_known_values():
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    # overflow wraps to negative int32
    assert java_string_hash("Hello World") == -862545276
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE
    assert java_string_hash("polygenelubricants") == -(2**31)
    # a non-BMP character counts as two UTF-16 code units (0xD83D, 0xDE00)
    assert java_string_hash("\U0001F600") == 31 * 0xD83D + 0xDE00
    assert java_string_hash("\u00e9") == 0xE9  # one code unit, not two UTF-8 bytes


def test_partition_for():
    assert partition_for("polygenelubricants") == 0  # Utils.abs(MIN_VALUE) == 0
    assert partition_for("polygenelubricants", 7) == 0
    assert partition_for("Hello World") == 862545276 % 50
    assert partition_for("hello", 10) == 99162322 % 10
    with pytest.raises(ValueError):
        partition_for("x", 0)


# ---------------------------------------------------------------- real files
def _txn_rows(path: Path):
    rows = []
    for h, r in read_segment(path):
        assert not h.is_control
        rows.append((h, r, decode_txn_record(r.key, r.value)))
    return rows


def _check_sequence(states):
    for prev, cur in zip(states, states[1:]):
        assert prev in PRECEDING[cur], f"{prev} -> {cur}"


def _commit_markers(partition_dir: Path) -> set[tuple[int, int]]:
    out = set()
    for h, r in read_segment(partition_dir / SEG0):
        if h.is_control:
            c = decode_control(r.key, r.value)
            if c.control_type == "COMMIT":
                out.add((h.producer_id, h.producer_epoch))
    return out


@pytest.mark.real_logs
@pytest.mark.parametrize(
    "logdir,txn_partition,txn_id,command_topic,expected_pid",
    [
        (ITUMELENG, 44, "default_", "_confluent-ksql-default__command_topic", 0),
        (DSCHNE, 44, "default_", "_confluent-ksql-default__command_topic", 3),
        (NOVA, 4, "agentic_ksql_", "_confluent-ksql-agentic_ksql__command_topic", 0),
    ],
)
def test_real_transaction_state(logdir, txn_partition, txn_id, command_topic, expected_pid):
    path = logdir / f"__transaction_state-{txn_partition}" / SEG0
    rows = _txn_rows(path)
    assert rows
    assert partition_for(txn_id) == txn_partition
    for h, r, row in rows:
        assert row["record_type"] == "transaction"
        assert row["transactional_id"] == txn_id
        assert partition_for(row["transactional_id"]) == txn_partition
        assert row["value_version"] == 0 and not row["is_tombstone"]
        assert row["producer_id"] == expected_pid
        if row["state"] == "Empty":
            assert row["topic_partitions"] is None
            assert row["start_timestamp_ms"] == -1
        elif row["state"] in ("Ongoing", "PrepareCommit"):
            assert row["topic_partitions"] == [{"topic": command_topic, "partition": 0}]
            assert row["start_timestamp_ms"] <= row["last_update_timestamp_ms"]
        else:
            assert row["state"] == "CompleteCommit"
            assert row["topic_partitions"] == []
    states = [row["state"] for _, _, row in rows]
    assert states[0] == "Empty"
    _check_sequence(states)
    # each committed (pid, epoch) has a COMMIT marker in the command topic, and vice versa
    committed = {(row["producer_id"], row["producer_epoch"]) for _, _, row in rows if row["state"] == "CompleteCommit"}
    assert committed == _commit_markers(logdir / f"{command_topic}-0")


@pytest.mark.real_logs
def test_real_nova_nine_transactions():
    rows = [row for _, _, row in _txn_rows(NOVA / "__transaction_state-4" / SEG0)]
    assert len(rows) == 36  # 36 batches of one record each (SOURCES.md)
    assert [r["state"] for r in rows] == ["Empty", "Ongoing", "PrepareCommit", "CompleteCommit"] * 9
    # SOURCES.md: producer epoch goes 0..8 over the 9 transactions
    assert [r["producer_epoch"] for r in rows] == [e for e in range(9) for _ in range(4)]


# ---------------------------------------------------------------- robustness
@settings(max_examples=400, deadline=None)
@given(st.one_of(st.none(), st.binary(max_size=40)), st.one_of(st.none(), st.binary(max_size=120)))
def test_random_bytes_only_decode_error(key, value):
    try:
        decode_txn_record(key, value)
    except DecodeError:
        pass


def _seed_values() -> list[bytes]:
    """Seeds to mutate: four v0 values a real broker wrote (the external corpus's NOVA partition; without
    the corpus, the first four of a shipped capture, sample_logs/compacted-transactions) and a v1 value
    with every tag."""
    seg = NOVA / "__transaction_state-4" / SEG0
    if not seg.is_file():
        seg = SAMPLE_LOGS / "compacted-transactions" / "broker-1" / "__transaction_state-4" / SEG0
    values = [r.value for _, r in read_segment(seg) if r.value is not None][:4]
    assert len(values) == 4, seg
    return values + [value_v1(v1_all_tags())]


_REAL_VALUES = _seed_values()


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(_REAL_VALUES), st.data())
def test_mutated_values_only_decode_error(value, data):
    buf = bytearray(value)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buf)))
    try:
        decode_txn_record(key_v0("agentic_ksql_"), bytes(buf[:cut]))
    except DecodeError:
        pass


@pytest.mark.real_logs
def test_rows_fit_arrow_schema():
    import pyarrow as pa

    rows = [row for _, _, row in _txn_rows(NOVA / "__transaction_state-4" / SEG0)]
    rows.append(decode_txn_record(key_v0("flex"), value_v1(v1_all_tags())))
    rows.append(decode_txn_record(key_v0("gone"), None))
    rows.append(decode_txn_record(struct.pack(">h", 3), None))
    table = pa.Table.from_pylist(rows, schema=pa.schema(COLUMNS))
    assert table.num_rows == 39
    assert table.column("topic_partitions")[1].as_py() == [
        {"topic": "_confluent-ksql-agentic_ksql__command_topic", "partition": 0}
    ]
