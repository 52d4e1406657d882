"""The layout of a ``txn-audit dump`` batch line: its keys in order and the
tokens of its enumerated values, shared by the vectorised writer
(:mod:`auditor.dump._fast`) and the compiled one (:mod:`auditor.dump._native`).

The order is the per-object path's (``{"type": "batch", **segments.batch_row(...)}``):
the header columns as :class:`auditor.formats.batch.BatchHeader` has them, the
control record's two fields, where the batch was read from, then the file it is in
(:func:`place`: two segments of the same base offset told apart). No numpy here.
"""

from __future__ import annotations

import json
from typing import Iterator

from auditor.dump._literals import key_literal, token
from auditor.formats.batch import CODEC_NAMES, COLUMN_NAMES, TS_TYPE_NAMES
from auditor.formats.records import CONTROL_TYPES, decode_control

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
# the keys every object of a file ends with (:func:`place`); a table whose rows have a ``topic`` or
# ``partition`` of their own (a committed offset's) names the file's ``log_topic`` / ``log_partition``
PLACE_KEYS = ("file", "topic", "partition")


# files of a log dir itself, never of a partition's: a log dir named like a partition directory
# (``broker-1``) is not one (discovery reads a lone file's parent by its name)
_LOG_DIR_KINDS = frozenset(("recovery-point-offset-checkpoint", "replication-offset-checkpoint",
                            "log-start-offset-checkpoint", "cleaner-offset-checkpoint", "meta-properties",
                            "clean-shutdown"))


def place(task: dict, rename=None) -> dict:
    """Where every object of ``task``'s file comes from: its path, and the topic and partition of
    the ``<topic>-<partition>`` directory it sits in (left out for a file outside one: a
    checkpoint of the log dir). Without them the lines of two segments of the same base offset
    (two partitions' first segments) could not be told apart once mixed. ``rename``: a table's
    :meth:`~auditor.ingest.tables.TableSpec.context_name`, for rows whose own columns have those
    names."""
    got = {"file": task["path"]}
    if task.get("topic") is not None and task.get("partition") is not None and task["kind"] not in _LOG_DIR_KINDS:
        got["topic"] = task["topic"]
        got["partition"] = task["partition"]
    return got if rename is None else {rename(k): v for k, v in got.items()}


def place_literal(task: dict, rename=None) -> bytes:
    """:func:`place` as the end of a JSON line's text, before its ``}``."""
    return b"".join(key_literal(False, k) + token(v) for k, v in place(task, rename).items())


def record_object(h, rec, where: dict) -> dict:
    """One record of a data topic's batch ``h``: what Kafka's DumpLogSegments prints of it with
    ``--deep-iteration`` (offset, timestamp, sizes, sequence, header keys), payloads left out;
    ``where``: :func:`place` of its file."""
    return {
        "type": "record",
        "offset": rec.offset,
        "timestamp": rec.timestamp,
        "sequence": rec.sequence,
        "key_size": -1 if rec.key is None else len(rec.key),
        "value_size": -1 if rec.value is None else len(rec.value),
        "header_keys": [k for k, _ in rec.headers],
        "batch_base_offset": h.base_offset,
        **where,
    }


def control_objects(h, recs, where: dict) -> list[dict]:
    """The records of control batch ``h`` (``recs``: its records, as ``iter_records`` yields them):
    a COMMIT/ABORT marker as ``type`` ``marker``, any other control record (KRaft's) as
    ``control``, each a record's fields then its control type and coordinator epoch -- what
    Kafka's DumpLogSegments prints after a control record's fields (``endTxnMarker: COMMIT
    coordinatorEpoch: 0``, ``controlType: LEADER_CHANGE(2)``). A record that does not decode
    ends them: the batch pass reports it (``auditor.ingest.segments.iter_batches``)."""
    from auditor.errors import DecodeError

    out = []
    try:
        for rec in recs:
            c = decode_control(rec.key, rec.value)
            obj = record_object(h, rec, {})
            obj["type"] = "marker" if c.control_type_id in (0, 1) else "control"
            obj["control_type"] = c.control_type
            obj["coordinator_epoch"] = c.coordinator_epoch
            obj.update(where)
            out.append(obj)
    except DecodeError:
        pass
    return out


def record_objects(h, f, where: dict) -> Iterator[dict]:
    """The objects of batch ``h``'s records (read from ``f``), as ``dump --records`` writes them:
    :func:`record_object` per data record, :func:`control_objects` for a control batch; those
    before a record that does not decode (the batch pass reports it)."""
    from auditor.errors import DecodeError
    from auditor.formats.batch import read_payload
    from auditor.formats.records import iter_records

    try:
        recs = iter_records(h, read_payload(f, h))
        if h.is_control:
            yield from control_objects(h, recs, where)
            return
        for rec in recs:
            yield record_object(h, rec, where)
    except DecodeError:
        return


