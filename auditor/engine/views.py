"""The view registry: every derived fact the rules read, each one call of a model function.

A *view* is a DataFrame an audit builds at most once (:class:`auditor.engine.context.AuditContext`
builds it on first use, persists what several readers share, releases it after its last
reader): each one here is one call of a model function on tables and other views — the
replica's log start, log end and high watermark (:mod:`auditor.model.replica`),
configuration (:mod:`auditor.model.config`), the reference instant (:mod:`auditor.model.clock`),
producer state, transactions and the last stable offset
(:mod:`auditor.model.producer_state.spark`), the coordinator's state
(:mod:`auditor.model.coordinator`), what the input holds (:mod:`auditor.model.coverage`) and
the open transactions' verdicts (:mod:`auditor.model.verdicts`).

Each view is declared in :class:`Views` beside the model call it makes, with the views it
is built on (``uses``) and the tables it reads itself (``tables``); both contexts inherit that
class, so rules read a view as an attribute a reader and a type checker can follow
(``ctx.transactions``). Rules declare the views they read (``Rule.views``), so the engine knows
each view's readers (:func:`closure`), and the tables they read themselves (``Rule.tables``),
so what a rule reads is known whole (``Rule.reads``; ``tests/test_rule_contract.py`` holds each
declaration to the source). Besides views, the registry holds *facts* (small driver-side values
computed once per audit, such as ``coverage``).

A *replica* is (cluster_id, broker_id, log_dir, topic, partition): several brokers' copies of
one partition are audited separately, and compared by the replica rule; the log dir keeps apart
a JBOD move's ``-future`` copy and two dumps of the same broker taken at different times.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from auditor.model.producer_state.spark import INT32_MAX, REPLICA  # noqa: F401 - re-exported for the rules
from auditor.model.replica_key import join_broker, join_replica  # noqa: F401 - re-exported for the rules

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

    from auditor.engine.context import AuditContext


@dataclass(frozen=True)
class ViewSpec:
    """A shared view: a DataFrame the context builds at most once per audit.
    ``uses`` are the views it is built on, ``tables`` the tables it reads itself; rules declare
    the views they read (``Rule.views``), so the engine knows each view's consumers and releases
    what it persisted after the last of them. As an attribute of :class:`Views` it is the view
    of the context it is read from (``ctx.transactions``)."""

    name: str
    uses: tuple[str, ...] = ()
    tables: tuple[str, ...] = ()
    doc: str = ""
    build: Callable[["AuditContext"], object] | None = field(default=None, compare=False, repr=False)

    def __get__(self, ctx, owner=None) -> "DataFrame":
        return self if ctx is None else ctx.view(self.name)


@dataclass(frozen=True)
class FactSpec:
    """A fact: a small driver-side value ``build(ctx)`` computes once per audit; as an attribute
    of :class:`Views`, the context's value."""

    name: str
    tables: tuple[str, ...] = ()
    build: Callable[["AuditContext"], object] | None = field(default=None, compare=False, repr=False)

    def __get__(self, ctx, owner=None) -> Any:
        return self if ctx is None else ctx.fact(self.name)


VIEWS: dict[str, ViewSpec] = {}
FACTS: dict[str, FactSpec] = {}


def view(*, uses: tuple[str, ...] = (), tables: tuple[str, ...] = ()):
    """Register a view: ``fn(ctx)`` builds it (the context calls it once per audit)."""
    def deco(fn) -> ViewSpec:
        spec = ViewSpec(fn.__name__, tuple(uses), tuple(tables), fn.__doc__ or "", fn)
        VIEWS[fn.__name__] = spec
        return spec
    return deco


def fact(*, tables: tuple[str, ...] = ()):
    """Register a fact: a small value ``fn(ctx)`` computes once per audit."""
    def deco(fn) -> FactSpec:
        spec = FactSpec(fn.__name__, tuple(tables), fn)
        FACTS[fn.__name__] = spec
        return spec
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


def _per_producer(ctx, derive):
    """``derive(producer batches, key)`` keyed by the replica id on a large dump, the replica's
    strings joined back on its (much smaller) result: sorting 1 M batches by an int instead of
    three strings and two ints halves the two window stages (bench/JOURNAL.md). A small
    dump (one partition, :attr:`AuditContext.single_partition`) sorts a few thousand rows, where
    the join and the ids' window would only add plans to build: it keeps the replica's columns
    (``tests/test_scenarios.py::test_audit_modes_agree`` holds both shapes to the same findings)."""
    from auditor.model.producer_state import spark as model

    if ctx.single_partition:
        return derive(ctx.producer_batches, model.REPLICA)
    ids = ctx.replica_ids
    return model.with_replica(derive(model.by_replica_id(ctx.producer_batches, ids), ["replica_id"]), ids)


