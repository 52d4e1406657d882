"""One decode pass for every table: the envelope a decode task emits.

A Spark column has one type, and every table has its own schema, so the decode
stage does not emit table rows directly: each task decodes its file for every
table that accepts it (:meth:`TableSpec.accepts`) and emits *envelope* rows —
one per Arrow record batch of table rows (its bytes as an Arrow IPC stream in
``payload``) and one per problem. The writer then unpacks the payloads of each
table (:func:`unpack`, executor side, or :func:`tables_of` on the driver).

Every envelope row belongs to one file (a task is one file or a byte range of
one), so the per-file facts the inventory needs (rows per table, a segment's
next offset, the problems) come from the envelope without the payloads:
:func:`summarize` on the driver, or a Spark aggregate of the same columns.

Spark-free: executors and the driver import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

import pyarrow as pa

from auditor.perf.no_pandas import skip_pandas

skip_pandas()  # before the decoders' first list-to-Arrow conversion: a worker would import pandas for it

from auditor.ingest.context import PROBLEM_COLUMNS  # noqa: E402
from auditor.ingest.storage import is_remote, open_input  # noqa: E402
from auditor.ingest.tables import TABLES, TableSpec, decode_task  # noqa: E402

ROWS_PER_ARROW_BATCH = 8192

ENVELOPE_SCHEMA = pa.schema([
    pa.field("table", pa.string()),
    pa.field("file", pa.string()),
    pa.field("rows", pa.int64()),  # data rows in payload (0 for a problem)
    pa.field("next_offset", pa.int64()),  # batches: the offset after the payload's last batch
    pa.field("problem_kind", pa.string()),
    pa.field("problem_position", pa.int64()),
    pa.field("problem_message", pa.string()),
    pa.field("payload", pa.binary()),  # Arrow IPC stream: one record batch of the table's schema
])
SUMMARY_COLUMNS = [f.name for f in ENVELOPE_SCHEMA if f.name != "payload"]
_PROBLEM_NAMES = {c.name for c in PROBLEM_COLUMNS}


def _ipc(rb: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rb.schema) as w:
        w.write_batch(rb)
    return sink.getvalue().to_pybytes()


def conform(rb: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """Columns of ``rb`` in ``schema``'s order and types; missing ones null."""
    n = rb.num_rows
    cols = []
    for f in schema:
        i = rb.schema.get_field_index(f.name)
        cols.append(rb.column(i).cast(f.type) if i >= 0 else pa.nulls(n, f.type))
    return pa.RecordBatch.from_arrays(cols, schema=schema)


Sink = Callable[[str, pa.RecordBatch], None]


class _Envelopes:
    """Accumulates one task's envelope rows; flushed as one Arrow batch.

    ``sink``: where the table rows go instead of the payload column (a local decode's Parquet
    writer, :mod:`auditor.ingest.local_decode`): called with the table's name and each record
    batch, whose envelope row then keeps its counts and a null payload."""

    def __init__(self, sink: Sink | None = None) -> None:
        self.cols: dict[str, list] = {f.name: [] for f in ENVELOPE_SCHEMA}
        self.sink = sink

    def add(self, table: str, file: str, *, rows: int = 0, next_offset: int | None = None,
            problem: tuple[str, int, str] | None = None, payload: bytes | None = None) -> None:
        kind, pos, msg = problem or (None, None, None)
        for k, v in (("table", table), ("file", file), ("rows", rows), ("next_offset", next_offset),
                     ("problem_kind", kind), ("problem_position", pos), ("problem_message", msg),
                     ("payload", payload)):
            self.cols[k].append(v)

    def __len__(self) -> int:
        return len(self.cols["table"])

    def flush(self) -> pa.RecordBatch:
        rb = pa.RecordBatch.from_pydict(self.cols, schema=ENVELOPE_SCHEMA)
        self.cols = {f.name: [] for f in ENVELOPE_SCHEMA}
        return rb


def _data_batch(spec: TableSpec, rb: pa.RecordBatch, file: str, env: _Envelopes) -> None:
    rb = conform(rb, spec.schema)
    nxt = None
    if spec.name == "batches" and rb.num_rows:
        import pyarrow.compute as pc

        m = pc.max(rb.column(rb.schema.get_field_index("last_offset"))).as_py()
        nxt = None if m is None else m + 1
    if env.sink is not None:
        env.sink(spec.name, rb)
        env.add(spec.name, file, rows=rb.num_rows, next_offset=nxt)
    else:
        env.add(spec.name, file, rows=rb.num_rows, next_offset=nxt, payload=_ipc(rb))


