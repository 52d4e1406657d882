"""Turn inputs into decode tasks (driver side, reads only names, sizes and meta.properties).

Large segments are split into byte ranges at batch boundaries taken from the
segment's own ``.index`` (each entry's position is the start of a batch), so
one 1 GiB segment becomes several Spark tasks. Without a usable index a segment
stays one task: guessing a boundary inside a segment could fabricate batches.
"""

from __future__ import annotations

import posixpath
import struct
from dataclasses import dataclass

from auditor.errors import DecodeError
from auditor.ingest.discovery import IDENTITY, FileInfo, classify_file, discover
from auditor.ingest import remote_store
from auditor.ingest.storage import file_size, join, open_input

DEFAULT_SPLIT_BYTES = 128 * 1024 * 1024
# A segment of an internal topic whose records are decoded one by one (the coordinators' and the
# controller's records) costs ~250 times the CPU per byte of a data segment, whose batch headers are
# decoded in columns (a 4 GiB log dir: 17.9 MB of __transaction_state took 4.8 CPU-s, 4 GiB of data
# segments 4.5; bench/JOURNAL.md, broker_dir.py). So such a segment is split this many times finer,
# and weighs that much more when tasks are shared out (``decode_cost``).
RECORD_TOPIC_COST = 250
RECORD_TOPIC_SPLIT_DIVISOR = 32
RECORD_TOPICS = frozenset({"__transaction_state", "__consumer_offsets", "__share_group_state", "__cluster_metadata",
                           "__remote_log_metadata"})
_MAX_META = 1 << 20  # meta.properties read for broker facts (the file is a few hundred bytes)
DECODED_KINDS = {
    "segment", "kraft-snapshot", "producer-snapshot", "txn-index", "offset-index", "time-index",
    "leader-epoch-checkpoint", "partition-metadata", "quorum-state", "meta-properties", "clean-shutdown",
    "replication-offset-checkpoint", "recovery-point-offset-checkpoint", "log-start-offset-checkpoint",
    "cleaner-offset-checkpoint", "zk-producer-id-block",
    "remote-producer-snapshot",  # tiered storage: the producer snapshot uploaded with a remote segment
    "dumped-segment", "dumped-segment-batches", "dumped-kraft-snapshot",  # blocks of kafka-dump-log text (auditor.ingest.dumplog)
}


def task_bytes(task: dict) -> int:
    """Bytes a task reads: its range, or the whole file."""
    return task["size"] if task["range_end"] < 0 else task["range_end"] - task["range_start"]


def decode_cost(task: dict) -> int:
    """A task's decode cost in bytes of data segment (:data:`RECORD_TOPIC_COST`)."""
    n = task_bytes(task)
    return n * RECORD_TOPIC_COST if task["kind"] == "segment" and task.get("topic") in RECORD_TOPICS else n


@dataclass
class Plan:
    files: list[FileInfo]
    tasks: list[dict]
    brokers: dict[str, dict]  # log_dir -> meta.properties facts


def _read_meta(log_dir: str) -> dict:
    from auditor.formats.checkpoints import read_meta_properties

    try:
        with open_input(join(log_dir, "meta.properties")) as f:
            data = f.read(_MAX_META + 1)  # a few hundred bytes; a huge file is not one
        if len(data) > _MAX_META:
            return {}
        return read_meta_properties(data)
    except (OSError, DecodeError):
        return {}


def _head(path: str) -> bytes:
    """The first bytes of a file given directly under a name Kafka would not give it: enough for
    :func:`archive_note` and :func:`_sniff_segment` (b"" when it cannot be read)."""
    try:
        with open_input(path) as f:
            return f.read(262)
    except OSError:
        return b""


def _sniff_segment(head: bytes) -> bool:
    """Does a file with a non-Kafka name, starting with ``head``, look like a log segment?"""
    if len(head) < 17:
        return False
    _off, size = struct.unpack_from(">qi", head, 0)
    return head[16] in (0, 1, 2) and size >= 14


# the files Kafka keeps in a partition directory
PARTITION_FILE_KINDS = ("segment", "offset-index", "time-index", "txn-index", "producer-snapshot",
                        "leader-epoch-checkpoint", "partition-metadata")

# what an archive or a compressed file starts with (offset, magic, what it is, how to open it)
_ARCHIVES = (
    (0, b"\x1f\x8b", "a gzip-compressed file (a .tar.gz?)", "tar -xzf"),
    (0, b"BZh", "a bzip2-compressed file (a .tar.bz2?)", "tar -xjf"),
    (0, b"\xfd7zXZ\x00", "an xz-compressed file (a .tar.xz?)", "tar -xJf"),
    (0, b"\x28\xb5\x2f\xfd", "a zstd-compressed file (a .tar.zst?)", "tar --zstd -xf"),
    (0, b"PK\x03\x04", "a zip archive", "unzip"),
    (257, b"ustar", "a tar archive", "tar -xf"),
)


def archive_note(head: bytes) -> str | None:
    """Why a file given as an input, starting with ``head``, is not read when it is an archive or a
    compressed file (a ticket's attachment, most often): what it is and how to unpack it. None
    otherwise. The tool reads the files a broker writes, never an archive of them: unpacking needs
    room and a place the user chooses."""
    for at, magic, what, how in _ARCHIVES:
        if head[at:at + len(magic)] == magic:
            return f"{what}, not a Kafka file: unpack it ({how} ...) and give the directories it holds"
    return None


