"""Ingestion on Spark: decode tasks on executors, write Parquet tables atomically.

Each table is one ``mapInArrow`` stage over the tasks that feed it; the decoded
DataFrame is persisted so data rows, problem rows and per-file counts come from
one decode. All tables of a run are written under a sibling staging directory
and swapped in by renames only when every table is complete, so a run killed at
any point leaves either the previous tables or the new ones, never a half-written
mix that a re-run would add to.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

import pyarrow as pa

from auditor.ingest.context import PROBLEM_COLUMNS, TASK_SCHEMA
from auditor.ingest.inventory import FILES_SCHEMA, build_inventory
from auditor.ingest.plan import DEFAULT_SPLIT_BYTES, Plan, make_plan
from auditor.ingest.tables import TABLES, TableSpec, decode_task

ROWS_PER_ARROW_BATCH = 8192
MANIFEST = "_ingest.json"


@dataclass
class IngestResult:
    out: str
    table_rows: dict[str, int]
    files: list[dict]
    seconds: float
    run_id: str
    stage_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def bad_files(self) -> list[dict]:
        from auditor.ingest.inventory import CLEAN_STATUSES

        return [f for f in self.files if f["status"] not in CLEAN_STATUSES]


def _decoder(table: str) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function shipped to executors (must pickle: looks the spec up by name there)."""

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        spec = TABLES[table]
        schema = pa.schema(list(spec.schema) + PROBLEM_COLUMNS)
        buf: list[dict] = []
        for rb in batches:
            for task in rb.to_pylist():
                for row in decode_task(spec, task):
                    if isinstance(row, pa.RecordBatch):  # columnar fast path: no per-row objects
                        if buf:
                            yield pa.RecordBatch.from_pylist(buf, schema=schema)
                            buf = []
                        yield _conform_batch(row, schema)
                        continue
                    buf.append(row)
                    if len(buf) >= ROWS_PER_ARROW_BATCH:
                        yield pa.RecordBatch.from_pylist(buf, schema=schema)
                        buf = []
        if buf:
            yield pa.RecordBatch.from_pylist(buf, schema=schema)

    return run


