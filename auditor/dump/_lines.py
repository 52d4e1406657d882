"""The layout of a ``txn-audit dump`` batch line: its keys in order and the
tokens of its enumerated values, shared by the vectorised writer
(:mod:`auditor.dump._fast`) and the compiled one (:mod:`auditor.dump._native`).

The order is the per-object path's (``{"type": "batch", **segments.batch_row(...)}``):
the header columns as :class:`auditor.formats.batch.BatchHeader` has them, the
control record's two fields, then where the batch was read from. No numpy here.
"""

from __future__ import annotations

from auditor.dump._literals import key_literal, token
from auditor.formats.batch import CODEC_NAMES, COLUMN_NAMES, TS_TYPE_NAMES
from auditor.formats.records import CONTROL_TYPES

BATCH_KEYS = ["type", *COLUMN_NAMES, "control_type", "coordinator_epoch", "segment_base_offset", "source"]
KEYS = {k: key_literal(i == 0, k) for i, k in enumerate(BATCH_KEYS)}
CODEC_TOKENS = [token(n) for n in CODEC_NAMES]
TS_TOKENS = [token(n) for n in TS_TYPE_NAMES]
# a control batch's type, by its id: ABORT, COMMIT (markers, with a coordinator epoch), then KRaft's
MARKER_TOKENS = [token(CONTROL_TYPES[t]) for t in range(len(CONTROL_TYPES))]
TYPE = token("batch")
END = b"}\n"
# a record line (``dump --records`` of a data topic): record_object's keys, in its order
RECORD_KEYS = ["type", "offset", "timestamp", "sequence", "key_size", "value_size", "header_keys", "batch_base_offset"]
RKEYS = {k: key_literal(i == 0, k) for i, k in enumerate(RECORD_KEYS)}
RECORD_TYPE = token("record")


def record_object(h, rec) -> dict:
    """One record of a data topic's batch ``h``: what Kafka's DumpLogSegments prints of it with
    ``--deep-iteration`` (offset, timestamp, sizes, sequence, header keys), payloads left out."""
    return {
        "type": "record",
        "offset": rec.offset,
        "timestamp": rec.timestamp,
        "sequence": rec.sequence,
        "key_size": -1 if rec.key is None else len(rec.key),
        "value_size": -1 if rec.value is None else len(rec.value),
        "header_keys": [k for k, _ in rec.headers],
        "batch_base_offset": h.base_offset,
    }


def tail(task: dict) -> bytes:
    """The end of every batch line of ``task``'s file: where it was read from."""
    source = "kraft-snapshot" if task["kind"] == "kraft-snapshot" else "segment"
    return KEYS["segment_base_offset"] + token(task.get("base_offset")) + KEYS["source"] + token(source) + END


# -- ``dump --format table``: kafka-dump-log's names, aligned -------------------------------------

# (kafka-dump-log's name, the batch object's key), in DumpLogSegments' order (printBatchLevel);
# the timestamp's name is the batch's timestamp type, as there (CreateTime / LogAppendTime)
TABLE_FIELDS = [
    ("baseOffset", "base_offset"), ("lastOffset", "last_offset"), ("count", "record_count"),
    ("baseSequence", "base_sequence"), ("lastSequence", "last_sequence"), ("producerId", "producer_id"),
    ("producerEpoch", "producer_epoch"), ("partitionLeaderEpoch", "partition_leader_epoch"),
    ("isTransactional", "is_transactional"), ("isControl", "is_control"), ("position", "position"),
    ("CreateTime", "max_timestamp"), ("size", "size"), ("magic", "magic"), ("compresscodec", "compression"),
    ("crc", "crc"), ("isvalid", "crc_valid"),
]
# a control batch's record, as kafka-dump-log prints it (``endTxnMarker: COMMIT coordinatorEpoch: 0``)
MARKER_FIELDS = [("endTxnMarker", "control_type"), ("coordinatorEpoch", "coordinator_epoch")]


def _value(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def table_lines(batches: list[dict], width: int, safe=str) -> list[str]:
    """A file's batches as kafka-dump-log's ``name: value`` pairs, one batch per row, values
    padded so that each field lines up down the file; a row wider than ``width`` continues on
    indented lines, broken between pairs (never inside one), at the same places for every row.
    ``safe`` makes a value fit for a terminal."""
    fields = list(TABLE_FIELDS)
    if any(b.get("control_type") is not None for b in batches):
        fields += MARKER_FIELDS
    rows = []
    for b in batches:
        row = {}
        for name, key in fields:
            label = (b.get("timestamp_type") or "CreateTime") if key == "max_timestamp" else name
            row[name] = (safe(label), safe(_value(b.get(key))))
        rows.append(row)
    label_w = {n: max([len(n)] + [len(r[n][0]) for r in rows]) for n, _ in fields}
    value_w = {n: max([1] + [len(r[n][1]) for r in rows]) for n, _ in fields}
    cell_w = {n: label_w[n] + 2 + value_w[n] for n, _ in fields}
    # the same line breaks for every row: greedy over the padded cells
    breaks, used = [], 0
    for i, (n, _) in enumerate(fields):
        add = cell_w[n] if used == 0 else 1 + cell_w[n]
        if used and used + add > width:
            breaks.append(i)
            used = 2 + cell_w[n]
        else:
            used += add
    out = []
    for r in rows:
        line, parts = "", []
        for i, (n, _) in enumerate(fields):
            label, value = r[n]
            cell = f"{label}: {value}".ljust(cell_w[n]) if value else " " * cell_w[n]
            if i in breaks:
                parts.append(line.rstrip())
                line = "  " + cell
            else:
                line += (" " if line else "") + cell
        parts.append(line.rstrip())
        out += [parts[0]] + [p for p in parts[1:] if p.strip()]  # a continuation of empty cells is left out
    return out
