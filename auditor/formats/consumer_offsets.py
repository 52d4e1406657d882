"""Records of the ``__consumer_offsets`` topic (the group coordinator's log).

Transactional producers commit consumer offsets *inside* their transactions
(``sendOffsetsToTransaction``): the group coordinator appends those offset
commits as transactional batches of this topic, and they only take effect when
the transaction's marker arrives. To audit exactly-once pipelines the auditor
therefore has to read this topic as well: which group committed which offset
for which partition, and when.

Framing: key = int16 version prefix + key body; value = int16 version prefix +
value body; a null value is a tombstone (offset or group deleted / expired).
The key prefix says what the record is:

* 0, 1 -> OffsetCommitKey (group, topic, partition); value OffsetCommitValue v0-v4
* 2    -> GroupMetadataKey (group); value GroupMetadataValue v0-v4
* 3+   -> records of the newer group protocols (KIP-848 consumer groups,
  KIP-932 share groups, KIP-1071 streams groups): the prefix is the
  coordinator record type id (``CoordinatorRecordType``); decoded by
  :mod:`auditor.formats.group_records` (the ``group_records`` table).

:func:`record_kind` tells the three apart from the key prefix alone, so each
table decodes only the records it keeps.

Schemas follow Kafka's group-coordinator message JSON files (OffsetCommitKey,
OffsetCommitValue, GroupMetadataKey, GroupMetadataValue). Fields a record's
version cannot carry are ``None`` in the row; error positions are relative to
the key or value buffer (the message says which).
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from auditor.errors import DecodeError
from auditor.formats.binary import Reader
from auditor.formats.message import UNKNOWN_TAGS, Field, Schema, decode, read_versioned

OFFSET_COMMIT_KEY = Schema(
    "OffsetCommitKey",
    [Field("group", "string"), Field("topic", "string"), Field("partition", "int32")],
    valid_versions="0-1",
)

GROUP_METADATA_KEY = Schema("GroupMetadataKey", [Field("group", "string")], valid_versions="2")

OFFSET_COMMIT_VALUE = Schema(
    "OffsetCommitValue",
    [
        Field("offset", "int64"),
        Field("leaderEpoch", "int32", versions="3+", default=-1),
        Field("metadata", "string"),
        Field("commitTimestamp", "int64"),
        Field("expireTimestamp", "int64", versions="1", default=-1),
    ],
    valid_versions="0-4",
    flexible_versions="4+",
)

_MEMBER_METADATA = (
    Field("memberId", "string"),
    Field("groupInstanceId", "string", versions="3+", nullable_versions="3+"),
    Field("clientId", "string"),
    Field("clientHost", "string"),
    Field("rebalanceTimeout", "int32", versions="1+"),
    Field("sessionTimeout", "int32"),
    Field("subscription", "bytes"),
    Field("assignment", "bytes"),
)

GROUP_METADATA_VALUE = Schema(
    "GroupMetadataValue",
    [
        Field("protocolType", "string"),
        Field("generation", "int32"),
        Field("protocol", "string", nullable_versions="0+"),
        Field("leader", "string", nullable_versions="0+"),
        Field("currentStateTimestamp", "int64", versions="2+", default=-1),
        Field("members", "[]struct", fields=_MEMBER_METADATA),
    ],
    valid_versions="0-4",
    flexible_versions="4+",
)

MEMBER = pa.struct(
    [
        pa.field("member_id", pa.string()),
        pa.field("group_instance_id", pa.string()),
        pa.field("client_id", pa.string()),
        pa.field("client_host", pa.string()),
        pa.field("rebalance_timeout_ms", pa.int32()),
        pa.field("session_timeout_ms", pa.int32()),
    ]
)

OFFSET_COMMIT_COLUMNS: list[pa.Field] = [
    pa.field("record_type", pa.string()),
    pa.field("key_version", pa.int16()),
    pa.field("group_id", pa.string()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("value_version", pa.int16()),
    pa.field("is_tombstone", pa.bool_()),
    pa.field("committed_offset", pa.int64()),
    pa.field("committed_leader_epoch", pa.int32()),
    pa.field("committed_metadata", pa.string()),
    pa.field("commit_timestamp_ms", pa.int64()),
    pa.field("expire_timestamp_ms", pa.int64()),
    pa.field("unknown_tags_json", pa.string()),
]

GROUP_METADATA_COLUMNS: list[pa.Field] = [
    pa.field("record_type", pa.string()),
    pa.field("key_version", pa.int16()),
    pa.field("group_id", pa.string()),
    pa.field("value_version", pa.int16()),
    pa.field("is_tombstone", pa.bool_()),
    pa.field("protocol_type", pa.string()),
    pa.field("generation", pa.int32()),
    pa.field("protocol", pa.string()),
    pa.field("leader", pa.string()),
    pa.field("current_state_timestamp_ms", pa.int64()),
    pa.field("member_count", pa.int32()),
    pa.field("members", pa.list_(MEMBER)),
    pa.field("unknown_tags_json", pa.string()),
]


def _blank(columns: list[pa.Field]) -> dict[str, Any]:
    return {c.name: None for c in columns}


def _reraise(where: str, exc: DecodeError) -> DecodeError:
    return DecodeError(f"{where}: {exc.message}", exc.position, exc.kind)


OFFSET_COMMIT = "offset_commit"
GROUP_METADATA = "group_metadata"
GROUP_RECORD = "group_record"


def _key_version(key: bytes | None) -> int:
    if key is None:
        raise DecodeError("key: __consumer_offsets record has a null key", 0, "corrupt")
    try:
        key_version = Reader(key).int16()
    except DecodeError as exc:
        raise _reraise("key", exc) from None
    if key_version < 0:
        raise DecodeError(f"key: negative key version {key_version}", 0, "unknown-version")
    return key_version


def record_kind(key: bytes | None) -> str:
    """:data:`OFFSET_COMMIT` (key prefix 0, 1), :data:`GROUP_METADATA` (2) or :data:`GROUP_RECORD`
    (3+: the newer group protocols), from the key's int16 prefix; a key without one raises."""
    v = _key_version(key)
    return OFFSET_COMMIT if v <= 1 else GROUP_METADATA if v == 2 else GROUP_RECORD