def _with_dump_texts(files: list[FileInfo]) -> list[FileInfo]:
    """Each kafka-dump-log text among the files Kafka would not name (any extension,
    given or found in a directory) expanded into its dumped blocks
    (:func:`auditor.ingest.dumplog.expand`), texts of one cluster given one cluster id
    (:func:`auditor.ingest.dumplog.join_clusters`)."""
    from auditor.ingest import dumplog

    out: list[FileInfo] = []
    for fi in files:
        if fi.kind == "unknown" and fi.size > 0 and fi.note is None and dumplog.is_dump_text(fi.path):
            out.extend(dumplog.expand(fi))
        else:
            out.append(fi)
    dumplog.join_clusters(out)
    return out


def split_points(index_path: str, base_offset: int, size: int, split_bytes: int) -> list[int]:
    """Batch start positions at least ``split_bytes`` apart, from a ``.index`` file
    (none if it cannot be read)."""
    from auditor.formats.offset_index import iter_offset_index

    points: list[int] = []
    last = 0
    try:
        with open_input(index_path) as f:
            for row in iter_offset_index(f, file_size(f), base_offset):
                if not isinstance(row, dict):
                    continue
                pos = row.get("position")
                if pos is None or pos <= last or pos >= size:
                    continue
                if pos - last >= split_bytes:
                    points.append(pos)
                    last = pos
    except (OSError, DecodeError):
        return []
    return points


def make_plan(inputs: list[str], split_bytes: int = DEFAULT_SPLIT_BYTES) -> Plan:
    files = list(discover(inputs))
    remote_store.attach(files)  # tiered storage: remote segments join a replica of their partition
    brokers: dict[str, dict] = {}
    for fi in files:
        if fi.kind == "unknown" and fi.path == fi.input_root and fi.size > 0:
            # an archive first: a tar header can pass for a segment's first batch
            head = _head(fi.path)
            archive = archive_note(head)
            if archive is not None:
                fi.note = archive
            elif _sniff_segment(head):
                fi.kind, fi.note = "segment", "treated as a log segment by its content (name is not Kafka's)"
        if fi.kind in PARTITION_FILE_KINDS and fi.topic is None and fi.dir_status != remote_store.REMOTE:
            # a partition's file whose partition is unknown (given without its partition directory, or
            # found in a directory not named topic-N): which partition it holds, and what comes before and
            # after it, are unknown. Kafka keeps one partition per directory, so its files under Kafka's
            # names in one directory are one replica (the directory as its log dir, and a cluster of its
            # own); a segment under a name of the user's own is one by itself -- two partitions' segments
            # handed over side by side must not be replayed as one log
            fi.log_dir = posixpath.dirname(fi.path) if classify_file(posixpath.basename(fi.path))[0] == fi.kind \
                else fi.path
        if fi.log_dir and fi.log_dir not in brokers:
            brokers[fi.log_dir] = {} if fi.log_dir == fi.path else _read_meta(fi.log_dir)
        meta = brokers.get(fi.log_dir or "", {})
        fi.broker_id = meta.get("broker_id")
        fi.cluster_id = meta.get("cluster_id")
    files = _with_dump_texts(files)
    newest: dict[str, int] = {}
    for fi in files:
        if (fi.kind == "segment" and fi.file_status == "live" and fi.base_offset is not None and fi.topic is not None
                and fi.size >= 0):
            d = posixpath.dirname(fi.path)
            newest[d] = max(newest.get(d, -1), fi.base_offset)
    tasks: list[dict] = []
    for fi in files:
        if fi.kind not in DECODED_KINDS or fi.size < 0:
            continue
        base = {
            "path": fi.path, "kind": fi.kind, "cluster_id": fi.cluster_id, "broker_id": fi.broker_id,
            "log_dir": fi.log_dir, "topic": fi.topic, "partition": fi.partition,
            "base_offset": fi.base_offset, "snapshot_epoch": fi.snapshot_epoch, "size": fi.size,
            "range_start": fi.extra.get("range_start", 0), "range_end": fi.extra.get("range_end", -1),
            # the newest segment of a partition is the one a running broker may still append to
            # or truncate: it is read with plain reads, never memory-mapped
            "active": fi.kind != "segment" or newest.get(posixpath.dirname(fi.path), -1) in (-1, fi.base_offset),
            "inode": (fi.extra.get(IDENTITY) or (None, None))[1],
        }
        split = max(1, split_bytes // RECORD_TOPIC_SPLIT_DIVISOR) if fi.topic in RECORD_TOPICS else split_bytes
        if fi.kind == "segment" and fi.size > split and fi.base_offset is not None:
            idx = join(posixpath.dirname(fi.path), f"{fi.base_offset:020d}.index")
            points = split_points(idx, fi.base_offset, fi.size, split)
            if points:
                bounds = [0, *points, fi.size]
                for a, b in zip(bounds, bounds[1:]):
                    tasks.append({**base, "range_start": a, "range_end": b})
                continue
        tasks.append(base)
    return Plan(files, tasks, brokers)
