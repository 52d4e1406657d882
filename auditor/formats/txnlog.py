"""Records of the ``__transaction_state`` topic (the transaction coordinator's log).

The coordinator keeps one compacted record per transactional id: the key names
the id, the value is the id's latest metadata (producer id/epoch, state, the
partitions of the open transaction, timestamps). Replaying these records is the
only offline way to know what the coordinator believed about a transaction, so
the auditor can compare it with what the data partitions hold (markers, open
transactions pinning the LSO).

Framing (docs/on-disk-format.md §4): key = int16 version prefix + TransactionLogKey v0;
value = int16 version prefix + TransactionLogValue v0 (non-flexible) or v1
(flexible, with tagged fields); a null value is a tombstone (the id expired).

Rows follow one rule for fields a version cannot carry: ``None``. A tagged
field that a flexible version simply omitted takes Kafka's schema default
(-1 producer ids, client transaction version 0), because Kafka only writes a
tagged field when it differs from its default.

Error positions are relative to the key or the value buffer (the message says
which one); the caller shifts them to file positions.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from auditor.errors import DecodeError
from auditor.formats.binary import Reader
from auditor.formats.message import UNKNOWN_TAGS, Field, Schema, decode, read_versioned

TRANSACTION_LOG_KEY = Schema(
    "TransactionLogKey",
    [Field("TransactionalId", "string")],
    valid_versions="0",
    flexible_versions=None,
)

TRANSACTION_LOG_VALUE = Schema(
    "TransactionLogValue",
    [
        Field("ProducerId", "int64"),
        Field("PreviousProducerId", "int64", versions="1+", tag=0, tagged_versions="1+", default=-1),
        Field("NextProducerId", "int64", versions="1+", tag=1, tagged_versions="1+", default=-1),
        Field("ProducerEpoch", "int16"),
        Field("TransactionTimeoutMs", "int32"),
        Field("TransactionStatus", "int8"),
        Field(
            "TransactionPartitions",
            "[]struct",
            nullable_versions="0+",
            fields=(
                Field("Topic", "string"),
                Field("PartitionIds", "[]int32"),
            ),
        ),
        Field("TransactionLastUpdateTimestampMs", "int64"),
        Field("TransactionStartTimestampMs", "int64"),
        Field("ClientTransactionVersion", "int16", versions="1+", tag=2, tagged_versions="1+", default=0),
    ],
    valid_versions="0-1",
    flexible_versions="1+",
)

# TransactionState ids (TransactionMetadata.scala / TransactionState.java).
TRANSACTION_STATES: dict[int, str] = {
    0: "Empty",
    1: "Ongoing",
    2: "PrepareCommit",
    3: "PrepareAbort",
    4: "CompleteCommit",
    5: "CompleteAbort",
    6: "Dead",
    7: "PrepareEpochFence",
}

# Which states may directly precede each state (docs/on-disk-format.md §4). PrepareAbort
# after Empty/Complete* only happens with transaction.version 2 (later trunk).
VALID_PREVIOUS_STATES: dict[str, frozenset[str]] = {
    "Empty": frozenset({"Empty", "CompleteCommit", "CompleteAbort"}),
    "Ongoing": frozenset({"Ongoing", "Empty", "CompleteCommit", "CompleteAbort"}),
    "PrepareCommit": frozenset({"Ongoing"}),
    "PrepareAbort": frozenset({"Ongoing", "PrepareEpochFence", "Empty", "CompleteCommit", "CompleteAbort"}),
    "CompleteCommit": frozenset({"PrepareCommit"}),
    "CompleteAbort": frozenset({"PrepareAbort"}),
    "Dead": frozenset({"Empty", "CompleteAbort", "CompleteCommit"}),
    "PrepareEpochFence": frozenset({"Ongoing"}),
}

# Status byte offset inside the value: prefix(2) + ProducerId(8) + ProducerEpoch(2) + TransactionTimeoutMs(4).
_STATUS_POS = 16

TOPIC_PARTITION = pa.struct([pa.field("topic", pa.string()), pa.field("partition", pa.int32())])

COLUMNS: list[pa.Field] = [
    pa.field("record_type", pa.string()),
    pa.field("key_version", pa.int16()),
    pa.field("transactional_id", pa.string()),
    pa.field("value_version", pa.int16()),
    pa.field("is_tombstone", pa.bool_()),
    pa.field("producer_id", pa.int64()),
    pa.field("previous_producer_id", pa.int64()),
    pa.field("next_producer_id", pa.int64()),
    pa.field("producer_epoch", pa.int16()),
    pa.field("transaction_timeout_ms", pa.int32()),
    pa.field("state_id", pa.int8()),
    pa.field("state", pa.string()),
    pa.field("topic_partitions", pa.list_(TOPIC_PARTITION)),
    pa.field("last_update_timestamp_ms", pa.int64()),
    pa.field("start_timestamp_ms", pa.int64()),
    pa.field("client_transaction_version", pa.int16()),
    pa.field("unknown_tags_json", pa.string()),
]

_VALUE_COLUMNS = [c.name for c in COLUMNS[3:]]


def _empty_row(record_type: str, key_version: int, transactional_id: str | None) -> dict[str, Any]:
    row: dict[str, Any] = {"record_type": record_type, "key_version": key_version, "transactional_id": transactional_id}
    for name in _VALUE_COLUMNS:
        row[name] = None
    row["is_tombstone"] = False
    return row


def decode_txn_record(key: bytes | None, value: bytes | None) -> dict[str, Any]:
    """Decode one ``__transaction_state`` record into a row of :data:`COLUMNS`.

    An unknown key version is not an error: Kafka itself skips such records
    (they may come from a newer coordinator), so the row says
    ``record_type="unknown"`` and keeps ``key_version``; value columns stay null.
    """
    if key is None:
        raise DecodeError("__transaction_state record has a null key", 0, "corrupt")
    kr = Reader(key)
    try:
        key_version = kr.int16()
    except DecodeError as exc:
        raise DecodeError(f"key: {exc.message}", exc.position, exc.kind) from None
    if not TRANSACTION_LOG_KEY.supports(key_version):
        row = _empty_row("unknown", key_version, None)
        row["is_tombstone"] = value is None
        return row
    try:
        k = decode(TRANSACTION_LOG_KEY, kr, key_version)
    except DecodeError as exc:
        raise DecodeError(f"key: {exc.message}", exc.position, exc.kind) from None
    txn_id = k["TransactionalId"]
    if txn_id is None:
        raise DecodeError("key: TransactionalId is null", 2, "corrupt")
    if kr.remaining():
        raise DecodeError(f"key: {kr.remaining()} bytes left after TransactionLogKey", kr.pos, "corrupt")

    row = _empty_row("transaction", key_version, txn_id)
    if value is None:
        row["is_tombstone"] = True
        return row

    try:
        _decode_value(value, row)
    except DecodeError as exc:
        raise DecodeError(f"value of {txn_id!r}: {exc.message}", exc.position, exc.kind) from None
    return row


def _decode_value(value: bytes, row: dict[str, Any]) -> None:
    version, v = read_versioned(TRANSACTION_LOG_VALUE, value)
    state_id = v["TransactionStatus"]
    state = TRANSACTION_STATES.get(state_id)
    if state is None:
        raise DecodeError(f"unknown transaction state id {state_id}", _STATUS_POS, "corrupt")

    unknown: dict[str, str] = dict(v.get(UNKNOWN_TAGS, {}))
    parts = v["TransactionPartitions"]
    topic_partitions: list[dict[str, Any]] | None
    if parts is None:
        topic_partitions = None
    else:
        topic_partitions = []
        for i, entry in enumerate(parts):
            for tag, hexval in entry.get(UNKNOWN_TAGS, {}).items():
                unknown[f"TransactionPartitions[{i}].{tag}"] = hexval
            topic = entry["Topic"]
            if topic is None:
                raise DecodeError(f"TransactionPartitions[{i}] has a null topic name", 0, "corrupt")
            for pid in entry["PartitionIds"]:
                topic_partitions.append({"topic": topic, "partition": pid})

    flexible = TRANSACTION_LOG_VALUE.is_flexible(version)
    row.update(
        value_version=version,
        is_tombstone=False,
        producer_id=v["ProducerId"],
        previous_producer_id=v["PreviousProducerId"] if flexible else None,
        next_producer_id=v["NextProducerId"] if flexible else None,
        producer_epoch=v["ProducerEpoch"],
        transaction_timeout_ms=v["TransactionTimeoutMs"],
        state_id=state_id,
        state=state,
        topic_partitions=topic_partitions,
        last_update_timestamp_ms=v["TransactionLastUpdateTimestampMs"],
        start_timestamp_ms=v["TransactionStartTimestampMs"],
        client_transaction_version=v["ClientTransactionVersion"] if flexible else None,
        unknown_tags_json=json.dumps(unknown, sort_keys=True) if unknown else None,
    )


def java_string_hash(s: str) -> int:
    """Java ``String.hashCode``: ``h = 31*h + c`` over UTF-16 code units, int32 overflow.

    Characters outside the BMP count as two code units (a surrogate pair), as in Java.
    """
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(transactional_id: str, num_partitions: int = 50) -> int:
    """The ``__transaction_state`` partition that owns ``transactional_id``.

    Kafka: ``Utils.abs(hashCode) % transaction.state.log.num.partitions`` where
    ``Utils.abs(Integer.MIN_VALUE)`` is 0 (not negative, unlike ``Math.abs``).
    A record found in any other partition was misplaced or the partition count
    differs from the one assumed.
    """
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return kafka_abs(java_string_hash(transactional_id)) % num_partitions


def kafka_abs(n: int) -> int:
    """``org.apache.kafka.common.utils.Utils.abs``: |n|, but 0 for Integer.MIN_VALUE
    (where ``Math.abs`` stays negative and Python's ``abs`` gives 2**31)."""
    return 0 if n == -(1 << 31) else abs(n)