def iter_record_objects(f, size: int, start: int, where: dict, controls_only: bool = False) -> Iterator[dict]:
    """:func:`record_objects` of every batch of a segment from byte ``start`` (a legacy wrapper
    whose records cannot be read has none, as in ``segments.iter_data_records``); problems are
    the batch pass's to report. ``controls_only``: the control batches' alone (an internal
    topic's data records are its tables' rows)."""
    from auditor.ingest import segments

    for item in segments.iter_batches(f, size, start, with_control=False):
        if isinstance(item, tuple):
            h = item[0]
            if (controls_only and not h.is_control) or (h.magic < 2 and h.record_count < 0):
                continue
            yield from record_objects(h, f, where)


def tail(task: dict) -> bytes:
    """The end of every batch line of ``task``'s file: where it was read from, and :func:`place`."""
    source = "kraft-snapshot" if task["kind"] == "kraft-snapshot" else "segment"
    return (KEYS["segment_base_offset"] + token(task.get("base_offset")) + KEYS["source"] + token(source)
            + place_literal(task) + END)


def record_end(task: dict) -> bytes:
    """The end of every record line of ``task``'s file: :func:`place`."""
    return place_literal(task) + END


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
    """A file's batches as kafka-dump-log's ``name: value`` pairs (:func:`table_rows`), one after another."""
    return [line for row in table_rows(batches, width, safe) for line in row]


def table_rows(batches: list[dict], width: int, safe=str) -> list[list[str]]:
    """A file's batches as kafka-dump-log's ``name: value`` pairs, one batch per row (its lines),
    values padded so that each field lines up down the file; a row wider than ``width`` continues
    on indented lines, broken between pairs (never inside one), at the same places for every row.
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
        out.append([parts[0]] + [p for p in parts[1:] if p.strip()])  # a continuation of empty cells is left out
    return out


# the keys of a record object a ``--format table`` record line does not repeat after its fields:
# the record's own (printed first) and its batch's, and the file's (said once, in the heading)
_RECORD_LINE_SKIP = frozenset(("type", "offset", "timestamp", "batch_position", "batch_producer_id",
                               "batch_producer_epoch", "batch_is_transactional", "log_topic", "log_partition",
                               *PLACE_KEYS))
_CONTROL_IDS = {name: i for i, name in CONTROL_TYPES.items()}


def record_line(rec: dict, batch: dict, decoded: "list[dict]") -> str:
    """One record under its batch in ``dump --format table --records``, as Kafka's DumpLogSegments
    prints it with ``--deep-iteration`` (``printRecordMetadata``): ``| offset: N CreateTime: T
    keySize: K valueSize: V`` then, in a v2 batch, ``sequence: S headerKeys: [a,b]``; a marker
    adds ``endTxnMarker: COMMIT coordinatorEpoch: N``, another control record ``controlType:
    NAME(id)``. ``decoded``: the record's rows in the tables of an internal topic (its
    transaction-log, offset-commit, metadata row), each added as ``<table>: {its columns}`` in
    the place of the tool's ``key: ... payload: ...``."""
    ts = batch.get("timestamp_type") or "CreateTime"  # the batch's, as the tool prints it (NoTimestampType: -1)
    line = (f"| offset: {rec['offset']} {ts}: {rec['timestamp']} keySize: {rec['key_size']} "
            f"valueSize: {rec['value_size']}")
    if batch.get("magic", 2) >= 2:
        line += f" sequence: {rec['sequence']} headerKeys: [{','.join(rec['header_keys'])}]"
    if rec["type"] == "marker":
        line += f" endTxnMarker: {rec['control_type']} coordinatorEpoch: {rec['coordinator_epoch']}"
    elif rec["type"] == "control":
        name = rec["control_type"]
        line += f" controlType: {name}({_CONTROL_IDS[name]})" if name in _CONTROL_IDS else f" controlType: {name}"
    for row in decoded:
        fields = {k: v for k, v in row.items() if k not in _RECORD_LINE_SKIP}
        line += f" {row['type']}: {json.dumps(fields, default=_text, separators=(',', ':'))}"
    return line


def _text(v) -> str:
    """A decoded value JSON has no type for: bytes as hex (as ``dump``'s JSON lines write them)."""
    return v.hex() if isinstance(v, (bytes, bytearray)) else str(v)
