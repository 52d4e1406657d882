"""The live log of a replica: which files, and which bytes of them, the broker would load.

A partition directory copied off a broker holds more than its log: the cleaner's
``.cleaned`` output and the ``.deleted`` originals it replaced (deleted only after
``file.delete.delay.ms``), a ``.swap`` segment an interrupted swap left behind,
segments after a torn write that recovery would throw away. Replaying all of it
as log invents duplicates and hanging transactions. This module decides, once,
what the broker's log loading (``LogLoader.load``, Kafka 3.x/4.x) keeps; the
ingest tables keep every file, and every consumer (rules, views, timeline, plots, the
coordinator lookup, the batch job's audit) gets only the live rows, from one decision
(:func:`live_log_of`) applied by one filter in two forms: :func:`keep_frame` for a
DataFrame (``AuditContext.table``), :func:`keep_rows` for rows read with pyarrow.

The rules applied to each partition directory, in the loader's order:

1. a directory renamed ``-delete`` or ``-stray`` is not served: nothing in it is
   live (``-future`` directories are a replica of their own and are loaded);
2. ``*.deleted`` files are deleted at load (``removeTempFilesAndCollectSwapFiles``);
3. ``*.cleaned`` files are deleted at load, and so is every ``.swap`` file whose
   base offset is at or above the lowest ``.cleaned`` offset (an interrupted
   split, KAFKA-6264);
4. the remaining ``.swap`` log files complete their swap: every other file whose
   base offset lies in [lowest swap base offset, highest swap next offset) —
   the segments they replace and those segments' indexes and snapshots — is
   deleted, and the ``.swap`` files become the segments;
5. without a clean-shutdown marker (``.kafka_cleanshutdown`` in the log dir),
   segments from the one holding the recovery point
   (``recovery-point-offset-checkpoint``) on are recovered: the first segment
   with an invalid batch (bad CRC, torn or zero-filled tail, lost framing) is
   truncated at that batch, and every segment after it is deleted;
6. a segment's batches at or above the next segment's base offset are shadowed
   by it (reads find an offset in the segment with the greatest base offset at
   or below it) — only possible when segments overlap, which healthy brokers
   never leave behind.

Producer snapshots go with rules 2-4 like any offset-named file; which live
snapshot seeds the producer state is the model's business
(:func:`auditor.model.producer_state.reference.load_replica`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

# problems the broker's segment recovery truncates at (LogSegment.recover: an invalid batch)
RECOVERY_TRUNCATES = ("bad-crc", "truncated", "zero-tail", "bad-length", "unknown-magic", "unknown-version", "corrupt")
OFFSET_NAMED = ("segment", "offset-index", "time-index", "txn-index", "producer-snapshot", "dumped-segment")
# a segment file, or a segment read back from kafka-dump-log text with its record lines (auditor.ingest.dumplog)
SEGMENT_KINDS = ("segment", "dumped-segment")
# kafka-dump-log text of a segment without --deep-iteration, holding control batches: whether each is a
# COMMIT or an ABORT marker is not in it, so its partition cannot be replayed (see _partition_dir)
UNTYPED_MARKERS_KIND = "dumped-segment-batches"


@dataclass(frozen=True)
class Liveness:
    """One file's place in the live log: ``live``, and if only part of it is, where it ends."""

    path: str
    live: bool
    reason: str | None = None  # why not live, or why only in part
    end_offset: int | None = None  # batches with base offset >= this are not live (shadowed)
    end_position: int | None = None  # batches at byte position >= this are not live (recovery truncation)
    # a remote (tiered) file: its place in the log of every replica of its partition in the input,
    # ((log dir, Liveness), ...) by log dir; the fields above are those of the replica it is stored under
    replicas: tuple = ()

    @property
    def bounded(self) -> bool:
        return self.live and (self.end_offset is not None or self.end_position is not None)

    def keeps(self, position: int | None, offset: int | None) -> bool:
        """Whether a row of this file at ``position`` / ``offset`` is in the live log
        (:func:`keep_frame` applies the same bounds to a DataFrame)."""
        if not self.live:
            return False
        if self.end_position is not None and position is not None and position >= self.end_position:
            return False
        return not (self.end_offset is not None and offset is not None and offset >= self.end_offset)


