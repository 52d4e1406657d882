"""Mutations: copies of part of a real capture with named bytes changed, for what no broker writes on
purpose (a sequence gap, overlapping producer-id blocks). The exact change goes into the mutation's
expected.json under ``mutation``.

Batches are framed and read with the auditor's decoders (:mod:`auditor.formats.batch`,
:mod:`auditor.formats.records`, :mod:`auditor.formats.metadata`) and the changed batch's CRC is
recomputed with :func:`auditor.formats.crc.crc32c`, the CRC-32C Kafka's DefaultRecordBatch checks."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Callable

from auditor.formats.crc import crc32c
from auditor.formats.metadata import decode_metadata_value
from scripts.capture.inspection import batch_records, segment_batches

# byte positions in a v2 batch (Kafka's DefaultRecordBatch: CRC_OFFSET, ATTRIBUTES_OFFSET,
# BASE_SEQUENCE_OFFSET); the CRC covers the bytes from the attributes to the end of the batch
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
BASE_SEQUENCE_OFFSET = 53
PRODUCER_IDS_RECORD = 15  # the metadata record's api key (MetadataRecordType.PRODUCER_IDS_RECORD)


def _recrc(buf: bytearray, pos: int, size: int) -> tuple[int, int]:
    """Recompute the CRC-32C of the batch at ``pos`` in place; return (old, new)."""
    old = struct.unpack_from(">I", buf, pos + CRC_OFFSET)[0]
    new = crc32c(bytes(buf[pos + ATTRIBUTES_OFFSET: pos + size]))
    struct.pack_into(">I", buf, pos + CRC_OFFSET, new)
    return old, new


def _copy_base(base: str, name: str, parts: list[str], out: Path) -> Path:
    """Copy ``parts`` (partition dirs) and meta.properties of ``out/base/broker-1`` to ``out/name/broker-1``."""
    src = out / base / "broker-1"
    if not src.is_dir():
        raise RuntimeError(f"mutation {name} needs the capture {base}: run --only {base} first")
    dst = out / name / "broker-1"
    if dst.parent.exists():
        shutil.rmtree(dst.parent)
    dst.mkdir(parents=True)
    shutil.copy2(src / "meta.properties", dst / "meta.properties")
    for p in parts:
        shutil.copytree(src / p, dst / p)
    return dst


def mutate_out_of_order(name: str, out: Path) -> dict:
    """From `unknown-producer`: in ledger-0, producer Q's retained batches from its second one on get
    base sequences 3 higher than Q sent, so Q's sequence jumps from s to s+4 between two consecutive
    batches (a gap the broker would have refused with OUT_OF_ORDER_SEQUENCE_NUMBER) and then runs on
    consecutively. The producer snapshots are left out: they hold Q's real last sequence."""
    base = "unknown-producer"
    shift = 3
    exp = json.loads((out / base / "expected.json").read_text())
    low = exp["steps"]["log_start_offset_after_delete"]
    # Q's batches: one record each (flushed one by one), sequences as recorded
    retained = [w for w in exp["writes"] if w["producer"] == "Q" and w["record_offsets"][0] >= low]
    prev, targets = retained[0], {w["record_offsets"][0]: w for w in retained[1:]}
    dst = _copy_base(base, name, ["ledger-0"], out)
    # the log dir's cleaner checkpoint too: it shows ledger-0 was never compacted, so the gap is loss
    # (without it, a gap in a partition directory alone is undetermined: rules/out_of_order_sequence.py)
    shutil.copy2(out / base / "broker-1" / "cleaner-offset-checkpoint", dst / "cleaner-offset-checkpoint")
    for snap in (dst / "ledger-0").glob("*.snapshot"):
        snap.unlink()  # our copy, not the capture
    changes = []
    for seg in sorted((dst / "ledger-0").glob("*.log")):
        buf = bytearray(seg.read_bytes())
        for h in segment_batches(bytes(buf)):
            w = targets.get(h.base_offset)
            if w is None:
                continue
            pos, size, base_off, pid, seq = h.position, h.size, h.base_offset, h.producer_id, h.base_sequence
            if pid != w["producer_id"] or seq != w["first_sequence"]:
                raise RuntimeError(f"batch at {base_off}: pid {pid} seq {seq} not as recorded {w}")
            struct.pack_into(">i", buf, pos + BASE_SEQUENCE_OFFSET, seq + shift)
            old, new = _recrc(buf, pos, size)
            changes.append({"file": f"broker-1/ledger-0/{seg.name}", "batch_position": pos, "batch_base_offset": base_off,
                            "base_sequence": [seq, seq + shift], "crc": [old, new]})
        seg.write_bytes(bytes(buf))
    if len(changes) != len(targets):
        raise RuntimeError(f"changed {len(changes)} of {len(targets)} batches")
    first = min(changes, key=lambda c: c["batch_base_offset"])
    return {
        "description": mutate_out_of_order.__doc__,
        "derived_from": base,
        "mutation": {
            "change": f"baseSequence (int32 at batch bytes 53-56) += {shift} in every batch of producer "
                      f"{prev['producer_id']} from offset {first['batch_base_offset']} on",
            "crc": "each changed batch's CRC-32C (batch bytes 17-20) recomputed over batch bytes 21..end",
            "batches": changes,
            "other_files": "meta.properties, cleaner-offset-checkpoint and ledger-0 copied from "
                           "../unknown-producer/broker-1; the producer snapshots (*.snapshot) of ledger-0 are left out "
                           "because they hold the real sequences",
        },
        "expect": {"anomalies": [{
            "type": "out-of-order-sequence", "topic": "ledger", "partition": 0, "producer_id": prev["producer_id"],
            "producer_epoch": prev["producer_epoch"], "first_offset": first["batch_base_offset"],
            "base_sequence": first["base_sequence"][1], "expected_sequence": prev["first_sequence"] + 1,
            "previous_batch_offset": prev["record_offsets"][0],
        }] + [a for a in exp["expect"]["anomalies"] if a["type"] == "unknown-producer"]},
    }


