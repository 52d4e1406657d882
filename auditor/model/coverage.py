"""What the input holds: per replica and per cluster, the evidence a verdict may rest on.

Users hand over parts of a broker: one partition directory, a few segment files,
a log dir without ``__transaction_state``. Three facts decide what can be
concluded from such a part, and they are established here once:

* **where the partition's log starts** — known when every segment of the
  partition directory was given *and* the log dir's
  ``log-start-offset-checkpoint`` was (Kafka writes an entry there only when the
  log start is above the first segment's base offset,
  ``LogManager.checkpointLogStartOffsetsInDir``, and loads the log start as the
  larger of the two, ``LogLoader.load``). Without it, a producer whose first
  given batch does not start its sequences cannot be called *removed* (retention)
  or *lost*;
* **where the partition's log ends** — known unless later segments of the
  directory were left out, or the replication checkpoint's high watermark lies
  beyond the last given batch. Without it, a transaction with no marker in the
  input may well have one in what was not given;
* **the broker's producer.id.expiration.ms** — a KRaft cluster keeps a dynamic
  override in its metadata log (``__cluster_metadata``); a partition directory
  given without it cannot show whether a producer snapshot's entry had expired.
  (A ZooKeeper cluster keeps it in ZooKeeper, a static one is in
  server.properties: neither is on disk, and Kafka's default is assumed, as
  before.) A log dir without ``meta.properties`` (a partition directory copied
  out of its log dir) may be either, and counts as KRaft;
* **whether a topic is compacted** — the cleaner removes whole batches (a
  producer's sequence then skips), so a sequence gap is loss only where the topic
  is known not to have been cleaned: its ``cleanup.policy`` is in the metadata log,
  or the log dir's ``cleaner-offset-checkpoint`` (created by the broker at
  start-up, ``LogCleanerManager``; an entry for every partition it has cleaned) was
  given. A partition directory given alone shows neither;
* **the coordinator's state** — a cluster's ``__transaction_state`` partitions
  given, against how many it has (the metadata log's PartitionRecords, else the
  partition directories found: :func:`auditor.model.coordinator_partitions.partition_counts`).
  Only when all are given can a producer id no record names be *unknown to the
  coordinator*.

The segments left out come from the ingest manifest (:mod:`auditor.ingest.not_given`);
checkpoints and ``__transaction_state`` directories from the ``files`` inventory.
A context without a manifest (the scheduled batch job reads whole log dirs) has
nothing left out. The rows are built on the driver (small: one per partition
given file by file, one per cluster) and handed to Spark as tiny DataFrames.
"""

from __future__ import annotations

from dataclasses import dataclass

from auditor.ingest.not_given import left_out
from auditor.model.clusters import cluster_key

TXN_TOPIC = "__transaction_state"
# ``given_as`` of segments whose partition is unknown (given without their partition directory, or in a
# directory not named topic-N): their partition and what precedes and follows them are unknown
SEGMENT_ALONE = "segment-alone"
CHECKPOINT_OK = ("ok", "empty")

REPLICA_COVERAGE_SCHEMA = (
    "cluster_id string, broker_id int, log_dir string, topic string, partition int, given_as string, "
    "earlier_segments_not_given int, later_segments_not_given int, segments_not_given_between int, "
    "next_not_given_offset bigint, gap_from_offset bigint, gap_to_offset bigint")
LOG_DIR_SCHEMA = ("cluster_id string, broker_id int, log_dir string, log_start_checkpoint_given boolean, "
                  "producer_id_expiration_known boolean, compaction_known boolean")
COORDINATOR_COVERAGE_SCHEMA = (
    "cluster_id string, coordinator_partitions_given int, coordinator_partitions_expected int, "
    "coordinator_partitions_source string, coordinator_complete boolean")