def decode_offsets_record(key: bytes | None, value: bytes | None) -> dict[str, Any]:
    """Decode one ``__consumer_offsets`` record.

    The row's shape follows :func:`record_kind`: an offset commit
    (:data:`OFFSET_COMMIT_COLUMNS`, ``record_type="offset_commit"``), classic group
    metadata (:data:`GROUP_METADATA_COLUMNS`, ``record_type="group_metadata"``) or a
    record of the newer group protocols (:data:`auditor.formats.group_records.COLUMNS`,
    ``record_type`` the coordinator record type's name, e.g. ``ConsumerGroupMemberMetadata``).
    """
    key_version = _key_version(key)
    kr = Reader(key)
    kr.int16()
    if key_version >= 3:
        from auditor.formats.group_records import decode_group_record

        return decode_group_record(key_version, kr, value)
    schema = OFFSET_COMMIT_KEY if key_version <= 1 else GROUP_METADATA_KEY
    try:
        k = decode(schema, kr, key_version)
        if k["group"] is None:
            raise DecodeError(f"{schema.name} group is null", 2, "corrupt")
        if kr.remaining():
            raise DecodeError(f"{kr.remaining()} bytes left after {schema.name}", kr.pos, "corrupt")
        if key_version <= 1 and k["topic"] is None:
            raise DecodeError("OffsetCommitKey topic is null", 4 + len(k["group"].encode("utf-8")), "corrupt")
    except DecodeError as exc:
        raise _reraise("key", exc) from None

    if key_version <= 1:
        row = _blank(OFFSET_COMMIT_COLUMNS)
        row.update(record_type="offset_commit", key_version=key_version, group_id=k["group"],
                   topic=k["topic"], partition=k["partition"], is_tombstone=value is None)
        if value is not None:
            try:
                _offset_commit_value(value, row)
            except DecodeError as exc:
                raise _reraise(f"value of offset commit {k['group']!r}/{k['topic']}-{k['partition']}", exc) from None
        return row

    row = _blank(GROUP_METADATA_COLUMNS)
    row.update(record_type="group_metadata", key_version=key_version, group_id=k["group"],
               is_tombstone=value is None)
    if value is not None:
        try:
            _group_metadata_value(value, row)
        except DecodeError as exc:
            raise _reraise(f"value of group metadata {k['group']!r}", exc) from None
    return row


def _tags_json(unknown: dict[str, str]) -> str | None:
    return json.dumps(unknown, sort_keys=True) if unknown else None


def _offset_commit_value(value: bytes, row: dict[str, Any]) -> None:
    version, v = read_versioned(OFFSET_COMMIT_VALUE, value)
    row.update(
        value_version=version,
        committed_offset=v["offset"],
        committed_leader_epoch=v["leaderEpoch"] if version >= 3 else None,
        committed_metadata=v["metadata"],
        commit_timestamp_ms=v["commitTimestamp"],
        expire_timestamp_ms=v["expireTimestamp"] if version == 1 else None,
        unknown_tags_json=_tags_json(v.get(UNKNOWN_TAGS, {})),
    )


def _group_metadata_value(value: bytes, row: dict[str, Any]) -> None:
    version, v = read_versioned(GROUP_METADATA_VALUE, value)
    unknown: dict[str, str] = dict(v.get(UNKNOWN_TAGS, {}))
    members = []
    for i, m in enumerate(v["members"]):
        for tag, hexval in m.get(UNKNOWN_TAGS, {}).items():
            unknown[f"members[{i}].{tag}"] = hexval
        members.append(
            {
                "member_id": m["memberId"],
                "group_instance_id": m["groupInstanceId"] if version >= 3 else None,
                "client_id": m["clientId"],
                "client_host": m["clientHost"],
                "rebalance_timeout_ms": m["rebalanceTimeout"] if version >= 1 else None,
                "session_timeout_ms": m["sessionTimeout"],
            }
        )
    row.update(
        value_version=version,
        protocol_type=v["protocolType"],
        generation=v["generation"],
        protocol=v["protocol"],
        leader=v["leader"],
        current_state_timestamp_ms=v["currentStateTimestamp"] if version >= 2 else None,
        member_count=len(members),
        members=members,
        unknown_tags_json=_tags_json(unknown),
    )
