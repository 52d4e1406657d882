"""Remote segments of tiered storage (KIP-405): the files a RemoteStorageManager keeps.

Kafka ships one file-system RemoteStorageManager, ``LocalTieredStorage`` (kafka-storage 4.3.1
test jar, ``org.apache.kafka.server.log.remote.storage``), and its layout is the one read here:
under ``<rsm.config.dir>/kafka-tiered-storage/`` one directory per topic-partition named
``<topic>-<partition>-<topic id>`` (``RemoteTopicPartitionDirectory``), holding per remote segment
the files ``<20-digit start offset>-<segment id>.<suffix>`` with the suffixes of
``RemoteLogSegmentFileset.RemoteLogSegmentFileType``: ``.log`` (the segment, byte for byte the
local one RemoteLogManager copied), ``.index``, ``.timeindex``, ``.txnindex`` (optional),
``.snapshot`` (the producer snapshot taken at the segment's end, i.e. at end offset + 1) and
``.leader_epoch_checkpoint``. The same names are recognised under ``hdfs://`` / ``s3a://`` inputs
(:mod:`auditor.ingest.storage`), so a copy of the store kept there reads the same way.

A remote segment belongs to a partition's log like a local one: the broker serves offsets below the
replica's local log start from it (``ReplicaManager`` / ``RemoteLogManager.read``). Each remote
file found is therefore attached to a replica of its partition in the input (:func:`attach`: the
log dir of the first such replica holding the same topic id, so it gets that broker's cluster and
broker id), marked with
the directory status ``remote``, where its rows are stored (decoded once). The remote log is
shared: every replica reads it below *its own* local log start (Kafka 4.3.1: each replica's
``RemoteLogManager.read``, whichever broker copied the segment), so :mod:`auditor.model.livelog`
decides for every replica of the input what of each remote file lies below that replica's local
log start and within its leader-epoch lineage (``Liveness.replicas``), and the audit joins the rows
to each replica that keeps them (``AuditContext.table``). Remote files whose partition has no
replica in the input stay on their own (no log dir, no cluster).
"""

from __future__ import annotations

import re

# Kafka's Uuid.toString(): URL-safe base64 of 16 bytes without padding, 22 characters
_UUID = r"[A-Za-z0-9_-]{22}"
PARTITION_DIR = re.compile(rf"^(?P<topic>.+)-(?P<partition>\d+)-(?P<topic_id>{_UUID})$")
SEGMENT_FILE = re.compile(
    rf"^(?P<offset>\d{{20}})-(?P<segment_id>{_UUID})\.(?P<ext>log|index|timeindex|txnindex|snapshot|leader_epoch_checkpoint)$")
ROOT_DIR_NAME = "kafka-tiered-storage"  # LocalTieredStorage.ROOT_STORAGE_DIR_NAME

# kinds: the local decoders read the same formats. The producer snapshot of a remote segment is
# decoded into producer_snapshots with its segment id; its offset is the segment's end + 1, which only
# the segment's metadata record gives (auditor.model.remote.snapshot_offsets). The leader-epoch
# checkpoint is listed, not decoded: the metadata record carries the segment's epochs
# (SegmentLeaderEpochs), which is what the lineage check reads
_KIND = {"log": "segment", "index": "offset-index", "timeindex": "time-index", "txnindex": "txn-index",
         "snapshot": "remote-producer-snapshot", "leader_epoch_checkpoint": "remote-leader-epoch-checkpoint"}
REMOTE = "remote"  # the directory status of every remote file


def parse_partition_dir(name: str) -> tuple[str, int, str] | None:
    """``tiered-0-byNkDA1GSAeMuXGiZiIRFw`` -> ("tiered", 0, "byNkDA1GSAeMuXGiZiIRFw")."""
    m = PARTITION_DIR.match(name)
    if not m or int(m.group("partition")) > 2**31 - 1:
        return None
    return m.group("topic"), int(m.group("partition")), m.group("topic_id")


