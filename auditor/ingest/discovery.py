"""Find the files of one or more broker log directories, without opening them for writing.

Kafka's layout (facts §7): a log dir holds ``meta.properties``, broker-level
checkpoint files and one directory per partition replica named
``<topic>-<partition>``; replicas being deleted, moved between log dirs (JBOD)
or left over after a reassignment carry ``.<uuid>-delete``, ``-future`` and
``-stray`` suffixes. Segment files may carry ``.deleted``, ``.cleaned`` or
``.swap`` suffixes while the broker deletes, compacts or swaps them. All of
these are inventoried and labelled, because a hanging transaction can hide in a
replica the broker was about to throw away.

Inputs may be log dirs, a directory holding several log dirs (one per broker,
as a user copies them off a cluster), single partition directories or single
files; local paths or ``file:``, ``hdfs://`` and ``s3a://`` URIs, walked through
:mod:`auditor.ingest.storage` (a ``pathlib.Path`` locally, the same methods over
a remote store's listings otherwise).
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass, asdict, field
from pathlib import Path
from typing import Iterator

from auditor.ingest import remote_store
from auditor.ingest.storage import RemotePath, as_path, file_type, normalize

_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
_SPECIAL_DIR = re.compile(r"^(?P<base>.+-\d+)\.(?P<uuid>[0-9a-fA-F]{32})-(?P<status>delete|future|stray)$")
_OFFSET_FILE = re.compile(r"^(?P<offset>\d{20})\.(?P<ext>log|index|timeindex|txnindex|snapshot)(?P<suffix>\.(deleted|cleaned|swap))?$")
_KRAFT_SNAPSHOT = re.compile(r"^(?P<offset>\d{20})-(?P<epoch>\d{10})\.checkpoint(?P<suffix>\.(part|deleted))?$")
_ROOT_CHECKPOINTS = {
    "replication-offset-checkpoint": "replication-offset-checkpoint",
    "recovery-point-offset-checkpoint": "recovery-point-offset-checkpoint",
    "log-start-offset-checkpoint": "log-start-offset-checkpoint",
    "cleaner-offset-checkpoint": "cleaner-offset-checkpoint",
}
_EXT_KIND = {
    "log": "segment",
    "index": "offset-index",
    "timeindex": "time-index",
    "txnindex": "txn-index",
    "snapshot": "producer-snapshot",
}
# files a user may hand us on their own
ZK_BLOCK_NAMES = ("latest_producer_id_block", "latest_producer_id_block.json")


@dataclass
class FileInfo:
    """One file found under an input, with what its name and place say about it."""

    path: str
    input_root: str
    log_dir: str | None
    topic: str | None
    partition: int | None
    dir_status: str  # live | delete | future | stray | root | none
    kind: str
    file_status: str  # live | deleted | cleaned | swap | partial
    base_offset: int | None
    snapshot_epoch: int | None
    size: int
    mtime_ms: int
    broker_id: int | None = None
    cluster_id: str | None = None
    note: str | None = None
    extra: dict = field(default_factory=dict)

    def as_row(self) -> dict:
        d = asdict(self)
        d.pop("extra")
        return d


# Kafka's limits on the numbers a name carries: a partition is an int32 >= 0, an offset an int64 >= 0
MAX_PARTITION = 2**31 - 1
MAX_OFFSET = 2**63 - 1


def parse_partition_dir(name: str) -> tuple[str, int, str] | None:
    """``payments-3`` -> ("payments", 3, "live"); suffixed names -> their status. None for a
    name Kafka would not give a partition directory, a partition number beyond int32 included
    (:func:`out_of_range` says why)."""
    status = "live"
    m = _SPECIAL_DIR.match(name)
    if m:
        name, status = m.group("base"), m.group("status")
    p = _PARTITION_DIR.match(name)
    if not p or int(p.group("partition")) > MAX_PARTITION:
        return None
    return p.group("topic"), int(p.group("partition")), status


def out_of_range(name: str) -> str | None:
    """Why a partition directory's or an offset file's name is not one Kafka would write:
    its number is beyond Kafka's limits (a partition is an int32, an offset an int64). None
    when the name is in range or not of that shape. Such an entry is listed, never read:
    one stray name must not stop an audit."""
    base = _SPECIAL_DIR.match(name)
    p = _PARTITION_DIR.match(base.group("base") if base else name)
    if p and int(p.group("partition")) > MAX_PARTITION:
        return (f"partition number {p.group('partition')} is beyond Kafka's limit ({MAX_PARTITION}): "
                "not a partition directory, not read")
    m = _OFFSET_FILE.match(name) or _KRAFT_SNAPSHOT.match(name)
    if m and int(m.group("offset")) > MAX_OFFSET:
        return f"offset {m.group('offset')} in the name is beyond Kafka's limit ({MAX_OFFSET}): not read"
    return None


def classify_file(name: str) -> tuple[str, str, int | None, int | None]:
    """Kind, file status, base offset and (KRaft snapshots) epoch from a file name; an offset
    beyond int64 makes it ``unknown`` (:func:`out_of_range`)."""
    if out_of_range(name):
        return "unknown", "live", None, None
    m = _OFFSET_FILE.match(name)
    if m:
        suffix = (m.group("suffix") or ".live")[1:]
        return _EXT_KIND[m.group("ext")], suffix, int(m.group("offset")), None
    m = _KRAFT_SNAPSHOT.match(name)
    if m:
        suffix = m.group("suffix")
        status = "live" if not suffix else ("partial" if suffix == ".part" else "deleted")
        return "kraft-snapshot", status, int(m.group("offset")), int(m.group("epoch"))
    if name == "bootstrap.checkpoint":
        return "kraft-snapshot", "live", 0, None
    if name == "leader-epoch-checkpoint":
        return "leader-epoch-checkpoint", "live", None, None
    if name == "partition.metadata":
        return "partition-metadata", "live", None, None
    if name == "quorum-state":
        return "quorum-state", "live", None, None
    if name == "meta.properties":
        return "meta-properties", "live", None, None
    if name == ".kafka_cleanshutdown":
        return "clean-shutdown", "live", None, None
    if name in _ROOT_CHECKPOINTS:
        return _ROOT_CHECKPOINTS[name], "live", None, None
    if name in ZK_BLOCK_NAMES:
        return "zk-producer-id-block", "live", None, None
    if name.endswith(".lock"):
        return "lock", "live", None, None
    return "unknown", "live", None, None


def _stat(path: Path) -> tuple[int, int, tuple | None]:
    """Size, mtime (ms) and, for a local file, its identity (device, inode: :func:`discover` lists a
    file reached twice once)."""
    st = path.stat()
    ms = getattr(st, "mtime_ms", None)  # a remote store's, exact
    ino = getattr(st, "st_ino", None)
    identity = None if isinstance(path, RemotePath) or not ino else (st.st_dev, ino)
    return st.st_size, int(st.st_mtime * 1000) if ms is None else ms, identity


def _info(path: Path, root: str, log_dir: str | None, topic, partition, dir_status) -> FileInfo:
    kind, fstatus, base, epoch = classify_file(path.name)
    try:
        size, mtime, identity = _stat(path)
    except OSError as exc:
        return FileInfo(str(path), root, log_dir, topic, partition, dir_status, kind, fstatus, base, epoch, -1, -1,
                        note=f"cannot stat: {exc.strerror}")
    return FileInfo(str(path), root, log_dir, topic, partition, dir_status, kind, fstatus, base, epoch, size, mtime,
                    note=out_of_range(path.name), extra={IDENTITY: identity} if identity else {})


def _not_a_file(path: Path, root: str, log_dir: str | None, topic, partition, dir_status) -> FileInfo:
    """The row of something that is not a regular file where files belong (a FIFO or a device
    named as a segment, a directory named ``00000000000000000000.log``, a dangling or looping
    symbolic link): listed with what it is, never opened (reading a FIFO or ``/dev/zero``
    would block or never end)."""
    try:
        note = f"{file_type(path.stat().st_mode)}, not a regular file: not read"
        if path.is_symlink():
            note = f"symbolic link to {os.readlink(path)!r}: {note}"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            note = "symbolic link loop: it resolves to itself"
        elif os.path.lexists(path):
            note = "broken symbolic link: the file it points to does not exist"
        else:  # gone between the directory's listing and this look (a running broker's temporary file)
            note = f"vanished after its directory was listed: {exc.strerror}"
    kind, fstatus, base, epoch = classify_file(path.name)  # what the name says, as for any file
    return FileInfo(str(path), root, log_dir, topic, partition, dir_status, kind, fstatus, base, epoch, -1, -1,
                    note=note)


# directory identity (st_dev, st_ino) -> the path it was first walked by
Visited = dict


def discover(inputs: list[str]) -> Iterator[FileInfo]:
    """Every regular file under ``inputs``, classified. Symlinks are followed, but a
    directory is walked at most once (tracked by device and inode), across all the
    inputs: a symbolic link back to an ancestor (``loop -> .``), a second link to a
    directory already walked, or an input inside (or equal to) one given before it
    (``scan LOGDIR LOGDIR/topic-0``) is one ``symlink-loop`` row with a note, not a
    walk; a file reached twice (given on its own and within a directory given too) is
    listed once. Read twice, a partition's batches would be replayed as two copies of
    one log. Nothing is opened here except directory listings."""
    visited: Visited = {}
    files_seen: set = set()
    for fi in _discover(inputs, visited):
        if fi.size >= 0 and fi.kind not in _DIR_KINDS:
            # a local file by its device and inode (a symbolic link and its target are one), a remote one by path
            key = fi.extra.get(IDENTITY) or fi.path
            if key in files_seen:
                continue
            files_seen.add(key)
        yield fi


# inventory kinds that stand for a directory, not a file
_DIR_KINDS = ("empty-dir", "symlink-loop", "unreadable-dir", "out-of-range-name")
# FileInfo.extra: a local file's (device, inode), from the stat that sized it
IDENTITY = "identity"


def _discover(inputs: list[str], visited: Visited) -> Iterator[FileInfo]:
    for raw in inputs:
        root = normalize(raw)
        p = as_path(root)
        try:
            is_file = p.is_file()
        except OSError as exc:  # a directory on the way that cannot be searched (EACCES), an I/O error
            yield FileInfo(root, root, None, None, None, "none", "unreadable-dir", "live", None, None, -1, -1,
                           note=f"cannot stat: {exc.strerror or exc}")
            continue
        if is_file:
            yield from _single_file(p, root)
        elif p.is_dir():
            yield from _walk(p, root, visited)
        elif os.path.lexists(root):
            yield _not_a_file(p, root, None, None, None, "none")
        else:
            yield _absent(p, root)


def _absent(p: Path, root: str) -> FileInfo:
    """The row of an input that is neither a file nor a directory: missing, or, in a remote
    store, one that could not be asked (an unreachable name node, a refused request)."""
    if isinstance(p, RemotePath):
        try:
            p.stat()
        except FileNotFoundError:
            pass
        except OSError as exc:
            return FileInfo(root, root, None, None, None, "none", "unreadable-dir", "live", None, None, -1, -1,
                            note=f"cannot stat: {exc.strerror or exc}")
    return FileInfo(root, root, None, None, None, "none", "missing", "live", None, None, -1, -1,
                    note="input path does not exist")


def _single_file(p: Path, root: str) -> Iterator[FileInfo]:
    parsed = parse_partition_dir(p.parent.name)
    if parsed:
        topic, part, status = parsed
        yield _info(p, root, str(p.parent.parent), topic, part, status)
    else:
        yield _info(p, root, str(p.parent), None, None, "root")


def _enter(d: Path, root: str, log_dir: str | None, visited: Visited) -> FileInfo | None:
    """Mark directory ``d`` walked; if it already was (a symlink loop, or a second
    link to the same directory), the inventory row that says so instead."""
    try:
        st = d.stat()
    except OSError as exc:
        return FileInfo(str(d), root, log_dir, None, None, "none", "unreadable-dir", "live", None, None, -1, -1,
                        note=f"cannot stat: {exc.strerror}")
    key = (st.st_dev, st.st_ino)
    first = visited.get(key)
    if first is None:
        visited[key] = str(d)
        return None
    try:
        target = os.readlink(d) if d.is_symlink() else None
    except OSError:
        target = None
    if str(d) == first:  # the same path again: an input inside one given before it
        note = "directory already read (an earlier input holds it): its files are read once"
    else:
        what = f"symbolic link to {target!r}" if target is not None else "directory"
        loop = " (a loop)" if str(d).startswith(first.rstrip("/") + "/") else ""
        note = f"{what} resolves to {first}, a directory already walked{loop}: not followed"
    return FileInfo(str(d), root, log_dir, None, None, "none", "symlink-loop", "live", None, None, 0, -1, note=note)


def _out_of_range_dir(d: Path, root: str, log_dir: str | None) -> FileInfo:
    """The one inventory row of a directory named like a partition whose number Kafka could
    not have written (``x-2147483648``): listed with why, never walked."""
    return FileInfo(str(d), root, log_dir, None, None, "none", "out-of-range-name", "live", None, None, 0, -1,
                    note=out_of_range(d.name))


def _walk(top: Path, root: str, visited: Visited) -> Iterator[FileInfo]:
    if out_of_range(top.name):
        yield _out_of_range_dir(top, root, str(top.parent))
        return
    seen = _enter(top, root, None, visited)
    if seen is not None:
        yield seen
        return
    if _looks_like_log_dir(top):
        yield from _log_dir(top, root, visited)
        return
    if remote_store.looks_like_partition_dir(top):
        yield from _remote_partition(top, root)
        return
    parsed = parse_partition_dir(top.name)
    if parsed and _looks_like_partition_dir(top):
        topic, part, status = parsed
        yield from _partition(top, root, str(top.parent), topic, part, status, visited, entered=True)
        return
    if _is_kafka_name(top.name):
        # a directory where Kafka keeps a file (given directly, or found outside a partition dir)
        parsed = parse_partition_dir(top.parent.name)
        topic, part, status = parsed if parsed else (None, None, "none")
        yield _not_a_file(top, root, None, topic, part, status)
    try:
        children = sorted(top.iterdir())
    except OSError as exc:
        yield FileInfo(str(top), root, None, None, None, "none", "unreadable-dir", "live", None, None, -1, -1,
                       note=f"cannot list: {exc.strerror}")
        return
    for child in children:
        if child.is_dir():
            yield from _walk(child, root, visited)
        elif child.is_file():
            yield _info(child, root, None, None, None, "none")
        else:
            yield _not_a_file(child, root, None, None, None, "none")


def _remote_partition(d: Path, root: str) -> Iterator[FileInfo]:
    """A tiered-storage topic-partition directory (:mod:`auditor.ingest.remote_store`): its remote
    segment files, directory status ``remote``, attached to a replica's log dir later
    (:func:`auditor.ingest.remote_store.attach`); anything else in it is listed as unknown."""
    topic, part, _topic_id = remote_store.parse_partition_dir(d.name)
    try:
        children = sorted(d.iterdir())
    except OSError as exc:
        yield FileInfo(str(d), root, None, topic, part, remote_store.REMOTE, "unreadable-dir", "live", None, None, -1, -1,
                       note=f"cannot list: {exc.strerror}")
        return
    for child in children:
        c = remote_store.classify(child.name)
        if not child.is_file():
            yield _not_a_file(child, root, None, topic, part, remote_store.REMOTE)
        elif c is None:
            yield _info(child, root, None, topic, part, remote_store.REMOTE)
        else:
            try:
                size, mtime, _ = _stat(child)
            except OSError as exc:
                size, mtime = -1, -1
                note = f"cannot stat: {exc.strerror}"
            else:
                note = None
            yield FileInfo(str(child), root, None, topic, part, remote_store.REMOTE, c[0], "live", c[1], None, size,
                           mtime, note=note)


def _looks_like_partition_dir(d: Path) -> bool:
    """No subdirectories (symbolic links to directories aside: a ``loop -> ..`` is
    reported, not walked), and Kafka-named files (or nothing at all)."""
    try:
        children = list(d.iterdir())
    except OSError:
        return False
    # a subdirectory named like a Kafka file (``00000000000000000000.log/``) is a file's place
    # taken by a directory: listed as such by _partition, it does not make this something else
    if any(c.is_dir() and not c.is_symlink() and not _is_kafka_name(c.name) for c in children):
        return False
    return not children or any(_is_kafka_name(c.name) for c in children)


def _looks_like_log_dir(d: Path) -> bool:
    if (d / "meta.properties").is_file():
        return True
    try:
        return any(
            c.is_dir() and parse_partition_dir(c.name) and _looks_like_partition_dir(c)
            and any(_is_kafka_name(x.name) for x in c.iterdir())
            for c in d.iterdir()
        )
    except OSError:
        return False


def _is_kafka_name(name: str) -> bool:
    return classify_file(name)[0] != "unknown"


def _log_dir(d: Path, root: str, visited: Visited) -> Iterator[FileInfo]:
    log_dir = str(d)
    try:
        children = sorted(d.iterdir())
    except OSError as exc:
        yield FileInfo(log_dir, root, log_dir, None, None, "root", "unreadable-dir", "live", None, None, -1, -1,
                       note=f"cannot list: {exc.strerror}")
        return
    for child in children:
        if child.is_dir() and out_of_range(child.name):
            yield _out_of_range_dir(child, root, log_dir)
        elif child.is_dir():
            parsed = parse_partition_dir(child.name)
            if parsed:
                seen = _enter(child, root, log_dir, visited)
                if seen is not None:
                    yield seen
                    continue
                topic, part, status = parsed
                yield from _partition(child, root, log_dir, topic, part, status, visited, entered=True)
            else:
                yield from _walk(child, root, visited)
        elif child.is_file():
            yield _info(child, root, log_dir, None, None, "root")
        else:
            yield _not_a_file(child, root, log_dir, None, None, "root")


def _partition(d: Path, root: str, log_dir: str, topic: str, part: int, status: str, visited: Visited,
               entered: bool = False) -> Iterator[FileInfo]:
    if not entered:
        seen = _enter(d, root, log_dir, visited)
        if seen is not None:
            yield seen
            return
    try:
        children = sorted(d.iterdir())
    except OSError as exc:
        yield FileInfo(str(d), root, log_dir, topic, part, status, "unreadable-dir", "live", None, None, -1, -1,
                       note=f"cannot list: {exc.strerror}")
        return
    if not children:
        yield FileInfo(str(d), root, log_dir, topic, part, status, "empty-dir", "live", None, None, 0, -1,
                       note="partition directory holds no files")
    for child in children:
        if child.is_dir() and child.is_symlink():
            # a partition holds no directories: a link back to one already walked is a loop row
            try:
                st = child.stat()
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in visited:
                yield _enter(child, root, log_dir, visited)
                continue
            yield _not_a_file(child, root, log_dir, topic, part, status)
        elif child.is_file():
            yield _info(child, root, log_dir, topic, part, status)
        else:  # a directory, FIFO, device, socket or dangling link where a file belongs
            yield _not_a_file(child, root, log_dir, topic, part, status)
