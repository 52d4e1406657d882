"""Ingestion: decode tasks, write Parquet tables atomically.

Local files under a local master (or with no session at all) are decoded by
processes of the driver's own, which write the tables' parts themselves
(:mod:`auditor.ingest.local_decode`: no Spark job; ``scan`` starts them before
the JVM, ``ingest`` starts no JVM). Otherwise one ``mapInArrow`` stage on
Spark's executors decodes every file for every table that accepts it
(:mod:`auditor.ingest.envelope`, the same function): data rows, problem rows
and per-file counts come from that one decode. All tables of a run are written under a sibling staging directory
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
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa

from auditor.errors import OutputError
from auditor.ingest import envelope
from auditor.ingest.context import TASK_SCHEMA
from auditor.ingest.not_given import not_given
from auditor.ingest.inventory import FILES_SCHEMA, build_inventory
from auditor.ingest.local_decode import LocalDecode, all_local
from auditor.ingest.plan import DEFAULT_SPLIT_BYTES, Plan, decode_cost, make_plan, task_bytes
from auditor.ingest.storage import normalize
from auditor.perf import enabled
from auditor.ingest.tables import TABLES

# on Spark's path, inputs up to this many bytes are decoded into the driver in one Spark job and their
# tables written by it (decoded rows stay well under 1 GiB); the session of a scan of at most this many
# bytes gets the small-input settings (small_plan)
SMALL_INPUT_BYTES = 64 * 1024 * 1024
# in a larger input, tables of at most this many rows are still written by the driver (one job for all)
DRIVER_TABLE_ROWS = 100_000
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


def _spark_schema(schema: pa.Schema):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def _tasks_df(spark, tasks: list[dict], small: bool = False):
    """The decode tasks as a DataFrame. A small input's few tasks go straight from
    an Arrow table (no Python stage before the decode's own); a large one's are
    dealt into slices of similar decode costs, four per core."""
    if small:
        return spark.createDataFrame(pa.Table.from_pylist(tasks, schema=TASK_SCHEMA))
    n = max(1, min(len(tasks), spark.sparkContext.defaultParallelism * 4))
    # costliest first (plan.decode_cost), dealt round-robin: slices get similar decode costs
    ordered = sorted(tasks, key=lambda t: -decode_cost(t))
    slices = [ordered[i::n] for i in range(n)]
    rdd = spark.sparkContext.parallelize([t for s in slices for t in s], n)
    from pyspark.sql import Row

    return spark.createDataFrame(rdd.map(lambda t: Row(**t)), schema=_spark_schema(TASK_SCHEMA))


def decode_envelope(spark, tasks: list[dict], names: list[str], small: bool = False):
    """The one decode pass: every task decoded for every table in ``names``
    that accepts it, as envelope rows (:mod:`auditor.ingest.envelope`)."""
    from functools import partial

    return _tasks_df(spark, tasks, small).mapInArrow(partial(envelope.decode_tasks, names=names),
                                              _spark_schema(envelope.ENVELOPE_SCHEMA))


def table_df(env_df, name: str, wrap: Callable | None = None):
    """``name``'s rows from an envelope DataFrame (payloads unpacked on executors);
    ``wrap`` decorates the executor function (the batch job's crash points)."""
    fn = envelope.unpack(name)
    return env_df.where(env_df["table"] == name).select("table", "payload").mapInArrow(
        wrap(fn) if wrap else fn, _spark_schema(TABLES[name].schema))


def driver_tables(env_df, names: list[str]) -> dict[str, pa.Table]:
    """The tables ``names`` of an envelope DataFrame brought to the driver in one job:
    for the tables of a large input that are small (checkpoints, snapshots, indexes),
    which would otherwise each cost a Spark write with a Python stage of its own."""
    if not names:
        return {}
    env = env_df.where(env_df["table"].isin(names)).select("table", "payload").toArrow()
    return envelope.tables_of(env, names)


def collect_summary(env_df) -> envelope.Summary:
    """Per-file rows, next offsets and problems of a (persisted) envelope: one small job."""
    return envelope.summarize(r.asDict() for r in env_df.select(*envelope.SUMMARY_COLUMNS).collect())


def input_bytes(plan: Plan) -> int:
    """Bytes the decode of ``plan`` reads."""
    return sum(task_bytes(t) for t in plan.tasks)


def small_plan(plan: Plan) -> bool:
    """Is ``plan`` a small input (its session gets the small-input settings, ``session.get_spark``)?"""
    return _small(plan.tasks, SMALL_INPUT_BYTES)


def _small(tasks: list[dict], small_input_bytes: int) -> bool:
    return sum(task_bytes(t) for t in tasks) <= small_input_bytes


def _decoded_tasks(plan: Plan, names: list[str]) -> list[dict]:
    """The tasks of ``plan`` some table of ``names`` decodes."""
    return [t for t in plan.tasks if any(TABLES[n].accepts(t) for n in names)]


def start_local_decode(plan: Plan, out: str, tables: list[str] | None = None) -> LocalDecode | None:
    """Start decoding ``plan`` in local processes now (:mod:`auditor.ingest.local_decode`), for
    :func:`ingest` of the same ``out`` and ``tables`` to take as ``decoded``: ``scan`` calls it
    before it starts Spark, so the decode runs while the driver JVM starts. Its processes write
    their parts into the staging directory of an ingest run of ``out`` (made here), which
    :func:`ingest` completes and swaps in. None when no task is left to decode or one is read
    through a remote store. The caller must also know that its session's master is local
    (``session.embedded_local``), and discard the decode if it never calls :func:`ingest`."""
    names = tables or list(TABLES)
    tasks = _decoded_tasks(plan, names)
    if not tasks or not all_local(tasks) or not enabled("local_decode"):
        return None
    run_id = new_run_id()
    staging = open_staging(out, run_id)
    return LocalDecode(tasks, names, str(staging), run_id=run_id)


def _local_master(spark) -> bool:
    if spark is None:  # no session: the caller decided that the decode is local
        return True
    try:
        return str(spark.sparkContext.master).startswith("local")
    except Exception:  # noqa: BLE001 - not a classic session: let Spark decode
        return False


def decodes_locally(tasks_of: Plan, master: str | None = None) -> bool:
    """Does :func:`ingest` of ``tasks_of`` under ``master`` (None: the default) need no Spark
    session at all? Every file local and an embedded local master: the local decode writes
    every table (``ingest`` then takes ``spark=None``)."""
    from auditor.spark.session import embedded_local

    return enabled("local_decode") and embedded_local(master) and all_local(tasks_of.tasks)


def ingest(
    spark,
    inputs: list[str],
    out: str,
    *,
    tables: list[str] | None = None,
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    small_input_bytes: int = SMALL_INPUT_BYTES,
    progress: Callable[[str, int, int], None] | None = None,
    plan: Plan | None = None,
    decoded: LocalDecode | None = None,
    local_decode: bool = True,
) -> IngestResult:
    """Decode ``inputs`` into Parquet tables under ``out`` (replacing what was there).

    Local files under a local master (or no session: ``spark=None``) are decoded by local
    processes that write the tables' parts themselves (:mod:`auditor.ingest.local_decode`, no
    Spark job). Otherwise Spark decodes: an input of at most ``small_input_bytes`` in one job
    whose tables the driver writes with pyarrow; a larger one in one job for every table,
    persisted, its tables of at most ``DRIVER_TABLE_ROWS`` rows brought to the driver in one job,
    and each larger table written by Spark from the persisted decode.

    ``plan``: the files and tasks of ``inputs`` when the caller made them already
    (``scan`` sizes its input before it starts Spark: :func:`input_bytes`).
    ``decoded``: the local decode of ``plan`` into ``out`` the caller started already
    (:func:`start_local_decode`, same ``tables``); taken over here.
    ``local_decode=False`` (or ``TXN_AUDIT_DISABLE=local_decode``): Spark decodes even local
    files under a local master (the tests and benches that compare the two paths).
    """
    t0 = time.monotonic()
    plan = plan if plan is not None else make_plan(inputs, split_bytes)
    names = tables or list(TABLES)
    tasks = _decoded_tasks(plan, names)
    if decoded is not None and (decoded.names != names or decoded.tasks != tasks
                                or Path(decoded.root) != staging_path(out, decoded.run_id)):
        decoded.discard()
        raise ValueError("ingest: the local decode given was started for other tables, tasks or tables directory")
    run_id = decoded.run_id if decoded is not None else new_run_id()
    try:
        return _ingest(spark, inputs, out, run_id, t0, plan, names, tasks, small_input_bytes, progress, decoded,
                       local_decode)
    finally:
        if decoded is not None:
            decoded.close()  # already done unless the decode did not take it (or failed)


def _ingest(spark, inputs, out, run_id, t0, plan, names, tasks, small_input_bytes, progress, decoded,
            local_decode: bool) -> IngestResult:
    stage_seconds: dict[str, float] = {}
    with staged(out, run_id, started=decoded is not None) as staging:
        if progress:
            progress("decode", 0, 2)
        ts = time.monotonic()
        summary, written = envelope.Summary(), set()
        if (decoded is None and local_decode and enabled("local_decode") and tasks and all_local(tasks)
                and _local_master(spark)):
            decoded = LocalDecode(tasks, names, str(staging), run_id=run_id)
        if decoded is not None:
            if progress:
                progress("write", 1, 2)  # the processes decode and write at once
            summary = envelope.summarize(decoded.result().select(envelope.SUMMARY_COLUMNS).to_pylist())
            written = {n for n in names if (staging / n).is_dir()}  # the parts the processes wrote
            for name in written:
                (staging / name / "_SUCCESS").touch()
            stage_seconds["decode"] = round(time.monotonic() - ts, 3)
            ts = time.monotonic()
        elif tasks:
            summary, written = _spark_decode(spark, tasks, names, staging, small_input_bytes, progress, stage_seconds)
            ts = time.monotonic() - stage_seconds.get("write", 0.0)
        for name in names:
            if name not in written:  # nothing feeds it: an empty table with the right schema, no Spark job
                _write_small(spark, TABLES[name].schema.empty_table(), staging / name)
        stage_seconds["write"] = round(time.monotonic() - ts, 3)
        table_rows = summary.table_rows(names)
        inventory = build_inventory(plan.files, summary.counts, summary.problems, summary.next_offsets)
        _write_small(spark, pa.Table.from_pylist(inventory, schema=FILES_SCHEMA), staging / "files")
        table_rows["files"] = len(inventory)
        _write_manifest(staging, run_id, inputs, table_rows, inventory, plan)
    return IngestResult(str(Path(out).absolute()), table_rows, inventory, time.monotonic() - t0, run_id, stage_seconds)


def _spark_decode(spark, tasks, names, staging: Path, small_input_bytes: int, progress,
                  stage_seconds: dict[str, float]) -> tuple[envelope.Summary, set[str]]:
    """Spark's decode of ``tasks`` (not local files, or not a local master) and the tables
    written from it under ``staging``: the summary and the names written."""
    from pyspark import StorageLevel

    ts = time.monotonic()
    written: set[str] = set()
    if _small(tasks, small_input_bytes):
        env = decode_envelope(spark, tasks, names, small=True).toArrow()  # the one job
        stage_seconds["decode"] = round(time.monotonic() - ts, 3)
        ts = time.monotonic()
        if progress:
            progress("write", 1, 2)
        summary = envelope.summarize(env.select(envelope.SUMMARY_COLUMNS).to_pylist())
        for name, tbl in envelope.tables_of(env, names).items():
            _write_small(spark, tbl, staging / name)
            written.add(name)
        stage_seconds["write"] = round(time.monotonic() - ts, 3)
        return summary, written
    env_df = decode_envelope(spark, tasks, names).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        summary = collect_summary(env_df)  # the decode job; the rest reads the cache
        stage_seconds["decode"] = round(time.monotonic() - ts, 3)
        ts = time.monotonic()
        if progress:
            progress("write", 1, 2)
        rows = summary.table_rows(names)
        local = [n for n in names if 0 < rows[n] <= DRIVER_TABLE_ROWS]
        for name, tbl in driver_tables(env_df, local).items():
            _write_small(spark, tbl, staging / name)
            written.add(name)
        for name in names:
            if rows[name] and name not in written:
                table_df(env_df, name).write.mode("overwrite").parquet(str(staging / name))
                written.add(name)
    finally:
        env_df.unpersist()
    stage_seconds["write"] = round(time.monotonic() - ts, 3)
    return summary, written


def _write_manifest(staging: Path, run_id: str, inputs: list[str], table_rows: dict[str, int],
                    inventory: list[dict], plan: Plan) -> None:
    manifest = {
        "run_id": run_id,
        "inputs": [normalize(i) for i in inputs],
        "tables": table_rows,
        "bad_files": sum(1 for f in inventory if f["status"] not in ("ok", "empty", "skipped")),
        "brokers": {k: v for k, v in plan.brokers.items() if v},
        # partitions given file by file, and the segments of their directories left out
        # (auditor.ingest.not_given; read by auditor.model.coverage)
        "not_given": not_given(plan.files),
        "written_at_ms": int(time.time() * 1000),
    }
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2, default=str))


