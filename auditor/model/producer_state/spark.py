"""The producer-state model as Spark derivations (see :mod:`auditor.model.producer_state.reference`).

Every function takes DataFrames and returns a DataFrame; none collects. They
are written over one ordering — (replica, producer id, base offset) — and the
caller (``AuditContext``) persists what several rules share, so an audit sorts
the producer batches once however many rules read the model.

A *replica* is (cluster_id, broker_id, log_dir, topic, partition): several
brokers' copies of a partition are modelled separately, as each broker keeps
its own producer state.
"""

from __future__ import annotations

from auditor.model.replica_key import REPLICA, join_replica

INT32_MAX = 2**31 - 1  # sequences wrap from here to 0
NUM_BATCHES_TO_RETAIN = 5  # the broker's duplicate window (ProducerStateEntry)
MARKER_TYPES = ("COMMIT", "ABORT")

BATCH_COLUMNS = (
    "cluster_id", "broker_id", "log_dir", "topic", "partition", "producer_id", "producer_epoch", "base_offset", "last_offset",
    "last_offset_delta", "base_sequence", "last_sequence", "record_count", "is_transactional", "is_control",
    "control_type", "coordinator_epoch", "max_timestamp",
)


def producer_batches(batches):
    """Batches with a producer id (data and markers) of the segments, narrowed to the
    columns the model reads, with ``is_marker`` (a COMMIT/ABORT control batch that
    still holds its record: an emptied control batch is skipped, as by the broker)
    and ``is_data``."""
    from pyspark.sql import functions as F

    return (
        batches.where("magic = 2 AND source = 'segment' AND producer_id >= 0")
        .select(*BATCH_COLUMNS)
        .withColumn("is_marker", F.col("is_control") & F.coalesce(F.col("control_type").isin(*MARKER_TYPES), F.lit(False)))
        .withColumn("is_data", ~F.col("is_control"))
    )


def replica_ids(replicas):
    """(replica id, *REPLICA) for each distinct replica of ``replicas``: a dense int,
    numbered in replica order (so the same input gives the same ids).

    The per-producer sorts of :func:`sequence_breaks` and :func:`transactions` compare
    their keys for every pair of rows they order; with the replica's three strings
    among them (cluster id, log dir, topic) most of the sort is string comparison.
    Keyed by this int instead (:func:`by_replica_id`, the strings joined back by
    :func:`with_replica` on the much smaller result) a 1 M-batch audit sorts about
    twice as fast (bench/JOURNAL.md)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    return replicas.select(*REPLICA).distinct().withColumn(
        "replica_id", F.row_number().over(Window.orderBy(*REPLICA)).cast("int"))


def by_replica_id(df, ids):
    """``df`` with ``replica_id`` in place of the replica's columns (``ids``: :func:`replica_ids`
    of a superset of ``df``'s replicas). Matched null-safe: a log dir without meta.properties has
    no broker id, and its batches are a replica like any other."""
    from pyspark.sql import functions as F

    return join_replica(df, F.broadcast(ids.select(*REPLICA, "replica_id"))).drop(*REPLICA)


def with_replica(df, ids):
    """The replica's columns of ``df``'s ``replica_id`` back in its place (the inverse of :func:`by_replica_id`)."""
    from pyspark.sql import functions as F

    return df.join(F.broadcast(ids), "replica_id").select(*REPLICA, *(c for c in df.columns if c != "replica_id"))


def sequence_breaks(pb, key=REPLICA):
    """Data batches of each (replica, producer id) that do not simply chain on the
    previous one, with that previous batch's epoch, sequences and offset: what the
    broker compares a new batch against (``ProducerAppendInfo.checkSequence``).

    A batch *chains* when it has the previous data batch's epoch and starts at its
    last sequence + 1 (wrapping after 2147483647). Only the others are kept: a
    producer's first retained batch, epoch changes, gaps, regressions and
    duplicates. On a healthy log that is one row per producer session.

    ``duplicate_of_offset``: the broker keeps the last 5 batches per producer to
    answer retries; a batch equal to one of the 2nd..5th previous ones (epoch and
    both sequences) is a retry it would have acknowledged, not appended — its
    offset is given here. The adjacent duplicate is visible from ``prev_data_*``.

    ``key``: the columns naming a replica (``["replica_id"]`` after :func:`by_replica_id`)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy(*key, "producer_id").orderBy("base_offset")
    # only the columns the sequence checks read: the shuffle before the sort is the largest
    # cost here, and it scales with the row width
    d = pb.where("is_data").select(
        *key, "producer_id", "producer_epoch", "base_offset", "last_offset", "base_sequence", "last_sequence",
        "record_count", "is_transactional", "max_timestamp")
    # one lag per batch back, of the four fields the checks compare (a struct): 5 window functions
    # where one per field and batch took 20 (1 M batches with C1: the stage's executor CPU 6.2 -> 3.9 s)
    back = [f"_b{k}" for k in range(1, NUM_BATCHES_TO_RETAIN + 1)]
    d = d.withColumn("_b", F.struct("producer_epoch", "base_sequence", "last_sequence", "base_offset"))
    d = d.withColumns({c: F.lag("_b", k).over(w) for k, c in enumerate(back, start=1)})
    prev = F.col(back[0])
    d = d.withColumns({
        "prev_data_epoch": prev["producer_epoch"], "prev_data_base_sequence": prev["base_sequence"],
        "prev_data_last_sequence": prev["last_sequence"], "prev_data_offset": prev["base_offset"],
    })
    duplicate_of = None
    for c in back[1:]:
        b = F.col(c)
        same = ((b["producer_epoch"] == F.col("producer_epoch")) & (b["base_sequence"] == F.col("base_sequence"))
                & (b["last_sequence"] == F.col("last_sequence")))
        duplicate_of = F.when(same, b["base_offset"]) if duplicate_of is None else duplicate_of.when(same, b["base_offset"])
    d = d.withColumn("duplicate_of_offset", duplicate_of).drop("_b", *back)
    prev_last = F.col("prev_data_last_sequence")
    expected = F.when(prev_last == INT32_MAX, F.lit(0)).otherwise(prev_last + 1)
    chained = (F.col("prev_data_epoch").isNotNull() & (F.col("producer_epoch") == F.col("prev_data_epoch"))
               & (F.col("base_sequence") == expected))
    return d.where(~chained | F.col("duplicate_of_offset").isNotNull())


