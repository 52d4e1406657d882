"""``txn-audit dump``: a structured, faster ``kafka-dump-log``.

One JSON object per batch (and per record with ``--records``), with snake_case
versions of Kafka's field names. Works on any file ingestion understands
(segments, KRaft snapshots, producer snapshots, indexes, checkpoints): each is
run through the same table decoders as ``ingest``, so the dump and the tables
always agree. No Spark is started.
"""

from __future__ import annotations

import json
import sys
from typing import Iterator

import click
from rich.table import Table

from auditor.cli.console import err, safe, wide
from auditor.errors import DecodeError
from auditor.ingest.context import CONTEXT_COLUMNS
from auditor.ingest.plan import make_plan
from auditor.ingest.tables import TABLES, iter_rows
from auditor.ingest import segments

_CTX = {c.name for c in CONTEXT_COLUMNS}
_TABLE_COLUMNS = {  # column -> short header
    "position": "position", "base_offset": "base", "last_offset": "last", "record_count": "count",
    "producer_id": "producerId", "producer_epoch": "epoch", "base_sequence": "baseSeq",
    "last_sequence": "lastSeq", "is_transactional": "txn", "is_control": "ctl",
    "control_type": "marker", "coordinator_epoch": "coordEpoch", "compression": "codec", "crc_valid": "crcOk",
}


def _records(task: dict) -> Iterator[dict]:
    """Generic per-record objects (offset, timestamp, sizes, sequence, header keys)."""
    with open(task["path"], "rb") as f:
        for item in segments.iter_data_records(f, task["size"]):
            if not isinstance(item, tuple):
                continue  # problems are reported by the batch pass
            h, rec = item
            yield {
                "type": "record",
                "offset": rec.offset,
                "timestamp": rec.timestamp,
                "sequence": rec.sequence,
                "key_size": -1 if rec.key is None else len(rec.key),
                "value_size": -1 if rec.value is None else len(rec.value),
                "header_keys": [k for k, _ in rec.headers],
                "batch_base_offset": h.base_offset,
            }


def _objects(task: dict, with_records: bool) -> Iterator[dict]:
    for name, spec in TABLES.items():
        if not spec.accepts(task):
            continue
        if name != "batches" and task["kind"] == "segment" and not with_records:
            continue  # internal-topic record decoders only with --records
        for row in iter_rows(spec, task):
            if row.get("_problem_kind"):
                yield {"type": "problem", "file": task["path"], "table": name, "kind": row["_problem_kind"],
                       "position": row["_problem_position"], "message": row["_problem_message"]}
                continue
            obj = {"type": "batch" if name == "batches" else name}
            obj.update({k: v for k, v in row.items() if k not in _CTX and not k.startswith("_problem")})
            yield obj
    if with_records and task["kind"] in ("segment", "kraft-snapshot") and task.get("topic") not in (
        "__transaction_state", "__consumer_offsets", "__cluster_metadata"
    ):
        yield from _records(task)


@click.command("dump")
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["jsonl", "table"]), default="jsonl", show_default=True)
@click.option("--records", is_flag=True, help="Also one object per record (decoded for internal topics).")
def dump_cmd(files, fmt, records) -> None:
    """Decode FILES (segments, snapshots, indexes, checkpoints) to JSON lines or a table.

    Problems go to stderr with path and byte position; exit status 1 if any.
    """
    plan = make_plan(list(files), split_bytes=1 << 62)
    bad = False
    table = None
    if fmt == "table":
        table = Table(show_lines=False)
        for c in ["file", *_TABLE_COLUMNS.values()]:
            table.add_column(c, overflow="fold")
    by_path = {t["path"]: t for t in plan.tasks}
    for fi in plan.files:
        task = by_path.get(fi.path)
        if task is None:
            bad = True
            err.print(f"[yellow]skipped[/yellow] {safe(fi.path)}: {safe(fi.note or 'not a Kafka file this tool decodes')}")
            continue
        for obj in _objects(task, records):
            if obj["type"] == "problem":
                bad = True
                err.print(f"[red]{safe(obj['kind'])}[/red] {safe(obj['file'])} at byte {obj['position']}: {safe(obj['message'])}")
                continue
            if table is not None:
                if obj["type"] == "batch":
                    table.add_row(safe(fi.path.rsplit("/", 1)[-1]), *["" if obj.get(c) is None else safe(obj.get(c)) for c in _TABLE_COLUMNS])
            else:
                sys.stdout.write(json.dumps(obj, default=_json_default) + "\n")
    if table is not None:
        wide().print(table)
    sys.exit(1 if bad else 0)


def _json_default(v):
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    return str(v)
