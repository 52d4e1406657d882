"""Records of ``__remote_log_metadata``: the tiered-storage (KIP-405) segment catalog.

The broker's TopicBasedRemoteLogMetadataManager (kafka-storage 4.3.1 / 4.4.0) publishes one record
per event to ``__remote_log_metadata`` with a null key and a value written by
``RemoteLogMetadataSerde`` through ``BytesApiMessageSerde`` / ``AbstractApiMessageSerde.write``:
an unsigned-varint frame version (``DEFAULT_FRAME_VERSION`` 1, the only one ``read`` accepts), the
api key and the record version as unsigned varints (each must fit a short:
``unsignedIntToShort``), then the generated message of that key
(``org.apache.kafka.server.log.remote.metadata.storage.generated``, resources
``message/*.json`` of the kafka-storage jar; all four are version 0 only and flexible):

* 0 ``RemoteLogSegmentMetadataRecord``: a segment copy starts (state COPY_SEGMENT_STARTED) with its
  offsets, leader epochs and size;
* 1 ``RemoteLogSegmentMetadataUpdateRecord``: a later state of the same segment id;
* 2 ``RemotePartitionDeleteMetadataRecord``: the whole partition's remote data is being deleted;
* 3 ``RemoteLogSegmentMetadataSnapshotRecord``: a segment's full metadata without its partition
  (RemoteLogSegmentMetadataSnapshot; the serde still reads and writes it, though 4.3.1 keeps no
  snapshot file of the metadata: decoded here like the others).

The segment and snapshot records carry ``TxnIndexEmpty`` as tagged field 0 (the schemas in the
4.3.1 and 4.4.0 jars are identical).

States are ``RemoteLogSegmentState.id()`` / ``RemotePartitionDeleteState.id()`` (kafka-storage-api
4.3.1 enums, in declaration order). The schemas are declared once below as :class:`Field` lists
and read with :mod:`auditor.formats.message`.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from auditor.errors import DecodeError
from auditor.formats.binary import Reader
from auditor.formats.message import Field, Schema, decode, read_api_message_frame, require_consumed

FRAME_VERSION = 1  # AbstractApiMessageSerde.DEFAULT_FRAME_VERSION

SEGMENT_STATES = {0: "COPY_SEGMENT_STARTED", 1: "COPY_SEGMENT_FINISHED",
                  2: "DELETE_SEGMENT_STARTED", 3: "DELETE_SEGMENT_FINISHED"}
PARTITION_DELETE_STATES = {0: "DELETE_PARTITION_MARKED", 1: "DELETE_PARTITION_STARTED",
                           2: "DELETE_PARTITION_FINISHED"}

_TOPIC_ID_PARTITION = Field("TopicIdPartition", "struct", fields=(
    Field("Name", "string"), Field("Id", "uuid"), Field("Partition", "int32")))
_SEGMENT_ID = Field("RemoteLogSegmentId", "struct", fields=(_TOPIC_ID_PARTITION, Field("Id", "uuid")))
_LEADER_EPOCHS = Field("SegmentLeaderEpochs", "[]struct", fields=(
    Field("LeaderEpoch", "int32"), Field("Offset", "int64")))
_CUSTOM = Field("CustomMetadata", "bytes", nullable_versions="0+")
_SEGMENT_BODY = (Field("StartOffset", "int64"), Field("EndOffset", "int64"), Field("BrokerId", "int32"),
                 Field("MaxTimestampMs", "int64"), Field("EventTimestampMs", "int64"), _LEADER_EPOCHS,
                 Field("SegmentSizeInBytes", "int32"), _CUSTOM, Field("RemoteLogSegmentState", "int8"),
                 # tagged (tag 0) since KIP-1058 (3.9): RemoteLogManager found the segment's .txnindex empty and
                 # did not upload it; absent = false
                 Field("TxnIndexEmpty", "bool", tag=0, tagged_versions="0+", default=False))


def _schema(name: str, *fields: Field) -> Schema:
    return Schema(name, fields, valid_versions="0", flexible_versions="0+")


SCHEMAS: dict[int, Schema] = {
    0: _schema("RemoteLogSegmentMetadataRecord", _SEGMENT_ID, *_SEGMENT_BODY),
    1: _schema("RemoteLogSegmentMetadataUpdateRecord", _SEGMENT_ID, Field("BrokerId", "int32"),
               Field("EventTimestampMs", "int64"), _CUSTOM, Field("RemoteLogSegmentState", "int8")),
    2: _schema("RemotePartitionDeleteMetadataRecord", _TOPIC_ID_PARTITION, Field("BrokerId", "int32"),
               Field("EventTimestampMs", "int64"), Field("RemotePartitionDeleteState", "int8")),
    3: _schema("RemoteLogSegmentMetadataSnapshotRecord", Field("SegmentId", "uuid"), *_SEGMENT_BODY),
}

COLUMNS: list[pa.Field] = [
    pa.field("record_type", pa.string()),
    pa.field("api_key", pa.int16()),
    pa.field("record_version", pa.int16()),
    pa.field("topic", pa.string()),  # the tiered partition (the record's TopicIdPartition)
    pa.field("topic_id", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("segment_id", pa.string()),
    pa.field("start_offset", pa.int64()),
    pa.field("end_offset", pa.int64()),
    pa.field("event_broker_id", pa.int32()),
    pa.field("max_timestamp_ms", pa.int64()),
    pa.field("event_timestamp_ms", pa.int64()),
    pa.field("segment_leader_epochs", pa.list_(pa.struct([pa.field("leader_epoch", pa.int32()),
                                                          pa.field("offset", pa.int64())]))),
    pa.field("segment_size_in_bytes", pa.int32()),
    pa.field("custom_metadata", pa.binary()),
    pa.field("state", pa.string()),
    pa.field("state_id", pa.int8()),
    pa.field("txn_index_empty", pa.bool_()),
]
_NAMES = [c.name for c in COLUMNS]


def decode_remote_log_metadata(key: bytes | None, value: bytes | None) -> dict[str, Any]:
    """One ``__remote_log_metadata`` record value as a row of :data:`COLUMNS`.

    A null value, a frame version other than 1, an api key or version Kafka does not know, or bytes
    left after the message are a :class:`DecodeError` (RemoteLogMetadataSerde would throw too).
    """
    if value is None:
        raise DecodeError("remote log metadata record has a null value", 0, "corrupt")
    r = Reader(value)
    frame, api_key, version = read_api_message_frame(r)
    if frame != FRAME_VERSION:
        raise DecodeError(f"frame version {frame}; only {FRAME_VERSION} is known", 0, "unknown-version")
    schema = SCHEMAS.get(api_key)
    if schema is None:
        raise DecodeError(f"unknown remote log metadata api key {api_key}", 1, "unknown-version")
    d = decode(schema, r, version)
    require_consumed(r, schema, version)
    row: dict[str, Any] = dict.fromkeys(_NAMES)
    row.update(record_type=schema.name, api_key=api_key, record_version=version)
    tip = d.get("TopicIdPartition") or (d.get("RemoteLogSegmentId") or {}).get("TopicIdPartition")
    if tip:
        row.update(topic=tip["Name"], topic_id=tip["Id"], partition=tip["Partition"])
    if "RemoteLogSegmentId" in d:
        row["segment_id"] = d["RemoteLogSegmentId"]["Id"]
    elif "SegmentId" in d:
        row["segment_id"] = d["SegmentId"]
    row.update(start_offset=d.get("StartOffset"), end_offset=d.get("EndOffset"), event_broker_id=d.get("BrokerId"),
               max_timestamp_ms=d.get("MaxTimestampMs"), event_timestamp_ms=d.get("EventTimestampMs"),
               segment_size_in_bytes=d.get("SegmentSizeInBytes"),
               custom_metadata=None if d.get("CustomMetadata") is None else bytes.fromhex(d["CustomMetadata"]),
               txn_index_empty=d.get("TxnIndexEmpty"))
    if d.get("SegmentLeaderEpochs") is not None:
        row["segment_leader_epochs"] = [{"leader_epoch": e["LeaderEpoch"], "offset": e["Offset"]}
                                        for e in d["SegmentLeaderEpochs"]]
    if api_key == 2:
        row["state_id"] = d["RemotePartitionDeleteState"]
        row["state"] = PARTITION_DELETE_STATES.get(row["state_id"], f"UNKNOWN({row['state_id']})")
    else:
        row["state_id"] = d["RemoteLogSegmentState"]
        row["state"] = SEGMENT_STATES.get(row["state_id"], f"UNKNOWN({row['state_id']})")
    return row