def classify(name: str) -> tuple[str, int, str] | None:
    """Kind, start offset and segment id of a remote segment file name, or None."""
    m = SEGMENT_FILE.match(name)
    if not m or int(m.group("offset")) > 2**63 - 1:
        return None
    return _KIND[m.group("ext")], int(m.group("offset")), m.group("segment_id")


def segment_id_of(path: str) -> str | None:
    """The remote segment id a remote file's name carries."""
    c = classify(path.rsplit("/", 1)[-1])
    return c[2] if c else None


def looks_like_partition_dir(d) -> bool:
    """A LocalTieredStorage topic-partition directory: its name and at least one segment file."""
    if parse_partition_dir(d.name) is None:
        return False
    try:
        return any(classify(c.name) is not None for c in d.iterdir())
    except OSError:
        return False


def replica_log_dirs(rows) -> dict[tuple, list[str]]:
    """(cluster id, topic, partition) -> the log dirs holding a live local replica of it, sorted
    (``rows``: the ``files`` inventory as dicts, cluster ids as stored). A remote file's replicas are
    those of its own key: :func:`attach` gave it the cluster of the replica matching its topic id."""
    replicas: dict[tuple, set[str]] = {}
    for r in rows:
        if (r.get("dir_status") == "live" and r.get("log_dir") is not None and r.get("topic") is not None
                and r.get("partition") is not None):
            replicas.setdefault((r.get("cluster_id"), r["topic"], r["partition"]), set()).add(r["log_dir"])
    return {k: sorted(v) for k, v in replicas.items()}


def _topic_id(fi) -> str | None:
    """The topic id a replica's ``partition.metadata`` holds (PartitionMetadataFile), None when it
    is not given or not readable."""
    from auditor.errors import DecodeError
    from auditor.formats.checkpoints import read_partition_metadata
    from auditor.ingest.storage import open_input

    try:
        with open_input(fi.path) as f:
            return read_partition_metadata(f.read(4096))["topic_id"]
    except (OSError, DecodeError):
        return None


def attach(files: list) -> None:
    """Give each remote file (``dir_status == 'remote'``, no log dir) the log dir of a replica of
    its partition found in the same input set: where its rows are stored, decoded once (the first
    such log dir, for a stable choice). The replica must hold the same topic id (its
    ``partition.metadata``; the remote directory is named ``<topic>-<partition>-<topic id>``: the
    broker keys remote data by TopicIdPartition), so captures of other clusters with the same topic
    name do not get it; a replica whose topic id is not given may. The remote log is shared by every
    replica of the partition (each reads it below its own local log start through
    RemoteLogManager); the audit joins the rows to every replica of that cluster
    (:func:`auditor.model.livelog.decide`, ``Liveness.replicas``). In place."""
    import posixpath

    remote = [fi for fi in files if fi.dir_status == REMOTE and fi.log_dir is None]
    if not remote:
        return
    wanted = {(fi.topic, fi.partition) for fi in remote}
    replicas: dict[tuple[str, int], set[str]] = {}
    ids: dict[tuple, str | None] = {}
    for fi in files:
        if (fi.dir_status == "live" and fi.log_dir is not None and (fi.topic, fi.partition) in wanted):
            replicas.setdefault((fi.topic, fi.partition), set()).add(fi.log_dir)
            if fi.kind == "partition-metadata":
                ids[(fi.log_dir, fi.topic, fi.partition)] = _topic_id(fi)
    for fi in remote:
        parsed = parse_partition_dir(posixpath.basename(posixpath.dirname(fi.path)))
        want = parsed[2] if parsed else None
        dirs = [d for d in sorted(replicas.get((fi.topic, fi.partition), ()))
                if want is None or ids.get((d, fi.topic, fi.partition)) in (None, want)]
        if dirs:
            fi.log_dir = dirs[0]