def _conform_batch(rb: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """Columns of ``rb`` in ``schema``'s order and types; missing ones null."""
    n = rb.num_rows
    cols = []
    for field in schema:
        i = rb.schema.get_field_index(field.name)
        cols.append(rb.column(i).cast(field.type) if i >= 0 else pa.nulls(n, field.type))
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def _spark_schema(schema: pa.Schema):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def _tasks_df(spark, tasks: list[dict]):
    n = max(1, min(len(tasks), spark.sparkContext.defaultParallelism * 4))
    # biggest first, dealt round-robin: slices get similar byte totals
    ordered = sorted(tasks, key=lambda t: -(t["size"] if t["range_end"] < 0 else t["range_end"] - t["range_start"]))
    slices = [ordered[i::n] for i in range(n)]
    rdd = spark.sparkContext.parallelize([t for s in slices for t in s], n)
    from pyspark.sql import Row

    return spark.createDataFrame(rdd.map(lambda t: Row(**t)), schema=_spark_schema(TASK_SCHEMA))


def ingest(
    spark,
    inputs: list[str],
    out: str,
    *,
    tables: list[str] | None = None,
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    progress: Callable[[str, int, int], None] | None = None,
) -> IngestResult:
    """Decode ``inputs`` into Parquet tables under ``out`` (replacing what was there)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    t0 = time.monotonic()
    run_id = time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]
    plan: Plan = make_plan(inputs, split_bytes)
    outp = Path(out).absolute()
    outp.parent.mkdir(parents=True, exist_ok=True)
    _cleanup_stale(outp)
    staging = outp.parent / f".{outp.name}.tmp-{run_id}"
    staging.mkdir()
    names = tables or list(TABLES)
    counts: dict[str, dict[str, int]] = {}
    problems: dict[str, list[tuple[int, str, str]]] = {}
    table_rows: dict[str, int] = {}
    next_offsets: dict[str, int] = {}
    stage_seconds: dict[str, float] = {}
    try:
        for i, name in enumerate(names):
            ts = time.monotonic()
            if progress:
                progress(name, i, len(names))
            spec = TABLES[name]
            mine = [t for t in plan.tasks if spec.accepts(t)]
            full = pa.schema(list(spec.schema) + PROBLEM_COLUMNS)
            if mine:
                decoded = _tasks_df(spark, mine).mapInArrow(_decoder(name), _spark_schema(full))
                decoded = decoded.persist(StorageLevel.MEMORY_AND_DISK)
                data = decoded.where(F.col("_problem_kind").isNull()).drop(*[c.name for c in PROBLEM_COLUMNS])
                data.write.mode("overwrite").parquet(str(staging / name))
                ok = F.col("_problem_kind").isNull()
                per_file = [F.count(F.when(ok, 1)).alias("n")]
                if name == "batches":  # a segment's next offset (files.next_offset), in the same job
                    per_file.append((F.max(F.when(ok, F.col("last_offset"))) + 1).alias("next_offset"))
                for r in decoded.groupBy("file").agg(*per_file).collect():
                    counts.setdefault(r["file"], {})[name] = r["n"]
                    if name == "batches" and r["next_offset"] is not None:
                        next_offsets[r["file"]] = r["next_offset"]
                for r in decoded.where(F.col("_problem_kind").isNotNull()).select(
                    "file", "_problem_position", "_problem_kind", "_problem_message"
                ).collect():
                    problems.setdefault(r["file"], []).append(
                        (r["_problem_position"], r["_problem_kind"], f"[{name}] {r['_problem_message']}")
                    )
                decoded.unpersist()
            else:  # nothing feeds it: an empty table with the right schema, no Spark job
                _write_small(spark, spec.schema.empty_table(), staging / name)
            table_rows[name] = sum(c.get(name, 0) for c in counts.values())
            stage_seconds[name] = round(time.monotonic() - ts, 3)
        inventory = build_inventory(plan.files, counts, problems, next_offsets)
        _write_small(spark, pa.Table.from_pylist(inventory, schema=FILES_SCHEMA), staging / "files")
        table_rows["files"] = len(inventory)
        manifest = {
            "run_id": run_id,
            "inputs": [os.path.abspath(i) for i in inputs],
            "tables": table_rows,
            "bad_files": sum(1 for f in inventory if f["status"] not in ("ok", "empty", "skipped")),
            "brokers": {k: v for k, v in plan.brokers.items() if v},
            "written_at_ms": int(time.time() * 1000),
        }
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2, default=str))
        _swap_in(staging, outp, run_id)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return IngestResult(str(outp), table_rows, inventory, time.monotonic() - t0, run_id, stage_seconds)


def _write_small(spark, table: pa.Table, path: Path) -> None:
    """Driver-built tables (the inventory) are small: written with pyarrow in the same
    directory-of-parts layout Spark uses, so every table reads the same way."""
    import pyarrow.parquet as pq

    path.mkdir(parents=True)
    pq.write_table(table, path / "part-00000.parquet")
    (path / "_SUCCESS").touch()


def _swap_in(staging: Path, out: Path, run_id: str) -> None:
    """Replace ``out`` by ``staging`` with two renames; a crash between them
    leaves ``out`` absent and both siblings present, which ``_cleanup_stale``
    resolves on the next run."""
    old = out.parent / f".{out.name}.old-{run_id}"
    if out.exists():
        os.rename(out, old)
    os.rename(staging, out)
    shutil.rmtree(old, ignore_errors=True)


def _cleanup_stale(out: Path) -> None:
    """Remove leftovers of killed runs; restore the last complete tables if a
    kill hit between the two renames of ``_swap_in``."""
    olds = sorted(out.parent.glob(f".{out.name}.old-*"))
    if not out.exists() and olds:
        os.rename(olds[-1], out)
        olds = olds[:-1]
    for p in olds + list(out.parent.glob(f".{out.name}.tmp-*")):
        shutil.rmtree(p, ignore_errors=True)
