"""The audit context: table access, and the cache of the views built over it.

Tables come through :meth:`AuditContext.table`, which hands out the *live log*
only (:mod:`auditor.model.livelog`: no ``.deleted``/``.cleaned`` copies, no
replaced or recovered-away segments, no retired replica directories): Parquet
directories read once per audit (the batch job's Delta tables:
:class:`auditor.batch.delta_rules.DeltaAuditContext`), small tables read on the
driver with pyarrow. Every derived fact is a view of the registry
(:mod:`auditor.engine.views`): the context builds each at most once per audit,
persists what several readers share (:meth:`AuditContext.persist`), and releases
it after its last reader (:meth:`AuditContext.release`); a rule sees only the
views it declares (:class:`RuleContext`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from auditor.engine.views import FACTS, VIEWS, Views
from auditor.tables.source import ParquetTables
from auditor.model.livelog import Liveness, keep_frame, live_log_of, row_bounds_columns
from auditor.model.producer_state.spark import REPLICA
from auditor.perf.cached_leaf import cached_leaf
from auditor.spark.literals import in_strings


@dataclass
class AuditOptions:
    """Broker settings the rules compare against (Kafka's defaults unless given)."""

    as_of_ms: int | None = None  # "now" for ages; default: newest timestamp in the dump
    transaction_max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    transaction_max_timeout_given: bool = False  # given (--max-timeout-ms); else Kafka's default, assumed
    producer_id_expiration_ms: int = 86_400_000  # producer.id.expiration.ms
    epoch_exhaustion_warn: int = 32_000  # warn when an epoch gets this close to 32767


class RuleContext(Views):
    """What one reader (a rule, the report data) sees of the context: every table
    and fact, and only the views it declares — an undeclared view fails at
    once, so the declarations the engine plans with are the truth. The views and
    facts are :class:`~auditor.engine.views.Views` attributes; what a reader asks of
    the tables is forwarded to the audit context."""

    def __init__(self, ctx: "AuditContext", reader: str, views) -> None:
        self._ctx, self._reader, self._views = ctx, reader, frozenset(views)

    def view(self, name: str):
        if name not in self._views:
            raise AttributeError(f"{self._reader} reads view {name!r} without declaring it")
        return self._ctx.view(name)

    def fact(self, name: str):
        return self._ctx.fact(name)

    @property
    def options(self) -> AuditOptions:
        return self._ctx.options

    @property
    def tables_dir(self) -> Path:
        return self._ctx.tables_dir

    def table(self, name: str):
        return self._ctx.table(name)

    def has_rows(self, name: str) -> bool:
        return self._ctx.has_rows(name)

    def small_df(self, rows, schema):
        return self._ctx.small_df(rows, schema)

    def persist(self, df):
        return self._ctx.persist(df)

    def __getattr__(self, name: str):
        """The rest of the audit context (the inventory's facts the report data reads, the manifest)."""
        if name.startswith("_"):
            raise AttributeError(name)
        if name in VIEWS:  # Python asks here when the view's own check raised: raise it again, not forward it
            return self.view(name)
        return getattr(self._ctx, name)


class AuditContext(Views):
    """The tables of one audit and the views and facts built over them (the
    :class:`~auditor.engine.views.Views` attributes: ``ctx.transactions``). Where the tables'
    rows are is its :attr:`source` (``source_type``: an ingest's Parquet directories here)."""

    source_type: type[ParquetTables] = ParquetTables

    def __init__(self, spark, tables_dir: str, options: AuditOptions | None = None) -> None:
        self.spark = spark
        self.tables_dir = Path(tables_dir)
        self.options = options or AuditOptions()
        self._persisted: list = []
        self.source = self.source_type(tables_dir)  # where the tables' rows are (auditor.tables.source)
        self._tables: dict[str, object] = {}
        self._views: dict[str, object] = {}
        self._facts: dict[str, object] = {}
        self._building: list[str] = []  # views being built (the innermost persists)
        self._persisted_by: dict[str, list] = {}
        self.released: list[str] = []  # views released before close(), in order
        # a small dump's audit (auditor.perf.tuning): every table and persisted view is read as one
        # partition, so Spark plans no shuffle between them (a single partition already satisfies every
        # join, aggregate and window): a few stages per query instead of one per exchange
        self.single_partition = False

    # -- the registry's views and facts ---------------------------------------
    def fact(self, name: str):
        """Fact ``name``, computed on first use."""
        if name not in self._facts:
            self._facts[name] = FACTS[name].build(self)
        return self._facts[name]

    def view(self, name: str):
        """View ``name``, built on first use (what it persists is recorded as its own, for :meth:`release`)."""
        if name not in self._views:
            self._building.append(name)
            try:
                self._views[name] = VIEWS[name].build(self)
            finally:
                self._building.pop()
        return self._views[name]

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
        df = self.load(name)
        if "cluster_id" in df.columns and "log_dir" in df.columns:
            from auditor.model.clusters import cluster_key_column

            df = df.withColumn("cluster_id", cluster_key_column())
        if "file" not in df.columns or "partition" not in df.columns or name == "files":
            return df
        live = self.live_log
        # tiered storage: remote files read by several replicas are joined to each (below)
        fan = self._remote_fan if live is not None and "log_dir" in df.columns else {}
        remote = self._remote_replica_rows(df, name) if fan else None  # those files' rows only, per replica
        df = keep_frame(df, name, live, self.small_df, drop=fan)
        return df if remote is None else df.unionByName(remote)

    @cached_property
    def _remote_fan(self) -> dict[str, tuple]:
        """Remote (tiered) files read by several replicas: path -> ``Liveness.replicas``."""
        return {p: lv.replicas for p, lv in (self.live_log or {}).items() if lv.replicas}

    @cached_property
    def _remote_replicas(self):
        """(file, _log_dir, _broker_id, _cluster_id, _end_offset): each remote file of
        :attr:`_remote_fan` once per replica whose live log holds it, with that replica's log dir,
        broker, cluster and local log start; one DataFrame for every table of the audit."""
        from auditor.model.clusters import cluster_key

        owner = {}
        for r in self.small_rows("files", ("log_dir", "broker_id", "cluster_id", "dir_status")) or []:
            if r.get("log_dir") is not None and r.get("dir_status") == "live":
                owner.setdefault(r["log_dir"], (r.get("broker_id"), cluster_key(r.get("cluster_id"), r["log_dir"])))
        rows = [(path, d, *owner.get(d, (None, cluster_key(None, d))), lv.end_offset)
                for path, per in sorted(self._remote_fan.items()) for d, lv in per if lv.live]
        return self.small_df(rows, "file string, _log_dir string, _broker_id int, _cluster_id string, "
                                                "_end_offset bigint")

    def _remote_replica_rows(self, df, name: str):
        """The rows of remote (tiered) files, once per replica whose log holds them
        (``Liveness.replicas``, :func:`auditor.model.livelog.decide`): with that replica's log
        dir, broker and cluster, cut at its local log start. Every replica of a tiered partition
        reads the one remote log below its own local log start (RemoteLogManager.read, Kafka
        4.3.1), so the files are decoded once and joined here to each replica."""
        from pyspark.sql import functions as F

        out = df.join(F.broadcast(self._remote_replicas), "file")
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
        """Every inventoried file's place in the live log (:func:`auditor.model.livelog.live_log_of`
        over this context's small tables). None when there is no inventory (hand-made tables)."""
        return live_log_of(self.small_rows, swap_ends=self._swap_ends, remote_metadata=lambda: self.remote_metadata)

    def _swap_ends(self, paths: list[str]) -> dict[str, int]:
        """The offset after each of these ``.swap`` segments' last batch, from their batches (tables
        written before the inventory carried it): one small Spark job."""
        from pyspark.sql import functions as F

        return {r["file"]: r["n"] for r in self.load("batches").where(in_strings("file", paths)).groupBy("file")
                .agg((F.max("last_offset") + 1).alias("n")).collect()}

    @cached_property
    def replicated_partitions(self) -> bool | None:
        """Could some partition of the input have two replicas? False when the inventory holds
        each (topic, partition)'s files in one log dir at most: the replicas the ``partitions``
        view counts are log dirs holding its live batches, a subset, so none is then replicated
        (a rule can say so without a Spark job). None when the inventory cannot tell: tables our
        ingest did not write (its manifest's ``run_id``: only then does the inventory list every
        file a row comes from), or blocks of ``kafka-dump-log`` text (several replicas' segments
        in one file)."""
        from auditor.ingest.dumplog import SEGMENT_KINDS

        if not self.manifest.get("run_id"):
            return None
        rows = self.small_rows("files", ("log_dir", "topic", "partition", "kind"))
        if not rows or "log_dir" not in rows[0] or any(r.get("kind") in SEGMENT_KINDS for r in rows):
            return None
        dirs: dict[tuple, set] = {}
        for r in rows:
            if r.get("topic") is not None:
                dirs.setdefault((r["topic"], r.get("partition")), set()).add(r["log_dir"])
        return any(len(d) > 1 for d in dirs.values())

    def small_rows(self, name: str, columns: tuple[str, ...]) -> list[dict] | None:
        """The rows of a small table (the inventory, checkpoints) as dicts, with those
        of ``columns`` it has; None if the table is missing (:attr:`source`)."""
        return self.source.rows(self.spark, name, columns)

    def load(self, name: str):
        """The table as stored, read once per audit (:attr:`source`: Parquet directories, or the
        batch job's Delta tables)."""
        return self.source.frame(self.spark, name)

    @property
    def manifest(self) -> dict:
        """The ingest manifest (``_ingest.json``); {} if there is none (hand-made or Delta tables)."""
        return self.source.manifest

    @property
    def table_rows(self) -> dict[str, int]:
        """Row counts known without a Spark job (the manifest's, or the Delta files' footers)."""
        return self.source.counts(self.spark)

    def has_rows(self, name: str) -> bool:
        return self.source.has_rows(self.spark, name)

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

    # -- tiered storage: the remote segments, read for the live log
    @cached_property
    def remote_metadata(self) -> list[dict]:
        """The ``remote_log_segments`` rows (``__remote_log_metadata``: small, one per segment event),
        cluster-keyed like every table; [] when the input has none."""
        from auditor.model.remote import metadata_rows

        return metadata_rows(self.small_rows)

    def small_df(self, rows, schema):
        """A small DataFrame of driver-side rows (the views of the input's coverage, the live
        log's file lists), sent as Arrow data: no Python worker (:mod:`auditor.spark.local_rows`)."""
        from auditor.spark.local_rows import local_df

        return local_df(self.spark, rows, schema)
