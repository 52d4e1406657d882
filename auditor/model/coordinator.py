"""The coordinator's records as the rules read them: ``__transaction_state`` once.

Several brokers replicate a ``__transaction_state`` partition, so a dump holds
each record once per replica. :func:`records` keeps one copy per (cluster,
partition, offset): the lowest broker id's, the same choice the ``coordinator``
forensics command makes (:func:`auditor.forensics.coordinator_lookup._records`). Every
view of the coordinator's state derives from it:

* :func:`history` — per transactional id, each record with the one before it.
  ``__transaction_state`` is compacted, but the cleaner only ever drops records
  *older* than a later record of the same key, so the records a dump still holds
  for an id are a suffix of its history: consecutive rows are consecutive
  state changes;
* :func:`latest` — the newest record per transactional id.

And from every copy, as the coordinator's state holds them:

* :func:`producer_transactional_ids` — each producer id a record names (current,
  previous or next) with its transactional id;
* :func:`coordinator_partitions` — how many ``__transaction_state`` partitions of a
  cluster the input holds records of (what was *given* against what the cluster
  has is :mod:`auditor.model.coverage`'s).
"""

from __future__ import annotations

HISTORY_KEY = ["cluster_id", "transactional_id"]
_HISTORY_COLUMNS = ("offset", "state_label", "producer_id", "producer_epoch", "last_update_timestamp_ms",
                    "start_timestamp_ms", "topic_partitions")
# the next record's append time (``timestamp``): a Complete* record's last update time is when the
# coordinator prepared it, right after the Prepare* (``TransactionMetadata.prepareComplete`` is called
# with the EndTxn's time), not when it was written once the markers were done
_NEXT_COLUMNS = ("offset", "state_label", "timestamp")


def records(transaction_log):
    """``transaction_log`` rows of kind ``transaction`` with an id, one copy per
    (cluster, partition, offset), and ``state_label``: ``state``, or ``Dead`` for a
    tombstone (expiry writes the tombstone from the in-memory Dead state)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    tl = transaction_log.where("record_type = 'transaction' AND transactional_id IS NOT NULL")
    w = Window.partitionBy("cluster_id", "partition", "offset").orderBy(F.col("broker_id").asc_nulls_last())
    tl = tl.withColumn("_copy", F.row_number().over(w)).where("_copy = 1").drop("_copy")
    return tl.withColumn("state_label", F.when(F.col("is_tombstone"), F.lit("Dead")).otherwise(F.col("state")))


#: the states of a transaction under way (it started: ``Ongoing``; a transaction.version 2 abort goes
#: from ``Empty`` or ``Complete*`` straight to ``PrepareAbort``)
_UNDER_WAY = ("Ongoing", "PrepareCommit", "PrepareAbort")


def transaction_start(prefix: str = ""):
    """When a record's transaction started: its ``start_timestamp_ms``, else (-1: a transaction.version
    2 abort straight from Empty/Complete*, or no transaction) the record's own last update time.
    ``prefix``: of the columns (``prev_`` for the previous record's, in :func:`history`)."""
    from pyspark.sql import functions as F

    st, up = F.col(prefix + "start_timestamp_ms"), F.col(prefix + "last_update_timestamp_ms")
    return F.when(st >= 0, st).otherwise(up)


def history(recs):
    """Each record with the previous record of the same transactional id (``prev_*``),
    the state, offset and time of the next one (``next_*``: what followed a decision),
    ``is_last``, and ``next_transaction_start_ms``: when the id's next transaction after this
    record's started (the first later record under way after one that is not; its
    ``start_timestamp_ms``, else its last update), null while none did. The coordinator starts
    no transaction of an id before the previous one's markers are written (it answers
    CONCURRENT_TRANSACTIONS), so that instant bounds this record's transaction: its data and
    markers precede it, a later transaction's data follows it."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy(*HISTORY_KEY).orderBy("offset")
    h = recs
    for c in _HISTORY_COLUMNS:
        h = h.withColumn(f"prev_{c}", F.lag(c).over(w))
    for c in _NEXT_COLUMNS:
        h = h.withColumn(f"next_{c}", F.lead(c).over(w))
    last = F.max("offset").over(w.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing))
    h = h.withColumn("is_last", F.col("offset") == last)
    starts = F.col("state_label").isin(*_UNDER_WAY) & ~F.coalesce(F.col("prev_state_label").isin(*_UNDER_WAY), F.lit(False))
    start = F.when(starts, transaction_start())
    # newest first, the rows above this one are the later records: the nearest start among them (a running frame)
    later = Window.partitionBy(*HISTORY_KEY).orderBy(F.col("offset").desc()).rowsBetween(Window.unboundedPreceding, -1)
    return h.withColumn("next_transaction_start_ms", F.last(start, ignorenulls=True).over(later))


def latest(recs, *, tombstones: bool = True):
    """The newest record per transactional id (without tombstones: the newest live one)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    r = recs if tombstones else recs.where("NOT is_tombstone")
    w = Window.partitionBy(*HISTORY_KEY).orderBy(F.col("offset").desc())
    return r.withColumn("_rn", F.row_number().over(w)).where("_rn = 1").drop("_rn")


def producer_transactional_ids(transaction_log):
    """(cluster_id, producer_id, transactional_id) the coordinator ever recorded: the
    producer id of every live transaction record, and the previous and next ones it
    names (an epoch bump or a fenced producer's successor), distinct."""
    from pyspark.sql import functions as F

    tl = transaction_log.where("record_type = 'transaction' AND NOT is_tombstone")
    ids = tl.select("cluster_id", F.col("producer_id"), "transactional_id").union(
        tl.where("previous_producer_id >= 0").select("cluster_id", F.col("previous_producer_id").alias("producer_id"), "transactional_id")
    ).union(tl.where("next_producer_id >= 0").select("cluster_id", F.col("next_producer_id").alias("producer_id"), "transactional_id"))
    return ids.where("producer_id >= 0").distinct()


def transactional_id_of(ids):
    """One transactional id per (cluster_id, producer_id) of :func:`producer_transactional_ids`
    rows (the least, should a producer id have served several ids): the name the verdicts,
    rules and reports give a producer."""
    from pyspark.sql import functions as F

    return ids.groupBy("cluster_id", "producer_id").agg(F.min("transactional_id").alias("transactional_id"))


def coordinator_partitions(transaction_log):
    """Per cluster (``cluster_id``, ``coordinator_partitions``): how many
    ``__transaction_state`` partitions ``transaction_log`` holds records of; a cluster
    without any has no row."""
    from pyspark.sql import functions as F

    return transaction_log.groupBy("cluster_id").agg(F.countDistinct("partition").alias("coordinator_partitions"))
