"""The audit context: table access and the cache over the domain model (:mod:`auditor.model`).

Tables come through :meth:`AuditContext.table`, which hands out the *live log*
only (:mod:`auditor.model.livelog`: no ``.deleted``/``.cleaned`` copies, no
replaced or recovered-away segments, no retired replica directories). Every
derived fact is the model's: each view here is one call of a model function on
tables and other views — the replica's log start, log end and high watermark
(:mod:`auditor.model.replica`), configuration (:mod:`auditor.model.config`), the
reference instant (:mod:`auditor.model.clock`), producer state, transactions and
the last stable offset (:mod:`auditor.model.producer_state.spark`), the
coordinator's state (:mod:`auditor.model.coordinator`), what the input holds
(:mod:`auditor.model.coverage`) and the open transactions' verdicts
(:mod:`auditor.model.verdicts`). The context builds each view at most once per
audit, persists what several readers share, and releases it after its last
reader (:class:`ViewSpec`).

A *replica* is (cluster_id, broker_id, log_dir, topic, partition): several
brokers' copies of one partition are audited separately, and compared by the
replica rule; the log dir keeps apart a JBOD move's ``-future`` copy and two
dumps of the same broker taken at different times.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from auditor.model.livelog import Liveness, decide, recovery_points, row_bounds_columns

from auditor.model.producer_state.spark import INT32_MAX, REPLICA  # noqa: F401 - re-exported for the rules

# a file inside a partition directory the broker retired, for tables without an inventory
RETIRED_REPLICA_FILE = r"\.[0-9a-fA-F]{32}-(delete|stray)/[^/]+$"
MAX_ISIN_FILES = 2000  # above this many non-live files, leave them out with a broadcast anti-join


@dataclass
class AuditOptions:
    """Broker settings the rules compare against (Kafka's defaults unless given)."""

    as_of_ms: int | None = None  # "now" for ages; default: newest timestamp in the dump
    transaction_max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    producer_id_expiration_ms: int = 86_400_000  # producer.id.expiration.ms
    epoch_exhaustion_warn: int = 32_000  # warn when an epoch gets this close to 32767


@dataclass(frozen=True)
class ViewSpec:
    """A shared view: a DataFrame the context builds at most once per audit.
    ``uses`` are the views it is built on; rules declare the views they read
    (``Rule.views``), so the engine knows each view's consumers and releases what
    it persisted after the last of them."""

    name: str
    uses: tuple[str, ...] = ()
    doc: str = ""


VIEWS: dict[str, ViewSpec] = {}


def view(*, uses: tuple[str, ...] = ()):
    """Declare a view of :class:`AuditContext` (a lazily built, cached property)."""
    def deco(fn):
        name = fn.__name__
        VIEWS[name] = ViewSpec(name, tuple(uses), fn.__doc__ or "")

        def get(self):
            if name not in self._views:
                self._building.append(name)
                try:
                    self._views[name] = fn(self)
                finally:
                    self._building.pop()
            return self._views[name]

        return property(get, doc=fn.__doc__)
    return deco


def closure(names) -> set[str]:
    """The views ``names`` are built on, themselves included."""
    out: set[str] = set()
    todo = list(names)
    while todo:
        n = todo.pop()
        if n not in out:
            out.add(n)
            todo.extend(VIEWS[n].uses)
    return out


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


class RuleContext:
    """What one reader (a rule, the report data) sees of the context: every table
    and helper, and only the views it declares — an undeclared view fails at
    once, so the declarations the engine plans with are the truth."""

    _METHOD_VIEWS = {"with_as_of": "as_of"}

    def __init__(self, ctx: "AuditContext", reader: str, views) -> None:
        self._ctx, self._reader, self._views = ctx, reader, frozenset(views)

    def __getattr__(self, name: str):
        need = name if name in VIEWS else self._METHOD_VIEWS.get(name)
        if need is not None and need not in self._views:
            raise AttributeError(f"{self._reader} reads view {need!r} without declaring it")
        return getattr(self._ctx, name)


class AuditContext:
    def __init__(self, spark, tables_dir: str, options: AuditOptions | None = None) -> None:
        self.spark = spark
        self.tables_dir = Path(tables_dir)
        self.options = options or AuditOptions()
        self._persisted: list = []
        self._loaded: dict[str, object] = {}
        self._tables: dict[str, object] = {}
        self._views: dict[str, object] = {}
        self._building: list[str] = []  # views being built (the innermost persists)
        self._persisted_by: dict[str, list] = {}
        self.released: list[str] = []  # views released before close(), in order
        # a small dump's audit (auditor.engine.tuning): every table and persisted view is read as one
        # partition, so Spark plans no shuffle between them (a single partition already satisfies every
        # join, aggregate and window): a few stages per query instead of one per exchange
        self.single_partition = False

    # -- tables ------------------------------------------------------------
    def table(self, name: str):
        """A table as the rules see it:

        * ``cluster_id`` is never null: brokers without a cluster.id (old
          ZooKeeper clusters) are keyed by their log dir, so two unrelated dumps
          are never mistaken for one cluster;
        * only rows of the live log (:attr:`live_log`): files the broker's log
          loading would delete (``.deleted``, ``.cleaned``, replaced segments,
          segments recovery drops, ``-delete``/``-stray`` replica directories)
          are left out, and batches beyond a recovery truncation or shadowed by
          an overlapping segment too. Every row stays in the tables (``files``
          lists each file; ``txn-audit tables`` says which are not live and why).
        """
        if name not in self._tables:
            df = self._live_table(name)
            if name == "producer_snapshots" and "remote_segment_id" in df.columns:
                # tiered storage: a remote segment's producer snapshot sits at the segment's end + 1
                from auditor.model.livelog import local_log_starts
                from auditor.model.remote import snapshot_offsets, with_remote_snapshot_offsets

                files = self.small_rows("files", ("path", "log_dir", "topic", "partition", "dir_status", "kind",
                                                  "base_offset")) or []
                starts = local_log_starts(files, self.live_log) if self.live_log is not None else None
                df = with_remote_snapshot_offsets(df, snapshot_offsets(self.remote_metadata), REPLICA, starts)
            self._tables[name] = df.coalesce(1) if self.single_partition else df
        return self._tables[name]

    def _live_table(self, name: str):
        from pyspark.sql import functions as F

        df = self.load(name)
        if "cluster_id" in df.columns and "log_dir" in df.columns:
            from auditor.model.clusters import cluster_key_column

            df = df.withColumn("cluster_id", cluster_key_column())
        if "file" not in df.columns or "partition" not in df.columns or name == "files":
            return df
        live = self.live_log
        if live is None:  # no inventory to tell (hand-made tables): recognise retired directories by name
            f = F.col("file")
            by_name = (f.contains("-delete/") | f.contains("-stray/")) & f.rlike(RETIRED_REPLICA_FILE)
            return df.where(~F.coalesce(by_name, F.lit(False)))
        # tiered storage: remote files read by several replicas are joined to each (below)
        fan = {p: lv.replicas for p, lv in live.items() if lv.replicas} if "log_dir" in df.columns else {}
        remote = None
        if fan:
            remote = self._remote_replica_rows(df, fan, name)  # an inner join on file: those files' rows only
            if len(fan) > MAX_ISIN_FILES:
                paths = self.spark.createDataFrame([(p,) for p in sorted(fan)], "file string")
                df = df.join(F.broadcast(paths), "file", "left_anti")
            else:
                df = df.where(~F.col("file").isin(sorted(fan)))
        dead = sorted(p for p, lv in live.items() if not lv.live and p not in fan)
        if len(dead) > MAX_ISIN_FILES:
            gone = self.spark.createDataFrame([(p,) for p in dead], "file string")
            df = df.join(F.broadcast(gone), "file", "left_anti")
        elif dead:
            df = df.where(~F.col("file").isin(dead))
        cols = row_bounds_columns(name)
        bounded = [lv for lv in live.values() if lv.bounded and lv.path not in fan]
        if cols and bounded:
            pos_col, off_col = cols
            for lv in bounded:
                cut = F.lit(False)
                if lv.end_position is not None:
                    cut = cut | (F.col(pos_col) >= lv.end_position)
                if lv.end_offset is not None:
                    cut = cut | (F.col(off_col) >= lv.end_offset)
                df = df.where(~((F.col("file") == lv.path) & cut))
        return df if remote is None else df.unionByName(remote)

    def _remote_replica_rows(self, df, fan: dict[str, tuple], name: str):
        """The rows of remote (tiered) files, once per replica whose log holds them
        (``Liveness.replicas``, :func:`auditor.model.livelog.decide`): with that replica's log
        dir, broker and cluster, cut at its local log start. Every replica of a tiered partition
        reads the one remote log below its own local log start (RemoteLogManager.read, Kafka
        4.3.1), so the files are decoded once and joined here to each replica."""
        from pyspark.sql import functions as F

        from auditor.model.clusters import cluster_key

        owner = {}
        for r in self.small_rows("files", ("log_dir", "broker_id", "cluster_id", "dir_status")) or []:
            if r.get("log_dir") is not None and r.get("dir_status") == "live":
                owner.setdefault(r["log_dir"], (r.get("broker_id"), cluster_key(r.get("cluster_id"), r["log_dir"])))
        rows = [(path, d, *owner.get(d, (None, cluster_key(None, d))), lv.end_offset)
                for path, per in sorted(fan.items()) for d, lv in per if lv.live]
        reps = self.spark.createDataFrame(rows, "file string, _log_dir string, _broker_id int, _cluster_id string, "
                                                "_end_offset bigint")
        out = df.join(F.broadcast(reps), "file")
        cols = row_bounds_columns(name)
        if cols:
            out = out.where(F.col("_end_offset").isNull() | (F.col(cols[1]) < F.col("_end_offset")))
        repl = {"log_dir": F.col("_log_dir")}
        if "broker_id" in df.columns:
            repl["broker_id"] = F.col("_broker_id").cast(df.schema["broker_id"].dataType)
        if "cluster_id" in df.columns:
            repl["cluster_id"] = F.col("_cluster_id")
        return out.withColumns(repl).select(*df.columns)

    @cached_property
    def live_log(self) -> dict[str, Liveness] | None:
        """Every inventoried file's place in the live log (:func:`livelog.decide`),
        from the ``files`` inventory and the recovery points: one small read of
        each. None when there is no inventory (hand-made tables)."""
        want = ("path", "cluster_id", "log_dir", "topic", "partition", "dir_status", "kind", "file_status",
                "base_offset", "status", "error_position", "next_offset")
        rows = self.small_rows("files", want)
        if rows is None or (rows and ("path" not in rows[0] or "dir_status" not in rows[0])):
            return None  # no inventory: table() falls back to directory names
        recovery = {}
        if any(r.get("kind") == "recovery-point-offset-checkpoint" for r in rows) and self.has_rows("checkpoints"):
            cp = self.small_rows("checkpoints", ("checkpoint_kind", "log_dir", "topic", "partition", "offset")) or []
            recovery = recovery_points([r for r in cp if r.get("checkpoint_kind") == "recovery-point-offset"])
        swaps = [r["path"] for r in rows if r.get("file_status") == "swap" and r.get("kind") == "segment"
                 and r.get("next_offset") is None]
        nxt = {}
        if swaps:  # tables written before files.next_offset: the swap segments' ends from their batches
            from pyspark.sql import functions as F

            nxt = {r["file"]: r["n"] for r in self.load("batches").where(F.col("file").isin(swaps)).groupBy("file")
                   .agg((F.max("last_offset") + 1).alias("n")).collect()}
        readable, outside = None, None
        if any(r.get("dir_status") == "remote" for r in rows) and self.remote_metadata:
            from auditor.model import remote

            readable = remote.readable_segment_ids(self.remote_metadata)
            epochs = self.small_rows("leader_epochs", ("log_dir", "topic", "partition", "leader_epoch", "start_offset"))
            outside = remote.outside_lineage(self.remote_metadata,
                                             *remote.replica_lineages(rows, epochs or [], per_replica=True))
        return decide(rows, recovery_points=recovery, next_offsets=nxt, readable_remote_segments=readable,
                      remote_outside_lineage=outside)

    def small_rows(self, name: str, columns: tuple[str, ...]) -> list[dict] | None:
        """The rows of a small table (the inventory, checkpoints) as dicts, with those
        of ``columns`` it has; None if the table is missing. Read with pyarrow on the
        driver: no Spark job (the Delta context reads them through Spark)."""
        from auditor.engine.tablesource import arrow_dataset

        path = self.tables_dir / name
        try:
            d = arrow_dataset(self.tables_dir, name)
            if d is None:
                return None
            return d.to_table(columns=[c for c in columns if c in d.schema.names]).to_pylist()
        except (OSError, ValueError) as exc:  # pyarrow raises ArrowInvalid (a ValueError) for a bad footer
            raise RuntimeError(f"{path}: unreadable table: {exc}") from exc

    def load(self, name: str):
        """The table as stored: a Parquet directory here (read once per audit); the
        scheduled batch job's context (``auditor.batch.audit``) reads Delta tables instead."""
        if name not in self._loaded:
            path = self.tables_dir / name
            schema = _parquet_schema(path)
            reader = self.spark.read if schema is None else self.spark.read.schema(schema)
            self._loaded[name] = reader.parquet(str(path))
        return self._loaded[name]

    @cached_property
    def manifest(self) -> dict:
        """The ingest manifest (``_ingest.json``); {} if there is none (hand-made or Delta tables)."""
        import json

        m = self.tables_dir / "_ingest.json"
        return json.loads(m.read_text()) if m.exists() else {}

    @cached_property
    def table_rows(self) -> dict[str, int]:
        """Row counts from the ingest manifest (no Spark job); {} if there is none."""
        return self.manifest.get("tables", {})

    def has_rows(self, name: str) -> bool:
        if name in self.table_rows:
            return self.table_rows[name] > 0
        p = self.tables_dir / name
        return p.exists() and not self.load(name).limit(1).isEmpty()

    def persist(self, df):
        """Persist a derived DataFrame for the rest of this audit run (released by :meth:`close`)."""
        from pyspark import StorageLevel

        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        self._persisted.append(df)
        if self._building:
            self._persisted_by.setdefault(self._building[-1], []).append(df)
        df = cached_leaf(df)
        # a cached scan reports no partitioning of its own: say again that it is one partition
        return df.coalesce(1) if self.single_partition else df

    def release(self, name: str) -> None:
        """Unpersist what view ``name`` persisted (its last consumer has run)."""
        dfs = self._persisted_by.pop(name, [])
        for df in dfs:
            df.unpersist()
            self._persisted.remove(df)
        if dfs:
            self.released.append(name)

    def close(self) -> None:
        for df in self._persisted:
            df.unpersist()
        self._persisted.clear()
        self._persisted_by.clear()

    # -- reference time ------------------------------------------------------
    @view()
    def as_of(self):
        """Per cluster, the instant ages are measured against (:func:`auditor.model.clock.as_of`):
        the newest timestamp in that cluster's dump (an offline dump has no "now"), or the
        user's ``--as-of``. Small: one row per cluster."""
        from auditor.model import clock

        as_of_ms = self.options.as_of_ms
        batches = self.table("batches")
        tl = self.table("transaction_log") if as_of_ms is None and self.has_rows("transaction_log") else None
        return self.persist(clock.as_of(batches, tl, as_of_ms=as_of_ms))

    def with_as_of(self, df):
        """``df`` with its cluster's ``as_of_ms`` column."""
        from pyspark.sql import functions as F

        return df.join(F.broadcast(self.as_of), "cluster_id", "left")

    @cached_property
    def as_of_ms(self) -> int:
        """The newest per-cluster reference time (for summaries)."""
        row = self.as_of.agg({"as_of_ms": "max"}).first()
        return int(row[0]) if row and row[0] is not None else 0

    # -- producer state (auditor.model.producer_state.spark, built once per audit) ----
    @view()
    def producer_batches(self):
        """Live batches with a producer id (data and markers), narrowed to the
        columns the model reads. A plain scan: not persisted."""
        from auditor.model.producer_state import spark as model

        return model.producer_batches(self.table("batches"))

    @view(uses=("producer_batches",))
    def sequence_breaks(self):
        """:func:`auditor.model.producer_state.spark.sequence_breaks`, persisted (tiny on a healthy log)."""
        from auditor.model.producer_state import spark as model

        return self.persist(model.sequence_breaks(self.producer_batches))

    @view(uses=("producer_batches",))
    def transactions(self):
        """:func:`auditor.model.producer_state.spark.transactions`: one row per transaction per replica, persisted."""
        from auditor.model.producer_state import spark as model

        return self.persist(model.transactions(self.producer_batches))

    @view(uses=("transactions",))
    def open_transactions(self):
        return self.transactions.where("state = 'open'")

    @view(uses=("open_transactions", "partitions", "as_of", "coordinator_latest", "coordinator_partitions",
                "coordinator_coverage", "producer_transactional_ids", "coordinator_history"))
    def transaction_verdicts(self):
        """Every open transaction with its one age and classification
        (:func:`auditor.model.verdicts.open_transaction_verdicts`), persisted: the
        rules, the plots and the report read it."""
        from auditor.model import verdicts

        from auditor.model import moving

        coord = None
        if self.has_coordinator_log:
            coord = {"ids": self.producer_transactional_ids, "latest": self.coordinator_latest,
                     "coverage": self.coordinator_coverage, "in_input": self.coordinator_partitions,
                     "read_until": moving.coordinator_read_until(self.table("transaction_log")),
                     "history": self.coordinator_history}
        inventory = (self.tables_dir / "files").exists() and self.has_rows("files")
        stopped = moving.stopped_clusters(self.table("files")) if inventory else None
        return self.persist(verdicts.open_transaction_verdicts(
            self.open_transactions, self.partitions, self.as_of,
            max_timeout_ms=self.options.transaction_max_timeout_ms, coordinator=coord, stopped=stopped))

    @view(uses=("transactions", "partitions"))
    def last_stable_offsets(self):
        """Per replica: high watermark, first unstable offset, last stable offset and
        the earliest open transaction pinning it
        (:func:`auditor.model.producer_state.spark.last_stable_offsets`)."""
        from auditor.model.producer_state import spark as model

        return model.last_stable_offsets(self.transactions, self.partitions)

    @view(uses=("open_transactions",))
    def offset_commit_groups(self):
        """Per open transaction on a ``__consumer_offsets`` replica, each group it commits offsets for,
        with the group's protocol (classic or KIP-848 consumer) and members as of the commit
        (:func:`auditor.model.groups.offset_commit_groups`), persisted (tiny: pending commits only)."""
        from auditor.model import groups

        def table(name):
            return self.table(name) if self.has_rows(name) else None

        if not self.has_rows("offset_commits"):
            return self._small_df([], groups.COMMIT_GROUP_SCHEMA)
        md = table("metadata_records")
        return self.persist(groups.offset_commit_groups(
            self.open_transactions, self.table("offset_commits"), table("group_records"), table("group_metadata"),
            groups.topic_names(md) if md is not None else None))

    # -- coordinator ---------------------------------------------------------
    @cached_property
    def has_coordinator_log(self) -> bool:
        return self.has_rows("transaction_log")

    @view()
    def coordinator_partitions(self):
        """Per cluster (``cluster_id``, ``coordinator_partitions``): how many
        ``__transaction_state`` partitions the dump holds records of
        (:func:`auditor.model.coordinator.coordinator_partitions`); a cluster without any has
        no row (a DataFrame, so a rule can join it without a Spark job of its own)."""
        from auditor.model import coordinator

        return coordinator.coordinator_partitions(self.table("transaction_log"))

    @view()
    def coordinator_records(self):
        """``__transaction_state`` transaction records, one copy per offset
        (:func:`auditor.model.coordinator.records`); persisted: several rules read them."""
        from auditor.model import coordinator

        return self.persist(coordinator.records(self.table("transaction_log")))

    @view(uses=("coordinator_records",))
    def coordinator_history(self):
        """Each coordinator record with the id's previous one (:func:`auditor.model.coordinator.history`), persisted."""
        from auditor.model import coordinator

        return self.persist(coordinator.history(self.coordinator_records))

    @view(uses=("coordinator_records",))
    def coordinator_latest(self):
        """The latest ``__transaction_state`` record per transactional id (tombstones included)."""
        from auditor.model import coordinator

        return coordinator.latest(self.coordinator_records)

    @view()
    def producer_transactional_ids(self):
        """(cluster_id, producer_id, transactional_id) the coordinator ever recorded
        (:func:`auditor.model.coordinator.producer_transactional_ids`)."""
        from auditor.model import coordinator

        return coordinator.producer_transactional_ids(self.table("transaction_log"))

    # -- what the input holds (auditor.model.coverage) ------------------------
    @cached_property
    def coverage(self):
        """:class:`auditor.model.coverage.Coverage`: segments left out, checkpoints and
        ``__transaction_state`` partitions given (driver-side, small)."""
        from auditor.forensics.coordinator import partition_counts
        from auditor.model import coverage

        files = self.small_rows("files", ("cluster_id", "broker_id", "log_dir", "topic", "partition", "kind", "status",
                                          "dir_status", "base_offset", "tables"))
        cov = coverage.build(files, self.manifest.get("not_given") or [], lambda: partition_counts(self.tables_dir, None),
                             self.manifest.get("brokers"))
        if self.remote_metadata:
            from dataclasses import replace

            from auditor.model.remote import extents

            cov = replace(cov, remote_not_given=coverage.remote_not_given(files, extents(self.remote_metadata)))
        return cov

    def _small_df(self, rows, schema: str):
        return self.spark.createDataFrame(rows, schema)

    @view()
    def replica_coverage(self):
        """Partitions given file by file, with the segments of their directories left out."""
        from auditor.model.coverage import REPLICA_COVERAGE_SCHEMA

        return self._small_df(self.coverage.replicas, REPLICA_COVERAGE_SCHEMA)

    @view()
    def log_dir_coverage(self):
        """Per log dir: its log-start-offset-checkpoint given, its producer.id.expiration.ms known."""
        from auditor.model.coverage import LOG_DIR_SCHEMA

        return self._small_df(self.coverage.log_dirs, LOG_DIR_SCHEMA)

    @view()
    def coordinator_coverage(self):
        """Per cluster: ``__transaction_state`` partitions given, expected, and whether all were."""
        from auditor.model.coverage import COORDINATOR_COVERAGE_SCHEMA

        return self._small_df(self.coverage.coordinator, COORDINATOR_COVERAGE_SCHEMA)

    # -- partitions, configuration (auditor.model.replica, auditor.model.config) ------
    @view(uses=("compacted_topics", "replica_coverage", "log_dir_coverage"))
    def partitions(self):
        """Per replica: log start/end, high watermark, newest timestamp, compaction, and
        what the input shows of them (:func:`auditor.model.replica.replica_facts`):
        ``log_start_known`` (every segment of the directory and the log dir's
        log-start-offset-checkpoint given), ``log_end_known`` (no later segment left
        out, the high watermark not beyond the last given batch), the segments left out."""
        from auditor.model import replica

        return self.persist(replica.replica_facts(self.table("batches"), self.table("checkpoints"), self.compacted_topics,
                                                  self.replica_coverage, self.log_dir_coverage,
                                                  self.remote_extents if self.remote_metadata else None))

    # -- tiered storage (auditor.model.remote) ---------------------------------------------
    @cached_property
    def remote_metadata(self) -> list[dict]:
        """The ``remote_log_segments`` rows (``__remote_log_metadata``: small, one per segment event),
        cluster-keyed like every table; [] when the input has none."""
        from auditor.model.clusters import cluster_key

        cols = ("cluster_id", "log_dir", "partition", "offset", "api_key", "topic", "topic_id", "log_partition",
                "segment_id", "start_offset", "end_offset", "max_timestamp_ms", "event_timestamp_ms",
                "segment_size_in_bytes", "state", "state_id", "segment_leader_epochs")
        rows = self.small_rows("remote_log_segments", cols) or []
        for r in rows:
            r["cluster_id"] = cluster_key(r.get("cluster_id"), r.get("log_dir"))
        return [r for r in rows if r.get("segment_id") is not None or r.get("api_key") == 2]

    @view()
    def remote_extents(self):
        """Per partition with readable remote segments: their offset range, count, bytes, newest
        timestamp (:func:`auditor.model.remote.extents`)."""
        from auditor.model.remote import REMOTE_EXTENT_SCHEMA, extents

        return self._small_df(extents(self.remote_metadata), REMOTE_EXTENT_SCHEMA)

    @view(uses=("log_dir_coverage",))
    def producer_id_expiration(self):
        """(cluster_id, broker_id, producer_id_expiration_ms, producer_id_expiration_known): the broker's
        ``producer.id.expiration.ms`` as a dynamic config in the metadata log (its own
        record, else the cluster-wide default), for every broker of the dump; the
        ``AuditOptions.producer_id_expiration_ms`` (Kafka's default, 1 day) otherwise
        (:func:`auditor.model.config.producer_id_expiration`)."""
        from auditor.model import config

        batches, coverage = self.table("batches"), self.log_dir_coverage
        md = self.table("metadata_records") if self.has_rows("metadata_records") else None
        return config.producer_id_expiration(batches, coverage, md, default_ms=self.options.producer_id_expiration_ms)

    @view()
    def compacted_topics(self):
        """(cluster, topic, config_compact): the latest ``cleanup.policy`` of each topic in the
        metadata log (:func:`auditor.model.config.compacted_topics`)."""
        from auditor.model import config

        if not self.has_rows("metadata_records"):
            return self._small_df([], config.COMPACTED_TOPICS_SCHEMA)
        return config.compacted_topics(self.table("metadata_records"))


def _parquet_schema(path: Path):
    """The Spark schema of a table directory, from one part file's footer read on
    the driver: every part of a table has the writer's schema, and Spark would
    otherwise run a job to infer it at every read. None if no part file is readable
    (Spark then infers it, or reports the directory)."""
    try:
        import pyarrow.parquet as pq
        from pyspark.sql.pandas.types import from_arrow_schema

        part = next(p for p in sorted(path.iterdir()) if p.suffix == ".parquet" and not p.name.startswith(("_", ".")))
        return from_arrow_schema(pq.read_schema(part))
    except (OSError, StopIteration, ValueError, TypeError):
        return None