class Views:
    """Every view and fact of the registry as an attribute, for the contexts that read them
    (:class:`auditor.engine.context.AuditContext`, and :class:`~auditor.engine.context.RuleContext`,
    which checks each read against what its reader declared): ``ctx.transactions`` is a name a
    reader and a type checker can follow here, to its builder and the model function it calls. A
    builder takes the audit context (never a bound method)."""

    # -- reference time ------------------------------------------------------

    @view(tables=("batches", "transaction_log"))
    def newest_records(ctx):
        """Per cluster, ``newest_ms``: the newest timestamp of its input (:func:`auditor.model.clock.newest`),
        what ages are measured against unless ``--as-of`` is given (the runner's
        :class:`auditor.model.clock.Clock`). Small: one row per cluster."""
        from auditor.model import clock

        tl = ctx.table("transaction_log") if ctx.has_rows("transaction_log") else None
        return ctx.persist(clock.newest(ctx.table("batches"), tl))

    # -- producer state (auditor.model.producer_state.spark, built once per audit) ----

    @view(tables=("batches",))
    def producer_batches(ctx):
        """Live batches with a producer id (data and markers), narrowed to the
        columns the model reads. A plain scan: not persisted."""
        from auditor.model.producer_state import spark as model

        return model.producer_batches(ctx.table("batches"))

    @view(uses=("partitions",))
    def replica_ids(ctx):
        """A dense int per replica of the live log (:func:`auditor.model.producer_state.spark.replica_ids`),
        persisted (one row per replica): a large dump's producer state is sorted by it, not by the
        replica's strings."""
        from auditor.model.producer_state import spark as model

        return ctx.persist(model.replica_ids(ctx.partitions))

    @view(uses=("producer_batches", "replica_ids"))
    def sequence_breaks(ctx):
        """:func:`auditor.model.producer_state.spark.sequence_breaks`, persisted (tiny on a healthy log)."""
        from auditor.model.producer_state import spark as model

        return ctx.persist(_per_producer(ctx, lambda pb, key: model.sequence_breaks(pb, key=key)))

    @view(uses=("producer_batches", "replica_ids"))
    def transactions(ctx):
        """:func:`auditor.model.producer_state.spark.transactions`: one row per transaction per replica, persisted."""
        from auditor.model.producer_state import spark as model

        return ctx.persist(_per_producer(ctx, lambda pb, key: model.transactions(pb, key=key)))

    @view(uses=("transactions",))
    def open_transactions(ctx):
        return ctx.transactions.where("state = 'open'")

    @view(tables=("files",))
    def stopped_clusters(ctx):
        """Per cluster, ``log_dirs_stopped``: every given log dir of it holds ``.kafka_cleanshutdown``
        (:func:`auditor.model.moving.stopped_clusters`); None without a file inventory (hand-made
        tables: taken as stopped). False: the log may have moved while it was read."""
        from auditor.model import moving

        return moving.stopped_clusters(ctx.table("files")) if ctx.has_inventory else None

    @view(tables=("files",))
    def stopped_log_dirs(ctx):
        """Per log dir, ``log_dir_stopped``: it holds ``.kafka_cleanshutdown``
        (:func:`auditor.model.moving.stopped_log_dirs`); None without a file inventory (hand-made
        tables: taken as stopped). Where False, the high watermark checkpoint is a lower bound."""
        from auditor.model import moving

        return moving.stopped_log_dirs(ctx.table("files")) if ctx.has_inventory else None

    @view(uses=("open_transactions", "transactions", "partitions", "coordinator_latest", "coordinator_partitions",
                "coordinator_coverage", "producer_transactional_ids", "coordinator_history", "stopped_clusters",
                "partition_leaders", "copies"), tables=("transaction_log", "files"))
    def transaction_evidence(ctx):
        """Every open transaction with what the input shows about it, persisted
        (:func:`auditor.model.verdicts.open_transaction_evidence`): none of it depends on the
        reference instant. The runner collects its decision inputs and decides each verdict and age
        once (:mod:`auditor.model.verdict_table`); rules and the report read this view for the rest
        and receive the verdict through their ``decide`` step."""
        from auditor.model import moving, verdicts

        coord = None
        if ctx.has_coordinator_log:
            coord = {"ids": ctx.producer_transactional_ids, "latest": ctx.coordinator_latest,
                     "coverage": ctx.coordinator_coverage, "in_input": ctx.coordinator_partitions,
                     "read_until": moving.coordinator_read_until(ctx.table("transaction_log")),
                     "history": ctx.coordinator_history}
        return ctx.persist(verdicts.open_transaction_evidence(
            ctx.open_transactions, ctx.partitions, coordinator=coord, stopped=ctx.stopped_clusters,
            transactions=ctx.transactions, replicated=ctx.replicated_partitions is not False,
            leaders=ctx.partition_leaders, persist=ctx.persist,
            written=moving.replica_written_until(ctx.table("files")) if ctx.has_inventory else None,
            copies=ctx.copies))

    @view(uses=("partitions", "stopped_log_dirs"), tables=("files", "metadata_records"))
    def copies(ctx):
        """Per replica, what tells why one copy of a partition may lag another
        (:func:`auditor.model.copies.copy_facts`): a ``-future`` directory, its log dir cleanly stopped,
        the log dir's newest batch, its log start, the brokers the metadata log shows being added."""
        from auditor.model import copies

        return copies.copy_facts(
            ctx.partitions, log_dirs=ctx.stopped_log_dirs,
            future=copies.future_replicas(ctx.table("files")) if ctx.has_inventory else None,
            adding=copies.adding_replicas(ctx.table("metadata_records")) if ctx.has_rows("metadata_records") else None)

    @view(tables=("metadata_records",))
    def partition_leaders(ctx):
        """Every leader the metadata log records per partition (:func:`auditor.model.decisions.partition_leaders`);
        None without metadata records."""
        from auditor.model import decisions

        return decisions.partition_leaders(ctx.table("metadata_records")) if ctx.has_rows("metadata_records") else None

    @view(uses=("transactions", "partitions", "stopped_log_dirs"))
    def last_stable_offsets(ctx):
        """Per replica: high watermark (the log end where the log dir was not cleanly stopped: its
        checkpoint lags), first unstable offset, last stable offset and the earliest open transaction
        pinning it (:func:`auditor.model.producer_state.spark.last_stable_offsets`)."""
        from auditor.model.producer_state import spark as model

        return model.last_stable_offsets(ctx.transactions, ctx.partitions, ctx.stopped_log_dirs)

    @view(uses=("open_transactions",),
          tables=("offset_commits", "group_records", "group_metadata", "metadata_records"))
    def offset_commit_groups(ctx):
        """Per open transaction on a ``__consumer_offsets`` replica, each group it commits offsets for,
        with the group's protocol (classic or KIP-848 consumer) and members as of the commit
        (:func:`auditor.model.groups.offset_commit_groups`), persisted (tiny: pending commits only)."""
        from auditor.model import groups

        def table(name):
            return ctx.table(name) if ctx.has_rows(name) else None

        if not ctx.has_rows("offset_commits"):
            return ctx.small_df([], groups.COMMIT_GROUP_SCHEMA)
        md = table("metadata_records")
        return ctx.persist(groups.offset_commit_groups(
            ctx.open_transactions, ctx.table("offset_commits"), table("group_records"), table("group_metadata"),
            groups.topic_names(md) if md is not None else None))

    # -- coordinator ---------------------------------------------------------

    @fact(tables=("files",))
    def has_inventory(ctx) -> bool:
        """The tables have a ``files`` inventory with rows (hand-made tables may not): without one,
        nothing says a log dir moved while it was read."""
        return (ctx.tables_dir / "files").exists() and ctx.has_rows("files")

    @fact(tables=("transaction_log",))
    def has_coordinator_log(ctx) -> bool:
        return ctx.has_rows("transaction_log")

    @view(tables=("transaction_log",))
    def coordinator_partitions(ctx):
        """Per cluster (``cluster_id``, ``coordinator_partitions``): how many
        ``__transaction_state`` partitions the dump holds records of
        (:func:`auditor.model.coordinator.coordinator_partitions`); a cluster without any has
        no row (a DataFrame, so a rule can join it without a Spark job of its own)."""
        from auditor.model import coordinator

        return coordinator.coordinator_partitions(ctx.table("transaction_log"))

    @view(tables=("transaction_log",))
    def coordinator_records(ctx):
        """``__transaction_state`` transaction records, one copy per offset
        (:func:`auditor.model.coordinator.records`); persisted: several rules read them."""
        from auditor.model import coordinator

        return ctx.persist(coordinator.records(ctx.table("transaction_log")))

    @view(uses=("coordinator_records",))
    def coordinator_history(ctx):
        """Each coordinator record with the id's previous one (:func:`auditor.model.coordinator.history`), persisted."""
        from auditor.model import coordinator

        return ctx.persist(coordinator.history(ctx.coordinator_records))

    @view(uses=("coordinator_records",))
    def coordinator_latest(ctx):
        """The latest ``__transaction_state`` record per transactional id (tombstones included)."""
        from auditor.model import coordinator

        return coordinator.latest(ctx.coordinator_records)

    @view(tables=("transaction_log",))
    def producer_transactional_ids(ctx):
        """(cluster_id, producer_id, transactional_id) the coordinator ever recorded
        (:func:`auditor.model.coordinator.producer_transactional_ids`)."""
        from auditor.model import coordinator

        return coordinator.producer_transactional_ids(ctx.table("transaction_log"))

    # -- what the input holds (auditor.model.coverage) ------------------------

    @fact(tables=("files", "remote_log_segments"))
    def coverage(ctx):
        """:class:`auditor.model.coverage.Coverage`: segments left out, checkpoints and
        ``__transaction_state`` partitions given (driver-side, small)."""
        from auditor.model.coordinator_partitions import partition_counts
        from auditor.model import coverage

        files = ctx.small_rows("files", ("cluster_id", "broker_id", "log_dir", "topic", "partition", "kind", "status",
                                          "dir_status", "file_status", "base_offset", "tables"))
        cov = coverage.build(files, ctx.manifest.get("not_given") or [], lambda: partition_counts(ctx.tables_dir, None),
                             ctx.manifest.get("brokers"))
        if ctx.remote_metadata:
            from dataclasses import replace

            from auditor.model.remote import extents

            cov = replace(cov, remote_not_given=coverage.remote_not_given(files, extents(ctx.remote_metadata)))
        return cov

    @view()
    def replica_coverage(ctx):
        """Partitions given file by file, with the segments of their directories left out."""
        from auditor.model.coverage import REPLICA_COVERAGE_SCHEMA

        return ctx.small_df(ctx.coverage.replicas, REPLICA_COVERAGE_SCHEMA)

    @view()
    def log_dir_coverage(ctx):
        """Per log dir: its log-start-offset-checkpoint given, its producer.id.expiration.ms known."""
        from auditor.model.coverage import LOG_DIR_SCHEMA

        return ctx.small_df(ctx.coverage.log_dirs, LOG_DIR_SCHEMA)

    @view()
    def coordinator_coverage(ctx):
        """Per cluster: ``__transaction_state`` partitions given, expected, and whether all were."""
        from auditor.model.coverage import COORDINATOR_COVERAGE_SCHEMA

        return ctx.small_df(ctx.coverage.coordinator, COORDINATOR_COVERAGE_SCHEMA)

    # -- partitions, configuration (auditor.model.replica, auditor.model.config) ------

    @view(uses=("compacted_topics", "replica_coverage", "log_dir_coverage"),
          tables=("batches", "checkpoints", "remote_log_segments"))
    def partitions(ctx):
        """Per replica: log start/end, high watermark, newest timestamp, compaction, and
        what the input shows of them (:func:`auditor.model.replica.replica_facts`):
        ``log_start_known`` (every segment of the directory and the log dir's
        log-start-offset-checkpoint given), ``log_end_known`` (no later segment left
        out, the high watermark not beyond the last given batch), the segments left out."""
        from auditor.model import replica

        return ctx.persist(replica.replica_facts(ctx.table("batches"), ctx.table("checkpoints"), ctx.compacted_topics,
                                                  ctx.replica_coverage, ctx.log_dir_coverage,
                                                  ctx.remote_extents if ctx.remote_metadata else None))

    # -- tiered storage (auditor.model.remote) ---------------------------------------------

    @view(tables=("remote_log_segments",))
    def remote_extents(ctx):
        """Per partition with readable remote segments: their offset range, count, bytes, newest
        timestamp (:func:`auditor.model.remote.extents`)."""
        from auditor.model.remote import REMOTE_EXTENT_SCHEMA, extents

        return ctx.small_df(extents(ctx.remote_metadata), REMOTE_EXTENT_SCHEMA)

    @view(uses=("log_dir_coverage",), tables=("batches", "metadata_records"))
    def producer_id_expiration(ctx):
        """(cluster_id, broker_id, producer_id_expiration_ms, producer_id_expiration_known): the broker's
        ``producer.id.expiration.ms`` as a dynamic config in the metadata log (its own
        record, else the cluster-wide default), for every broker of the dump; the
        ``AuditOptions.producer_id_expiration_ms`` (Kafka's default, 1 day) otherwise
        (:func:`auditor.model.config.producer_id_expiration`)."""
        from auditor.model import config

        batches, coverage = ctx.table("batches"), ctx.log_dir_coverage
        md = ctx.table("metadata_records") if ctx.has_rows("metadata_records") else None
        return config.producer_id_expiration(batches, coverage, md, default_ms=ctx.options.producer_id_expiration_ms)

    @view(tables=("metadata_records",))
    def compacted_topics(ctx):
        """(cluster, topic, config_compact): the latest ``cleanup.policy`` of each topic in the
        metadata log (:func:`auditor.model.config.compacted_topics`)."""
        from auditor.model import config

        if not ctx.has_rows("metadata_records"):
            return ctx.small_df([], config.COMPACTED_TOPICS_SCHEMA)
        return config.compacted_topics(ctx.table("metadata_records"))
