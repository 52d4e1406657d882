"""Records of the ``__share_group_state`` topic (the share coordinator's log, KIP-932).

A share group's consumers acquire records of a partition one by one; which
offsets were delivered, acknowledged or archived is the *share-partition state*,
kept by the share coordinator in ``__share_group_state`` (one coordinator per
partition of that topic, keyed by group, topic id and partition). Two record
types, the ``CoordinatorRecordType`` of ``org.apache.kafka.coordinator.share.generated``
(kafka-share-coordinator 4.3.1 and 4.4.0, which write the same):

* 0 ``ShareSnapshot`` — the whole state: start offset, state epoch and the
  in-flight batches (written at initialisation and every
  ``share.coordinator.snapshot.update.records.per.snapshot`` updates);
* 1 ``ShareUpdate`` — a delta over the last snapshot: the batches whose state
  changed and, unless -1, a new start offset.

Framing as in ``__consumer_offsets`` (``CoordinatorRecordSerde``): key = int16
record type + key message (non-flexible: group id string, topic id uuid,
partition int32); value = int16 version + value message (version 0, flexible);
a null value is a tombstone (the state was deleted). Schemas follow
``ShareSnapshotKey/Value.json`` and ``ShareUpdateKey/Value.json`` of
kafka-share-coordinator 4.3.1/4.4.0 (``common/message/``). ``DeliveryState`` of a
batch: the ids of ``org.apache.kafka.server.share.fetch.RecordState`` (kafka-server 4.3.1):
0 available, 1 acquired, 2 acknowledged, 3 archiving, 4 archived.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from auditor.errors import DecodeError
from auditor.formats.binary import Reader
from auditor.formats.message import UNKNOWN_TAGS, Field, Schema, decode, read_versioned

SHARE_KEY = Schema("ShareKey", [Field("GroupId", "string"), Field("TopicId", "uuid"), Field("Partition", "int32")])

_STATE_BATCH = (Field("FirstOffset", "int64"), Field("LastOffset", "int64"), Field("DeliveryState", "int8"),
                Field("DeliveryCount", "int16"))

SHARE_SNAPSHOT_VALUE = Schema(
    "ShareSnapshotValue",
    [
        Field("SnapshotEpoch", "int32"),
        Field("StateEpoch", "int32"),
        Field("LeaderEpoch", "int32"),
        Field("StartOffset", "int64"),
        Field("DeliveryCompleteCount", "int32", tag=0, default=-1),
        Field("CreateTimestamp", "int64"),
        Field("WriteTimestamp", "int64"),
        Field("StateBatches", "[]struct", fields=_STATE_BATCH),
    ],
    valid_versions="0",
    flexible_versions="0+",
)

SHARE_UPDATE_VALUE = Schema(
    "ShareUpdateValue",
    [
        Field("SnapshotEpoch", "int32"),
        Field("LeaderEpoch", "int32"),
        Field("StartOffset", "int64"),
        Field("DeliveryCompleteCount", "int32", tag=0, default=-1),
        Field("StateBatches", "[]struct", fields=_STATE_BATCH),
    ],
    valid_versions="0",
    flexible_versions="0+",
)

RECORD_TYPES: dict[int, tuple[str, Schema]] = {0: ("ShareSnapshot", SHARE_SNAPSHOT_VALUE), 1: ("ShareUpdate", SHARE_UPDATE_VALUE)}

#: ``org.apache.kafka.server.share.fetch.RecordState`` (kafka-server 4.3.1): the ``DeliveryState`` ids
DELIVERY_STATES = {0: "AVAILABLE", 1: "ACQUIRED", 2: "ACKNOWLEDGED", 3: "ARCHIVING", 4: "ARCHIVED"}

STATE_BATCH = pa.struct([
    pa.field("first_offset", pa.int64()),
    pa.field("last_offset", pa.int64()),
    pa.field("delivery_state", pa.string()),
    pa.field("delivery_count", pa.int16()),
])

COLUMNS: list[pa.Field] = [
    pa.field("record_type", pa.string()),  # ShareSnapshot or ShareUpdate
    pa.field("key_version", pa.int16()),  # the record type id (0, 1)
    pa.field("group_id", pa.string()),
    pa.field("topic_id", pa.string()),
    pa.field("partition", pa.int32()),  # of the share-partition (the record's own: log_partition)
    pa.field("value_version", pa.int16()),
    pa.field("is_tombstone", pa.bool_()),
    pa.field("snapshot_epoch", pa.int32()),
    pa.field("state_epoch", pa.int32()),  # snapshots only
    pa.field("leader_epoch", pa.int32()),
    pa.field("start_offset", pa.int64()),  # -1 in an update: not changed
    pa.field("delivery_complete_count", pa.int32()),
    pa.field("create_timestamp_ms", pa.int64()),
    pa.field("write_timestamp_ms", pa.int64()),
    pa.field("state_batches", pa.list_(STATE_BATCH)),
    pa.field("unknown_tags_json", pa.string()),
]


def _reraise(where: str, exc: DecodeError) -> DecodeError:
    return DecodeError(f"{where}: {exc.message}", exc.position, exc.kind)


def decode_share_state_record(key: bytes | None, value: bytes | None) -> dict[str, Any]:
    """Decode one ``__share_group_state`` record into a :data:`COLUMNS` row."""
    if key is None:
        raise DecodeError("key: __share_group_state record has a null key", 0, "corrupt")
    kr = Reader(key)
    try:
        type_id = kr.int16()
        if type_id not in RECORD_TYPES:
            raise DecodeError(f"share coordinator record type {type_id} is not known", 0, "unknown-version")
        name, schema = RECORD_TYPES[type_id]
        k = decode(SHARE_KEY, kr, 0)
        if k["GroupId"] is None:
            raise DecodeError(f"{name}Key group id is null", 2, "corrupt")
        if kr.remaining():
            raise DecodeError(f"{kr.remaining()} bytes left after {name}Key", kr.pos, "corrupt")
    except DecodeError as exc:
        raise _reraise("key", exc) from None
    row: dict[str, Any] = {c.name: None for c in COLUMNS}
    row.update(record_type=name, key_version=type_id, group_id=k["GroupId"], topic_id=k["TopicId"],
               partition=k["Partition"], is_tombstone=value is None)
    if value is None:
        return row
    try:
        version, v = read_versioned(schema, value)
    except DecodeError as exc:
        raise _reraise(f"value of {name} {k['GroupId']!r}/{k['TopicId']}-{k['Partition']}", exc) from None
    unknown = dict(v.get(UNKNOWN_TAGS, {}))
    for i, b in enumerate(v["StateBatches"]):
        unknown.update({f"StateBatches[{i}].{t}": h for t, h in b.get(UNKNOWN_TAGS, {}).items()})
    row.update(
        value_version=version,
        snapshot_epoch=v["SnapshotEpoch"],
        state_epoch=v.get("StateEpoch"),
        leader_epoch=v["LeaderEpoch"],
        start_offset=v["StartOffset"],
        delivery_complete_count=v["DeliveryCompleteCount"],
        create_timestamp_ms=v.get("CreateTimestamp"),
        write_timestamp_ms=v.get("WriteTimestamp"),
        state_batches=[{"first_offset": b["FirstOffset"], "last_offset": b["LastOffset"],
                        "delivery_state": DELIVERY_STATES.get(b["DeliveryState"], str(b["DeliveryState"])),
                        "delivery_count": b["DeliveryCount"]} for b in v["StateBatches"]],
        unknown_tags_json=json.dumps(unknown, sort_keys=True) if unknown else None,
    )
    return row
