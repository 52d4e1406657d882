"""The table catalog: which files feed which table, and how a task is decoded.

Every table is ``CONTEXT_COLUMNS`` + the decoder's own columns. A table spec is
Spark-free: ``decode_task`` opens the file read-only and yields row dicts or
:class:`Problem` objects; the Spark job (``auditor.ingest.spark_job``) and the
local runner both call it.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Iterator

import pyarrow as pa

from auditor.errors import DecodeError
from auditor.ingest.context import CONTEXT_COLUMNS, context_of
from auditor.ingest.problems import BAD_RECORD, Problem
from auditor.ingest import dumplog, segments
from auditor.ingest.plan import RECORD_TOPICS
from auditor.ingest.storage import open_input

# blocks of kafka-dump-log text read as segments (auditor.ingest.dumplog)
DUMPED_SEGMENTS = dumplog.SEGMENT_KINDS

Decoder = Callable[[dict, "object"], Iterator["dict | Problem"]]
# (key, value) -> the row of one record of an internal topic, or None (not this table's)
RecordDecoder = Callable[["bytes | None", "bytes | None"], "dict | None"]


@dataclass(frozen=True)
class TableSpec:
    name: str
    kinds: tuple[str, ...]
    columns: tuple[pa.Field, ...]
    decode: Decoder
    topic: str | None = None  # only files of this topic
    doc: str = ""
    # tables of an internal topic's records (``decode`` is :func:`_records_of` over it): what makes
    # a record's row, imported when called; and the columns a task's rows get after the record's
    # own (:func:`record_context`). ``dump --records`` frames a segment once and calls them
    # (auditor.dump._run); ingestion reads them through ``decode``.
    record_decoder: "Callable[[], RecordDecoder] | None" = None
    record_extra: "Callable[[dict], dict] | None" = None

    def accepts(self, task: dict) -> bool:
        if task["kind"] not in self.kinds:
            return False
        # the topic filter is for segments (and segments dumped as text); snapshots/exports are self-describing
        return (self.topic is None or task["kind"] not in ("segment", *DUMPED_SEGMENTS)
                or task.get("topic") == self.topic)

    @cached_property  # asked for every row by dump; a frozen spec's columns do not change
    def _own(self) -> frozenset[str]:
        return frozenset(c.name for c in self.columns)

    def context_name(self, name: str) -> str:
        """Context columns a decoder also fills (a committed offset's topic, a
        metadata record's broker id) are kept as ``log_<name>``."""
        return f"log_{name}" if name in self._own else name

    @property
    def schema(self) -> pa.Schema:
        ctx = [pa.field(self.context_name(c.name), c.type) for c in CONTEXT_COLUMNS]
        own = [pa.field(c.name, c.type) for c in self.columns]  # all nullable: problem rows
        return pa.schema(ctx + own)

    def context_row(self, task: dict) -> dict:
        return {self.context_name(k): v for k, v in context_of(task).items()}


def _open(task: dict):
    if task["kind"] in DUMPED_SEGMENTS:  # a block of kafka-dump-log text: read from the text file
        return open_input(dumplog.text_path(task["path"]))
    return open_input(task["path"])


def replaced(task: dict, f) -> str | None:
    """Why a segment opened for ``task`` is not the file discovery listed, or None: another inode is at
    its path now. On a running broker the cleaner swaps a cleaned segment in under the old name
    (``.cleaned`` -> ``.swap`` -> ``.log``) and recovery rewrites segments; a segment so replaced holds
    the log as of a later time than the segments read before it (a compacted partition read half
    before and half after a cleaning can show a transaction's data without the marker the later
    cleaning removed), so it is not read: the partition's view keeps a gap there, which the model
    treats as a segment not given (:func:`auditor.model.coverage.build`). Only segments: the broker
    rewrites its checkpoints by renaming a new file in every few seconds, and a newer checkpoint is
    what tells that the log moved."""
    listed = task.get("inode")
    if task.get("kind") != "segment" or listed is None or not hasattr(f, "fileno"):
        return None
    now = os.fstat(f.fileno()).st_ino
    if now == listed:
        return None
    return (f"changed since it was listed: another file (inode {now}, listed as {listed}) is at its path now "
            "(a running broker's cleaner or recovery replaced the segment); not read, so that the partition is "
            "not read as of two times")


def _range(task: dict) -> tuple[int, int | None]:
    start = task.get("range_start") or 0
    end = task.get("range_end")
    return start, (end if end is not None and end >= 0 else None)


def decode_batches(task: dict, f) -> Iterator[dict | Problem]:
    if task["kind"] in DUMPED_SEGMENTS:
        yield from dumplog.decode_batches(task, f)
        return
    start, end = _range(task)
    source = "kraft-snapshot" if task["kind"] == "kraft-snapshot" else "segment"
    # every segment, rolled or active, in windows of bounded size (pread), local or remote: never
    # memory-mapped, since any segment of a running broker can shrink under the reader (a follower
    # truncating to its leader's epoch end, recovery after an unclean restart), and touching a mapped
    # page past the new end is SIGBUS; the copy costs ~0.03 CPU-s per 400 MiB (measured on a file in
    # /tmp). The columnar decoder gives the per-batch decoder's rows and problems one for one (the
    # active segments of every capture and of the external corpus compared); an active segment of a
    # GiB took 4x as long on the per-batch path.
    yield from segments.iter_batches_columnar(f, task["size"], start, end, task.get("base_offset"), source,
                                              windowed=True)


TABLES: dict[str, TableSpec] = {}
MAX_TEXT_FILE = 16 * 1024 * 1024  # checkpoint/properties files are KBs


def register(spec: TableSpec) -> TableSpec:
    # the planner weighs and splits these topics' segments as decoded record by record
    if spec.record_decoder is not None and spec.topic not in RECORD_TOPICS:
        raise ValueError(f"table {spec.name}: a record decoder for {spec.topic}, not in plan.RECORD_TOPICS")
    TABLES[spec.name] = spec
    return spec


register(
    TableSpec(
        "batches",
        ("segment", "kraft-snapshot", *DUMPED_SEGMENTS),
        tuple(segments.BATCH_COLUMNS),
        decode_batches,
        doc="one row per record batch (v2) or legacy entry of every segment and KRaft snapshot",
    )
)


def _records_of(task: dict, f, decoder) -> Iterator[dict | Problem]:
    """Decoded records of an internal topic; an undecodable record is a
    non-fatal problem at its batch position."""
    start, end = _range(task)
    for item in segments.iter_data_records(f, task["size"], start, end):
        if isinstance(item, Problem):
            yield item
            continue
        h, rec = item
        try:
            row = decoder(rec.key, rec.value)
        except DecodeError as exc:
            # the batch is valid (size, CRC, offsets: what the broker's recovery checks, LogSegment.recover);
            # only this record's content is not: ``bad-record``, which recovery never truncates at
            yield Problem(BAD_RECORD, h.position, f"record at offset {rec.offset}: {exc.message} ({exc.kind})",
                          fatal=False)
            continue
        if row is None:
            continue
        row.update(segments.record_context(h, rec))
        yield row


def _txn_record() -> RecordDecoder:
    from auditor.formats.txnlog import decode_txn_record

    return decode_txn_record


def decode_txn_log(task: dict, f) -> Iterator[dict | Problem]:
    if task["kind"] in DUMPED_SEGMENTS:
        yield from dumplog.decode_txn_log(task, f)
        return
    yield from _records_of(task, f, _txn_record())


def _offsets_record(kind: str) -> Callable[[], RecordDecoder]:
    """Records of one kind of ``__consumer_offsets`` (offset commits, classic group metadata,
    the newer protocols' group records), told apart by the key prefix before any decoding."""
    def make() -> RecordDecoder:
        from auditor.formats.consumer_offsets import decode_offsets_record, record_kind

        def only(key, value):
            return decode_offsets_record(key, value) if record_kind(key) == kind else None

        return only

    return make


def _offsets_of(kind: str):
    def decode(task: dict, f) -> Iterator[dict | Problem]:
        if task["kind"] in DUMPED_SEGMENTS:  # kafka-dump-log --offsets-decoder text: offset commits only
            if kind == "offset_commit":
                yield from dumplog.decode_offset_commits(task, f)
            return
        yield from _records_of(task, f, _offsets_record(kind)())

    return decode


def _share_state_record() -> RecordDecoder:
    from auditor.formats.share_state import decode_share_state_record

    return decode_share_state_record


def decode_share_state(task: dict, f) -> Iterator[dict | Problem]:
    yield from _records_of(task, f, _share_state_record())


def _metadata_record() -> RecordDecoder:
    from auditor.formats.metadata import decode_metadata_value

    return lambda k, v: decode_metadata_value(v) if v is not None else None


def _metadata_extra(task: dict) -> dict:
    """Where a metadata record was read: the log, or a snapshot (and the offset it ends at)."""
    snapshot = task["kind"] == "kraft-snapshot"
    return {"source": "snapshot" if snapshot else "log", "snapshot_end_offset": task.get("base_offset") if snapshot else None}


def _metadata_rows(task: dict, f) -> Iterator[dict | Problem]:
    if task["kind"] in DUMPED_SEGMENTS:
        yield from dumplog.decode_metadata(task, f)
        return
    extra = _metadata_extra(task)
    for item in _records_of(task, f, _metadata_record()):
        if not isinstance(item, Problem):
            item.update(extra)
        yield item


def _remote_log_record() -> RecordDecoder:
    from auditor.formats.remote_log_metadata import decode_remote_log_metadata as decode

    return decode


def decode_remote_log_metadata(task: dict, f) -> Iterator[dict | Problem]:
    yield from _records_of(task, f, _remote_log_record())


def decode_pid_blocks(task: dict, f) -> Iterator[dict | Problem]:
    from auditor.formats.zk_pid_block import decode_zk_pid_block

    if task["kind"] == "zk-producer-id-block":
        row = decode_zk_pid_block(_read_all(task, f))
        yield {"source": "zookeeper", "broker_id": row["broker_id"], "broker_epoch": None,
               "next_producer_id": row["block_end"] + 1, "block_start": row["block_start"],
               "block_end": row["block_end"], "offset": None, "timestamp": None}
        return
    yield from pid_blocks_of(_metadata_rows(task, f))


def pid_blocks_of(items) -> Iterator[dict | Problem]:
    """The ``producer_id_blocks`` items of ``metadata_records``' items (:func:`_metadata_rows`):
    its problems, and a block for each grant. Apart so that ``dump`` derives both tables from one
    decode of the log (auditor.dump._run)."""
    from auditor.formats.metadata import producer_id_block

    for item in items:
        if isinstance(item, Problem):
            yield item
            continue
        block = producer_id_block(item)
        if block:
            block.update(source=item["source"], offset=item["offset"], timestamp=item["timestamp"])
            yield block


def _read_all(task: dict, f) -> bytes:
    data = f.read(MAX_TEXT_FILE + 1)
    if len(data) > MAX_TEXT_FILE:
        raise DecodeError(f"{task['kind']} larger than {MAX_TEXT_FILE} bytes: not a Kafka text file", MAX_TEXT_FILE, "bad-length")
    return data


def decode_producer_snapshot(task: dict, f) -> Iterator[dict | Problem]:
    from auditor.formats.snapshot import iter_snapshot, read_snapshot_header

    header = read_snapshot_header(f, task["size"])
    if not header["crc_valid"]:
        yield Problem("bad-crc", 2, f"snapshot CRC mismatch: stored {header['crc']}, computed {header['computed_crc']}", fatal=False)
    if task["kind"] != "remote-producer-snapshot":
        yield from iter_snapshot(f, task["size"], snapshot_offset=task.get("base_offset"), raise_on_bad_crc=False)
        return
    # tiered storage: the snapshot uploaded with a remote segment (auditor.ingest.remote_store); its
    # offset is the segment's end + 1, resolved from __remote_log_metadata by the model
    from auditor.ingest.remote_store import segment_id_of

    seg = segment_id_of(task["path"])
    for row in iter_snapshot(f, task["size"], snapshot_offset=None, raise_on_bad_crc=False):
        row["remote_segment_id"] = seg
        yield row


def _with_problems(it) -> Iterator[dict | Problem]:
    from auditor.formats.batch import LogProblem

    for item in it:
        if isinstance(item, LogProblem):
            yield Problem(item.kind, item.position, item.message, fatal=item.kind != "zero-tail")
        else:
            yield item


def decode_txn_index(task: dict, f) -> Iterator[dict | Problem]:
    from auditor.formats.txnindex import iter_txn_index

    for row in _with_problems(iter_txn_index(f, task["size"])):
        if isinstance(row, dict):
            row["segment_base_offset"] = task.get("base_offset")
        yield row


def decode_index(task: dict, f) -> Iterator[dict | Problem]:
    from auditor.formats.offset_index import iter_offset_index, iter_time_index

    fn = iter_offset_index if task["kind"] == "offset-index" else iter_time_index
    yield from _with_problems(fn(f, task["size"], task.get("base_offset") or 0))


def decode_checkpoint(task: dict, f) -> Iterator[dict | Problem]:
    from auditor.formats.checkpoints import checkpoint_kind, read_offset_checkpoint

    name = task["path"].rsplit("/", 1)[-1]
    yield from read_offset_checkpoint(_read_all(task, f), checkpoint_kind(name) or name)


def decode_leader_epochs(task: dict, f) -> Iterator[dict | Problem]:
    from auditor.formats.checkpoints import read_leader_epoch_checkpoint

    yield from read_leader_epoch_checkpoint(_read_all(task, f))


def decode_partition_metadata(task: dict, f) -> Iterator[dict | Problem]:
    from auditor.formats.checkpoints import read_partition_metadata

    yield read_partition_metadata(_read_all(task, f))


def decode_broker_files(task: dict, f) -> Iterator[dict | Problem]:
    """meta.properties, quorum-state and .kafka_cleanshutdown: one row each."""
    from auditor.formats import checkpoints as cp

    data = _read_all(task, f)
    row = {"file_kind": task["kind"]}
    if task["kind"] == "meta-properties":
        row.update(cp.read_meta_properties(data))
        row["json"] = row.pop("properties", None)
    elif task["kind"] == "quorum-state":
        row.update(cp.read_quorum_state(data))
    else:
        cs = cp.read_clean_shutdown(data)
        row.update(broker_epoch=cs["broker_epoch"], version=cs["version"], json=cs["json"])
    yield row


def iter_rows(spec: TableSpec, task: dict) -> Iterator[dict]:
    """:func:`decode_task` with Arrow record batches expanded to row dicts."""
    for item in decode_task(spec, task):
        if isinstance(item, pa.RecordBatch):
            yield from item.to_pylist()
        else:
            yield item


def decode_task(spec: TableSpec, task: dict, f=None) -> Iterator["dict | pa.RecordBatch"]:
    """Rows of ``spec`` for ``task`` (dicts, or Arrow record batches from the
    columnar fast path); problems come out as rows with ``_problem_*`` set.
    ``f``: the task's file already opened (:func:`open_input`; left open here)."""
    ctx = spec.context_row(task)
    if f is None:
        try:
            opened = _open(task)
            why = replaced(task, opened)
        except OSError as exc:
            yield Problem("unreadable", 0, f"cannot open: {exc.strerror or exc}").row(ctx)
            return
        if why is not None:
            opened.close()
            yield Problem("unreadable", 0, why).row(ctx)
            return
    else:
        f.seek(0)
        opened = nullcontext(f)  # the caller's to close
    with opened as f:
        try:
            for item in spec.decode(task, f):
                if isinstance(item, Problem):
                    yield item.row(ctx)
                elif isinstance(item, pa.RecordBatch):
                    n = item.num_rows
                    for k, v in ctx.items():
                        item = item.append_column(k, pa.array([v] * n, spec.schema.field(k).type))
                    yield item
                else:
                    item.update(ctx)
                    yield item
        except OSError as exc:
            yield Problem("io-error", -1, f"read failed: {exc.strerror or exc}").row(ctx)
        except DecodeError as exc:
            yield Problem(exc.kind, exc.position, exc.message).row(ctx)
        except Exception as exc:  # a decoder bug must not kill the whole audit
            yield Problem("internal-error", -1, f"{type(exc).__name__}: {exc}").row(ctx)


# -- the catalog -----------------------------------------------------------------

def _lazy_columns(module: str, attr: str, *extra: pa.Field, prefix: tuple[pa.Field, ...] = ()) -> tuple[pa.Field, ...]:
    import importlib

    cols = list(getattr(importlib.import_module(module), attr))
    return tuple(prefix) + tuple(cols) + tuple(extra)


_REC = tuple(segments.RECORD_CONTEXT_COLUMNS)
_SOURCE = (pa.field("source", pa.string()), pa.field("snapshot_end_offset", pa.int64()))

register(TableSpec("transaction_log", ("segment", *DUMPED_SEGMENTS), _lazy_columns("auditor.formats.txnlog", "COLUMNS", prefix=_REC),
                   decode_txn_log, topic="__transaction_state", record_decoder=_txn_record,
                   doc="every record of __transaction_state: the coordinator's state changes per transactional id"))
register(TableSpec("offset_commits", ("segment", *DUMPED_SEGMENTS),
                   _lazy_columns("auditor.formats.consumer_offsets", "OFFSET_COMMIT_COLUMNS", prefix=_REC),
                   _offsets_of("offset_commit"), topic="__consumer_offsets", record_decoder=_offsets_record("offset_commit"),
                   doc="offset commits of __consumer_offsets, with the producer of transactional commits"))
register(TableSpec("group_metadata", ("segment",),
                   _lazy_columns("auditor.formats.consumer_offsets", "GROUP_METADATA_COLUMNS", prefix=_REC),
                   _offsets_of("group_metadata"), topic="__consumer_offsets", record_decoder=_offsets_record("group_metadata"),
                   doc="group metadata records of __consumer_offsets"))
register(TableSpec("group_records", ("segment",),
                   _lazy_columns("auditor.formats.group_records", "COLUMNS", prefix=_REC),
                   _offsets_of("group_record"), topic="__consumer_offsets", record_decoder=_offsets_record("group_record"),
                   doc="records of the newer group protocols in __consumer_offsets (KIP-848 consumer, KIP-932 share, "
                       "KIP-1071 streams groups): members, epochs, subscriptions, assignments"))
register(TableSpec("share_group_state", ("segment",),
                   _lazy_columns("auditor.formats.share_state", "COLUMNS", prefix=_REC),
                   decode_share_state, topic="__share_group_state", record_decoder=_share_state_record,
                   doc="share-partition state of KIP-932 share groups (__share_group_state): snapshots and updates"))
register(TableSpec("metadata_records", ("segment", "kraft-snapshot", *DUMPED_SEGMENTS),
                   _lazy_columns("auditor.formats.metadata", "COLUMNS", *_SOURCE, prefix=_REC),
                   _metadata_rows, topic="__cluster_metadata", record_decoder=_metadata_record,
                   record_extra=_metadata_extra,
                   doc="KRaft metadata records from the __cluster_metadata log and its snapshots"))
register(TableSpec("producer_id_blocks", ("segment", "kraft-snapshot", "zk-producer-id-block", *DUMPED_SEGMENTS),
                   _lazy_columns("auditor.formats.metadata", "PID_BLOCK_COLUMNS", pa.field("source", pa.string()),
                                 pa.field("offset", pa.int64()), pa.field("timestamp", pa.int64())),
                   decode_pid_blocks, topic="__cluster_metadata", doc="producer-id blocks granted by the controller (or ZooKeeper)"))
register(TableSpec("remote_log_segments", ("segment",),
                   _lazy_columns("auditor.formats.remote_log_metadata", "COLUMNS", prefix=_REC),
                   decode_remote_log_metadata, topic="__remote_log_metadata", record_decoder=_remote_log_record,
                   doc="every record of __remote_log_metadata (tiered storage, KIP-405): each remote segment's "
                       "offsets, leader epochs, size and state changes, and remote partition deletions"))
register(TableSpec("producer_snapshots", ("producer-snapshot", "remote-producer-snapshot"),
                   _lazy_columns("auditor.formats.snapshot", "COLUMNS"), decode_producer_snapshot,
                   doc="entries of producer-state .snapshot files, local and uploaded with remote segments "
                       "(tiered storage: remote_segment_id)"))
register(TableSpec("aborted_txns", ("txn-index",),
                   _lazy_columns("auditor.formats.txnindex", "COLUMNS", pa.field("segment_base_offset", pa.int64())),
                   decode_txn_index, doc="entries of .txnindex files (aborted transactions)"))
register(TableSpec("index_entries", ("offset-index", "time-index"),
                   _lazy_columns("auditor.formats.offset_index", "COLUMNS"), decode_index,
                   doc="entries of .index and .timeindex files"))
register(TableSpec("checkpoints", ("replication-offset-checkpoint", "recovery-point-offset-checkpoint",
                                   "log-start-offset-checkpoint", "cleaner-offset-checkpoint"),
                   _lazy_columns("auditor.formats.checkpoints", "CHECKPOINT_COLUMNS"), decode_checkpoint,
                   doc="log-dir checkpoint files: high watermarks, log start offsets, recovery points"))
register(TableSpec("leader_epochs", ("leader-epoch-checkpoint",),
                   _lazy_columns("auditor.formats.checkpoints", "LEADER_EPOCH_COLUMNS"), decode_leader_epochs,
                   doc="leader-epoch-checkpoint entries per partition"))
register(TableSpec("partition_metadata", ("partition-metadata",),
                   _lazy_columns("auditor.formats.checkpoints", "PARTITION_METADATA_COLUMNS"), decode_partition_metadata,
                   doc="partition.metadata: the topic id of each partition directory"))
register(TableSpec("broker_files", ("meta-properties", "quorum-state", "clean-shutdown"),
                   (pa.field("file_kind", pa.string()), pa.field("version", pa.int32()),
                    pa.field("broker_id", pa.int32()), pa.field("node_id", pa.int32()),
                    pa.field("cluster_id", pa.string()), pa.field("directory_id", pa.string()),
                    pa.field("leader_id", pa.int32()), pa.field("leader_epoch", pa.int32()),
                    pa.field("voted_id", pa.int32()), pa.field("broker_epoch", pa.int64()),
                    pa.field("json", pa.string())),
                   decode_broker_files, doc="meta.properties, quorum-state and .kafka_cleanshutdown of each log dir"))
