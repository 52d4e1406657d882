"""Records of the newer group protocols in ``__consumer_offsets``.

KIP-848 consumer groups (the default protocol of Kafka 4.x clients), KIP-932
share groups and KIP-1071 streams groups keep their state in the same topic as
offset commits and classic ``GroupMetadata``, as *coordinator records*: the key
is an int16 record type id (``CoordinatorRecordType`` of
``org.apache.kafka.coordinator.group.generated``) followed by the key message;
the value is an int16 version followed by the value message; a null value is a
tombstone (the member left, the group was deleted). This is the framing of
``CoordinatorRecordSerde.serializeKey/serializeValue``
(``MessageUtil.toCoordinatorTypePrefixedBytes`` / ``toVersionPrefixedBytes``)
in kafka-coordinator-common 4.3.1 and 4.4.0. ``CoordinatorRecordSerde.deserialize``
reads the key with the record type as its version, and the generated key
classes read their fields whatever the version: every key here is one
non-flexible message (int16-length strings, no tagged fields).

The schemas follow the ``*Key.json`` / ``*Value.json`` message definitions packed
in kafka-group-coordinator 4.3.1 and 4.4.0 (``common/message/``), field by field;
the two releases write the same ids and versions (every value at version 0,
flexible), 4.4.0 adds two tagged fields to ``StreamsGroupMetadataValue``
(tags 2 and 3; a 4.3.1 reader keeps them as unknown tags, so do we when absent).
A nullable struct is preceded by a presence marker, as the generated ``read()``
methods expect (see :mod:`auditor.formats.message`): notably
``ConsumerGroupMemberMetadataValue.ClassicMemberMetadata`` (tag 0) is written
for every member, null (marker 0) for a member speaking the consumer protocol,
present for a classic-protocol member of a consumer group (an upgraded group).

One row per record (:data:`COLUMNS`): the common facts (group, member, epochs,
client, subscriptions, assignments as topic ids with partitions) in columns,
and the whole value as compact JSON in ``value_json`` (streams tasks and
topologies, share-group initialisation state) so no field is lost.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from auditor.errors import DecodeError
from auditor.formats.binary import Reader
from auditor.formats.message import UNKNOWN_TAGS, Field, Schema, decode, read_versioned

# -- keys: three shapes, read as the generated key classes do (version ignored) ----
GROUP_KEY = Schema("GroupKey", [Field("GroupId", "string")])
MEMBER_KEY = Schema("MemberKey", [Field("GroupId", "string"), Field("MemberId", "string")])
REGEX_KEY = Schema("ConsumerGroupRegularExpressionKey", [Field("GroupId", "string"), Field("RegularExpression", "string")])

# -- values (kafka-group-coordinator 4.4.0 common/message/*Value.json; 4.3.1 the same but for StreamsGroupMetadataValue)
_V0 = {"valid_versions": "0", "flexible_versions": "0+"}


def _value(name: str, *fields: Field) -> Schema:
    return Schema(name, list(fields), **_V0)


_TOPIC_PARTITIONS = (Field("TopicId", "uuid"), Field("Partitions", "[]int32"))
_TOPIC_PARTITIONS_EPOCHS = _TOPIC_PARTITIONS + (
    Field("AssignmentEpochs", "[]int32", nullable_versions="0+", tag=0),)
_TASK_IDS = (Field("SubtopologyId", "string"), Field("Partitions", "[]int32"))
_TASK_IDS_EPOCHS = _TASK_IDS + (Field("AssignmentEpochs", "[]int32", nullable_versions="0+", tag=0),)
_KEY_VALUE = (Field("Key", "string"), Field("Value", "string"))
_TOPIC_INFO = (Field("Name", "string"), Field("Partitions", "int32"), Field("ReplicationFactor", "int16"),
               Field("TopicConfigs", "[]struct", fields=(Field("key", "string"), Field("value", "string"))))
_ASSIGNMENT_METADATA = (Field("AssignmentEpoch", "int32"), Field("AssignmentTimestamp", "int64", tag=0, default=0))

CONSUMER_GROUP_METADATA_VALUE = _value(
    "ConsumerGroupMetadataValue", Field("Epoch", "int32"), Field("MetadataHash", "int64", tag=0, default=0))
CONSUMER_GROUP_PARTITION_METADATA_VALUE = _value(
    "ConsumerGroupPartitionMetadataValue",
    Field("Topics", "[]struct", fields=(
        Field("TopicId", "uuid"), Field("TopicName", "string"), Field("NumPartitions", "int32"),
        Field("PartitionMetadata", "[]struct", fields=(Field("Partition", "int32"), Field("Racks", "[]string"))))))
CONSUMER_GROUP_MEMBER_METADATA_VALUE = _value(
    "ConsumerGroupMemberMetadataValue",
    Field("InstanceId", "string", nullable_versions="0+"),
    Field("RackId", "string", nullable_versions="0+"),
    Field("ClientId", "string"),
    Field("ClientHost", "string"),
    Field("SubscribedTopicNames", "[]string"),
    Field("SubscribedTopicRegex", "string", nullable_versions="0+"),
    Field("RebalanceTimeoutMs", "int32", default=-1),
    Field("ServerAssignor", "string", nullable_versions="0+"),
    Field("ClassicMemberMetadata", "struct", nullable_versions="0+", tag=0, fields=(
        Field("SessionTimeoutMs", "int32"),
        Field("SupportedProtocols", "[]struct", fields=(Field("Name", "string"), Field("Metadata", "bytes"))))))
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE = _value("ConsumerGroupTargetAssignmentMetadataValue", *_ASSIGNMENT_METADATA)
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE = _value(
    "ConsumerGroupTargetAssignmentMemberValue", Field("TopicPartitions", "[]struct", fields=_TOPIC_PARTITIONS))
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE = _value(
    "ConsumerGroupCurrentMemberAssignmentValue",
    Field("MemberEpoch", "int32"), Field("PreviousMemberEpoch", "int32"), Field("State", "int8"),
    Field("AssignedPartitions", "[]struct", fields=_TOPIC_PARTITIONS_EPOCHS),
    Field("PartitionsPendingRevocation", "[]struct", fields=_TOPIC_PARTITIONS_EPOCHS))
CONSUMER_GROUP_REGULAR_EXPRESSION_VALUE = _value(
    "ConsumerGroupRegularExpressionValue", Field("Topics", "[]string"), Field("Version", "int64"), Field("Timestamp", "int64"))

SHARE_GROUP_MEMBER_METADATA_VALUE = _value(
    "ShareGroupMemberMetadataValue", Field("RackId", "string", nullable_versions="0+"), Field("ClientId", "string"),
    Field("ClientHost", "string"), Field("SubscribedTopicNames", "[]string"))
SHARE_GROUP_METADATA_VALUE = _value("ShareGroupMetadataValue", Field("Epoch", "int32"), Field("MetadataHash", "int64"))
SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE = _value("ShareGroupTargetAssignmentMetadataValue", *_ASSIGNMENT_METADATA)
SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE = _value(
    "ShareGroupTargetAssignmentMemberValue", Field("TopicPartitions", "[]struct", fields=_TOPIC_PARTITIONS))
SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE = _value(
    "ShareGroupCurrentMemberAssignmentValue",
    Field("MemberEpoch", "int32"), Field("PreviousMemberEpoch", "int32"), Field("State", "int8"),
    Field("AssignedPartitions", "[]struct", fields=_TOPIC_PARTITIONS))
_TOPIC_PARTITIONS_INFO = (Field("TopicId", "uuid"), Field("TopicName", "string"), Field("Partitions", "[]int32"))
SHARE_GROUP_STATE_PARTITION_METADATA_VALUE = _value(
    "ShareGroupStatePartitionMetadataValue",
    Field("InitializingTopics", "[]struct", fields=_TOPIC_PARTITIONS_INFO),
    Field("InitializedTopics", "[]struct", fields=_TOPIC_PARTITIONS_INFO),
    Field("DeletingTopics", "[]struct", fields=(Field("TopicId", "uuid"), Field("TopicName", "string"))))

STREAMS_GROUP_METADATA_VALUE = _value(
    "StreamsGroupMetadataValue",
    Field("Epoch", "int32"), Field("MetadataHash", "int64"),
    Field("ValidatedTopologyEpoch", "int32", tag=0, default=-1),
    Field("LastAssignmentConfigs", "[]struct", nullable_versions="0+", tag=1, fields=_KEY_VALUE),
    # 4.4.0 only (a 4.3.1 broker never writes them)
    Field("StoredDescriptionTopologyEpoch", "int32", tag=2, default=-1),
    Field("FailedDescriptionTopologyEpoch", "int32", tag=3, default=-1))
STREAMS_GROUP_MEMBER_METADATA_VALUE = _value(
    "StreamsGroupMemberMetadataValue",
    Field("InstanceId", "string", nullable_versions="0+"), Field("RackId", "string", nullable_versions="0+"),
    Field("ClientId", "string"), Field("ClientHost", "string"), Field("RebalanceTimeoutMs", "int32", default=-1),
    Field("TopologyEpoch", "int32"), Field("ProcessId", "string"),
    Field("UserEndpoint", "struct", nullable_versions="0+", fields=(Field("Host", "string"), Field("Port", "uint16"))),
    Field("ClientTags", "[]struct", fields=_KEY_VALUE))
STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE = _value("StreamsGroupTargetAssignmentMetadataValue", *_ASSIGNMENT_METADATA)
STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE = _value(
    "StreamsGroupTargetAssignmentMemberValue",
    *(Field(n, "[]struct", fields=_TASK_IDS) for n in ("ActiveTasks", "StandbyTasks", "WarmupTasks")))
STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE = _value(
    "StreamsGroupCurrentMemberAssignmentValue",
    Field("MemberEpoch", "int32"), Field("PreviousMemberEpoch", "int32"), Field("State", "int8"),
    *(Field(n, "[]struct", fields=_TASK_IDS_EPOCHS)
      for n in ("ActiveTasks", "StandbyTasks", "WarmupTasks", "ActiveTasksPendingRevocation",
                "StandbyTasksPendingRevocation", "WarmupTasksPendingRevocation")))
STREAMS_GROUP_TOPOLOGY_VALUE = _value(
    "StreamsGroupTopologyValue",
    Field("Epoch", "int32"),
    Field("Subtopologies", "[]struct", fields=(
        Field("SubtopologyId", "string"), Field("SourceTopics", "[]string"), Field("SourceTopicRegex", "[]string"),
        Field("StateChangelogTopics", "[]struct", fields=_TOPIC_INFO), Field("RepartitionSinkTopics", "[]string"),
        Field("RepartitionSourceTopics", "[]struct", fields=_TOPIC_INFO),
        Field("CopartitionGroups", "[]struct", fields=(
            Field("SourceTopics", "[]int16"), Field("SourceTopicRegex", "[]int16"),
            Field("RepartitionSourceTopics", "[]int16"))))))


@dataclass(frozen=True)
class RecordType:
    """One coordinator record type: its id (the key prefix), name and group type."""

    id: int
    name: str
    group_type: str
    key: Schema
    value: Schema


#: ``CoordinatorRecordType`` of kafka-group-coordinator 4.3.1/4.4.0, ids 3 and up (0-2: offset
#: commits and classic GroupMetadata, :mod:`auditor.formats.consumer_offsets`). Id 9 (the early-access
#: ShareGroupPartitionMetadata) and 18 (StreamsGroupPartitionMetadata) are retired: no release here
#: writes them, so they stay unknown.
RECORD_TYPES: dict[int, RecordType] = {t.id: t for t in (
    RecordType(3, "ConsumerGroupMetadata", "consumer", GROUP_KEY, CONSUMER_GROUP_METADATA_VALUE),
    RecordType(4, "ConsumerGroupPartitionMetadata", "consumer", GROUP_KEY, CONSUMER_GROUP_PARTITION_METADATA_VALUE),
    RecordType(5, "ConsumerGroupMemberMetadata", "consumer", MEMBER_KEY, CONSUMER_GROUP_MEMBER_METADATA_VALUE),
    RecordType(6, "ConsumerGroupTargetAssignmentMetadata", "consumer", GROUP_KEY,
               CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE),
    RecordType(7, "ConsumerGroupTargetAssignmentMember", "consumer", MEMBER_KEY,
               CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE),
    RecordType(8, "ConsumerGroupCurrentMemberAssignment", "consumer", MEMBER_KEY,
               CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE),
    RecordType(10, "ShareGroupMemberMetadata", "share", MEMBER_KEY, SHARE_GROUP_MEMBER_METADATA_VALUE),
    RecordType(11, "ShareGroupMetadata", "share", GROUP_KEY, SHARE_GROUP_METADATA_VALUE),
    RecordType(12, "ShareGroupTargetAssignmentMetadata", "share", GROUP_KEY, SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE),
    RecordType(13, "ShareGroupTargetAssignmentMember", "share", MEMBER_KEY, SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE),
    RecordType(14, "ShareGroupCurrentMemberAssignment", "share", MEMBER_KEY, SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE),
    RecordType(15, "ShareGroupStatePartitionMetadata", "share", GROUP_KEY, SHARE_GROUP_STATE_PARTITION_METADATA_VALUE),
    RecordType(16, "ConsumerGroupRegularExpression", "consumer", REGEX_KEY, CONSUMER_GROUP_REGULAR_EXPRESSION_VALUE),
    RecordType(17, "StreamsGroupMetadata", "streams", GROUP_KEY, STREAMS_GROUP_METADATA_VALUE),
    RecordType(19, "StreamsGroupMemberMetadata", "streams", MEMBER_KEY, STREAMS_GROUP_MEMBER_METADATA_VALUE),
    RecordType(20, "StreamsGroupTargetAssignmentMetadata", "streams", GROUP_KEY,
               STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE),
    RecordType(21, "StreamsGroupTargetAssignmentMember", "streams", MEMBER_KEY, STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE),
    RecordType(22, "StreamsGroupCurrentMemberAssignment", "streams", MEMBER_KEY,
               STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE),
    RecordType(23, "StreamsGroupTopology", "streams", GROUP_KEY, STREAMS_GROUP_TOPOLOGY_VALUE),
)}

#: ``org.apache.kafka.coordinator.group.modern.MemberState`` (4.3.1): the value of ``State`` in
#: the current-assignment records of consumer and share groups
MEMBER_STATES = {0: "STABLE", 1: "UNREVOKED_PARTITIONS", 2: "UNRELEASED_PARTITIONS", 127: "UNKNOWN"}

TOPIC_PARTITIONS = pa.struct([pa.field("topic_id", pa.string()), pa.field("partitions", pa.list_(pa.int32()))])

COLUMNS: list[pa.Field] = [
    pa.field("record_type", pa.string()),  # the CoordinatorRecordType name, e.g. ConsumerGroupMemberMetadata
    pa.field("key_version", pa.int16()),  # the record type id (the key's int16 prefix)
    pa.field("group_type", pa.string()),  # consumer, share, streams; null for an unknown type
    pa.field("group_id", pa.string()),
    pa.field("member_id", pa.string()),
    pa.field("regular_expression", pa.string()),
    pa.field("value_version", pa.int16()),
    pa.field("is_tombstone", pa.bool_()),
    pa.field("group_epoch", pa.int32()),
    pa.field("metadata_hash", pa.int64()),
    pa.field("assignment_epoch", pa.int32()),
    pa.field("assignment_timestamp_ms", pa.int64()),
    pa.field("member_epoch", pa.int32()),
    pa.field("previous_member_epoch", pa.int32()),
    pa.field("member_state", pa.string()),
    pa.field("instance_id", pa.string()),
    pa.field("rack_id", pa.string()),
    pa.field("client_id", pa.string()),
    pa.field("client_host", pa.string()),
    pa.field("rebalance_timeout_ms", pa.int32()),
    pa.field("server_assignor", pa.string()),
    pa.field("subscribed_topic_names", pa.list_(pa.string())),
    pa.field("subscribed_topic_regex", pa.string()),
    pa.field("classic_protocols", pa.list_(pa.string())),  # a classic-protocol member of a consumer group only
    pa.field("classic_session_timeout_ms", pa.int32()),
    pa.field("assigned_partitions", pa.list_(TOPIC_PARTITIONS)),
    pa.field("partitions_pending_revocation", pa.list_(TOPIC_PARTITIONS)),
    pa.field("resolved_topics", pa.list_(pa.string())),  # ConsumerGroupRegularExpression: the topics it matched
    pa.field("regex_version", pa.int64()),
    pa.field("regex_timestamp_ms", pa.int64()),
    pa.field("value_json", pa.string()),
    pa.field("unknown_tags_json", pa.string()),
]


def _reraise(where: str, exc: DecodeError) -> DecodeError:
    return DecodeError(f"{where}: {exc.message}", exc.position, exc.kind)


def decode_group_record(type_id: int, kr: Reader, value: bytes | None) -> dict[str, Any]:
    """Decode a record of type ``type_id`` >= 3; ``kr`` is positioned after the key's prefix.

    An unknown type id (a newer broker's) is kept as a row with ``record_type`` null and its
    group id when the key starts with one, never a failure; a known type must decode whole.
    """
    row: dict[str, Any] = {c.name: None for c in COLUMNS}
    rt = RECORD_TYPES.get(type_id)
    row.update(key_version=type_id, is_tombstone=value is None)
    if rt is None:
        try:  # every group coordinator key starts with the group id
            row["group_id"] = kr.string(flexible=False)
        except DecodeError:
            pass
        if value is not None and len(value) >= 2:
            row["value_version"] = int.from_bytes(value[:2], "big", signed=True)
        return row
    try:
        k = decode(rt.key, kr, 0)
        if k["GroupId"] is None:
            raise DecodeError(f"{rt.name}Key group id is null", 2, "corrupt")
        if kr.remaining():
            raise DecodeError(f"{kr.remaining()} bytes left after {rt.name}Key", kr.pos, "corrupt")
    except DecodeError as exc:
        raise _reraise("key", exc) from None
    row.update(record_type=rt.name, group_type=rt.group_type, group_id=k["GroupId"], member_id=k.get("MemberId"),
               regular_expression=k.get("RegularExpression"))
    if value is not None:
        try:
            _fill_value(rt, value, row)
        except DecodeError as exc:
            raise _reraise(f"value of {rt.name} {k['GroupId']!r}", exc) from None
    return row


def _unknown_tags(v: Any, path: str = "") -> dict[str, str]:
    """Unknown tagged fields anywhere in a decoded value, keyed by their path."""
    out: dict[str, str] = {}
    if isinstance(v, dict):
        for tag, hexval in v.get(UNKNOWN_TAGS, {}).items():
            out[f"{path}{tag}"] = hexval
        for name, sub in v.items():
            if name != UNKNOWN_TAGS:
                out.update(_unknown_tags(sub, f"{path}{name}."))
    elif isinstance(v, list):
        for i, sub in enumerate(v):
            out.update(_unknown_tags(sub, f"{path[:-1]}[{i}]."))
    return out


def _plain(v: Any) -> Any:
    """The decoded value without the unknown-tag bookkeeping (for ``value_json``)."""
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items() if k != UNKNOWN_TAGS}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def _partitions(items: list[dict] | None) -> list[dict] | None:
    if items is None:
        return None
    return [{"topic_id": t["TopicId"], "partitions": t["Partitions"]} for t in items]


def _fill_value(rt: RecordType, value: bytes, row: dict[str, Any]) -> None:
    version, v = read_versioned(rt.value, value)
    tags = _unknown_tags(v)
    row.update(value_version=version, value_json=json.dumps(_plain(v), sort_keys=True, separators=(",", ":")),
               unknown_tags_json=json.dumps(tags, sort_keys=True) if tags else None)
    name = rt.name.removeprefix("Consumer").removeprefix("Share").removeprefix("Streams").removeprefix("Group")
    if name == "Metadata":
        row.update(group_epoch=v["Epoch"], metadata_hash=v["MetadataHash"])
    elif name == "TargetAssignmentMetadata":
        row.update(assignment_epoch=v["AssignmentEpoch"], assignment_timestamp_ms=v["AssignmentTimestamp"])
    elif name == "TargetAssignmentMember" and rt.group_type != "streams":
        row["assigned_partitions"] = _partitions(v["TopicPartitions"])
    elif name == "CurrentMemberAssignment":
        row.update(member_epoch=v["MemberEpoch"], previous_member_epoch=v["PreviousMemberEpoch"],
                   member_state=MEMBER_STATES.get(v["State"], str(v["State"])) if rt.group_type != "streams"
                   else str(v["State"]))
        if rt.group_type != "streams":
            row["assigned_partitions"] = _partitions(v["AssignedPartitions"])
            row["partitions_pending_revocation"] = _partitions(v.get("PartitionsPendingRevocation"))
    elif name == "MemberMetadata":
        row.update(instance_id=v.get("InstanceId"), rack_id=v["RackId"], client_id=v["ClientId"],
                   client_host=v["ClientHost"], rebalance_timeout_ms=v.get("RebalanceTimeoutMs"),
                   server_assignor=v.get("ServerAssignor"), subscribed_topic_names=v.get("SubscribedTopicNames"),
                   subscribed_topic_regex=v.get("SubscribedTopicRegex"))
        classic = v.get("ClassicMemberMetadata")
        if classic is not None:
            row.update(classic_session_timeout_ms=classic["SessionTimeoutMs"],
                       classic_protocols=[p["Name"] for p in classic["SupportedProtocols"]])
    elif name == "RegularExpression":
        row.update(resolved_topics=v["Topics"], regex_version=v["Version"], regex_timestamp_ms=v["Timestamp"])