def _write_small(spark, table: pa.Table, path: Path) -> None:
    """Driver-side tables (the inventory, a small input's decode) written with
    pyarrow in the directory-of-parts layout and codec Spark uses, so every
    table reads the same way."""
    import pyarrow.parquet as pq

    path.mkdir(parents=True)
    pq.write_table(table, path / "part-00000.parquet", compression="zstd")
    (path / "_SUCCESS").touch()


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]


def staging_path(out: str, run_id: str) -> Path:
    """Where ingest run ``run_id`` writes the tables that replace ``out``: a sibling directory."""
    outp = Path(out).absolute()
    return outp.parent / f".{outp.name}.tmp-{run_id}"


def open_staging(out: str, run_id: str) -> Path:
    """Make the staging directory of run ``run_id`` (after removing what killed runs left
    beside ``out``); an ``OSError`` becomes an :class:`OutputError` naming ``out``."""
    outp = Path(out).absolute()
    staging = staging_path(out, run_id)
    try:
        outp.parent.mkdir(parents=True, exist_ok=True)
        _cleanup_stale(outp)
        staging.mkdir()
    except OSError as exc:
        raise OutputError.of(outp, exc) from exc
    return staging


@contextmanager
def staged(out: str, run_id: str, started: bool = False) -> Iterator[Path]:
    """A staging directory beside ``out`` for the block to write, swapped in for ``out`` when the
    block completes and removed when it fails, so ``out`` is either what it was or complete.
    ``started``: :func:`open_staging` made it already (a local decode is writing into it).

    An ``OSError`` while writing (a read-only or full file system, no permission) becomes an
    :class:`OutputError` naming ``out``; a broken connection to the JVM is not an output problem
    and stays what it is."""
    outp = Path(out).absolute()
    staging = staging_path(out, run_id) if started else open_staging(out, run_id)
    try:
        yield staging
        _swap_in(staging, outp, run_id)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(exc, OSError) and not isinstance(exc, ConnectionError):
            raise OutputError.of(outp, exc) from exc
        if isinstance(exc, Exception) and not isinstance(exc, OutputError):
            jvm = OutputError.of_jvm(outp, exc)  # a table over DRIVER_TABLE_ROWS, written by Spark's tasks
            if jvm is not None:
                raise jvm from exc
        raise


def check_output(out: str) -> None:
    """Raise :class:`OutputError` now if :func:`staged` cannot write ``out``: it exists and is
    not a directory, or the nearest existing directory it goes into is not writable (a read-only
    file system, no permission). A command calls it before it starts Spark and decodes."""
    outp = Path(out).absolute()
    if outp.exists() and not outp.is_dir():
        raise OutputError(outp, "it exists and is not a directory")
    parent = outp.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise OutputError(outp, f"{parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        read_only = bool(os.statvfs(parent).f_flag & os.ST_RDONLY)
        raise OutputError(outp, f"{parent} is on a read-only file system" if read_only
                          else f"no permission to write in {parent}")


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