def decide(files: Iterable[Mapping[str, Any]], *, recovery_points: Mapping[tuple, int] | None = None,
           next_offsets: Mapping[str, int] | None = None,
           readable_remote_segments: set[str] | None = None,
           remote_outside_lineage: Mapping[str, str] | None = None) -> dict[str, Liveness]:
    """Liveness of every file of the ``files`` inventory (rows as dicts).

    ``recovery_points``: (log_dir, topic, partition) -> recovery point offset.
    ``next_offsets``: segment path -> the offset after its last batch
    (``files.next_offset``; needed for ``.swap`` segments and overlaps, read from
    the rows themselves when they carry it).
    ``readable_remote_segments``: the remote segment ids ``__remote_log_metadata`` says are
    readable (:func:`auditor.model.remote.readable_segment_ids`); None when the input has no
    metadata to tell (every remote file is then taken as readable).
    ``remote_outside_lineage``: remote segment id, or (log dir, segment id) for one replica -> why
    it lies outside that replica's leader-epoch lineage (:func:`auditor.model.remote.outside_lineage`):
    not part of that replica's log."""
    rows = list(files)
    recovery_points = recovery_points or {}
    nxt = {r["path"]: r["next_offset"] for r in rows if r.get("next_offset") is not None}
    nxt.update(next_offsets or {})
    clean_dirs = {r["log_dir"] for r in rows if r.get("kind") == "clean-shutdown" and r.get("log_dir")}
    out: dict[str, Liveness] = {}
    by_dir: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        if r.get("partition") is None or r.get("topic") is None:
            out[r["path"]] = Liveness(r["path"], True)
            continue
        by_dir.setdefault(os.path.dirname(r["path"]), []).append(r)
    remote_dirs = []
    for d, members in by_dir.items():
        if members[0].get("dir_status") == "remote":
            remote_dirs.append(members)
            continue
        for lv in _partition_dir(members, recovery_points, nxt, clean_dirs):
            out[lv.path] = lv
    if remote_dirs:
        local_start = local_log_starts(rows, out)
        cluster_of = {r["log_dir"]: r.get("cluster_id") for r in rows if r.get("log_dir") is not None}
        for members in remote_dirs:
            for lv in _remote_partition_dir(members, local_start, readable_remote_segments, nxt,
                                            remote_outside_lineage or {}, cluster_of):
                out[lv.path] = lv
        _one_copy_per_remote_segment([r for m in remote_dirs for r in m], out, cluster_of)
    return out


def _one_copy_per_remote_segment(remote_rows: list[Mapping[str, Any]], out: dict[str, Liveness],
                                 cluster_of: Mapping[str, Any]) -> None:
    """A replica reads each remote segment once: where the input holds several copies of one remote
    file (the same segment id and kind of one partition of one cluster: two dumps of the remote
    store, taken at different times, given together), each replica keeps one -- the copy stored
    under its own log dir (the same dump) if it is live there, else the first by path -- and the
    others are not part of its log (``out`` updated in place). Without this every batch of the
    segment was in the replica's log twice, and the second copy looked like a duplicate append."""
    from auditor.ingest.remote_store import segment_id_of

    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for r in remote_rows:
        seg_id = segment_id_of(r["path"])
        if seg_id is not None:
            key = (cluster_of.get(r.get("log_dir")), r["topic"], r["partition"], seg_id, r.get("kind"))
            groups.setdefault(key, []).append(r)
    for (_, _, _, seg_id, _), rows in groups.items():
        if len(rows) < 2:
            continue
        per = {r["path"]: dict(out[r["path"]].replicas) or {r.get("log_dir"): out[r["path"]]} for r in rows}
        for d in sorted({d for p in per.values() for d in p}, key=str):
            holders = [r for r in rows if d in per[r["path"]] and per[r["path"]][d].live]
            if len(holders) < 2:
                continue
            keep = next((r for r in holders if r.get("log_dir") == d), None) or min(holders, key=lambda r: r["path"])
            for r in holders:
                if r is not keep:
                    per[r["path"]][d] = Liveness(r["path"], False, f"another copy of remote segment {seg_id} "
                                                                   f"({keep['path']}) is read for this replica")
        for r in rows:
            lv = per[r["path"]]
            own = lv[r.get("log_dir")]
            out[r["path"]] = Liveness(own.path, own.live, own.reason, own.end_offset, own.end_position,
                                      tuple(lv.items()) if len(lv) > 1 else ())


