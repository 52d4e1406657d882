"""The ledger of decoded files, and the change set of a run.

One row per file found under the inputs (segments, indexes, snapshots,
checkpoints, and the files that are only inventoried), with what identified its
content when it was decoded: size, mtime and a fingerprint (BLAKE2b of the
whole file up to 64 KiB, else of its first and last KiB at that size). Files of
a remote store (``hdfs://``, ``s3a://``) are fingerprinted the same way, through
:mod:`auditor.ingest.storage`, with their store's length and modification time. A file
is decoded again only when one of those, or what its log dir says about it
(broker id, cluster id, input root), differs: a rolled segment is decoded once;
an active segment that grew, a rewritten checkpoint or a new snapshot is
decoded again and its rows replaced. A file that is gone from an input root of
this run (retention deleted it, the broker renamed it to ``.deleted``) has its
rows removed, so the tables always describe what the inputs hold now.

The fingerprint is taken *before* the decode, from the size the decode will
read up to, so a file that changes while it is decoded is seen as changed
again by the next run (a stale fingerprint costs a re-decode, never a miss).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import pyarrow as pa

from auditor.ingest.discovery import FileInfo
from auditor.ingest.plan import Plan
from auditor.ingest.storage import is_remote, open_input

LEDGER_SCHEMA = pa.schema(
    [
        pa.field("path", pa.string()),
        pa.field("input_root", pa.string()),
        pa.field("kind", pa.string()),
        pa.field("log_dir", pa.string()),
        pa.field("cluster_id", pa.string()),
        pa.field("broker_id", pa.int32()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("base_offset", pa.int64()),
        pa.field("size", pa.int64()),
        pa.field("mtime_ms", pa.int64()),
        pa.field("fingerprint", pa.string()),
        pa.field("decoder", pa.string()),  # digest of the decoding code (auditor.tables.versions)
        pa.field("run", pa.int64()),  # the run that decoded this version of the file
        pa.field("decoded_at_ms", pa.int64()),
    ]
)
# what must be equal for a file to count as already decoded
IDENTITY = ("size", "mtime_ms", "fingerprint", "decoder", "kind", "cluster_id", "broker_id", "input_root", "topic", "partition")
WHOLE_FILE_LIMIT = 64 * 1024
EDGE = 1024


def fingerprint(path: str, size: int) -> str | None:
    """Hash of the content up to ``size`` bytes (whole file when small, else the
    first and last KiB: bytes the decode reads anyway); None for directories and
    unreadable files. Local paths and remote URIs alike (:func:`open_input`)."""
    if size < 0:
        return None
    h = hashlib.blake2b(digest_size=16)
    h.update(size.to_bytes(8, "big"))
    try:
        with open_input(path) as f:
            if size <= WHOLE_FILE_LIMIT:
                h.update(f.read(size))
            else:
                h.update(f.read(EDGE))
                f.seek(size - EDGE)
                h.update(f.read(EDGE))
    except (IsADirectoryError, NotADirectoryError):
        return None
    except OSError as exc:
        return f"unreadable:{exc.errno}"
    return h.hexdigest()


# rows of discovery that are directories, not files: no content to fingerprint
_DIRECTORY_KINDS = ("empty-dir", "unreadable-dir", "symlink-loop", "missing")
# fingerprints of a remote store's files are taken this many at a time (a round trip each)
REMOTE_FINGERPRINT_THREADS = 16


def fingerprints(files: list[FileInfo]) -> dict[str, str | None]:
    """path -> :func:`fingerprint` of every file; a remote store's files concurrently."""
    from auditor.ingest import dumplog

    todo = {fi.path: fi.size for fi in files if fi.kind not in _DIRECTORY_KINDS and not dumplog.is_block(fi)}
    out: dict[str, str | None] = {fi.path: None for fi in files}
    for fi in files:
        if dumplog.is_block(fi):  # a block of kafka-dump-log text: its bytes of the text
            out[fi.path] = dumplog.block_fingerprint(fi)
    remote = [p for p in todo if is_remote(p)]
    for p, size in todo.items():
        if not is_remote(p):
            out[p] = fingerprint(p, size)
    if remote:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(REMOTE_FINGERPRINT_THREADS) as pool:
            for p, fp in zip(remote, pool.map(lambda p: fingerprint(p, todo[p]), remote)):
                out[p] = fp
    return out