@dataclass(frozen=True)
class Coverage:
    """The rows of the three coverage views, built from the inventory and the manifest."""

    replicas: list[tuple]  # REPLICA_COVERAGE_SCHEMA: partitions given file by file, or with a segment not read
    inventoried: bool  # False: tables without a ``files`` inventory (hand-made): taken as whole log dirs
    log_dirs: list[tuple]  # LOG_DIR_SCHEMA, one per log dir of the input
    coordinator: list[tuple]  # COORDINATOR_COVERAGE_SCHEMA, one per cluster
    # tiered storage: (cluster, broker, log dir, topic, partition, remote start, local start, remote segments)
    # of each replica whose readable remote segments lie below its local log and were not given
    remote_not_given: tuple = ()
    text_dumps: tuple[str, ...] = ()  # what kafka-dump-log text given as input lacks (:func:`text_dump_lacks`)

    def lacking(self) -> list[str]:
        """What the input lacks, one line each, for the report's summary."""
        out = list(self.text_dumps)
        for r in self.replicas:
            parts = []
            if r[6]:
                parts.append(f"{r[6]} earlier segment(s)")
            if r[7]:
                parts.append(f"{r[7]} later segment(s) (from offset {r[9]})")
            if r[8]:
                parts.append(f"{r[8]} segment(s) between the given ones")
            if parts:
                out.append(f"{r[3]}-{r[4]} (broker {r[1]}): {', '.join(parts)} of its directory not given")
        alone = [r[2] for r in self.replicas if r[5] == SEGMENT_ALONE]
        if alone:
            more = f" and {len(alone) - 3} more" if len(alone) > 3 else ""
            out.append(f"segments whose partition is not known ({', '.join(alone[:3])}{more}: given without their "
                       "partition directory, or in a directory not named topic-N): their topic, partition and the "
                       "segments before and after them are not known (their producers' sequences are not judged)")
        for c in self.coordinator:
            if not c[4]:
                if c[1] == 0:
                    out.append(f"cluster {c[0]}: no {TXN_TOPIC} partition given: open transactions cannot be checked "
                               "against their coordinator")
                else:
                    out.append(f"cluster {c[0]}: {c[1]} of {c[2]} {TXN_TOPIC} partitions given ({c[3]})")
        for c, b, _d, t, p, start, local, n in self.remote_not_given:
            out.append(f"{t}-{p} (broker {b}): offsets {start}..{local - 1} are in remote storage ({n} segment(s) in "
                       "__remote_log_metadata), not given: pass the remote store with --remote-store")
        for d in self.log_dirs:
            if not d[3]:
                out.append(f"log dir {d[2]}: no log-start-offset-checkpoint given: where its partitions' logs start "
                           "is not known")
            if not d[4]:
                out.append(f"log dir {d[2]}: its cluster's metadata log not given: producer.id.expiration.ms is not "
                           "known")
        return out


def build(files: list[dict] | None, not_given: list[dict], partition_counts, brokers: dict | None = None) -> Coverage:
    """``files``: inventory rows (cluster_id, broker_id, log_dir, topic, partition, kind,
    status); ``not_given``: the manifest's list; ``brokers``: the manifest's
    ``meta.properties`` per log dir; ``partition_counts``: a callable
    returning ``(per cluster, default)`` :class:`~auditor.model.coordinator_partitions.PartitionCount`s
    (called only when some cluster has ``__transaction_state`` files or transactional data).
    ``files`` None: no inventory to tell (hand-made tables), everything is taken as given."""
    if files is None:
        return Coverage([], False, [], [])
    ids = {}
    for f in files:
        if f.get("log_dir") is not None:
            ids.setdefault(f["log_dir"], (cluster_key(f.get("cluster_id"), f["log_dir"]), f.get("broker_id")))
    replicas = []
    for g in not_given:
        c, b = ids.get(g["log_dir"], (cluster_key(None, g["log_dir"]), None))
        if g.get("cluster_id") is not None:
            c = g["cluster_id"]
        replicas.append((c, b, g["log_dir"], g["topic"], g["partition"], "file", g["before"], g["after"],
                         g["between"], g["next_not_given_offset"], g.get("gap_from_offset"), g.get("gap_to_offset")))
    replicas = _with_unread_segments(replicas, files)
    # segments whose partition is unknown (auditor.ingest.plan: their directory, or the file itself, is their
    # log dir): neither their log start nor their log end is known
    alone = {f["log_dir"]: (cluster_key(f.get("cluster_id"), f["log_dir"]), f.get("broker_id"), f["log_dir"], None,
                            None, SEGMENT_ALONE, 0, 0, 0, None, None, None)
             for f in files if f.get("kind") == "segment" and f.get("topic") is None and f.get("log_dir") is not None}
    replicas += list(alone.values())
    log_dirs = []
    # (cluster, log dir) pairs holding partitions of the input (the parent of a partition dir given alone too)
    pairs = {(cluster_key(f.get("cluster_id"), f["log_dir"]), f["log_dir"]): f.get("broker_id") for f in files
             if f.get("log_dir") is not None and f.get("topic") is not None}
    cps = {(cluster_key(f.get("cluster_id"), f["log_dir"]), f["log_dir"]) for f in files
           if f.get("kind") == "log-start-offset-checkpoint" and f.get("status") in CHECKPOINT_OK
           and f.get("partition") is None and f.get("log_dir") is not None}
    metadata = {cluster_key(f.get("cluster_id"), f["log_dir"]) for f in files
                if f.get("topic") == "__cluster_metadata" and f.get("log_dir") is not None}
    cleaner = {(cluster_key(f.get("cluster_id"), f["log_dir"]), f["log_dir"]) for f in files
               if f.get("kind") == "cleaner-offset-checkpoint" and f.get("status") in CHECKPOINT_OK
               and f.get("partition") is None and f.get("log_dir") is not None}
    for (c, d), b in sorted(pairs.items(), key=lambda kv: (kv[0][0] or "", kv[0][1])):
        # KRaft, or not known to be ZooKeeper: a log dir the manifest has no meta.properties for (a
        # partition directory copied out of its log dir) may be a KRaft broker's, whose setting only
        # the metadata log shows. Without a manifest (the batch job) every log dir counts as read whole
        meta = (brokers or {}).get(d)
        kraft = meta.get("version") == 1 if meta else brokers is not None
        # whether a partition's topic is compacted: its cleanup.policy (the metadata log), or the log dir's
        # cleaner-offset-checkpoint (Kafka creates it at start-up and lists every partition it has cleaned)
        log_dirs.append((c, b, d, (c, d) in cps, c in metadata or not kraft, (c, d) in cleaner or c in metadata))
    given: dict[str, set[int]] = {}
    clusters = set()
    for f in files:
        if f.get("log_dir") is None:
            continue
        c = cluster_key(f.get("cluster_id"), f["log_dir"])
        clusters.add(c)
        if f.get("topic") == TXN_TOPIC and f.get("partition") is not None and not _undecoded_text(f):
            given.setdefault(c, set()).add(f["partition"])
    coordinator = []
    if clusters:
        try:
            counts, default = partition_counts()
        except Exception:  # noqa: BLE001 - a store pyarrow cannot list: count what was given
            counts, default = {}, None
        for c in sorted(clusters, key=lambda k: (k is None, k or "")):
            have = given.get(c, set())
            pc = counts.get(c)
            if pc is not None:
                expected, source = pc.count, pc.source
            else:  # no directory of the topic and no metadata log: the broker's default
                expected, source = (default.count, default.source) if default is not None else (len(have), "given")
            complete = len(have) > 0 and have >= set(range(expected))
            coordinator.append((c, len(have), expected, source, complete))
    return Coverage(replicas, True, log_dirs, coordinator, text_dumps=text_dump_lacks(files))