def mutate_overlapping_blocks(name: str, out: Path) -> dict:
    """From `many-producers`: the second ProducerIdsRecord in the metadata log gets a nextProducerId
    500 lower, so its block overlaps the first block by 500 ids (what KIP-730 must never allow, and
    what a ZooKeeper-to-KRaft migration bug could produce)."""
    base = "many-producers"
    dst = _copy_base(base, name, ["__cluster_metadata-0"], out)
    found = []
    for seg in sorted((dst / "__cluster_metadata-0").glob("*.log")):
        buf = bytearray(seg.read_bytes())
        for h in segment_batches(bytes(buf)):
            if h.is_control:
                continue
            for rec in batch_records(buf, h):
                row = decode_metadata_value(rec.value)
                if row["api_key"] == PRODUCER_IDS_RECORD:
                    found.append((seg, h.position, h.size, h.base_offset, rec.offset, bytes(rec.value),
                                  row["next_producer_id"]))
    if len(found) < 2:
        raise RuntimeError(f"need two ProducerIdsRecords, found {len(found)}")
    first, second = found[0], found[1]
    seg, pos, size, base_off, rec_offset, value, old_next = second
    buf = bytearray(seg.read_bytes())
    at = bytes(buf[pos: pos + size]).find(value)
    if at < 0 or bytes(buf[pos: pos + size]).count(value) != 1:
        raise RuntimeError("ProducerIdsRecord value not unique in its batch")
    # the value: frame version, api key and record version (one-byte varints here), then brokerId int32,
    # brokerEpoch int64, nextProducerId int64 (ProducerIdsRecord v0), tagged fields
    npid_at = pos + at + 3 + 4 + 8
    if struct.unpack_from(">q", buf, npid_at)[0] != old_next:
        raise RuntimeError(f"nextProducerId {old_next} is not at file bytes {npid_at}-{npid_at + 7}")
    first_next = first[6]
    new_next = old_next - 500
    struct.pack_into(">q", buf, npid_at, new_next)
    old, new = _recrc(buf, pos, size)
    seg.write_bytes(bytes(buf))
    return {
        "description": mutate_overlapping_blocks.__doc__,
        "derived_from": base,
        "mutation": {
            "file": f"broker-1/__cluster_metadata-0/{seg.name}", "batch_position": pos, "record_offset": rec_offset,
            "change": f"ProducerIdsRecord.nextProducerId (int64 at file bytes {npid_at}-{npid_at + 7}) {old_next} -> {new_next}",
            "crc": f"batch CRC-32C (bytes {pos + 17}-{pos + 20}) recomputed: {old} -> {new}",
            "other_files": "copied unchanged from ../many-producers/broker-1 (meta.properties and __cluster_metadata-0); "
                           "KRaft snapshots (*.checkpoint) there still hold the unmutated latest block",
        },
        "expect": {"anomalies": [{
            "type": "overlapping-producer-id-blocks", "topic": "__cluster_metadata", "partition": 0,
            "first_block": [first_next - 1000, first_next - 1], "first_record_offset": first[4],
            "second_block": [new_next - 1000, new_next - 1], "second_record_offset": rec_offset,
            "overlap": [new_next - 1000, first_next - 1],
        }]},
    }


MUTATIONS: dict[str, tuple[str, Callable[[str, Path], dict]]] = {
    "mutated-out-of-order-sequence": ("unknown-producer", mutate_out_of_order),
    "mutated-overlapping-pid-blocks": ("many-producers", mutate_overlapping_blocks),
}
