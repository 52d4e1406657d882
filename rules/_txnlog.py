"""The coordinator's history per transactional id (not a rule: modules starting with _ are skipped).

``__transaction_state`` is compacted, but the cleaner only ever drops records
*older* than a later record of the same key, so the records a dump still holds
for one transactional id are a suffix of its history: two consecutive rows here
are two consecutive state changes. Several brokers' replicas of the same
partition repeat each record; the history keeps one row per offset.
"""

from __future__ import annotations

HISTORY_KEY = ["cluster_id", "transactional_id"]


def history(ctx):
    """``transaction_log`` rows of kind ``transaction``, one per (id, offset), with the
    previous record of the same transactional id (``prev_*``) and ``is_last``.

    ``state_label`` is ``state``, or ``Dead`` for a tombstone (expiry writes the
    tombstone from the in-memory Dead state). One window, one sort; computed once
    per audit run and persisted with the context's other views (released by
    ``ctx.close()``), since several rules read it.
    """
    cached = getattr(ctx, "_coordinator_history", None)
    if cached is None:
        cached = ctx.persist(_history(ctx))
        ctx._coordinator_history = cached
    return cached


def _history(ctx):
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    tl = ctx.table("transaction_log").where("record_type = 'transaction' AND transactional_id IS NOT NULL")
    tl = tl.withColumn("state_label", F.when(F.col("is_tombstone"), F.lit("Dead")).otherwise(F.col("state")))
    w = Window.partitionBy(*HISTORY_KEY).orderBy("offset", "broker_id")
    cols = ("offset", "state_label", "producer_id", "producer_epoch", "last_update_timestamp_ms",
            "start_timestamp_ms", "topic_partitions")
    for c in cols:
        tl = tl.withColumn(f"prev_{c}", F.lag(c).over(w))
    tl = tl.withColumn("last_offset_of_id", F.max("offset").over(w.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)))
    # the same record from another replica sorts right after it: keep the first copy
    tl = tl.where(F.col("prev_offset").isNull() | (F.col("prev_offset") != F.col("offset")))
    return tl.withColumn("is_last", F.col("offset") == F.col("last_offset_of_id"))
