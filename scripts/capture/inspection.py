"""What the log dirs hold while a scenario runs and after the brokers stopped: the checks a scenario
makes before it trusts that Kafka did what the scenario needs (the cleaner made two passes, a marker
was emptied, ...), and the facts written into expected.json's ``steps`` / ``capture_checks``.

Decoding is the auditor's own (:mod:`auditor.formats.batch` frames the segments and reads the v2
headers, :mod:`auditor.formats.records` the records and control records,
:mod:`auditor.formats.checkpoints` the checkpoint files), so the scenarios and the auditor read the
bytes the same way. These checks only steer the capture; the ground truth stays the clients'
bookkeeping (:mod:`scripts.capture.bookkeeping`)."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from auditor.formats.batch import BatchHeader, LogProblem, iter_segment
from auditor.formats.checkpoints import checkpoint_kind, read_offset_checkpoint
from auditor.formats.records import Record, decode_control, iter_records
from scripts.capture.bookkeeping import tp

if TYPE_CHECKING:
    from scripts.capture.context import Ctx


def segment_batches(buf: bytes) -> Iterator[BatchHeader]:
    """The entries of a segment's bytes, framed by :func:`auditor.formats.batch.iter_segment` (CRC not
    checked: the bytes are Kafka's own, or a mutation's before its CRC is recomputed). Stops where the
    framing ends: a live segment's tail the broker is still appending to is not an entry yet."""
    for item in iter_segment(io.BytesIO(buf), file_size=len(buf), verify_crc=False):
        if isinstance(item, LogProblem):
            return
        yield item


def batch_records(buf: bytes, header: BatchHeader) -> Iterator[Record]:
    """The records of the batch ``header`` in ``buf`` (:func:`auditor.formats.records.iter_records`)."""
    return iter_records(header, bytes(buf[header.payload_position: header.position + header.size]))


def checkpoint_offsets(path: Path) -> dict[str, int]:
    """``<topic>-<partition>`` -> offset of an offset checkpoint (``cleaner-offset-checkpoint``,
    ``replication-offset-checkpoint``); empty when the broker has not written it (yet). Kafka's
    CheckpointFile replaces the file atomically (write a temporary file, rename), so a running
    broker's file is always whole."""
    if not path.exists():
        return {}
    rows = read_offset_checkpoint(path.read_bytes(), checkpoint_kind(path.name) or path.name)
    return {tp(r["topic"], r["partition"]): r["offset"] for r in rows}


def scan_partition_dir(part_dir: Path) -> dict:
    """What the live segments (``*.log``, not ``.deleted``/``.cleaned``/``.swap``) of a partition hold:
    record offsets, batches, emptied batches (record count 0, kept for producer state), control
    records (markers), tombstones, batches with the delete-horizon flag (attributes bit 6, KIP-534)."""
    offsets: set[int] = set()
    st = {"segments": 0, "batches": 0, "empty_batches": 0, "markers": 0, "tombstones": 0, "delete_horizon_batches": 0}
    for seg in sorted(part_dir.glob("*.log")):
        st["segments"] += 1
        buf = seg.read_bytes()
        for h in segment_batches(buf):
            st["batches"] += 1
            if h.record_count == 0:
                st["empty_batches"] += 1
            if h.has_delete_horizon:
                st["delete_horizon_batches"] += 1
            for r in batch_records(buf, h):
                offsets.add(r.offset)
                if h.is_control:
                    st["markers"] += 1
                elif r.value is None:
                    st["tombstones"] += 1
    files = sorted(f.name for f in part_dir.iterdir())
    st["records"] = len(offsets)
    st["log_end"] = max(offsets) + 1 if offsets else None
    st["deleted_files"] = [f for f in files if f.endswith(".deleted")]
    st["cleaned_or_swap_files"] = [f for f in files if f.endswith((".cleaned", ".swap"))]
    st["_offsets"] = offsets
    return st