def local_log_starts(rows: list[Mapping[str, Any]], out: Mapping[str, Liveness]) -> dict[tuple, int]:
    """(log_dir, topic, partition) -> base offset of the replica's first live local segment."""
    starts: dict[tuple, int] = {}
    for r in rows:
        lv = out.get(r["path"])
        if (r.get("kind") == "segment" and r.get("dir_status") == "live" and r.get("base_offset") is not None
                and lv is not None and lv.live):
            k = (r.get("log_dir"), r["topic"], r["partition"])
            starts[k] = min(starts.get(k, r["base_offset"]), r["base_offset"])
    return starts


def _remote_partition_dir(members: list[Mapping[str, Any]], local_start: Mapping[tuple, int],
                          readable: set[str] | None, nxt: Mapping[str, int],
                          outside: Mapping = {}, cluster_of: Mapping[str, Any] = {}) -> list[Liveness]:
    """Each remote file's :class:`Liveness` for every replica of its partition with a local log in
    the input (``local_start``) in the cluster of the replica it is stored under (``cluster_of``:
    log dir -> cluster id), in ``Liveness.replicas``; its own fields are those of the replica
    it is stored under (:func:`auditor.ingest.remote_store.attach`). The remote log is one for all
    replicas, read by each below its own local log start (RemoteLogManager.read on the replica
    serving the fetch, Kafka 4.3.1) and checked against its own leader-epoch cache
    (RemoteLogManager.isRemoteSegmentWithinLeaderEpochs), so the verdict is per replica."""
    out = []
    for r in members:
        topic, part = r["topic"], r["partition"]
        cluster = cluster_of.get(r.get("log_dir"))
        dirs = sorted({d for (d, t, p) in local_start if (t, p) == (topic, part) and cluster_of.get(d) == cluster}
                      | {r.get("log_dir")}, key=str)
        per = tuple((d, _remote_file({**r, "log_dir": d}, local_start, readable, nxt, outside)) for d in dirs)
        own = dict(per)[r.get("log_dir")]
        out.append(Liveness(own.path, own.live, own.reason, own.end_offset, own.end_position,
                            per if len(per) > 1 else ()))
    return out


def _remote_file(r: Mapping[str, Any], local_start: Mapping[tuple, int], readable: set[str] | None,
                 nxt: Mapping[str, int], outside: Mapping) -> Liveness:
    """Tiered storage (KIP-405): a remote segment is part of the replica's log below its local log
    start. The broker serves a fetch from the local log at and above ``localLogStartOffset`` and
    from remote storage only below it (ReplicaManager.readFromLog -> RemoteLogManager.read on
    OffsetOutOfRange below the local start, Kafka 4.3.1); a segment copied but not yet deleted
    locally (RemoteLogManager copies, local retention deletes later) is read locally. A remote
    segment whose latest metadata state is not COPY_SEGMENT_FINISHED (a copy that never finished, a
    deletion started) is not readable (RemoteLogMetadataCache keeps only finished copies in its
    leader-epoch lineage)."""
    from auditor.ingest.remote_store import segment_id_of

    key = (r.get("log_dir"), r["topic"], r["partition"])
    start = local_start.get(key)
    seg_id = segment_id_of(r["path"])
    if readable is not None and seg_id is not None and seg_id not in readable:
        return Liveness(r["path"], False, f"remote segment {seg_id} is not readable: its latest "
                                          "__remote_log_metadata state is not COPY_SEGMENT_FINISHED")
    why = outside.get((r.get("log_dir"), seg_id)) or outside.get(seg_id)
    if seg_id is not None and why:
        return Liveness(r["path"], False, why)
    if start is not None and r.get("base_offset") is not None and r["base_offset"] >= start:
        return Liveness(r["path"], False, f"remote copy of offsets the replica still holds locally (local log "
                                          f"start {start}): the broker reads them from the local log")
    if start is not None and r.get("kind") == "segment" and nxt.get(r["path"], start + 1) > start:
        # reaches into the local log (or its end is not known): bounded at the local log start
        return Liveness(r["path"], True, f"remote segment below the local log start {start}", end_offset=start)
    return Liveness(r["path"], True)


