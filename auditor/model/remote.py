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

**Producer snapshots of remote segments.** With every segment RemoteLogManager uploads the
producer snapshot at the segment's end (``RLMCopyTask.copyLogSegment``: ``fetchSnapshot(next
segment base)``, ``endOffset = next segment base - 1``), so its offset is the segment's end offset
+ 1 (:func:`snapshot_offsets`). The broker loads one when a replica's log starts in remote storage:
a follower whose leader moved its local log start past the follower's log end builds its state
from the remote segment ending just below the leader's local log start
(``TierStateMachine.buildRemoteLogAuxState``, Kafka 4.3.1: the segment's leader-epoch checkpoint
is assigned to its epoch cache, its producer snapshot written as ``<end + 1>.snapshot``, then
``ProducerStateManager.truncateFullyAndReloadSnapshots`` and ``UnifiedLog.loadProducerState(end +
1)``, which replays the local log from there like ``UnifiedLog.rebuildProducerState``). The model
does the same: the remote snapshot at the replica's local log start is one more snapshot of the
replica (:func:`with_remote_snapshot_offsets`), so a producer whose earlier batches are only remote
is remembered the way the broker remembers it; the other remote snapshots are left out (no broker
holds them: a replica loads only that one). Where the replica has a local snapshot at the same
offset the local file is the broker's own (the upload is a copy of it) and the remote one is left out.

**Leader-epoch lineage.** A remote segment counts as part of the log only if its leader epochs
lie within the replica's leader-epoch lineage (``RemoteLogManager.isRemoteSegmentWithinLeaderEpochs``
with ``buildFilteredLeaderEpochMap``, Kafka 4.3.1): the retention task
(``RLMExpirationTask.cleanupExpiredRemoteLogSegments``) neither counts a segment outside it for
retention nor keeps it (one whose epochs all precede the lineage's first epoch is deleted as
unreferenced), ``findOffsetByTimestamp`` skips it. Such a segment was written by a leader whose
epoch was truncated away (an unclean election, a diverged leader): :func:`outside_lineage` names
it and the live log leaves it out.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from auditor.model.replica_key import join_replica

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


# -- producer snapshots of remote segments -------------------------------------------------------

