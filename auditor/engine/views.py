"""Shared, cached views the rules are written against.

The broker keeps producer state per (partition, producer id): epoch, last
sequences, coordinator epoch and the first offset of the open transaction
(``ProducerStateManager``). The views below rebuild that state from the
``batches`` table with window functions over one ordering — (replica,
producer id, base offset) — so every rule shares a single sort, and the result
is persisted once per audit run.

A *replica* is (cluster_id, broker_id, log_dir, topic, partition): several
brokers' copies of one partition are audited separately, and compared by the
replica rule; the log dir keeps apart a JBOD move's ``-future`` copy and two
dumps of the same broker taken at different times.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

REPLICA = ["cluster_id", "broker_id", "log_dir", "topic", "partition"]
# a file inside a partition directory the broker retired (see AuditContext.table)
RETIRED_REPLICA_FILE = r"\.[0-9a-fA-F]{32}-(delete|stray)/[^/]+$"
INTERNAL_COMPACTED = ("__consumer_offsets", "__transaction_state")
INT32_MAX = 2**31 - 1  # sequences wrap from here to 0


@dataclass
class AuditOptions:
    """Broker settings the rules compare against (Kafka's defaults unless given)."""

    as_of_ms: int | None = None  # "now" for ages; default: newest timestamp in the dump
    transaction_max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    producer_id_expiration_ms: int = 86_400_000  # producer.id.expiration.ms
    epoch_exhaustion_warn: int = 32_000  # warn when an epoch gets this close to 32767


class AuditContext:
    def __init__(self, spark, tables_dir: str, options: AuditOptions | None = None) -> None:
        self.spark = spark
        self.tables_dir = Path(tables_dir)
        self.options = options or AuditOptions()
        self._persisted: list = []

    # -- tables ------------------------------------------------------------
    def table(self, name: str):
        """A table as the rules see it:

        * ``cluster_id`` is never null: brokers without a cluster.id (old
          ZooKeeper clusters) are keyed by their log dir, so two unrelated dumps
          are never mistaken for one cluster;
        * rows from replicas the broker no longer serves are left out: a
          partition directory renamed ``<topic>-<n>.<uuid>-delete`` (the topic
          was deleted, or the replica moved away) or ``-stray`` (a replica the
          KRaft broker found it should not host). Such a directory sits in the
          same log dir as a live ``<topic>-<n>`` if the topic was re-created,
          and merging the two would fake sequence regressions, duplicates and
          hanging transactions on the live partition. Their rows stay in the
          tables (``files.dir_status`` says which) for ``txn-audit tables`` and
          ad-hoc queries; ``-future`` copies (a JBOD move in progress) live in
          another log dir and are audited as a replica of their own.
        """
        from pyspark.sql import functions as F

        df = self.load(name)
        if "cluster_id" in df.columns and "log_dir" in df.columns:
            df = df.withColumn("cluster_id", F.coalesce("cluster_id", F.concat(F.lit("logdir:"), F.col("log_dir"))))
        if "file" in df.columns and "partition" in df.columns and name != "files":
            retired = self.retired_files
            if retired is None:  # no inventory to tell: recognise the directory names row by row
                f = F.col("file")
                by_name = (f.contains("-delete/") | f.contains("-stray/")) & f.rlike(RETIRED_REPLICA_FILE)
                df = df.where(~F.coalesce(by_name, F.lit(False)))
            elif retired:
                df = df.where(~F.col("file").isin(retired))
        return df

    @cached_property
    def retired_files(self) -> list[str] | None:
        """Files in ``-delete`` / ``-stray`` partition directories, from the ``files``
        inventory (one small read; usually none, and then the tables are not
        filtered at all); None when there is no inventory."""
        try:
            inv = self.load("files")
        except Exception:  # noqa: BLE001 - no inventory (hand-made tables): table() falls back to names
            return None
        if "dir_status" not in inv.columns or "path" not in inv.columns:
            return None
        rows = inv.where("dir_status IN ('delete', 'stray')").select("path").distinct().collect()
        return sorted(r["path"] for r in rows)

    def load(self, name: str):
        """The table as stored: a Parquet directory here; the scheduled batch job's
        context (``auditor.batch.audit``) reads Delta tables instead."""
        return self.spark.read.parquet(str(self.tables_dir / name))

    @cached_property
    def table_rows(self) -> dict[str, int]:
        """Row counts from the ingest manifest (no Spark job); {} if there is none."""
        import json

        m = self.tables_dir / "_ingest.json"
        return json.loads(m.read_text()).get("tables", {}) if m.exists() else {}

    def has_rows(self, name: str) -> bool:
        if name in self.table_rows:
            return self.table_rows[name] > 0
        p = self.tables_dir / name
        return p.exists() and not self.table(name).limit(1).isEmpty()

    def persist(self, df):
        """Persist a derived DataFrame for the rest of this audit run (released by :meth:`close`)."""
        from pyspark import StorageLevel

        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        self._persisted.append(df)
        return df

    def close(self) -> None:
        for df in self._persisted:
            df.unpersist()
        self._persisted.clear()

    # -- reference time ------------------------------------------------------
    @cached_property
    def as_of(self):
        """Per cluster, the instant ages are measured against: the newest
        timestamp in that cluster's dump (an offline dump has no "now"), or the
        user's ``--as-of``. Small: one row per cluster."""
        from pyspark.sql import functions as F

        if self.options.as_of_ms is not None:
            clusters = self.table("batches").select("cluster_id").distinct()
            return self.persist(clusters.withColumn("as_of_ms", F.lit(self.options.as_of_ms).cast("long")))
        b = self.table("batches").where("magic = 2 AND source = 'segment'").groupBy("cluster_id").agg(
            F.max("max_timestamp").alias("t"))
        if self.has_rows("transaction_log"):
            t = self.table("transaction_log").groupBy("cluster_id").agg(F.max("last_update_timestamp_ms").alias("t"))
            b = b.unionByName(t)
        return self.persist(b.groupBy("cluster_id").agg(F.max("t").cast("long").alias("as_of_ms")))

    def with_as_of(self, df):
        """``df`` with its cluster's ``as_of_ms`` column."""
        from pyspark.sql import functions as F

        return df.join(F.broadcast(self.as_of), "cluster_id", "left")

    @cached_property
    def as_of_ms(self) -> int:
        """The newest per-cluster reference time (for summaries)."""
        row = self.as_of.agg({"as_of_ms": "max"}).first()
        return int(row[0]) if row and row[0] is not None else 0

    # -- producer state ------------------------------------------------------
    _BATCH_COLUMNS = (
        "cluster_id", "broker_id", "log_dir", "topic", "partition", "producer_id", "producer_epoch", "base_offset", "last_offset",
        "last_offset_delta", "base_sequence", "last_sequence", "record_count", "is_transactional", "is_control",
        "control_type", "coordinator_epoch", "max_timestamp",
    )

    @cached_property
    def producer_batches(self):
        """Batches with a producer id (data and markers), narrowed to the columns
        producer-state rules read. A plain scan: not persisted."""
        from pyspark.sql import functions as F

        return (
            self.table("batches")
            .where("magic = 2 AND source = 'segment' AND producer_id >= 0")
            .select(*self._BATCH_COLUMNS)
            .withColumn("is_marker", F.col("is_control") & F.col("control_type").isin("COMMIT", "ABORT"))
            .withColumn("is_data", ~F.col("is_control"))
        )

    @cached_property
    def sequence_breaks(self):
        """Data batches of each (replica, producer id) that do not simply chain
        on the previous one, with that previous batch's epoch, sequences and
        offset: what the broker compares a new batch against (ProducerAppendInfo).

        A batch *chains* when it has the previous data batch's epoch and starts
        at its last sequence + 1 (wrapping after 2147483647). Only the others
        are kept: a producer's first retained batch, epoch changes, gaps,
        regressions and duplicates. On a healthy log that is one row per
        producer session, so the persisted view is tiny and the rules never
        re-read the sorted batches (keeping every row measured ~3x slower).

        ``duplicate_of_offset``: the broker keeps the last 5 batches per
        producer to answer retries (NUM_BATCHES_TO_RETAIN); a batch equal to
        one of the 2nd..5th previous ones (epoch and both sequences) is a retry
        it would have acknowledged, not appended — its offset is given here.
        The adjacent duplicate is visible from the ``prev_data_*`` columns."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        w = Window.partitionBy(*REPLICA, "producer_id").orderBy("base_offset")
        # only the columns the sequence checks read: the shuffle before the sort is the largest
        # cost here, and it scales with the row width
        d = self.producer_batches.where("is_data").select(
            *REPLICA, "producer_id", "producer_epoch", "base_offset", "last_offset", "base_sequence", "last_sequence",
            "record_count", "is_transactional", "max_timestamp")
        d = (
            d.withColumn("prev_data_epoch", F.lag("producer_epoch").over(w))
            .withColumn("prev_data_base_sequence", F.lag("base_sequence").over(w))
            .withColumn("prev_data_last_sequence", F.lag("last_sequence").over(w))
            .withColumn("prev_data_offset", F.lag("base_offset").over(w))
        )
        duplicate_of = None
        for k in range(2, 6):
            def back(c: str, k: int = k):
                return F.lag(c, k).over(w)

            same = ((back("producer_epoch") == F.col("producer_epoch")) & (back("base_sequence") == F.col("base_sequence"))
                    & (back("last_sequence") == F.col("last_sequence")))
            duplicate_of = F.when(same, back("base_offset")) if duplicate_of is None else duplicate_of.when(same, back("base_offset"))
        d = d.withColumn("duplicate_of_offset", duplicate_of)
        prev_last = F.col("prev_data_last_sequence")
        expected = F.when(prev_last == INT32_MAX, F.lit(0)).otherwise(prev_last + 1)
        chained = (F.col("prev_data_epoch").isNotNull() & (F.col("producer_epoch") == F.col("prev_data_epoch"))
                   & (F.col("base_sequence") == expected))
        return self.persist(d.where(~chained | F.col("duplicate_of_offset").isNotNull()))

    @cached_property
    def transactions(self):
        """One row per transaction per replica: the transactional data of one
        producer between two of its markers, closed by the later marker (or
        open), with the previous transaction's marker alongside."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        w = Window.partitionBy(*REPLICA, "producer_id").orderBy("base_offset")
        running = w.rowsBetween(Window.unboundedPreceding, Window.currentRow)
        pb = self.producer_batches.where("is_transactional").withColumn(
            # markers strictly before this batch: a marker belongs to the data before it
            "markers_before",
            F.sum(F.col("is_marker").cast("int")).over(running) - F.col("is_marker").cast("int"),
        )
        d = F.col("is_data")
        m = F.col("is_marker")
        t = pb.groupBy(*REPLICA, "producer_id", "markers_before").agg(
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
        t = t.withColumn("marker_type", F.when(F.col("_marker_commit") == 1, F.lit("COMMIT")).when(
            F.col("_marker_commit") == 0, F.lit("ABORT"))).drop("_marker_commit")
        t = t.withColumn(
            "state",
            F.when(F.col("marker_offset").isNull(), F.lit("open"))
            .when(F.col("data_batches") == 0, F.lit("marker-only"))
            .otherwise(F.lower(F.col("marker_type"))),
        )
        g = Window.partitionBy(*REPLICA, "producer_id").orderBy("markers_before")
        before = g.rowsBetween(Window.unboundedPreceding, -1)
        t = (
            t.withColumn("prev_marker_epoch", F.lag("marker_epoch").over(g))
            .withColumn("prev_marker_offset", F.lag("marker_offset").over(g))
            .withColumn("prev_coordinator_epoch", F.last("coordinator_epoch", ignorenulls=True).over(before))
        )
        return self.persist(t)

    @cached_property
    def open_transactions(self):
        return self.transactions.where("state = 'open'")

    # -- coordinator ---------------------------------------------------------
    @cached_property
    def has_coordinator_log(self) -> bool:
        return self.has_rows("transaction_log")

    @cached_property
    def coordinator_partitions(self) -> int:
        """How many ``__transaction_state`` partitions the dump holds records of."""
        return self.table("transaction_log").select("partition").distinct().count()

    @cached_property
    def coordinator_latest(self):
        """The latest ``__transaction_state`` record per transactional id."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        tl = self.table("transaction_log").where("record_type = 'transaction'")
        w = Window.partitionBy("cluster_id", "transactional_id").orderBy(F.col("offset").desc(), F.col("broker_id").asc_nulls_last())
        return tl.withColumn("_rn", F.row_number().over(w)).where("_rn = 1").drop("_rn")

    @cached_property
    def producer_transactional_ids(self):
        """(cluster_id, producer_id, transactional_id) the coordinator ever recorded."""
        from pyspark.sql import functions as F

        tl = self.table("transaction_log").where("record_type = 'transaction' AND NOT is_tombstone")
        ids = tl.select("cluster_id", F.col("producer_id"), "transactional_id").union(
            tl.where("previous_producer_id >= 0").select("cluster_id", F.col("previous_producer_id").alias("producer_id"), "transactional_id")
        ).union(tl.where("next_producer_id >= 0").select("cluster_id", F.col("next_producer_id").alias("producer_id"), "transactional_id"))
        return ids.where("producer_id >= 0").distinct()

    # -- partitions ----------------------------------------------------------
    @cached_property
    def partitions(self):
        """Per replica: log start/end, high watermark, newest timestamp, compaction."""
        from pyspark.sql import functions as F

        b = self.table("batches").where("source = 'segment'")
        p = b.groupBy(*REPLICA).agg(
            F.min("base_offset").alias("first_batch_offset"),
            (F.max("last_offset") + 1).alias("log_end_offset"),
            F.min("segment_base_offset").alias("first_segment_base_offset"),
            F.max("max_timestamp").alias("max_timestamp"),
            F.sum(F.when((F.col("magic") == 2) & (F.col("record_count") < F.col("last_offset_delta") + 1), 1).otherwise(0)).alias("compacted_batches"),
        )
        cp = self.table("checkpoints")
        keys = [F.col("cluster_id"), F.col("broker_id"), F.col("log_dir"), F.col("topic"), F.col("partition")]
        hw = cp.where("checkpoint_kind = 'replication-offset'").groupBy(*keys).agg(F.max("offset").alias("high_watermark"))
        ls = cp.where("checkpoint_kind = 'log-start-offset'").groupBy(*keys).agg(F.max("offset").alias("checkpoint_log_start_offset"))
        p = p.join(hw, REPLICA, "left").join(ls, REPLICA, "left")
        p = p.withColumn(
            "log_start_offset",
            F.greatest(F.coalesce("checkpoint_log_start_offset", F.lit(0)), F.coalesce("first_segment_base_offset", F.lit(0))),
        )
        compact = self.compacted_topics
        p = p.join(compact, ["topic"], "left").withColumn(
            "is_compacted",
            F.coalesce(F.col("config_compact"), F.lit(False)) | F.col("topic").isin(*INTERNAL_COMPACTED) | (F.col("compacted_batches") > 0),
        )
        return self.persist(p)

    @cached_property
    def compacted_topics(self):
        """Topics whose latest ``cleanup.policy`` in the metadata log includes compact."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        if not self.has_rows("metadata_records"):
            return self.spark.createDataFrame([], "topic string, config_compact boolean")
        c = self.table("metadata_records").where("record_type = 'CONFIG_RECORD' AND config_resource_type = 2 AND config_name = 'cleanup.policy'")
        w = Window.partitionBy("config_resource_name").orderBy(F.col("offset").desc())
        c = c.withColumn("_rn", F.row_number().over(w)).where("_rn = 1")
        return c.select(F.col("config_resource_name").alias("topic"),
                        F.coalesce(F.col("config_value").contains("compact"), F.lit(False)).alias("config_compact"))
