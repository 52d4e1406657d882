"""The reference instant of each cluster: the "now" every age is measured against.

An offline dump has no "now": a transaction's age, a producer's idle time and how long
an LSO has trailed are measured against the newest timestamp the cluster's input holds
(its segment batches, and its ``__transaction_state`` records' last update times), or
against the instant the user gives (``--as-of``).

The newest timestamps are a fact of the input (:func:`newest`, computed with the tables);
the reference instant is a choice of the run (:class:`Clock`, applied after the rules'
queries are collected). Kept apart, a second audit of the same tables with another
``--as-of`` or ``transaction.max.timeout.ms`` decides again without reading the tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def newest(batches, transaction_log=None):
    """(cluster_id, newest_ms), one row per cluster of ``batches``: the newest
    ``max_timestamp`` of the cluster's v2 segment batches and ``last_update_timestamp_ms``
    of its ``transaction_log`` records (None: no coordinator records in the input)."""
    from pyspark.sql import functions as F

    b = batches.where("magic = 2 AND source = 'segment'").groupBy("cluster_id").agg(F.max("max_timestamp").alias("t"))
    if transaction_log is not None:
        t = transaction_log.groupBy("cluster_id").agg(F.max("last_update_timestamp_ms").alias("t"))
        b = b.unionByName(t)
    # every cluster of the input has a row, null when it has no timestamp
    per = b.groupBy("cluster_id").agg(F.max("t").cast("long").alias("newest_ms"))
    return batches.select("cluster_id").distinct().join(per, "cluster_id", "full")


@dataclass(frozen=True)
class Clock:
    """What an audit's ages are measured against: ``given_ms`` (``--as-of``) for every
    cluster, else each cluster's newest timestamp (``newest_ms``, from :func:`newest`), and
    ``transaction.max.timeout.ms``, the longest a live coordinator lets a transaction run."""

    max_timeout_ms: int
    given_ms: int | None = None
    newest_ms: dict = field(default_factory=dict)  # cluster_id -> newest timestamp (None: none)

    def as_of(self, cluster_id) -> int | None:
        """The reference instant of ``cluster_id``."""
        return self.given_ms if self.given_ms is not None else self.newest_ms.get(cluster_id)

    @property
    def run_as_of_ms(self) -> int:
        """The run's one figure (the header's "ages as of"): the given instant, else the newest
        cluster's (0: the input has no timestamp)."""
        if self.given_ms is not None:
            return self.given_ms
        return max((v for v in self.newest_ms.values() if v is not None), default=0)

    @classmethod
    def of(cls, rows: list[dict], *, given_ms: int | None, max_timeout_ms: int) -> "Clock":
        """From the collected rows of :func:`newest`."""
        return cls(max_timeout_ms=max_timeout_ms, given_ms=given_ms,
                   newest_ms={r["cluster_id"]: r["newest_ms"] for r in rows})
