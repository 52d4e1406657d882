"""Decode the changed files of a run into the warehouse tables.

The changed files are decoded once for every table, on Spark, exactly as
``txn-audit ingest`` decodes them. For each table of the catalog the rows of
the files that can feed it (by kind and topic) are written with one Delta commit that replaces every row those files
(and the files that are gone) contributed before. A table no changed file can
feed is not touched. The ``files`` inventory is replaced the same way, keyed by
path. Nothing here records that a file is done: the ledger commit that follows
does, so a run killed anywhere in between redoes the same keyed overwrites.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import pyarrow as pa

from auditor.batch import crash
from auditor.batch.deltaio import create_empty, in_predicate, is_delta, overwrite, table_uri
from auditor.spark.local_rows import arrow_df
from auditor.batch.ledger import ChangeSet
from auditor.ingest.inventory import FILES_SCHEMA, build_inventory
from auditor.ingest.tables import TABLES, TableSpec

ALL_TABLES = (*TABLES, "files")


@dataclass
class DecodeResult:
    rows_written: dict[str, int] = field(default_factory=dict)  # table -> rows of this run's decode
    tables_written: list[str] = field(default_factory=list)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    problems: dict[str, list[tuple[int, str, str]]] = field(default_factory=dict)
    next_offsets: dict[str, int] = field(default_factory=dict)  # segment path -> offset after its last batch
    inventory: list[dict] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)


def _accepts(spec: TableSpec, kind: str | None, topic: str | None) -> bool:
    return spec.accepts({"kind": kind, "topic": topic})


def _crash_in_decode(name: str):
    """Wraps the executor function that yields ``name``'s rows: the ``decode:<name>``
    crash point fires inside a task of that table's Delta write."""
    stage = f"decode:{name}"

    def wrap(fn):
        if crash.armed() != stage:
            return fn

        def run(batches):
            crash.task_point(stage)
            yield from fn(batches)

        return run

    return wrap


def write_tables(spark, wh: str, cs: ChangeSet, progress: Callable[[str, int, int], None] | None = None) -> DecodeResult:
    """One decode of the run's tasks for every table (:func:`auditor.ingest.spark_job.decode_envelope`,
    persisted), the per-file facts in one small job, then one Delta commit per table."""
    from pyspark import StorageLevel

    from auditor.ingest.spark_job import DRIVER_TABLE_ROWS, collect_summary, decode_envelope, driver_tables, table_df

    res = DecodeResult()
    names = list(TABLES)
    env_df = None
    local: dict[str, pa.Table] = {}
    if cs.tasks:
        t0 = time.monotonic()
        env_df = decode_envelope(spark, cs.tasks, names).persist(StorageLevel.MEMORY_AND_DISK)
        summary = collect_summary(env_df)
        res.counts, res.problems, res.next_offsets = summary.counts, summary.problems, summary.next_offsets
        # small tables to the driver in one job (their writes then need no Python stage); a table
        # whose decode crash point is armed stays on the executors, where the point fires
        rows = summary.table_rows(names)
        local = driver_tables(env_df, [n for n in names if 0 < rows[n] <= DRIVER_TABLE_ROWS
                                       and crash.armed() != f"decode:{n}"])
        res.seconds["decode"] = round(time.monotonic() - t0, 3)
    try:
        for i, name in enumerate(names):
            spec = TABLES[name]
            t0 = time.monotonic()
            uri = table_uri(wh, name)
            key = spec.context_name("file")
            affected = {fi.path for fi in cs.changed if _accepts(spec, fi.kind, fi.topic)}
            affected |= {g["path"] for g in cs.gone if _accepts(spec, g.get("kind"), g.get("topic"))}
            if not cs.fresh and not affected:
                continue
            if progress:
                progress(name, i, len(names))
            fed = env_df is not None and any(spec.accepts(t) for t in cs.tasks)
            if name in local:
                data = arrow_df(spark, local[name])
            elif fed:
                data = table_df(env_df, name, _crash_in_decode(name))
            else:
                data = arrow_df(spark, spec.schema.empty_table())
            if not fed and not is_delta(spark, uri):
                create_empty(spark, uri, data.schema)  # metadata only: no Spark job
            else:
                overwrite(data, uri, replace_where=None if cs.fresh else in_predicate(key, affected), new_schema=cs.fresh)
            res.tables_written.append(name)
            res.rows_written[name] = sum(c.get(name, 0) for c in res.counts.values())
            res.seconds[name] = round(time.monotonic() - t0, 3)
            crash.point(f"after-table:{name}")
    finally:
        if env_df is not None:
            env_df.unpersist()
    return res


def write_files(spark, wh: str, cs: ChangeSet, res: DecodeResult) -> None:
    """The ``files`` inventory rows of the changed files replace theirs; gone files' rows go."""
    keys = cs.changed_paths | cs.gone_paths
    if not cs.fresh and not keys:
        return
    t0 = time.monotonic()
    res.inventory = build_inventory(cs.changed, res.counts, res.problems, res.next_offsets)
    df = arrow_df(spark, pa.Table.from_pylist(res.inventory, schema=FILES_SCHEMA))
    overwrite(df, table_uri(wh, "files"), replace_where=None if cs.fresh else in_predicate("path", keys),
              new_schema=cs.fresh)
    res.tables_written.append("files")
    res.rows_written["files"] = len(res.inventory)
    res.seconds["files"] = round(time.monotonic() - t0, 3)


def missing_tables(spark, wh: str) -> list[str]:
    return [n for n in ALL_TABLES if not is_delta(spark, table_uri(wh, n))]


def rows_of_files(spark, wh: str, paths: set[str]) -> dict[str, int]:
    """Rows each table (and the ``files`` inventory) holds for ``paths``: what a run wrote for the
    files it decoded, read back. A run resumed after a kill that came after its ledger commit
    decodes nothing itself; its ``runs`` record still says what the run as a whole decoded."""
    from auditor.batch.deltaio import read

    out: dict[str, int] = {}
    if not paths:
        return out
    for name in ALL_TABLES:
        uri = table_uri(wh, name)
        if not is_delta(spark, uri):
            continue
        key = "path" if name == "files" else TABLES[name].context_name("file")
        out[name] = read(spark, uri).where(in_predicate(key, paths)).count()
    return out
