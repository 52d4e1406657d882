"""How the audit runner collects queries: several in one Spark job, and on worker threads.

An audit (:mod:`auditor.engine.runner`) collects each rule's query as soon as it is built, on
a :class:`Pipeline` worker, while the caller builds the next one: building is Catalyst analysis
on the Py4J thread, running is the optimizer and the tasks; overlapped, the cores do not wait
for the driver between rules. :func:`collect_many` is also how
the report data (:mod:`auditor.report.spark.data`) collects its few small queries in one job.
"""

from __future__ import annotations

from typing import Mapping


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
        self.seconds: dict[str, float] = {}  # per query name: its job's time on the worker (jobs overlap)

    def submit_many(self, queries: Mapping[str, object], *, required: bool = True):
        """Collect ``queries`` in one job; returns its future (None for no query). A
        ``required`` job's rows are in :meth:`results` (which raises its failure);
        another's are the caller's to take from the future."""
        if not queries:
            return None
        from pyspark.util import inheritable_thread_target

        session = next(iter(queries.values())).sparkSession  # its local properties and tags go with the job
        future = self._pool.submit(inheritable_thread_target(session)(self._timed), dict(queries))
        if required:
            self._futures.append(future)
        return future

    def _timed(self, queries: Mapping[str, object]) -> dict[str, list[dict]]:
        import time

        t0 = time.monotonic()
        try:
            return collect_many(queries)
        finally:
            took = round(time.monotonic() - t0, 3)
            for name in queries:
                self.seconds[name] = took

    def submit(self, name: str, df):
        """Collect one query (:meth:`submit_many`); returns its future."""
        return self.submit_many({name: df})

    def results(self) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = {}
        for f in self._futures:
            out.update(f.result())
        return out

    def __enter__(self) -> "Pipeline":
        return self

    def __exit__(self, *exc) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
