"""The reference instant of each cluster: the "now" every age is measured against.

An offline dump has no "now": a transaction's age, a producer's idle time and
how long an LSO has trailed are measured against the newest timestamp the
cluster's input holds (its segment batches, and its ``__transaction_state``
records' last update times), or against the instant the user gives
(``--as-of``, :attr:`auditor.engine.context.AuditOptions.as_of_ms`).
"""

from __future__ import annotations


def as_of(batches, transaction_log=None, *, as_of_ms: int | None = None):
    """(cluster_id, as_of_ms), one row per cluster of ``batches``: ``as_of_ms`` when
    given, else the newest ``max_timestamp`` of the cluster's v2 segment batches and
    ``last_update_timestamp_ms`` of its ``transaction_log`` records (None: no
    coordinator records in the input)."""
    from pyspark.sql import functions as F

    if as_of_ms is not None:
        return batches.select("cluster_id").distinct().withColumn("as_of_ms", F.lit(as_of_ms).cast("long"))
    b = batches.where("magic = 2 AND source = 'segment'").groupBy("cluster_id").agg(F.max("max_timestamp").alias("t"))
    if transaction_log is not None:
        t = transaction_log.groupBy("cluster_id").agg(F.max("last_update_timestamp_ms").alias("t"))
        b = b.unionByName(t)
    return b.groupBy("cluster_id").agg(F.max("t").cast("long").alias("as_of_ms"))