def recovery_points(checkpoint_rows: Iterable[Mapping[str, Any]]) -> dict[tuple, int]:
    """(log_dir, topic, partition) -> recovery point, from ``checkpoints`` rows."""
    return {(r["log_dir"], r["topic"], r["partition"]): r["offset"] for r in checkpoint_rows
            if r["checkpoint_kind"] == "recovery-point-offset"}


def _partition_dir(members: list[Mapping[str, Any]], recovery_points: Mapping[tuple, int],
                   nxt: Mapping[str, int], clean_dirs: set[str]) -> list[Liveness]:
    first = members[0]
    if first.get("dir_status") in ("delete", "stray"):
        why = f"in a -{first['dir_status']} partition directory: a replica the broker no longer serves"
        return [Liveness(r["path"], False, why) for r in members]
    if any(r.get("kind") == UNTYPED_MARKERS_KIND for r in members):
        why = ("dumped as text without --deep-iteration: its control batches' COMMIT/ABORT are not shown, so "
               "the partition's transactions cannot be replayed (kept in the tables, not audited)")
        return [Liveness(r["path"], False, why) for r in members]
    verdict: dict[str, Liveness] = {}

    def drop(r: Mapping[str, Any], why: str) -> None:
        verdict[r["path"]] = Liveness(r["path"], False, why)

    named = [r for r in members if r.get("kind") in OFFSET_NAMED and r.get("base_offset") is not None]
    cleaned = [r for r in named if r.get("file_status") == "cleaned"]
    min_cleaned = min((r["base_offset"] for r in cleaned), default=None)
    for r in named:
        if r.get("file_status") == "deleted":
            drop(r, "a .deleted file: the broker deletes it at load (its replacement is live)")
        elif r.get("file_status") == "cleaned":
            drop(r, "a .cleaned file: log cleaner output not yet swapped in; the broker deletes it at load")
        elif r.get("file_status") == "swap" and min_cleaned is not None and r["base_offset"] >= min_cleaned:
            drop(r, f"a .swap file at or above the lowest .cleaned offset {min_cleaned}: an interrupted split the broker discards")
    swaps = [r for r in named if r.get("file_status") == "swap" and r["path"] not in verdict and r.get("kind") in SEGMENT_KINDS]
    if swaps:
        lo = min(r["base_offset"] for r in swaps)
        hi = max(nxt.get(r["path"], r["base_offset"]) for r in swaps)
        for r in named:
            if r["path"] in verdict or r.get("file_status") == "swap":
                continue
            if lo <= r["base_offset"] < hi:
                drop(r, f"replaced by the .swap segment(s) covering offsets {lo}..{hi - 1}: the broker completes the swap at load")
    # the segments now making up the log, in offset order
    segs = sorted((r for r in named if r.get("kind") in SEGMENT_KINDS and r["path"] not in verdict),
                  key=lambda r: r["base_offset"])
    bounds: dict[str, dict[str, Any]] = {}
    log_dir = first.get("log_dir")
    if segs and log_dir not in clean_dirs:
        rp = recovery_points.get((log_dir, first.get("topic"), first.get("partition")), 0)
        start = 0
        for i, s in enumerate(segs):
            if s["base_offset"] <= rp:
                start = i
        for i in range(start, len(segs)):
            s = segs[i]
            pos = s.get("error_position")
            if s.get("status") in RECOVERY_TRUNCATES and pos is not None and pos >= 0:
                bounds.setdefault(s["path"], {})["end_position"] = _batch_start(pos, s.get("status"))
                bounds[s["path"]]["reason"] = (
                    f"recovery truncates it at byte {bounds[s['path']]['end_position']} ({s['status']}; no clean shutdown, "
                    f"at or after the recovery point {rp})")
                for later in segs[i + 1:]:
                    drop(later, f"deleted by recovery: an invalid batch in the earlier segment {s['path']} "
                                f"(no clean shutdown, at or after the recovery point {rp})")
                segs = segs[: i + 1]
                break
    for a, b in zip(segs, segs[1:]):
        end = nxt.get(a["path"])
        if end is not None and end > b["base_offset"]:
            d = bounds.setdefault(a["path"], {})
            d["end_offset"] = b["base_offset"]
            d["reason"] = ((d.get("reason") + "; ") if d.get("reason") else "") + (
                f"overlaps the next segment from offset {b['base_offset']}: reads from there find the next segment")
    out = []
    for r in members:
        if r["path"] in verdict:
            out.append(verdict[r["path"]])
        elif r["path"] in bounds:
            d = bounds[r["path"]]
            out.append(Liveness(r["path"], True, d.get("reason"), d.get("end_offset"), d.get("end_position")))
        else:
            out.append(Liveness(r["path"], True))
    return out