def _with_unread_segments(replicas: list[tuple], files: list[dict]) -> list[tuple]:
    """``replicas`` with each live segment the inventory lists but could not read at all
    (status ``unreadable``: gone before it was opened -- retention deleting it while a running
    broker was scanned -- or not readable) counted as a segment left out: before the first segment
    read, after the last, or between them (with the offsets bounding the gap), as for a segment the
    user did not give. What the rules see of the partition lacks its batches either way; a producer's
    sequences running on across it are not a gap the log holds (``tests/test_running_broker.py``)."""
    read: dict[tuple, list[int]] = {}
    unread: dict[tuple, list[int]] = {}
    broker: dict[tuple, object] = {}
    for f in files:
        if f.get("kind") != "segment" or f.get("file_status") != "live" \
                or f.get("topic") is None or f.get("partition") is None or f.get("log_dir") is None:
            continue
        base = f.get("base_offset")
        if base is None:
            continue
        k = (cluster_key(f.get("cluster_id"), f["log_dir"]), f["log_dir"], f["topic"], f["partition"])
        broker.setdefault(k, f.get("broker_id"))
        (unread if f.get("status") == "unreadable" else read).setdefault(k, []).append(base)
    if not unread:
        return replicas
    rows = {(r[0], r[2], r[3], r[4]): list(r) for r in replicas}
    for k, gone in unread.items():
        lo = left_out(read.get(k, []), gone)
        r = rows.setdefault(k, [k[0], broker[k], k[1], k[2], k[3], "directory", 0, 0, 0, None, None, None])
        # merged with the segments the user left out (a replica given file by file)
        r[6] += lo["before"]
        r[7] += lo["after"]
        r[8] += lo["between"]
        if lo["next_not_given_offset"] is not None:
            r[9] = lo["next_not_given_offset"] if r[9] is None else min(r[9], lo["next_not_given_offset"])
        if lo["gap_from_offset"] is not None:
            to = lo["gap_to_offset"]
            r[10] = lo["gap_from_offset"] if r[10] is None else min(r[10], lo["gap_from_offset"])
            r[11] = to if r[11] is None or to is None else max(r[11], to)
    return [tuple(r) for r in rows.values()]