def transactions(pb, key=REPLICA):
    """One row per transaction per replica (``reference.transactions`` row by row).

    A producer's transactional data batches between two of its markers form one
    transaction; the later marker closes it (``state`` commit / abort), none
    leaves it ``open`` with its first offset where the broker's
    ``currentTxnFirstOffset`` is. A marker with no data before it is a
    ``marker-only`` row (the cleaner removed the data, or a coordinator's marker
    for a partition the producer never wrote). The previous transaction's marker
    is alongside (``prev_*``: its epoch, offset, type, timestamp and the last coordinator epoch). Grouping is a running count of markers: one sort
    of the transactional batches, then a hash aggregate. ``key``: as for :func:`sequence_breaks`."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy(*key, "producer_id").orderBy("base_offset")
    running = w.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    pb = pb.where(F.col("is_transactional") & (F.col("is_data") | F.col("is_marker"))).withColumn(
        # markers strictly before this batch: a marker belongs to the data before it
        "markers_before",
        F.sum(F.col("is_marker").cast("int")).over(running) - F.col("is_marker").cast("int"),
    )
    d = F.col("is_data")
    m = F.col("is_marker")
    t = pb.groupBy(*key, "producer_id", "markers_before").agg(
        F.sum(d.cast("int")).alias("data_batches"),
        F.min(F.when(d, F.col("base_offset"))).alias("first_offset"),
        F.max(F.when(d, F.col("last_offset"))).alias("last_data_offset"),
        F.min(F.when(d, F.col("max_timestamp"))).alias("first_timestamp"),
        F.max(F.when(d, F.col("max_timestamp"))).alias("last_data_timestamp"),
        F.min(F.when(d, F.col("producer_epoch"))).alias("data_epoch_min"),
        F.max(F.when(d, F.col("producer_epoch"))).alias("data_epoch_max"),
        F.max(F.when(m, F.col("base_offset"))).alias("marker_offset"),
        # numeric, not max(control_type): a string aggregate forces a sort-based aggregate, i.e. a
        # second full sort of the transactional batches; with fixed-width buffers it is a hash aggregate
        F.max(F.when(m, (F.col("control_type") == "COMMIT").cast("int"))).alias("_marker_commit"),
        F.max(F.when(m, F.col("producer_epoch"))).alias("marker_epoch"),
        F.max(F.when(m, F.col("coordinator_epoch"))).alias("coordinator_epoch"),
        F.max(F.when(m, F.col("max_timestamp"))).alias("marker_timestamp"),
    )
    commit = F.col("_marker_commit")
    # the state spelled out rather than lower(marker_type): Spark 4's lower() loads ICU's case
    # mapping and word-break tables on first use, ~0.5 CPU-s of an executor on every audit
    t = t.withColumns({
        "marker_type": F.when(commit == 1, F.lit("COMMIT")).when(commit == 0, F.lit("ABORT")),
        "state": F.when(F.col("marker_offset").isNull(), F.lit("open"))
        .when(F.col("data_batches") == 0, F.lit("marker-only"))
        .when(commit == 1, F.lit("commit")).when(commit == 0, F.lit("abort")),
    }).drop("_marker_commit")
    g = Window.partitionBy(*key, "producer_id").orderBy("markers_before")
    before = g.rowsBetween(Window.unboundedPreceding, -1)
    return (
        t.withColumn("prev_marker_epoch", F.lag("marker_epoch").over(g))
        .withColumn("prev_marker_offset", F.lag("marker_offset").over(g))
        .withColumn("prev_marker_type", F.lag("marker_type").over(g))
        .withColumn("prev_marker_timestamp", F.lag("marker_timestamp").over(g))
        .withColumn("prev_coordinator_epoch", F.last("coordinator_epoch", ignorenulls=True).over(before))
    )


def unstable_at(txns, offset_col):
    """Transactions that hold the LSO at ``offset_col`` (a column of ``txns``' rows
    after a join): opened below it and not closed by a marker below it."""
    from pyspark.sql import functions as F

    return (F.col("first_offset") < offset_col) & (F.col("marker_offset").isNull() | (F.col("marker_offset") >= offset_col))


def high_watermarks(partitions, stopped_log_dirs=None):
    """Per replica of ``partitions`` (columns: the replica key, ``high_watermark`` — the
    ``replication-offset-checkpoint`` entry, null without one — and ``log_end_offset``): the high
    watermark the model counts with, the one every reader shows (``stuck-lso``, the report, the
    timeline's Spark engine), so a replica never has two.

    ``hw`` is the checkpoint's entry capped at the log end, the log end without one. In a log dir
    that was not cleanly stopped (``stopped_log_dirs``: :func:`auditor.model.moving.stopped_log_dirs`,
    None or no row: stopped) the checkpoint lags the log (the broker writes it every 5 s and at a
    clean shutdown), so its entry is only a lower bound: ``hw`` is then the log end, and a
    transaction the log holds pins the LSO. ``hw_checkpoint`` keeps the checkpoint's entry (capped
    at the log end), ``hw_lower_bound`` says it is only a lower bound. The rule on rows, for the
    readers without Spark, is :func:`auditor.model.replica.high_watermark_of` (the two are held
    equal on every partition of sample_logs/ by ``tests/test_forensics_fast.py``)."""
    from pyspark.sql import functions as F

    p = partitions
    if stopped_log_dirs is not None:
        p = p.join(F.broadcast(stopped_log_dirs), ["cluster_id", "log_dir"], "left")
        moved = ~F.coalesce(F.col("log_dir_stopped"), F.lit(True))
    else:
        moved = F.lit(False)
    checkpoint = F.least(F.coalesce("high_watermark", "log_end_offset"), F.col("log_end_offset"))
    p = p.withColumns({"hw_checkpoint": checkpoint, "hw_lower_bound": moved & F.col("high_watermark").isNotNull(),
                       "hw": F.when(moved, F.col("log_end_offset")).otherwise(checkpoint)})
    return p.drop("log_dir_stopped") if stopped_log_dirs is not None else p


def last_stable_offsets(txns, partitions, stopped_log_dirs=None):
    """Per replica of ``partitions`` (columns: the replica key, ``high_watermark``,
    ``log_end_offset``, ``log_start_offset``): the first unstable offset and the
    last stable offset the broker has after loading the replica, and the open
    transaction that pins it.

    ``hw``, ``hw_checkpoint``, ``hw_lower_bound``: the replica's high watermark
    (:func:`high_watermarks`: the checkpoint's entry capped at the log end, the log
    end without one or where the log dir was not cleanly stopped). The first unstable offset is the first offset of
    the earliest open transaction, never below the log start; the LSO is that
    offset if below ``hw``, else ``hw`` (``UnifiedLog.lastStableOffset``).
    Completed transactions whose marker is not yet below the high watermark
    (``unreplicatedTxns``) are not counted: a loaded broker seeds its state from a
    producer snapshot at the log end (written at a clean shutdown, or by recovery
    after an unclean one), which does not keep them — they hold a running
    broker's LSO only until its followers fetch the marker
    (:func:`auditor.model.producer_state.reference.load_replica` does the same).

    Columns added: those of :func:`high_watermarks`, ``first_unstable_offset``, ``last_stable_offset``,
    ``open_transactions`` (how many are open) and the earliest open transaction
    as ``pin`` (struct: ``first_offset``, ``producer_id``, ``producer_epoch`` —
    its data epoch —, ``first_timestamp``, ``prev_coordinator_epoch``), null
    when none is open."""
    from pyspark.sql import functions as F

    p = high_watermarks(partitions, stopped_log_dirs)
    agg = txns.where("state = 'open'").groupBy(*REPLICA).agg(
        F.count(F.lit(1)).alias("open_transactions"),
        F.min(F.struct("first_offset", "producer_id", F.col("data_epoch_max").alias("producer_epoch"),
                       "first_timestamp", "prev_coordinator_epoch")).alias("pin"),
    )
    out = join_replica(p, agg, "left")
    fuo = F.greatest(F.col("pin.first_offset"), F.coalesce(F.col("log_start_offset"), F.lit(0)))
    return (out.withColumn("first_unstable_offset", F.when(F.col("pin").isNotNull(), fuo))
            .withColumn("last_stable_offset", F.when(F.col("first_unstable_offset") < F.col("hw"), F.col("first_unstable_offset"))
                        .otherwise(F.col("hw")))
            .withColumn("open_transactions", F.coalesce("open_transactions", F.lit(0))))


def open_at(txns, offset: int):
    """Transactions open just before ``offset`` (the timeline's state at ``--from``):
    (producer id, first offset, data epoch) rows."""
    from pyspark.sql import functions as F

    return txns.where(unstable_at(txns, F.lit(offset))).select(
        "producer_id", "first_offset", F.col("data_epoch_min").alias("producer_epoch"))


def pins_by_bucket(txns, opened_bucket, last_open_bucket):
    """The LSO's pin over time, for charts: per replica and time bucket, the earliest
    transaction open during it (struct ``pin``: first offset, first timestamp,
    producer id) and how many were open. ``opened_bucket`` / ``last_open_bucket``
    are columns of ``txns`` giving the bucket a transaction opened in and the last
    one it was still open in (before its marker's bucket)."""
    from pyspark.sql import functions as F

    return (txns.where("first_offset IS NOT NULL").withColumn("_b0", opened_bucket).withColumn("_b1", last_open_bucket)
            .where("_b1 >= _b0")
            .select(*REPLICA, F.explode(F.sequence("_b0", "_b1")).alias("bucket"),
                    F.struct("first_offset", "first_timestamp", "producer_id").alias("txn"))
            .groupBy(*REPLICA, "bucket").agg(F.min("txn").alias("pin"), F.count(F.lit(1)).alias("open")))


def snapshot_remembers(first, snapshots, expiration_ms):
    """``first`` (data batches with the replica key, ``producer_id``, ``producer_epoch``,
    ``base_offset``, ``base_sequence``, ``max_timestamp``) with ``remembered``: a producer
    snapshot taken at or before the batch holds the producer, the entry had not expired
    by the batch's time (``isProducerExpired``: idle ``producer.id.expiration.ms`` with
    no open transaction), and the batch continues the entry's sequence in its epoch —
    the broker then had state for the producer and accepted the batch in sequence.
    Retention deleting the producer's segments does not drop its state (KIP-360): only
    expiry does. ``expiration_ms``: an int, or a column of ``first`` (per broker).

    Also ``remembered_whatever_expiration``: such an entry kept alive by its open
    transaction (``currentTxnFirstOffset``), which no expiration setting drops — what
    holds when the input cannot show ``producer.id.expiration.ms``."""
    from pyspark.sql import Column
    from pyspark.sql import functions as F

    exp = expiration_ms if isinstance(expiration_ms, Column) else F.lit(expiration_ms)
    first = first.withColumn("_expiration_ms", exp)

    s = snapshots.where("producer_id IS NOT NULL").select(
        *REPLICA, "producer_id", F.col("snapshot_offset"), F.col("producer_epoch").alias("_s_epoch"),
        F.col("last_sequence").alias("_s_last_seq"), F.col("last_timestamp").alias("_s_ts"),
        F.col("current_txn_first_offset").alias("_s_txn"))
    j = join_replica(first.select(*REPLICA, "producer_id", "base_offset", "producer_epoch", "base_sequence",
                                  "max_timestamp", "_expiration_ms"), s, on=["producer_id"])
    alive = (F.coalesce(F.col("_s_txn"), F.lit(-1)) >= 0) | ((F.col("max_timestamp") - F.col("_s_ts")) < F.col("_expiration_ms"))
    nxt = F.when(F.col("_s_last_seq") == INT32_MAX, F.lit(0)).otherwise(F.col("_s_last_seq") + 1)
    continues = (F.col("_s_epoch") == F.col("producer_epoch")) & (F.col("base_sequence") == nxt)
    in_open_txn = F.coalesce(F.col("_s_txn"), F.lit(-1)) >= 0
    hit = j.where((F.col("snapshot_offset") <= F.col("base_offset")) & alive & continues) \
        .groupBy(*REPLICA, "producer_id", "base_offset").agg(F.max(in_open_txn.cast("int")).alias("_open"))
    return join_replica(first, hit, "left", on=["producer_id", "base_offset"]).withColumns({
        "remembered": F.col("_open").isNotNull(),
        "remembered_whatever_expiration": F.coalesce(F.col("_open") == 1, F.lit(False)),
    }).drop("_expiration_ms", "_open")
