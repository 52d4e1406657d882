"""Decode the changed files of a run into the warehouse tables.

For each table of the catalog: the files of this run that can feed it (by
kind and topic) are decoded on Spark exactly as ``txn-audit ingest`` decodes
them, and written with one Delta commit that replaces every row those files
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
from auditor.batch.deltaio import arrow_df, create_empty, in_predicate, is_delta, overwrite, table_uri
from auditor.batch.ledger import ChangeSet
from auditor.ingest.context import PROBLEM_COLUMNS
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


def _decoder(name: str):
    from auditor.engine.ingest_job import _decoder as ingest_decoder

    inner = ingest_decoder(name)
    if crash.armed() != f"decode:{name}":
        return inner
    stage = f"decode:{name}"

    def run(batches):
        crash.task_point(stage)
        yield from inner(batches)

    return run


def write_tables(spark, wh: str, cs: ChangeSet, progress: Callable[[str, int, int], None] | None = None) -> DecodeResult:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from auditor.engine.ingest_job import _spark_schema, _tasks_df

    res = DecodeResult()
    names = list(TABLES)
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
        mine = [t for t in cs.tasks if spec.accepts(t)]
        decoded = None
        if mine:
            full = pa.schema(list(spec.schema) + PROBLEM_COLUMNS)
            decoded = _tasks_df(spark, mine).mapInArrow(_decoder(name), _spark_schema(full))
            decoded = decoded.persist(StorageLevel.MEMORY_AND_DISK)
            data = decoded.where(F.col("_problem_kind").isNull()).drop(*[c.name for c in PROBLEM_COLUMNS])
        else:
            data = arrow_df(spark, spec.schema.empty_table())
        if decoded is None and not is_delta(spark, uri):
            create_empty(spark, uri, data.schema)  # metadata only: no Spark job
        else:
            overwrite(data, uri, replace_where=None if cs.fresh else in_predicate(key, affected), new_schema=cs.fresh)
        res.tables_written.append(name)
        n = 0
        if decoded is not None:  # rows and problems per file, in one job over the cached decode
            bad = F.col("_problem_kind").isNotNull()
            aggs = [F.count(F.when(~bad, 1)).alias("n"),
                    F.collect_list(F.when(bad, F.struct("_problem_position", "_problem_kind", "_problem_message"))).alias("p")]
            if name == "batches":  # a segment's next offset (files.next_offset)
                aggs.append((F.max(F.when(~bad, F.col("last_offset"))) + 1).alias("next_offset"))
            for r in decoded.groupBy("file").agg(*aggs).collect():
                res.counts.setdefault(r["file"], {})[name] = r["n"]
                if name == "batches" and r["next_offset"] is not None:
                    res.next_offsets[r["file"]] = r["next_offset"]
                n += r["n"]
                for pos, kind, msg in r["p"]:
                    res.problems.setdefault(r["file"], []).append((pos, kind, f"[{name}] {msg}"))
            decoded.unpersist()
        res.rows_written[name] = n
        res.seconds[name] = round(time.monotonic() - t0, 3)
        crash.point(f"after-table:{name}")
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
