"""Whether the input may be a log that moved while it was read, and how far each view reaches.

Operators point the auditor at the log dirs of running brokers. Each file is sized when it is
listed and read up to that size, so every partition is a consistent prefix, but two partitions
are prefixes taken at (slightly) different moments. Two orders of events then look like
anomalies that are not:

* the coordinator records a transaction (``Ongoing`` with the partition, written before the
  producer may write there: ``TransactionCoordinator.handleAddPartitionsToTransaction``, or the
  verification of transaction version 2) *after* its ``__transaction_state`` partition was sized,
  and the producer writes the data *before* the data partition was: the data looks written
  after its session's marker with the coordinator not listing the partition (a late write);
* the coordinator writes the markers and its ``Complete*`` record *after* the data partition
  was sized: the data looks open with the coordinator saying it completed (hanging).

A log dir that holds ``.kafka_cleanshutdown`` belongs to a broker that stopped cleanly and did
not start again (the broker deletes the file when it starts: ``LogManager.loadLogs``): nothing
more is written there. A cluster all of whose given log dirs hold it is *stopped*; otherwise the
verdicts ask how far each view reaches before they call a transaction late or hanging
(:mod:`auditor.model.verdict_table`).
"""

from __future__ import annotations


def stopped_log_dirs(files):
    """Per log dir of the ``files`` inventory (``cluster_id``, ``log_dir``): ``log_dir_stopped`` — it
    holds ``.kafka_cleanshutdown``. A log dir the inventory does not list (hand-made tables) has no
    row: it is taken as stopped (nothing says it moved).

    In a log dir that was not cleanly stopped the ``replication-offset-checkpoint`` lags the log: the
    broker writes it every ``replica.high.watermark.checkpoint.interval.ms`` (5 s) and at a clean
    shutdown (``ReplicaManager.checkpointHighWatermarks``), so its entry is a lower bound of the high
    watermark (:func:`auditor.model.producer_state.spark.last_stable_offsets`)."""
    from pyspark.sql import functions as F

    return files.where("log_dir IS NOT NULL AND cluster_id IS NOT NULL").groupBy("cluster_id", "log_dir").agg(
        (F.max(F.when(F.col("kind") == "clean-shutdown", 1).otherwise(0)) == 1).alias("log_dir_stopped"))


def stopped_log_dirs_of_rows(files: list[dict]) -> dict[tuple[str, str], bool]:
    """:func:`stopped_log_dirs` of ``files`` inventory rows (dicts with ``cluster_id`` — the
    cluster's key, :func:`auditor.model.clusters.cluster_key` —, ``log_dir``, ``kind``), for the
    readers without Spark (the timeline's pyarrow engine): ``{(cluster_id, log_dir): stopped}``. A
    log dir without a row is taken as stopped, as there."""
    out: dict[tuple[str, str], bool] = {}
    for r in files:
        if r.get("log_dir") is None or r.get("cluster_id") is None:
            continue
        key = (r["cluster_id"], r["log_dir"])
        out[key] = out.get(key, False) or r.get("kind") == "clean-shutdown"
    return out


def stopped_clusters(files):
    """Per cluster of the ``files`` inventory: ``log_dirs_stopped`` — every log dir of it that
    was given holds ``.kafka_cleanshutdown`` (:func:`stopped_log_dirs`). A cluster the inventory
    does not list (hand-made tables) has no row: it is taken as stopped (nothing says it moved)."""
    from pyspark.sql import functions as F

    return stopped_log_dirs(files).groupBy("cluster_id").agg(F.min(F.col("log_dir_stopped").cast("int")).alias("_s")) \
        .select("cluster_id", (F.col("_s") == 1).alias("log_dirs_stopped"))


def coordinator_read_until(transaction_log):
    """Per ``__transaction_state`` partition of a cluster (``cluster_id``, ``coordinator_partition``):
    ``coordinator_read_until_ms``, the newest record timestamp the input holds of it (over every
    replica): the coordinator's view reaches at least that far."""
    from pyspark.sql import functions as F

    return transaction_log.groupBy("cluster_id", F.col("partition").alias("coordinator_partition")).agg(
        F.max("timestamp").alias("coordinator_read_until_ms"))


def replica_written_until(files):
    """Per replica of the ``files`` inventory (the replica's columns): ``written_until_ms``, the
    newest modification time of its live segments when they were listed. It bounds how far the
    replica as read reaches on the broker host's clock: a segment is read up to the size it was
    listed with, so nothing the broker appended after that time is in it. Batch timestamps bound
    it too, but on the producers' clocks (``CreateTime``): a client whose clock runs ahead makes a
    partition read before the coordinator completed a transaction look read after it. A follower
    appends old batches late, so a recent time here alone says nothing of a marker either: the
    verdicts take the earlier of the two (:func:`auditor.model.verdicts.open_transaction_evidence`).
    A replica the inventory does not list, or lists without times, has no row."""
    from pyspark.sql import functions as F

    from auditor.model.replica_key import REPLICA

    return files.where("kind = 'segment' AND file_status = 'live' AND topic IS NOT NULL AND mtime_ms > 0") \
        .groupBy(*REPLICA).agg(F.max("mtime_ms").alias("written_until_ms"))