def _shared(task: dict, tables: int):
    """A remote file feeding several tables is opened once for all of them (its
    cached blocks serve every table: a small file is fetched once); a local one is
    opened per table, as it always was. None: each table opens it (and reports why not)."""
    if tables < 2 or not is_remote(task["path"]):
        return None
    try:
        return open_input(task["path"])
    except OSError:
        return None


def decode_task_all(task: dict, names: Iterable[str] | None = None, sink: Sink | None = None) -> Iterator[pa.RecordBatch]:
    """Envelope batches of ``task`` for every table in ``names`` (default: all) that accepts it
    (``sink``: see :class:`_Envelopes`)."""
    env = _Envelopes(sink)
    specs = [TABLES[n] for n in names or TABLES if TABLES[n].accepts(task)]
    shared = _shared(task, len(specs))
    try:
        yield from _decode_specs(task, specs, shared, env)
    finally:
        if shared is not None:
            shared.close()
    if len(env):
        yield env.flush()


def _decode_specs(task: dict, specs: list[TableSpec], shared, env: _Envelopes) -> Iterator[pa.RecordBatch]:
    file = task["path"]
    for spec in specs:
        name = spec.name
        buf: list[dict] = []
        for item in decode_task(spec, task, shared):
            if isinstance(item, pa.RecordBatch):
                _data_batch(spec, item, file, env)
            elif item.get("_problem_kind") is not None:
                env.add(name, file, problem=(item["_problem_kind"], item["_problem_position"], item["_problem_message"]))
            else:
                buf.append({k: v for k, v in item.items() if k not in _PROBLEM_NAMES})
                if len(buf) >= ROWS_PER_ARROW_BATCH:
                    _data_batch(spec, pa.RecordBatch.from_pylist(buf, schema=spec.schema), file, env)
                    buf = []
            if len(env) >= 64:
                yield env.flush()
        if buf:
            _data_batch(spec, pa.RecordBatch.from_pylist(buf, schema=spec.schema), file, env)


def decode_tasks(task_batches: Iterable[pa.RecordBatch], names: list[str] | None = None,
                 sink: Sink | None = None) -> Iterator[pa.RecordBatch]:
    """The executor function of the decode stage (``mapInArrow``): task rows in, envelope batches
    out (``sink``: the local decode's writer, see :class:`_Envelopes`)."""
    for rb in task_batches:
        for task in rb.to_pylist():
            yield from decode_task_all(task, names, sink)


def payload_batch(payload: bytes) -> pa.RecordBatch:
    with pa.ipc.open_stream(payload) as r:
        return r.read_next_batch()


def unpack(table: str):
    """The executor function that turns envelope batches into ``table``'s rows (``mapInArrow``)."""

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for rb in batches:
            tables = rb.column(rb.schema.get_field_index("table")).to_pylist()
            payloads = rb.column(rb.schema.get_field_index("payload"))
            for t, p in zip(tables, payloads):
                if t == table and p.is_valid:
                    yield payload_batch(p.as_py())

    return run


@dataclass
class Summary:
    """Per-file facts of a decode: what the ``files`` inventory is built from."""

    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # path -> table -> data rows
    problems: dict[str, list[tuple[int, str, str]]] = field(default_factory=dict)  # path -> (pos, kind, message)
    next_offsets: dict[str, int] = field(default_factory=dict)  # segment path -> offset after its last batch

    def add(self, row: dict) -> None:
        f, t = row["file"], row["table"]
        if row["problem_kind"] is not None:
            self.problems.setdefault(f, []).append(
                (row["problem_position"], row["problem_kind"], f"[{t}] {row['problem_message']}"))
            return
        per = self.counts.setdefault(f, {})
        per[t] = per.get(t, 0) + (row["rows"] or 0)
        if row["next_offset"] is not None:
            self.next_offsets[f] = max(self.next_offsets.get(f, row["next_offset"]), row["next_offset"])

    def table_rows(self, names: Iterable[str]) -> dict[str, int]:
        return {n: sum(c.get(n, 0) for c in self.counts.values()) for n in names}


def summarize(rows: Iterable[dict]) -> Summary:
    s = Summary()
    for r in rows:
        s.add(r)
    return s


def tables_of(envelope: pa.Table, names: Iterable[str]) -> dict[str, pa.Table]:
    """Driver side: the envelope's payloads as one Arrow table per name (empty ones with their schema)."""
    by: dict[str, list[pa.RecordBatch]] = {n: [] for n in names}
    tables = envelope.column("table").to_pylist()
    payloads = envelope.column("payload")
    for t, p in zip(tables, payloads):
        if t in by and p.is_valid:
            by[t].append(payload_batch(p.as_py()))
    return {n: pa.Table.from_batches(b, schema=TABLES[n].schema) for n, b in by.items()}
