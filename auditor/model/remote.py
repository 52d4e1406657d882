"""Tiered storage (KIP-405): which remote segments a partition's log holds, from ``__remote_log_metadata``.

The broker's view of its remote segments is ``RemoteLogMetadataCache`` (kafka-storage 4.3.1), fed
by TopicBasedRemoteLogMetadataManager from ``__remote_log_metadata`` in offset order (all events of
one topic-partition go to one metadata partition, so offset order is their order):

* a ``RemoteLogSegmentMetadataRecord`` adds a segment in state COPY_SEGMENT_STARTED; updates move
  the same segment id to COPY_SEGMENT_FINISHED, DELETE_SEGMENT_STARTED, DELETE_SEGMENT_FINISHED
  (``RemoteLogMetadataCache.updateRemoteLogSegmentMetadata``);
* only COPY_SEGMENT_FINISHED segments are served (``listRemoteLogSegments`` /
  ``remoteLogSegmentMetadata`` skip the others): a copy that never finished and a segment whose
  deletion started are not part of the log;
* a ``RemotePartitionDeleteMetadataRecord`` marks the partition's remote data for deletion (the
  topic was deleted): nothing of it is served any more.

The partition's **log start** on a tiered replica is ``UnifiedLog.logStartOffset``, which for a
remote-enabled log is the checkpointed value (``LogLoader.load`` keeps
``logStartOffsetCheckpoint`` as is when remote storage is enabled; ``LogManager`` always
checkpoints it for such logs) and is moved by ``RemoteLogManager`` to the first readable remote
segment's start (``findLogStartOffset``) or past expired ones (``handleLogStartOffsetUpdate``);
``localLogStartOffset`` is the first local segment's base (``max(logStartOffset, first
segment)``, UnifiedLog's constructor). So the remote part is [log start, local log start).

Not modelled: the leader-epoch lineage check (``RemoteLogManager`` lists segments per epoch of the
local leader-epoch cache; segments of a truncated epoch are unreferenced and later deleted).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

READABLE = "COPY_SEGMENT_FINISHED"


def latest_states(rows: Iterable[Mapping[str, Any]]) -> dict[tuple, dict]:
    """(cluster, segment id) -> its latest event (a row of ``remote_log_segments`` with the start/end
    offsets and leader epochs of its RemoteLogSegmentMetadataRecord), replayed in metadata offset order."""
    segs: dict[tuple, dict] = {}
    for r in sorted((r for r in rows if r.get("segment_id") is not None),
                    key=lambda r: (str(r.get("cluster_id")), r.get("log_partition") or 0, r.get("offset") or 0)):
        s = segs.setdefault((r.get("cluster_id"), r["segment_id"]), {})
        for k, v in r.items():
            if v is not None and (k not in s or k in ("state", "state_id", "event_timestamp_ms", "offset")):
                s[k] = v
    return segs


def deleted_partitions(rows: Iterable[Mapping[str, Any]]) -> set[tuple]:
    """(cluster, topic id, partition) of every partition with a RemotePartitionDeleteMetadataRecord."""
    return {(r.get("cluster_id"), r.get("topic_id"), r.get("partition")) for r in rows if r.get("api_key") == 2}


def readable_segment_ids(rows: Iterable[Mapping[str, Any]]) -> set[str]:
    """Remote segment ids the broker would serve: latest state COPY_SEGMENT_FINISHED, partition not deleted."""
    rows = list(rows)
    gone = deleted_partitions(rows)
    return {sid for (cluster, sid), s in latest_states(rows).items()
            if s.get("state") == READABLE and (cluster, s.get("topic_id"), s.get("partition")) not in gone}


REMOTE_EXTENT_SCHEMA = ("cluster_id string, topic string, partition int, topic_id string, remote_log_start_offset bigint, "
                        "remote_log_end_offset bigint, remote_segments int, remote_bytes bigint, remote_max_timestamp bigint")


def extents(rows: Iterable[Mapping[str, Any]]) -> list[tuple]:
    """Per (cluster, topic, partition, topic id): the readable remote segments' first start offset, the
    offset after their last end offset, their count, bytes and newest record timestamp
    (``MaxTimestampMs``; :data:`REMOTE_EXTENT_SCHEMA`). ``rows`` carry ``cluster_id`` (the metadata
    log dir's cluster)."""
    rows = list(rows)
    gone = deleted_partitions(rows)
    out: dict[tuple, list] = {}
    for s in latest_states(rows).values():
        if s.get("state") != READABLE or (s.get("cluster_id"), s.get("topic_id"), s.get("partition")) in gone:
            continue
        if s.get("start_offset") is None or s.get("end_offset") is None:
            continue  # an update without its segment record (the record is not in the input)
        k = (s.get("cluster_id"), s.get("topic"), s.get("partition"), s.get("topic_id"))
        e = out.setdefault(k, [s["start_offset"], s["end_offset"] + 1, 0, 0, None])
        e[0] = min(e[0], s["start_offset"])
        e[1] = max(e[1], s["end_offset"] + 1)
        e[2] += 1
        e[3] += s.get("segment_size_in_bytes") or 0
        if s.get("max_timestamp_ms") is not None:
            e[4] = max(e[4] if e[4] is not None else s["max_timestamp_ms"], s["max_timestamp_ms"])
    return [(*k, *v) for k, v in sorted(out.items(), key=lambda kv: tuple(str(x) for x in kv[0]))]