def ledger_row(fi: FileInfo, fp: str | None, decoder: str, run: int, now_ms: int) -> dict:
    return {
        "path": fi.path, "input_root": fi.input_root, "kind": fi.kind, "log_dir": fi.log_dir,
        "cluster_id": fi.cluster_id, "broker_id": fi.broker_id, "topic": fi.topic, "partition": fi.partition,
        "base_offset": fi.base_offset, "size": fi.size, "mtime_ms": fi.mtime_ms, "fingerprint": fp,
        "decoder": decoder, "run": run, "decoded_at_ms": now_ms,
    }


@dataclass
class ChangeSet:
    plan: Plan
    changed: list[FileInfo]  # new or modified: decoded in this run
    gone: list[dict]  # ledger rows of files no longer under this run's inputs
    reasons: dict[str, str]  # path -> new | size | mtime_ms | fingerprint | ...
    ledger: list[dict]  # the ledger after this run
    fresh: bool = False  # rebuild every table from the current inputs
    unchanged: int = 0
    tasks: list[dict] = field(default_factory=list)

    @property
    def changed_paths(self) -> set[str]:
        return {fi.path for fi in self.changed}

    @property
    def gone_paths(self) -> set[str]:
        return {g["path"] for g in self.gone}


def needs_rebuild(previous: list[dict], decoder: str) -> bool:
    """Files were decoded by other decoding code (an upgrade of the tool): rebuild
    every table from the inputs, so that no table mixes rows of two decoders
    (nor two schemas, if the upgrade changed one)."""
    return any(r.get("decoder") != decoder for r in previous)


def diff(plan: Plan, previous: list[dict], roots: list[str], run: int, now_ms: int, *, fresh: bool,
         decoder: str) -> ChangeSet:
    """Compare the files of ``plan`` with the ledger rows ``previous``.

    ``fresh``: the warehouse is rebuilt from these inputs (first run, a table
    is missing, or the decoder changed): every file is decoded and the ledger
    restarts from them. ``decoder``: the digest of the decoding code of this run."""
    prev = {} if fresh else {r["path"]: r for r in previous}
    seen: dict[str, FileInfo] = {}
    for fi in plan.files:
        seen.setdefault(fi.path, fi)
    changed: list[FileInfo] = []
    reasons: dict[str, str] = {}
    after: dict[str, dict] = {}
    fps = fingerprints(list(seen.values()))
    for path, fi in seen.items():
        row = ledger_row(fi, fps[path], decoder, run, now_ms)
        old = prev.get(path)
        why = "new" if old is None else next((k for k in IDENTITY if old.get(k) != row[k]), None)
        if why is None:
            after[path] = old
        else:
            changed.append(fi)
            reasons[path] = why
            after[path] = row
    root_set = set(roots)
    gone = [r for p, r in prev.items() if p not in seen and r.get("input_root") in root_set]
    for p, r in prev.items():
        if p not in seen and r.get("input_root") not in root_set:
            after[p] = r  # files of other inputs stay as they were
    paths = {fi.path for fi in changed}
    tasks, keys = [], set()
    for t in plan.tasks:  # overlapping inputs list a file twice: decode it once
        k = (t["path"], t["range_start"], t["range_end"])
        if t["path"] in paths and k not in keys:
            keys.add(k)
            tasks.append(t)
    ledger = [after[p] for p in sorted(after)]
    return ChangeSet(plan, changed, gone, reasons, ledger, fresh, len(seen) - len(changed), tasks)
