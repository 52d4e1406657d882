"""Spark settings chosen from the input size.

Spark's defaults are sized for large data: adaptive execution re-plans at every
shuffle (one job per query stage), small sides are broadcast (one job each),
and every stage is compiled to Java byte code. On an interactive scan of a
small dump that overhead is nearly all the time spent: a few thousand rows
need none of it. Audits of at most :data:`SMALL_AUDIT_BATCHES` batches run
under :data:`SMALL_SQL_CONF` (restored afterwards: the session may be shared),
with the tables read as one partition and each rule's query collected by a
:class:`Pipeline` worker while the next is built (``auditor.engine.audit``);
larger ones keep Spark's settings and run rule by rule.

What else a small input changes lives where it is decided: the driver JVM's
compiler (``session.SMALL_INPUT_JAVA_OPTIONS``, chosen by ``scan``, ``ingest``
and ``audit`` before Spark starts) and the decode's collection to the driver
(``ingest_job.SMALL_INPUT_BYTES``).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Mapping

SMALL_AUDIT_BATCHES = 200_000


def small_audit(table_rows: Mapping[str, object]) -> bool:
    """Does a dump of these table row counts (the ingest manifest's) take the small-input path?"""
    n = table_rows.get("batches")
    return isinstance(n, int) and n <= SMALL_AUDIT_BATCHES

SMALL_SQL_CONF: dict[str, str] = {
    "spark.sql.adaptive.enabled": "false",  # one job per query, not one per shuffle stage
    "spark.sql.autoBroadcastJoinThreshold": "-1",  # no broadcast jobs...
    "spark.sql.optimizer.disableHints": "true",  # ...not even for hinted joins
    "spark.sql.shuffle.partitions": "1",  # one task per stage
    "spark.sql.codegen.wholeStage": "false",  # interpret: compiling costs more than a few rows take
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    # Constraint propagation is documented as costly on some plans: here it is most of the time of
    # PruneFilters, InferFiltersFromConstraints and EliminateOuterJoin, which prune nothing on rows this few
    "spark.sql.constraintPropagation.enabled": "false",
    "spark.sql.optimizer.excludedRules": ",".join(f"org.apache.spark.sql.{r}" for r in (
        # optimizer rules that only pay on large data (pruning, runtime filters, subquery merging);
        # each is a rewrite that keeps results the same, so leaving it out changes nothing but the plan
        "catalyst.optimizer.InferFiltersFromConstraints",
        "catalyst.optimizer.PruneFilters",
        "catalyst.optimizer.RemoveRedundantAliases",
        "catalyst.optimizer.EliminateOuterJoin",
        "catalyst.optimizer.InjectRuntimeFilter",
        "catalyst.optimizer.MergeScalarSubqueries",
        "catalyst.optimizer.OptimizeOneRowRelationSubquery",
        "catalyst.optimizer.OptimizeCsvJsonExprs",
        "catalyst.optimizer.ConstantPropagation",
        "execution.datasources.SchemaPruning",
        "execution.dynamicpruning.PartitionPruning",
    )),
}

# What Spark records as the "call site" of every RDD a query plans: given as local properties, Spark
# does not compute it. Computing it walks the JVM thread's stack once per RDD (each operator of each
# query): on a small dump's audit, about a tenth of the driver's CPU time on its Py4J threads.
CALL_SITE_SHORT, CALL_SITE_LONG = "callSite.short", "callSite.long"


@contextmanager
def call_site(spark, text: str) -> Iterator[None]:
    """Name the call site of the jobs the block starts (this thread's, and a :class:`Pipeline`'s
    submitted from it) ``text``; the previous values after."""
    sc = spark.sparkContext
    before = {k: sc.getLocalProperty(k) for k in (CALL_SITE_SHORT, CALL_SITE_LONG)}
    for k in before:
        sc.setLocalProperty(k, text)
    try:
        yield
    finally:
        for k, v in before.items():
            sc.setLocalProperty(k, v)  # None removes it


@contextmanager
def sql_conf(spark, conf: Mapping[str, str]) -> Iterator[None]:
    """Run the block with the session's SQL settings ``conf``; the previous values after."""
    before: dict[str, str | None] = {}
    for k, v in conf.items():
        before[k] = spark.conf.get(k, None)
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def collect_many(queries: Mapping[str, object]) -> dict[str, list[dict]]:
    """Collect several DataFrames in one Spark job: each row travels as JSON
    (nulls kept) tagged with its query's name; returns plain dicts per name.
    Values come back as JSON types: numbers, strings, booleans, nested dicts
    for structs and maps, lists for arrays."""
    import json
    from functools import reduce

    from pyspark.sql import functions as F

    out: dict[str, list[dict]] = {name: [] for name in queries}
    if not queries:
        return out
    parts = [df.select(F.lit(name).alias("_q"),
                       F.to_json(F.struct(*[F.col(f"`{c}`") for c in df.columns]), {"ignoreNullFields": "false"}).alias("_j"))
             for name, df in queries.items()]
    for row in reduce(lambda a, b: a.union(b), parts).collect():
        out[row["_q"]].append(json.loads(row["_j"]))
    return out


PIPELINE_WORKERS = 2  # queries collected at once while the next is built (one per core of a small machine)


class Pipeline:
    """Collect queries on worker threads while the caller builds the next ones.

    ``submit(name, df)`` starts collecting ``df`` (one Spark job, :func:`collect_many`)
    and returns at once; ``results()`` waits for every submission and returns
    their rows by name. The workers carry the submitting thread's Spark local
    properties (job group, description), so a job is accounted where the caller
    is. Leaving the ``with`` block waits for what is still running, so no job
    outlives the audit that started it (an exception inside it is re-raised
    after that)."""

    def __init__(self, workers: int = PIPELINE_WORKERS) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="txn-audit-collect")
        self._futures: list = []

    def submit_many(self, queries: Mapping[str, object], *, required: bool = True):
        """Collect ``queries`` in one job; returns its future (None for no query). A
        ``required`` job's rows are in :meth:`results` (which raises its failure);
        another's are the caller's to take from the future."""
        if not queries:
            return None
        from pyspark.util import inheritable_thread_target

        session = next(iter(queries.values())).sparkSession  # its local properties and tags go with the job
        future = self._pool.submit(inheritable_thread_target(session)(collect_many), dict(queries))
        if required:
            self._futures.append(future)
        return future

    def submit(self, name: str, df) -> None:
        self.submit_many({name: df})

    def results(self) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = {}
        for f in self._futures:
            out.update(f.result())
        return out

    def __enter__(self) -> "Pipeline":
        return self

    def __exit__(self, *exc) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