def _batch_start(position: int, status: str | None) -> int:
    """The inventory gives a bad CRC's position at the CRC field (batch start + 17);
    other problems at the batch start."""
    return position - 17 if status == "bad-crc" and position >= 17 else position


def row_bounds_columns(table: str) -> tuple[str, str] | None:
    """(position column, offset column) of a table's rows, for partial files; None
    for tables whose rows are not batches or records of a segment."""
    if table == "batches":
        return "position", "base_offset"
    if table in ("transaction_log", "offset_commits", "group_metadata", "group_records", "share_group_state",
                 "metadata_records"):
        return "batch_position", "offset"
    return None


# the inventory's columns the decision reads
INVENTORY_COLUMNS = ("path", "cluster_id", "log_dir", "topic", "partition", "dir_status", "kind", "file_status",
                     "base_offset", "status", "error_position", "next_offset")
# a file of a replica directory the broker renamed for deletion, or found stray (``topic-N.<uuid>-delete``)
RETIRED_REPLICA_FILE = r"\.[0-9a-fA-F]{32}-(delete|stray)/[^/]+$"
_RETIRED = re.compile(RETIRED_REPLICA_FILE)

SmallRows = Callable[[str, tuple], "list[dict] | None"]


def live_log_of(small_rows: SmallRows, *, swap_ends: Callable[[list[str]], dict[str, int]] | None = None,
                remote_metadata: Callable[[], list[dict]] | None = None) -> dict[str, Liveness] | None:
    """:func:`decide` over an input's tables, however they are read (``small_rows(table, columns)``:
    the rows of a small table with those of ``columns`` it has, None when it is missing; the audit
    reads Parquet or Delta, the commands without Spark read with pyarrow): the inventory, the
    recovery points, and for tiered storage the remote segments' metadata and the replicas' leader
    epochs. ``swap_ends(paths)``: the offset after each ``.swap`` segment's last batch, for tables
    written before the inventory carried it (``files.next_offset``). ``remote_metadata()``: the
    remote segments' metadata rows when the caller keeps them (else read here,
    :func:`auditor.model.remote.metadata_rows`). None: no inventory to tell
    (hand-made tables; :func:`keep_rows` then recognises retired directories by name)."""
    rows = small_rows("files", INVENTORY_COLUMNS)
    if rows is None or (rows and ("path" not in rows[0] or "dir_status" not in rows[0])):
        return None
    recovery: dict[tuple, int] = {}
    if any(r.get("kind") == "recovery-point-offset-checkpoint" for r in rows):
        cp = small_rows("checkpoints", ("checkpoint_kind", "log_dir", "topic", "partition", "offset")) or []
        recovery = recovery_points([r for r in cp if r.get("checkpoint_kind") == "recovery-point-offset"])
    swaps = [r["path"] for r in rows if r.get("file_status") == "swap" and r.get("kind") == "segment"
             and r.get("next_offset") is None]
    nxt = swap_ends(swaps) if swaps and swap_ends is not None else {}
    readable, outside = None, None
    if any(r.get("dir_status") == "remote" for r in rows):
        from auditor.model import remote

        meta = remote_metadata() if remote_metadata is not None else remote.metadata_rows(small_rows)
        if meta:
            readable = remote.readable_segment_ids(meta)
            epochs = small_rows("leader_epochs", ("log_dir", "topic", "partition", "leader_epoch", "start_offset"))
            outside = remote.outside_lineage(meta, *remote.replica_lineages(rows, epochs or [], per_replica=True))
    return decide(rows, recovery_points=recovery, next_offsets=nxt, readable_remote_segments=readable,
                  remote_outside_lineage=outside)


