"""A persisted view handed to the rules as its cache entry alone (switch ``cached_leaf``, :mod:`auditor.perf`)."""

from __future__ import annotations

from auditor.perf import enabled


def cached_leaf(df):
    """``df`` (persisted) as a DataFrame whose plan is its cache entry alone.

    Why: Catalyst analyses every new DataFrame operation over the whole plan
    beneath it (``DeduplicateRelations`` and reference resolution walk each
    node), and a persisted view's logical plan is the whole chain of views and
    tables it was built from. Every ``withColumn`` of every rule re-walked the
    producer-state model: on a small dump that analysis was most of the audit.
    At execution Spark swaps that subtree for its cache entry (an
    ``InMemoryRelation``) anyway; handing the rules the entry itself gives the
    same physical plan, and analysis that does not grow with the views below
    (one audit of a sample capture: ``DeduplicateRelations`` 1.7 s -> 0.5 s).

    Uses Spark's classic (non-Connect) internals; where they are not there, or
    ``df`` has no cache entry, ``df`` is returned as it is (same results, slower
    analysis)."""
    if not enabled("cached_leaf"):
        return df
    from pyspark.sql import DataFrame

    try:
        spark = df.sparkSession
        jss = spark._jsparkSession
        entry = jss.sharedState().cacheManager().lookupCachedData(df._jdf)
        if entry.isEmpty():
            return df
        dataset = spark._jvm.org.apache.spark.sql.classic.Dataset
        return DataFrame(dataset.ofRows(jss, entry.get().cachedRepresentation()), spark)
    except Exception:  # noqa: BLE001 - an optimisation: never a reason to fail the audit
        return df
