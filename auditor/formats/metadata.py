"""KRaft ``__cluster_metadata`` records, KRaft control records, snapshot names.

Why the auditor reads the metadata log at all: the KRaft controller is the
authority that hands out producer-id blocks (``ProducerIdsRecord``), and two
live producers sharing one producer id look exactly like a broken transaction
on a data partition. The metadata log and its ``.checkpoint`` snapshots also
tell which topics exist (``TopicRecord``), where partitions live
(``PartitionRecord`` / ``PartitionChangeRecord``), which features are enabled
(``FeatureLevelRecord``: ``metadata.version``, ``transaction.version``) and how
topics are configured (``ConfigRecord``: ``cleanup.policy`` decides whether
missing offsets are compaction or loss).

Value framing (docs/on-disk-format.md §5.1): ``uvarint frameVersion`` (must be 1),
``uvarint apiKey``, ``uvarint recordVersion``, then the flexible message body,
and nothing after it. A record whose api key (or version) has no schema here is
*not* an error: newer brokers add record types all the time, so such records
are returned with ``data_json = None`` and still counted by api key.

``data_json`` renders the decoded fields the way Kafka's generated JSON
converters (and so ``kafka-dump-log --cluster-metadata-decoder``) print them:
camelCase field names (first letter lowered), fields absent from the record's
version omitted, tagged fields only when they differ from their default,
uuids as Kafka's URL-safe base64 text.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any, Sequence

import pyarrow as pa

from auditor.errors import DecodeError
from auditor.formats.binary import Reader
from auditor.formats.message import UNKNOWN_TAGS, Field, Schema, _default, decode, read_api_message_frame

METADATA_FRAME_VERSION = 1
PRODUCER_ID_BLOCK_SIZE = 1000  # server-common ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE

# -- record schemas (metadata/src/main/resources/common/metadata/*.json) --------
# Every metadata record is flexible from version 0.

_ENDPOINT = (
    Field("Name", "string"),
    Field("Host", "string"),
    Field("Port", "uint16"),
    Field("SecurityProtocol", "int16"),
)
_FEATURE_RANGE = (
    Field("Name", "string"),
    Field("MinSupportedVersion", "int16"),
    Field("MaxSupportedVersion", "int16"),
)


def _schema(name: str, valid: str, *fields: Field) -> Schema:
    return Schema(name, fields, valid_versions=valid, flexible_versions="0+")


_SCHEMAS: dict[int, Schema] = {
    0: _schema(
        "RegisterBrokerRecord", "0-4",
        Field("BrokerId", "int32"),
        Field("IsMigratingZkBroker", "bool", versions="2+"),
        Field("IncarnationId", "uuid"),
        Field("BrokerEpoch", "int64"),
        Field("EndPoints", "[]struct", fields=_ENDPOINT),
        Field("Features", "[]struct", fields=_FEATURE_RANGE),
        Field("Rack", "string", nullable_versions="0+"),
        Field("Fenced", "bool", default=True),
        Field("InControlledShutdown", "bool", versions="1+"),
        Field("LogDirs", "[]uuid", versions="3+", tag=0, tagged_versions="3+"),
        Field("CordonedLogDirs", "[]uuid", versions="4+", tag=1, tagged_versions="4+", nullable_versions="4+"),
    ),
    1: _schema(
        "UnregisterBrokerRecord", "0",
        Field("BrokerId", "int32"),
        Field("BrokerEpoch", "int64"),
    ),
    2: _schema(
        "TopicRecord", "0",
        Field("Name", "string"),
        Field("TopicId", "uuid"),
    ),
    3: _schema(
        "PartitionRecord", "0-2",
        Field("PartitionId", "int32", default=-1),
        Field("TopicId", "uuid"),
        Field("Replicas", "[]int32"),
        Field("Isr", "[]int32"),
        Field("RemovingReplicas", "[]int32"),
        Field("AddingReplicas", "[]int32"),
        Field("Leader", "int32", default=-1),
        Field("LeaderRecoveryState", "int8", tag=0, tagged_versions="0+"),
        Field("LeaderEpoch", "int32", default=-1),
        Field("PartitionEpoch", "int32", default=-1),
        Field("Directories", "[]uuid", versions="1+"),
        Field("EligibleLeaderReplicas", "[]int32", versions="2+", nullable_versions="2+",
              tag=1, tagged_versions="2+"),
        Field("LastKnownElr", "[]int32", versions="2+", nullable_versions="2+",
              tag=2, tagged_versions="2+"),
    ),
    4: _schema(
        "ConfigRecord", "0",
        Field("ResourceType", "int8"),
        Field("ResourceName", "string"),
        Field("Name", "string"),
        Field("Value", "string", nullable_versions="0+"),
    ),
    5: _schema(
        "PartitionChangeRecord", "0-2",
        Field("PartitionId", "int32", default=-1),
        Field("TopicId", "uuid"),
        Field("Isr", "[]int32", nullable_versions="0+", tag=0, tagged_versions="0+"),
        Field("Leader", "int32", default=-2, tag=1, tagged_versions="0+"),
        Field("Replicas", "[]int32", nullable_versions="0+", tag=2, tagged_versions="0+"),
        Field("RemovingReplicas", "[]int32", nullable_versions="0+", tag=3, tagged_versions="0+"),
        Field("AddingReplicas", "[]int32", nullable_versions="0+", tag=4, tagged_versions="0+"),
        Field("LeaderRecoveryState", "int8", default=-1, tag=5, tagged_versions="0+"),
        Field("Directories", "[]uuid", versions="1+", nullable_versions="1+", tag=8, tagged_versions="1+"),
        Field("EligibleLeaderReplicas", "[]int32", versions="2+", nullable_versions="2+",
              tag=6, tagged_versions="2+"),
        Field("LastKnownElr", "[]int32", versions="2+", nullable_versions="2+",
              tag=7, tagged_versions="2+"),
    ),
    7: _schema(
        "FenceBrokerRecord", "0",
        Field("Id", "int32"),
        Field("Epoch", "int64"),
    ),
    8: _schema(
        "UnfenceBrokerRecord", "0",
        Field("Id", "int32"),
        Field("Epoch", "int64"),
    ),
    9: _schema(
        "RemoveTopicRecord", "0",
        Field("TopicId", "uuid"),
    ),
    12: _schema(
        "FeatureLevelRecord", "0",
        Field("Name", "string"),
        Field("FeatureLevel", "int16"),
    ),
    15: _schema(
        "ProducerIdsRecord", "0",
        Field("BrokerId", "int32"),
        Field("BrokerEpoch", "int64", default=-1),
        Field("NextProducerId", "int64"),
    ),
    17: _schema(
        "BrokerRegistrationChangeRecord", "0-3",
        Field("BrokerId", "int32"),
        Field("BrokerEpoch", "int64"),
        Field("Fenced", "int8", tag=0, tagged_versions="0+"),
        Field("InControlledShutdown", "int8", versions="1+", tag=1, tagged_versions="1+"),
        Field("LogDirs", "[]uuid", versions="2+", tag=2, tagged_versions="2+"),
        Field("CordonedLogDirs", "[]uuid", versions="3+", tag=3, tagged_versions="3+", nullable_versions="3+"),
    ),
    20: _schema("NoOpRecord", "0"),
    21: _schema(
        "ZkMigrationStateRecord", "0",
        Field("ZkMigrationState", "int8"),
    ),
    23: _schema(
        "BeginTransactionRecord", "0",
        Field("Name", "string", nullable_versions="0+", tag=0, tagged_versions="0+"),
    ),
    24: _schema("EndTransactionRecord", "0"),
    25: _schema(
        "AbortTransactionRecord", "0",
        Field("Reason", "string", nullable_versions="0+", tag=0, tagged_versions="0+"),
    ),
    28: _schema("ClearElrRecord", "0", Field("TopicName", "string")),
    27: _schema(
        "RegisterControllerRecord", "0",
        Field("ControllerId", "int32"),
        Field("IncarnationId", "uuid"),
        Field("ZkMigrationReady", "bool"),
        Field("EndPoints", "[]struct", fields=_ENDPOINT),
        Field("Features", "[]struct", fields=_FEATURE_RANGE),
    ),
    # new in Kafka 4.4.0 (kafka-metadata's generated UnregisterControllerRecord, the only record type
    # 4.4.0's MetadataRecordType adds to 4.3.1's; every other type keeps its versions and fields)
    29: _schema("UnregisterControllerRecord", "0", Field("ControllerId", "int32")),
}

# MetadataRecordType enum names (what the dump tool prints as "type"); keys
# without a schema above are still named, their bodies are just not decoded.
RECORD_TYPES: dict[int, str] = {
    0: "REGISTER_BROKER_RECORD",
    1: "UNREGISTER_BROKER_RECORD",
    2: "TOPIC_RECORD",
    3: "PARTITION_RECORD",
    4: "CONFIG_RECORD",
    5: "PARTITION_CHANGE_RECORD",
    7: "FENCE_BROKER_RECORD",
    8: "UNFENCE_BROKER_RECORD",
    9: "REMOVE_TOPIC_RECORD",
    10: "DELEGATION_TOKEN_RECORD",
    11: "USER_SCRAM_CREDENTIAL_RECORD",
    12: "FEATURE_LEVEL_RECORD",
    14: "CLIENT_QUOTA_RECORD",
    15: "PRODUCER_IDS_RECORD",
    17: "BROKER_REGISTRATION_CHANGE_RECORD",
    18: "ACCESS_CONTROL_ENTRY_RECORD",
    19: "REMOVE_ACCESS_CONTROL_ENTRY_RECORD",
    20: "NO_OP_RECORD",
    21: "ZK_MIGRATION_STATE_RECORD",
    22: "REMOVE_USER_SCRAM_CREDENTIAL_RECORD",
    23: "BEGIN_TRANSACTION_RECORD",
    24: "END_TRANSACTION_RECORD",
    25: "ABORT_TRANSACTION_RECORD",
    26: "REMOVE_DELEGATION_TOKEN_RECORD",
    27: "REGISTER_CONTROLLER_RECORD",
    28: "CLEAR_ELR_RECORD",
    29: "UNREGISTER_CONTROLLER_RECORD",
}

COLUMNS: list[pa.Field] = [
    pa.field("frame_version", pa.int16()),
    pa.field("api_key", pa.int16()),
    pa.field("record_type", pa.string()),
    pa.field("record_version", pa.int16()),
    pa.field("data_json", pa.string()),
    pa.field("unknown_tags_json", pa.string()),
    pa.field("broker_id", pa.int32()),
    pa.field("broker_epoch", pa.int64()),
    pa.field("next_producer_id", pa.int64()),
    pa.field("topic_name", pa.string()),
    pa.field("topic_id", pa.string()),
    pa.field("partition_id", pa.int32()),
    pa.field("leader", pa.int32()),
    pa.field("leader_epoch", pa.int32()),
    pa.field("replicas", pa.list_(pa.int32())),
    pa.field("isr", pa.list_(pa.int32())),
    pa.field("feature_name", pa.string()),
    pa.field("feature_level", pa.int16()),
    pa.field("config_resource_type", pa.int8()),
    pa.field("config_resource_name", pa.string()),
    pa.field("config_name", pa.string()),
    pa.field("config_value", pa.string()),
]

PID_BLOCK_COLUMNS: list[pa.Field] = [
    pa.field("broker_id", pa.int32()),
    pa.field("broker_epoch", pa.int64()),
    pa.field("next_producer_id", pa.int64()),
    pa.field("block_start", pa.int64()),
    pa.field("block_end", pa.int64()),
]

_COLUMN_NAMES = [f.name for f in COLUMNS]


# -- JSON rendering ---------------------------------------------------------------

def json_name(field_name: str) -> str:
    """Kafka's FieldSpec.camelCaseName: only the first letter is lowered
    (``KRaftVersion`` -> ``kRaftVersion``, ``BrokerId`` -> ``brokerId``)."""
    return field_name[:1].lower() + field_name[1:]


def _tag_default(f: Field) -> Any:
    """The value Kafka leaves a tagged field at when it is absent (see message._default)."""
    return _default(f)


def _is_default(f: Field, value: Any, version: int) -> bool:
    if f.type.startswith("[]"):
        nullable = f.nullable_versions is not None
        # a non-nullable array's default is the empty array; a nullable one's is null
        return value is None or (not nullable and len(value) == 0)
    return value == _tag_default(f)


def _json_scalar(typ: str, value: Any) -> Any:
    if typ == "bytes" and value is not None:
        # Jackson prints a BinaryNode as standard base64
        return base64.b64encode(bytes.fromhex(value)).decode("ascii")
    return value


def _to_json(fields: Sequence[Field], data: dict[str, Any], version: int, flexible: bool,
             path: str, unknown: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields:
        if not f.present(version):
            continue
        value = data.get(f.name)
        if flexible and f.tagged_in(version) and _is_default(f, value, version):
            continue
        key = json_name(f.name)
        if f.type == "[]struct":
            out[key] = None if value is None else [
                _to_json(f.fields, elem, version, flexible, f"{path}{key}[{i}].", unknown)
                for i, elem in enumerate(value)
            ]
        elif f.type == "struct":
            out[key] = None if value is None else _to_json(f.fields, value, version, flexible, f"{path}{key}.", unknown)
        elif f.type.startswith("[]"):
            out[key] = None if value is None else [_json_scalar(f.type[2:], v) for v in value]
        else:
            out[key] = _json_scalar(f.type, value)
    for tag, hexbody in (data.get(UNKNOWN_TAGS) or {}).items():
        unknown[f"{path}{tag}"] = hexbody
    return out


def _decode_body(schema: Schema, r: Reader, version: int) -> tuple[dict[str, Any], dict[str, str]]:
    data = decode(schema, r, version)
    unknown: dict[str, str] = {}
    rendered = _to_json(schema.fields, data, version, schema.is_flexible(version), "", unknown)
    return rendered, unknown


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


# -- metadata record values -------------------------------------------------------

# Decoded rows of small values, by the value's bytes: a KRaft controller appends a 4-byte
# NoOpRecord every half second (KIP-835, metadata.max.idle.interval.ms), ~95% of the records of an
# idle cluster's metadata log. Only rows of scalars are kept (a copy is handed out: no list shared).
_MEMO: dict[bytes, dict] = {}
_MEMO_VALUE_BYTES = 64  # values up to this size are memoized
_MEMO_ENTRIES = 4096  # at most this many: memory stays bounded whatever the log holds


def decode_metadata_value(value: bytes) -> dict:
    """Decode one ``__cluster_metadata`` record value into a row (``COLUMNS``); a small value
    seen before is not decoded again (:data:`_MEMO`)."""
    small = type(value) is bytes and len(value) <= _MEMO_VALUE_BYTES
    if small:
        row = _MEMO.get(value)
        if row is not None:
            return row.copy()
    row = _decode_metadata_value(value)
    if small and len(_MEMO) < _MEMO_ENTRIES and not any(isinstance(v, (list, dict)) for v in row.values()):
        _MEMO[value] = row.copy()
    return row


def _decode_metadata_value(value: bytes) -> dict:
    """Decode one ``__cluster_metadata`` record value into a row (``COLUMNS``).

    Raises :class:`DecodeError` for a frame version other than 1 (0 was the
    2.8 preview format, which Kafka rejects), bad bytes inside a known schema,
    or bytes left after the body. Unknown api keys / versions are returned with
    ``data_json`` None so they can be counted.
    """
    if value is None:
        raise DecodeError("metadata record has a null value", 0, "corrupt")
    r = Reader(value)
    frame_version, api_key, record_version = read_api_message_frame(r)
    if frame_version != METADATA_FRAME_VERSION:
        hint = " (the 2.8 KRaft preview format, not readable by any release)" if frame_version == 0 else ""
        raise DecodeError(f"metadata frame version {frame_version}{hint}; only 1 is known", 0, "unknown-version")
    row: dict[str, Any] = dict.fromkeys(_COLUMN_NAMES)
    row.update(
        frame_version=frame_version,
        api_key=api_key,
        record_type=RECORD_TYPES.get(api_key, f"UNKNOWN({api_key})"),
        record_version=record_version,
    )
    schema = _SCHEMAS.get(api_key)
    if schema is None or not schema.supports(record_version):
        return row
    data, unknown = _decode_body(schema, r, record_version)
    if r.remaining():
        raise DecodeError(
            f"{r.remaining()} bytes left after {schema.name} v{record_version}", r.pos, "corrupt"
        )
    row["data_json"] = _dumps(data)
    row["unknown_tags_json"] = _dumps(unknown) if unknown else None
    _fill_typed(api_key, data, row)
    return row


def _fill_typed(api_key: int, d: dict[str, Any], row: dict[str, Any]) -> None:
    """Copy the fields rules join on out of the JSON into typed columns."""
    if api_key == 15:
        row.update(broker_id=d["brokerId"], broker_epoch=d["brokerEpoch"], next_producer_id=d["nextProducerId"])
    elif api_key == 2:
        row.update(topic_name=d["name"], topic_id=d["topicId"])
    elif api_key == 9:
        row["topic_id"] = d["topicId"]
    elif api_key == 3:
        row.update(
            topic_id=d["topicId"], partition_id=d["partitionId"], leader=d["leader"],
            leader_epoch=d["leaderEpoch"], replicas=d["replicas"], isr=d["isr"],
        )
    elif api_key == 5:
        # absent tagged fields mean "unchanged": leave those columns null
        leader = d.get("leader", -2)
        row.update(
            topic_id=d["topicId"], partition_id=d["partitionId"],
            leader=None if leader == -2 else leader,
            replicas=d.get("replicas"), isr=d.get("isr"),
        )
    elif api_key == 12:
        row.update(feature_name=d["name"], feature_level=d["featureLevel"])
    elif api_key == 4:
        row.update(
            config_resource_type=d["resourceType"], config_resource_name=d["resourceName"],
            config_name=d["name"], config_value=d["value"],
        )
    elif api_key in (0, 1, 17):
        row.update(broker_id=d["brokerId"], broker_epoch=d["brokerEpoch"])
    elif api_key in (7, 8):
        row.update(broker_id=d["id"], broker_epoch=d["epoch"])


def producer_id_block(row: dict) -> dict | None:
    """The producer-id block a ``PRODUCER_IDS_RECORD`` row stands for.

    The controller appends ``NextProducerId = first + 1000`` when it grants
    ``[first, first + 999]`` (ProducerIdControlManager), so the block is
    ``[next - 1000, next - 1]``. Rows of other types, and a next id below one
    block size (no whole block can have been granted), give None. A row with
    broker_id -1 comes from a snapshot image or a ZooKeeper migration: it
    restates the newest block, it is not a grant to a known broker.
    """
    if row.get("api_key") != 15:
        return None
    nxt = row.get("next_producer_id")
    if nxt is None or nxt < PRODUCER_ID_BLOCK_SIZE:
        return None
    return {
        "broker_id": row.get("broker_id"),
        "broker_epoch": row.get("broker_epoch"),
        "next_producer_id": nxt,
        "block_start": nxt - PRODUCER_ID_BLOCK_SIZE,
        "block_end": nxt - 1,
    }


# -- KRaft control record values (control batches, key types 2..6) ----------------

def _control(name: str, *fields: Field) -> Schema:
    return Schema(name, (Field("Version", "int16"),) + fields, valid_versions="0", flexible_versions="0+")


_VOTER = (Field("VoterId", "int32"),)
_CONTROL_SCHEMAS: dict[int, Schema] = {
    2: _control(
        "LeaderChangeMessage",
        Field("LeaderId", "int32"),
        Field("Voters", "[]struct", fields=_VOTER),
        Field("GrantingVoters", "[]struct", fields=_VOTER),
    ),
    3: _control("SnapshotHeaderRecord", Field("LastContainedLogTimestamp", "int64")),
    4: _control("SnapshotFooterRecord"),
    5: _control("KRaftVersionRecord", Field("KRaftVersion", "int16")),
    6: _control(
        "VotersRecord",
        Field("Voters", "[]struct", fields=(
            Field("VoterId", "int32"),
            Field("VoterUuid", "uuid"),
            Field("Endpoints", "[]struct", fields=(
                Field("Name", "string"),
                Field("Host", "string"),
                Field("Port", "uint16"),
            )),
            Field("KRaftVersionFeature", "struct", fields=(
                Field("MinSupportedVersion", "int16"),
                Field("MaxSupportedVersion", "int16"),
            )),
        )),
    ),
}


def decode_kraft_control_value(type_id: int, value: bytes) -> dict:
    """Decode the value of a KRaft control record (LeaderChange, SnapshotHeader,
    SnapshotFooter, KRaftVersion, KRaftVoters) into Kafka-style JSON fields.

    These values carry their own int16 ``Version`` as the first field, with no
    metadata framing; Kafka reads them at message version 0. Other control
    types (transaction markers, unknown ids) give ``{}``. Unknown tagged
    fields are kept under ``"_unknownTaggedFields"`` (tag path -> hex).
    """
    schema = _CONTROL_SCHEMAS.get(type_id)
    if schema is None:
        return {}
    if value is None:
        raise DecodeError(f"{schema.name} control record has a null value", 0, "corrupt")
    r = Reader(value)
    data, unknown = _decode_body(schema, r, 0)
    if r.remaining():
        raise DecodeError(f"{r.remaining()} bytes left after {schema.name}", r.pos, "corrupt")
    if unknown:
        data["_unknownTaggedFields"] = unknown
    return data


# -- snapshot file names ------------------------------------------------------------

_SNAPSHOT_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
BOOTSTRAP_SNAPSHOT = "bootstrap.checkpoint"


def parse_snapshot_name(name: str) -> tuple[int, int] | None:
    """``<endOffset 20 digits>-<epoch 10 digits>.checkpoint`` -> (end_offset, epoch).

    end_offset is exclusive (the snapshot covers offsets below it). Returns
    None for anything else, including ``bootstrap.checkpoint`` (a valid
    metadata snapshot without an offset, see :func:`is_metadata_snapshot_name`)
    and in-progress ``.checkpoint.part`` / ``.checkpoint.deleted`` files.
    """
    m = _SNAPSHOT_NAME.match(name)
    if not m:
        return None
    end_offset, epoch = int(m.group(1)), int(m.group(2))
    if end_offset > 2**63 - 1 or epoch > 2**31 - 1:
        return None
    return end_offset, epoch


def is_metadata_snapshot_name(name: str) -> bool:
    """True for files holding a complete KRaft snapshot: ``<offset>-<epoch>.checkpoint``
    or ``bootstrap.checkpoint`` (same format, written by ``kafka-storage format``)."""
    return name == BOOTSTRAP_SNAPSHOT or parse_snapshot_name(name) is not None