def decide_for_tables(tables_dir) -> dict[str, Liveness] | None:
    """:func:`live_log_of` an ingested tables directory (Parquet or Delta), read with pyarrow:
    for the commands that answer without Spark (``tables``, ``timeline``, ``coordinator``)."""
    from functools import partial

    from auditor.tables.source import arrow_dataset, small_rows

    def swap_ends(paths: list[str]) -> dict[str, int]:
        import pyarrow.compute as pc

        d = arrow_dataset(tables_dir, "batches")
        if d is None:
            return {}
        t = d.to_table(columns=["file", "last_offset"], filter=pc.field("file").isin(paths))
        return {r["file"]: r["last_offset_max"] + 1 for r in t.group_by("file").aggregate([("last_offset", "max")])
                .to_pylist() if r["last_offset_max"] is not None}

    return live_log_of(partial(small_rows, tables_dir), swap_ends=swap_ends)


def retired_by_name(path: str | None) -> bool:
    """A file of a retired replica directory, told by its name alone (no inventory to tell)."""
    return bool(path) and ("-delete/" in path or "-stray/" in path) and _RETIRED.search(path) is not None


def keep_rows(rows: Iterable[dict[str, Any]], table: str, live: Mapping[str, Liveness] | None) -> list[dict[str, Any]]:
    """The rows of ``table`` (dicts with ``file`` and the table's :func:`row_bounds_columns`) in the
    live log ``live`` (None: retired replica directories left out by name); a file the decision
    does not list is kept. :func:`keep_frame` is the same filter over a DataFrame."""
    if live is None:
        return [r for r in rows if not retired_by_name(r.get("file"))]
    pos, off = row_bounds_columns(table) or (None, None)
    out = []
    for r in rows:
        lv = live.get(r.get("file"))
        if lv is None or lv.keeps(r.get(pos) if pos else None, r.get(off) if off else None):
            out.append(r)
    return out


# above this many files left out, a DataFrame leaves them out with a broadcast anti-join
MAX_ISIN_FILES = 2000


def keep_frame(df, table: str, live: Mapping[str, Liveness] | None, small_df, *, drop: Iterable[str] = ()):
    """:func:`keep_rows` over a DataFrame with a ``file`` column (``small_df(rows, schema)``: a
    small DataFrame of driver-side rows). ``drop``: files whose rows are left out whole besides (the
    caller adds them its own way, as the audit does for remote segments that several replicas read)."""
    from pyspark.sql import functions as F

    from auditor.spark.literals import in_strings

    if live is None:
        f = F.col("file")
        by_name = (f.contains("-delete/") | f.contains("-stray/")) & f.rlike(RETIRED_REPLICA_FILE)
        return df.where(~F.coalesce(by_name, F.lit(False)))
    drop = set(drop)
    dead = sorted(drop | {p for p, lv in live.items() if not lv.live})
    if len(dead) > MAX_ISIN_FILES:
        df = df.join(F.broadcast(small_df([(p,) for p in dead], "file string")), "file", "left_anti")
    elif dead:
        df = df.where(~in_strings("file", dead))
    cols = row_bounds_columns(table)
    bounded = [lv for lv in live.values() if lv.bounded and lv.path not in drop]
    if cols and bounded:
        pos_col, off_col = cols
        for lv in bounded:  # the bounds of Liveness.keeps
            cut = F.lit(False)
            if lv.end_position is not None:
                cut = cut | (F.col(pos_col) >= lv.end_position)
            if lv.end_offset is not None:
                cut = cut | (F.col(off_col) >= lv.end_offset)
            df = df.where(~((F.col("file") == lv.path) & cut))
    return df