def compaction_state(ctx: Ctx, topic: str, parts: list[int]) -> dict[str, dict[str, dict]]:
    """Per broker (``broker-<id>``) and partition: the cleaner-offset-checkpoint entry and what
    :func:`scan_partition_dir` sees, with the written totals from the clients' bookkeeping."""
    written_markers: dict[str, int] = {}
    for t in ctx.rec.txns:
        for k in t.marker_offsets:
            written_markers[k] = written_markers.get(k, 0) + 1
    out: dict[str, dict[str, dict]] = {}
    for node, d in ctx.log_dirs().items():
        ck = checkpoint_offsets(d / "cleaner-offset-checkpoint")
        for p in parts:
            k = tp(topic, p)
            st = scan_partition_dir(d / k)
            offs = st.pop("_offsets")
            end = st["log_end"] or 0
            keyed = ctx.rec.keyed.get(k, [])
            st.update({
                "cleaner_checkpoint": ck.get(k),
                "offset_holes": end - len(offs),
                "records_written": len([o for o, *_ in keyed]) + written_markers.get(k, 0),
                "tombstones_written": sum(1 for _, _, tomb, _ in keyed if tomb),
                "markers_written": written_markers.get(k, 0),
            })
            out.setdefault(f"broker-{node}", {})[k] = st
    return out


def wait_compaction(ctx: Ctx, topic: str, parts: list[int], nodes: list[int], cond: Callable[[dict], bool],
                    what: str, timeout: float = 90.0) -> dict:
    """Poll :func:`compaction_state` until ``cond`` holds for every partition on each of ``nodes``."""
    deadline = time.monotonic() + timeout
    while True:
        state = compaction_state(ctx, topic, parts)
        if all(cond(state[f"broker-{n}"][tp(topic, p)]) for n in nodes for p in parts):
            return state
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not reached after {timeout}s: {json.dumps(state, indent=1)}")
        time.sleep(0.5)


def first_pass_done(st: dict) -> bool:
    """The cleaner has cleaned the partition at least once: checkpoint entry, offsets removed, the
    replaced segments' files renamed *.deleted."""
    return bool(st["cleaner_checkpoint"]) and st["offset_holes"] > 0 and bool(st["deleted_files"])


def second_pass_done(st: dict) -> bool:
    """A later pass removed tombstones and markers of emptied transactions whose delete horizon passed."""
    return first_pass_done(st) and st["markers"] < st["markers_written"] and st["tombstones"] < st["tombstones_written"]


CONTROL_TYPES = {0: "ABORT", 1: "COMMIT"}  # ControlRecordType: key = version (int16) + type (int16)


def batch_at(part_dir: Path, base_offset: int) -> dict | None:
    """The v2 batch at ``base_offset`` in a partition's live segments (``*.log``), from its header
    (transactional, control, delete horizon; record count) and, for a control batch, its control
    record's type (ControlRecordType: ABORT, COMMIT, ...); None when no live segment holds a batch there."""
    for seg in sorted(part_dir.glob("*.log")):
        try:
            buf = seg.read_bytes()
        except FileNotFoundError:  # replaced by the cleaner meanwhile (renamed *.deleted): look again later
            return None
        for h in segment_batches(buf):
            if h.base_offset != base_offset:
                continue
            out = {"segment": seg.name, "last_offset_delta": h.last_offset_delta, "producer_id": h.producer_id,
                   "producer_epoch": h.producer_epoch, "base_sequence": h.base_sequence,
                   "record_count": h.record_count, "is_transactional": h.is_transactional,
                   "is_control": h.is_control, "has_delete_horizon": h.has_delete_horizon, "control_type": None}
            if h.is_control:
                for r in batch_records(buf, h):
                    out["control_type"] = decode_control(r.key, r.value).control_type
                    break
            return out
    return None



def emptied_marker(b: dict | None) -> bool:
    """A control batch the cleaner emptied and kept (BatchRetention.RETAIN_EMPTY): no record left."""
    return bool(b) and b["is_control"] and b["record_count"] == 0 and b["control_type"] is None


def full_abort(b: dict | None) -> bool:
    return bool(b) and b["is_control"] and b["record_count"] == 1 and b["control_type"] == "ABORT"