def snapshot_offsets(rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Remote segment id -> the offset of the producer snapshot uploaded with it: its end offset + 1
    (``RLMCopyTask.copyLogSegment``). Every segment with its RemoteLogSegmentMetadataRecord in
    ``rows``, whatever its state (whether the segment is part of the log is the live log's call)."""
    return {r["segment_id"]: r["end_offset"] + 1 for r in rows
            if r.get("api_key") == 0 and r.get("segment_id") is not None and r.get("end_offset") is not None}


def with_remote_snapshot_offsets(snapshots, offsets: Mapping[str, int], replica: tuple[str, ...],
                                 local_starts: Mapping[tuple, int] | None = None):
    """``producer_snapshots`` (a DataFrame) with the remote snapshots' ``snapshot_offset`` filled in
    from ``offsets`` (:func:`snapshot_offsets`), keeping of them the one a replica rebuilding from
    remote storage loads: the snapshot at its local log start (``local_starts``: (log dir, topic,
    partition) -> its first local segment's base; ``TierStateMachine.buildRemoteLogAuxState`` takes
    the remote segment ending just below the leader's local log start). The others are snapshots no
    broker of the input holds. A remote snapshot whose segment's end the input does not show (no
    metadata record) is left out: without its offset it seeds nothing; so is one where the replica
    has its own snapshot at the same offset (the broker reads its own file; the upload is a copy)."""
    from pyspark.sql import functions as F

    is_remote = F.col("remote_segment_id").isNotNull()
    if not offsets or not local_starts:
        return snapshots.where(~is_remote)
    m = F.create_map(*[x for sid, off in sorted(offsets.items()) for x in (F.lit(sid), F.lit(off))])
    start = F.create_map(*[x for (d, t, p), o in sorted(local_starts.items(), key=str)
                           for x in (F.lit(f"{d}\0{t}\0{p}"), F.lit(o))])
    key = F.concat_ws("\0", F.col("log_dir"), F.col("topic"), F.col("partition").cast("string"))
    s = snapshots.withColumn("snapshot_offset", F.when(is_remote, m[F.col("remote_segment_id")])
                             .otherwise(F.col("snapshot_offset")))
    s = s.where(~is_remote | (F.col("snapshot_offset") == start[key]))
    local = s.where(~is_remote).select(*replica, "snapshot_offset").distinct().withColumn("_local", F.lit(True))
    return (join_replica(s, local, "left", on=["snapshot_offset"])
            .where(~(is_remote & F.coalesce(F.col("_local"), F.lit(False)))).drop("_local"))


# -- leader-epoch lineage ------------------------------------------------------------------------

def filtered_epochs(epochs: Mapping[int, int]) -> dict[int, int]:
    """``RemoteLogManager.buildFilteredLeaderEpochMap``: epoch -> start offset without the epochs
    that hold no record (an epoch starting where the next one starts)."""
    items = sorted(epochs.items())
    return {e: o for i, (e, o) in enumerate(items) if not (i + 1 < len(items) and items[i + 1][1] == o)}


def within_leader_epochs(segment_epochs: Mapping[int, int], segment_end_offset: int, log_end_offset: int | None,
                         leader_epochs: Mapping[int, int]) -> bool:
    """``RemoteLogManager.isRemoteSegmentWithinLeaderEpochs`` (Kafka 4.3.1): is a remote segment
    (its ``SegmentLeaderEpochs`` and end offset) within the replica's leader-epoch lineage
    (``leader_epochs``: its leader-epoch-checkpoint, filtered like the segment's) and below its log
    end? ``log_end_offset`` None: the log end is not known, that part of the check is skipped."""
    seg = filtered_epochs(segment_epochs)
    lineage = filtered_epochs(leader_epochs)
    if not seg or not lineage:
        return False
    seg_keys, lin_keys = sorted(seg), sorted(lineage)
    last = seg_keys[-1]
    if last < lin_keys[0] or last > lin_keys[-1]:  # (Kafka compares the segment's *last* epoch with both ends)
        return False
    first = next((e for e in seg_keys if e >= lin_keys[0]), None)  # ceilingKey
    if first is None:
        return False

    def higher(keys: list[int], m: Mapping[int, int], e: int) -> tuple[int, int] | None:
        k = next((x for x in keys if x > e), None)
        return None if k is None else (k, m[k])

    for epoch in seg_keys:
        offset = seg[epoch]
        if epoch < first:
            continue
        if epoch not in lineage:
            return False
        # the segment's first epoch must start within that epoch of the lineage, unless it is the lineage's first
        if epoch == first and any(k < epoch for k in lin_keys) and offset < lineage[epoch]:
            return False
        if epoch == last:
            nxt = higher(lin_keys, lineage, epoch)
            if nxt is not None and segment_end_offset > nxt[1] - 1:
                return False
        if epoch != last and higher(lin_keys, lineage, epoch) != higher(seg_keys, seg, epoch):
            return False
    return log_end_offset is None or segment_end_offset < log_end_offset


def outside_lineage(rows: Iterable[Mapping[str, Any]], lineage_of: Mapping[str, Mapping[int, int]],
                    log_end_of: Mapping[str, int | None]) -> dict[str, str]:
    """Remote segment id -> why it is not part of the log, for the segments (``rows``: their
    RemoteLogSegmentMetadataRecords with ``segment_leader_epochs``) outside the leader-epoch lineage
    of the replica they belong to: ``lineage_of`` maps a segment id to that replica's
    leader-epoch-checkpoint (epoch -> start offset), ``log_end_of`` to its log end offset. A segment
    whose replica's checkpoint is not in the input is not judged. The keys may also be (log dir,
    segment id), one per replica (:func:`replica_lineages` with ``per_replica``): each replica is
    judged against its own lineage, as each broker's RemoteLogManager checks against its own
    leader-epoch cache; the result is then keyed the same way."""
    keys_of: dict[str, list] = {}
    for k in lineage_of:
        keys_of.setdefault(k[1] if isinstance(k, tuple) else k, []).append(k)
    out: dict = {}
    for r in rows:
        sid = r.get("segment_id")
        if r.get("api_key") != 0 or sid is None or sid not in keys_of or r.get("end_offset") is None:
            continue
        seg = {e["leader_epoch"]: e["offset"] for e in (r.get("segment_leader_epochs") or [])}
        for k in keys_of[sid]:
            lineage = lineage_of[k]
            if not within_leader_epochs(seg, r["end_offset"], log_end_of.get(k), lineage):
                out[k] = (f"remote segment {sid} (offsets {r.get('start_offset')}..{r['end_offset']}, leader epochs "
                          f"{sorted(seg)}) is outside the replica's leader-epoch lineage {sorted(lineage.items())}: "
                          "the broker does not count it as part of the log (RemoteLogManager."
                          "isRemoteSegmentWithinLeaderEpochs)")
    return out


def replica_lineages(files: Iterable[Mapping[str, Any]], epoch_rows: Iterable[Mapping[str, Any]],
                     per_replica: bool = False) -> tuple[dict, dict]:
    """For each remote segment file of the ``files`` inventory attached to a replica
    (:func:`auditor.ingest.remote_store.attach`): its segment id -> that replica's leader-epoch
    lineage (its local ``leader-epoch-checkpoint``: ``leader_epochs`` rows, epoch -> start offset)
    and its log end offset (the end of its last local segment, ``files.next_offset``; None when not
    known). Inputs of :func:`outside_lineage`. With ``per_replica`` the keys are (log dir, segment
    id) for every replica of the segment's partition in its cluster (the remote log is every
    replica's: :func:`auditor.ingest.remote_store.replica_log_dirs`; ``files`` then carry ``cluster_id``)."""
    from auditor.ingest.remote_store import REMOTE, replica_log_dirs, segment_id_of

    files = list(files)
    lineage: dict[tuple, dict[int, int]] = {}
    for r in epoch_rows:
        if r.get("leader_epoch") is not None and r.get("start_offset") is not None:
            lineage.setdefault((r.get("log_dir"), r.get("topic"), r.get("partition")), {})[r["leader_epoch"]] = r["start_offset"]
    ends: dict[tuple, int] = {}
    for r in files:
        if r.get("dir_status") != REMOTE and r.get("kind") == "segment" and r.get("next_offset") is not None:
            k = (r.get("log_dir"), r.get("topic"), r.get("partition"))
            ends[k] = max(ends.get(k, r["next_offset"]), r["next_offset"])
    dirs = replica_log_dirs(files) if per_replica else {}
    lineage_of: dict = {}
    log_end_of: dict = {}
    for r in files:
        sid = segment_id_of(r["path"]) if r.get("dir_status") == REMOTE else None
        if sid is None:
            continue
        for d in (dirs.get((r.get("cluster_id"), r.get("topic"), r.get("partition")), []) if per_replica
                  else [r.get("log_dir")]):
            k = (d, r.get("topic"), r.get("partition"))
            if k in lineage:
                key = (d, sid) if per_replica else sid
                lineage_of[key] = lineage[k]
                log_end_of[key] = ends.get(k)
    return lineage_of, log_end_of


# -- a tiered log seen from the replica alone ------------------------------------------------------

def lineage_starts(leader_epochs, replica: tuple[str, ...]):
    """Per replica (``replica`` columns) of ``leader_epochs`` (its local leader-epoch-checkpoint
    rows): ``epoch_lineage_start_offset``, the first entry's start offset.

    Why it tells a tiered log without ``__remote_log_metadata``: when segments of a log are deleted,
    ``UnifiedLog.deleteSegments`` (Kafka 4.3.1) moves only the *local* log start of a log with remote
    copy enabled (``maybeIncrementLocalLogStartOffset``, the leader-epoch cache untouched), and for
    any other log the log start itself (``maybeIncrementLogStartOffset``, which truncates the cache
    to it: ``LeaderEpochFileCache.truncateFromStartAsyncFlush``). So a checkpoint whose first entry
    lies below the replica's first local segment belongs to a tiered log (or, on a running broker,
    to a cache not yet flushed). Likewise ``LogManager.checkpointLogStartOffsetsInDir`` writes a
    log start below the first local segment only for a remote-enabled log (``remoteLogEnabled ||
    logStartOffset > first segment base``)."""
    from pyspark.sql import functions as F

    return (leader_epochs.where("start_offset IS NOT NULL").groupBy(*replica)
            .agg(F.min("start_offset").alias("epoch_lineage_start_offset")))


# the columns of ``remote_log_segments`` the model reads
METADATA_COLUMNS = ("cluster_id", "log_dir", "partition", "offset", "api_key", "topic", "topic_id", "log_partition",
                    "segment_id", "start_offset", "end_offset", "max_timestamp_ms", "event_timestamp_ms",
                    "segment_size_in_bytes", "state", "state_id", "segment_leader_epochs")


def metadata_rows(small_rows) -> list[dict]:
    """The ``remote_log_segments`` rows (``__remote_log_metadata``: small, one per segment event),
    cluster-keyed like every table; [] when the input has none. ``small_rows(table, columns)``:
    see :func:`auditor.model.livelog.live_log_of`."""
    from auditor.model.clusters import cluster_key

    rows = small_rows("remote_log_segments", METADATA_COLUMNS) or []
    for r in rows:
        r["cluster_id"] = cluster_key(r.get("cluster_id"), r.get("log_dir"))
    return [r for r in rows if r.get("segment_id") is not None or r.get("api_key") == 2]