# kinds of the inventory rows of kafka-dump-log text (auditor.ingest.dumplog)
DUMPED_KINDS = ("dumped-segment", "dumped-segment-batches")
TEXT_SEPARATOR = "::"
# internal topics whose records kafka-dump-log text gives only through the tool's decoder (read: the table)
TEXT_DECODED_TOPICS = {TXN_TOPIC: "transaction_log", "__cluster_metadata": "metadata_records"}
TEXT_UNDECODED_TOPICS = ("__consumer_offsets",)


def _undecoded_text(f: dict) -> bool:
    """A block of kafka-dump-log text of an internal topic whose records were printed raw
    (no ``--transaction-log-decoder`` / ``--cluster-metadata-decoder``): its batches are
    there, its records are not — a ``__transaction_state`` partition so given is not the
    coordinator's record."""
    table = TEXT_DECODED_TOPICS.get(f.get("topic") or "")
    tables = f.get("tables") or []
    return (f.get("kind") in DUMPED_KINDS and table is not None and "batches" in tables
            and table not in tables)


def text_dump_lacks(files: list[dict]) -> tuple[str, ...]:
    """What segments given as ``kafka-dump-log`` text cannot show. The text is what
    ``DumpLogSegments`` printed of each segment: the broker's other files (producer
    snapshots, indexes, checkpoints: no high watermark, no log start) are not in it,
    and each dumped partition's log is taken to end at its last dumped batch, as for a
    partition directory given whole. Without ``--deep-iteration`` a control batch's
    COMMIT/ABORT is not printed, and the partition is left out of the live log
    (:mod:`auditor.model.livelog`)."""
    texts: dict[str, set[str]] = {}
    untyped: set[tuple] = set()
    for f in files:
        if f.get("kind") not in DUMPED_KINDS or not f.get("log_dir"):
            continue
        text = f["log_dir"].split(TEXT_SEPARATOR, 1)[0]
        topics = texts.setdefault(text, set())
        if f.get("topic") in TEXT_UNDECODED_TOPICS or _undecoded_text(f):
            topics.add(f["topic"])
        if f["kind"] == "dumped-segment-batches":
            untyped.add((text, f.get("topic"), f.get("partition")))
    out = []
    for text, topics in sorted(texts.items()):
        out.append(f"text dump {text}: kafka-dump-log output, not the files: no producer snapshots, indexes, "
                   "checkpoints or clean-shutdown marker (no high watermark, no log start offset, nothing says the "
                   "broker had stopped); each dumped partition's log is taken to end at its last dumped batch")
        for t in sorted(topics):
            how = ("not decoded from text" if t in TEXT_UNDECODED_TOPICS
                   else "printed raw (without the tool's decoder): not decoded")
            out.append(f"text dump {text}: records of {t} {how} (its batches are read)")
    for text, topic, part in sorted(untyped, key=lambda k: (k[0], k[1] or "", k[2] or 0)):
        out.append(f"{topic}-{part} (text dump {text}): dumped without --deep-iteration: its control batches' "
                   "COMMIT/ABORT are not shown; the partition is not audited")
    return tuple(out)


def remote_not_given(files: list[dict] | None, extents: list[tuple]) -> tuple:
    """Tiered storage (KIP-405): the replicas of the input whose partition has readable remote
    segments (``extents``: :func:`auditor.model.remote.extents` rows) below the replica's first
    local segment, with no remote segment file of the partition given for them
    (:mod:`auditor.ingest.remote_store` stores those under one replica's log dir; they are the remote
    log of every replica of the partition, as each broker's RemoteLogManager reads the one store)."""
    if not files or not extents:
        return ()
    local: dict[tuple, int] = {}
    remote_given: set[tuple] = set()
    broker: dict[tuple, int | None] = {}
    for f in files:
        if f.get("log_dir") is None or f.get("topic") is None or f.get("kind") != "segment":
            continue
        k = (cluster_key(f.get("cluster_id"), f["log_dir"]), f["log_dir"], f["topic"], f["partition"])
        if f.get("dir_status") == "remote":
            remote_given.add((k[0], k[2], k[3]))
        elif f.get("dir_status") == "live" and f.get("base_offset") is not None:
            local[k] = min(local.get(k, f["base_offset"]), f["base_offset"])
            broker[k] = f.get("broker_id")
    out = []
    for cluster, topic, partition, _topic_id, start, _end, n, *_ in extents:
        for k, first in sorted(local.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
            if (k[0], k[2], k[3]) == (cluster, topic, partition) and (k[0], k[2], k[3]) not in remote_given \
                    and start < first:
                out.append((cluster, broker[k], k[1], topic, partition, start, first, n))
    return tuple(out)
