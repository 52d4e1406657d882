"""``txn-audit timeline``: select, bound and sort one partition's rows, replay them.

Two engines feed the same :class:`auditor.forensics.replay.Replay` with the same
rows (``tests/test_forensics_fast.py`` holds them equal on every sample capture):

* :class:`ArrowTimeline` (``--engine arrow``, and ``auto`` when the tables are
  local and the partition has fewer than :data:`ARROW_MAX_BATCHES` batches):
  pyarrow reads the partition's rows with filters, the live log is the model's
  (:func:`auditor.model.livelog.decide_for_tables`), the transactions and log
  bounds are the reference model's (:mod:`auditor.model.producer_state.reference`).
  No Spark session: a sample capture answers in well under a second.
* :class:`Timeline` (``--engine spark``), for big or remote tables, below.

A partition can hold millions of batches, so nothing here collects it: Spark
applies the topic/partition/replica/offset filters (pushed down to Parquet),
sorts, and the rows are streamed to the driver with ``toLocalIterator`` into
:class:`auditor.forensics.replay.Replay`. What *is* collected is small by
construction: the replicas of the partition, the open transactions at the
start of the view (at most one per producer), the producer id -> transactional
id map of the producers involved, and the replica's high watermark and log start
(the model's: :func:`auditor.model.replica.log_bounds` and
:func:`auditor.model.producer_state.spark.high_watermarks`, or their rules on rows in the
pyarrow engine, so the last row shows the high watermark ``stuck-lso`` reports).

Two shortcuts keep a bounded view exact without replaying the prefix:

* the open transactions at ``--from`` are the producer-state model's
  transactions of the replica (:mod:`auditor.model.producer_state.spark`) opened
  before it and not closed before it;
* with ``--producer-id`` only that producer's batches are streamed, plus every
  other producer's transaction *edges* (the first data batch and the marker of
  each transaction), because those are all the LSO depends on.

Rows come from the live log only (``AuditContext.table``): a ``.deleted`` copy
of a cleaned segment is never replayed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from auditor.forensics.replay import Replay, ReplayOptions
from auditor.model.clusters import cluster_key, is_log_dir_key

ARROW_MAX_BATCHES = 2_000_000  # above this many batches of the partition, ``auto`` replays with Spark

BATCH_COLUMNS = ["base_offset", "last_offset", "producer_id", "producer_epoch", "base_sequence", "last_sequence",
                 "record_count", "is_transactional", "is_control", "control_type", "coordinator_epoch", "max_timestamp"]


def did_you_mean(name: str, known: list[str], what: str = "") -> str:
    """``; did you mean 'x'?`` for the known names closest to a mistyped one ('' for none)."""
    import difflib

    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    if not close:
        return ""
    return f"; did you mean {' or '.join(repr(c) for c in close)}{what}?"


class TimelineError(Exception):
    """The request names nothing in the tables (unknown topic, partition or broker)."""


@dataclass(frozen=True)
class Bound:
    """``--from`` / ``--to``: an offset or an instant (epoch ms)."""

    offset: int | None = None
    time_ms: int | None = None

    @classmethod
    def parse(cls, text: str) -> "Bound":
        """An integer is an offset; anything else must be ISO-8601 (naive means UTC)."""
        t = text.strip()
        if t.lstrip("-").isdigit():
            off = int(t)
            if off < 0:
                raise ValueError(f"offset must be >= 0, got {off}")
            return cls(offset=off)
        from auditor.report.model import iso_to_ms

        try:
            return cls(time_ms=iso_to_ms(t))
        except ValueError:
            raise ValueError(f"not an offset or an ISO-8601 time: {text!r}") from None


@dataclass(frozen=True)
class Replica:
    """One copy of the partition: a broker's log dir (several brokers, JBOD moves)."""

    cluster_id: str
    broker_id: int | None
    log_dir: str
    batches: int
    first_offset: int
    log_end: int

    def describe(self) -> str:
        return (f"cluster {self.cluster_id}, broker {self.broker_id}, log dir {self.log_dir} "
                f"(offsets {self.first_offset}..{self.log_end - 1}, {self.batches} batches)")


def _sort_replicas(reps: list[Replica]) -> list[Replica]:
    """The longest log first, then the lowest broker id, then the log dir."""
    return sorted(reps, key=lambda x: (-x.log_end, x.broker_id if x.broker_id is not None else 1 << 40, x.log_dir or ""))


@dataclass
class TimelineRequest:
    topic: str
    partition: int
    producer_id: int | None = None
    start: Bound | None = None
    stop: Bound | None = None
    broker: int | None = None
    summary: bool = True
    cluster: str | None = None


class _TimelineBase:
    """Resolves a :class:`TimelineRequest` against an ingested tables directory: which
    replica, then the replay. Subclasses read the rows (Spark or pyarrow)."""

    engine = ""

    def __init__(self, request: TimelineRequest) -> None:
        self.req = request
        self.replicas: list[Replica] = []
        self.replica: Replica | None = None

    # what an engine provides
    def find_replicas(self) -> list[Replica]:
        raise NotImplementedError

    def partitions_present(self) -> list[int]:
        raise NotImplementedError

    def topics_present(self) -> list[str]:
        raise NotImplementedError

    def offset_range(self) -> tuple[int, int | None]:
        raise NotImplementedError

    def transactional_ids(self) -> tuple[dict[int, str], list[str]]:
        raise NotImplementedError

    def log_bounds(self) -> dict[str, Any]:
        raise NotImplementedError

    def open_at(self, lo: int) -> list[tuple[int, int, int]]:
        raise NotImplementedError

    def batch_stream(self, lo: int, hi: int | None) -> Iterator[dict[str, Any]]:
        raise NotImplementedError

    def coordinator_stream(self, ids: list[str]) -> Iterator[dict[str, Any]]:
        raise NotImplementedError

    # -- which copy ---------------------------------------------------------------
    def clusters(self) -> dict[str | None, list[int | None]]:
        """Cluster -> brokers holding a copy of the partition."""
        out: dict[str | None, set] = {}
        for x in self.replicas or self.find_replicas():
            out.setdefault(x.cluster_id, set()).add(x.broker_id)
        return {c: sorted(b, key=lambda v: (v is None, v or 0)) for c, b in out.items()}

    def choose(self) -> Replica:
        """The replica to replay: ``--cluster``'s (required when several clusters hold the
        partition), then ``--broker``'s (its longest log dir), else the longest log."""
        reps = self.replicas or self.find_replicas()
        r = self.req
        if not reps:
            parts = self.partitions_present()
            if parts:
                raise TimelineError(f"topic {r.topic!r} has no partition {r.partition} in this dump "
                                    f"(partitions present: {', '.join(map(str, parts))})")
            raise TimelineError(f"topic {r.topic!r} is not in this dump (no batches){did_you_mean(r.topic, self.topics_present())}")
        clusters = self.clusters()
        if r.cluster is not None:
            mine = [x for x in reps if x.cluster_id == r.cluster]
            if not mine:
                raise TimelineError(f"cluster {r.cluster!r} has no copy of {r.topic}-{r.partition} "
                                    f"(clusters with one: {describe_clusters(clusters)})")
            reps = mine
        elif len(clusters) > 1:
            raise TimelineError(f"{r.topic}-{r.partition} is in {len(clusters)} clusters; pick one with --cluster: "
                                f"{describe_clusters(clusters)}")
        if r.broker is not None:
            mine = [x for x in reps if x.broker_id == r.broker]
            if not mine:
                have = ", ".join(sorted({str(x.broker_id) for x in reps}))
                raise TimelineError(f"broker {r.broker} has no copy of {r.topic}-{r.partition} (brokers with one: {have})")
            reps = mine
        self.replica = reps[0]
        return reps[0]

    def others(self) -> list[Replica]:
        """The chosen cluster's other replicas (``--broker`` picks one of them)."""
        rep = self.replica
        return [x for x in self.replicas if x != rep and rep is not None and x.cluster_id == rep.cluster_id]

    # -- all together ---------------------------------------------------------------------
    def events(self) -> Iterator[dict[str, Any]]:
        """The timeline, as :class:`Replay` events (call :meth:`choose` first)."""
        rep = self.replica or self.choose()
        r = self.req
        lo, hi = self.offset_range()
        reaches_end = hi is None or hi >= rep.log_end - 1
        tid_by_pid, ids = self.transactional_ids()
        bounds = self.log_bounds()
        opts = ReplayOptions(
            topic=r.topic, partition=r.partition, producer_id=r.producer_id, summary=r.summary, bounded_from=lo > rep.first_offset,
            coord_from_ms=r.start.time_ms if r.start else None, coord_to_ms=r.stop.time_ms if r.stop else None,
            from_is_offset=bool(r.start and r.start.offset is not None),
            to_is_offset=bool(r.stop and r.stop.offset is not None),
            end_offset=rep.log_end if reaches_end else min(hi + 1, rep.log_end),
            high_watermark=bounds["high_watermark"] if reaches_end else None,
            log_start_offset=bounds["log_start_offset"],
            holes=tuple((a, b) for a, b in bounds["holes"] if b > lo and (hi is None or a <= hi)),
        )
        replay = Replay(opts, tid_by_pid, self.open_at(lo))
        yield from replay.run(self.batch_stream(lo, hi), self.coordinator_stream(ids))


def describe_clusters(clusters: dict[str | None, list[int | None]]) -> str:
    """``c1 (broker 1); c2 (brokers 1, 2, 3)``."""
    parts = []
    for c, brokers in sorted(clusters.items(), key=lambda kv: (kv[0] is None, kv[0] or "")):
        b = ", ".join(str(x) for x in brokers)
        parts.append(f"{c} (broker{'s' if len(brokers) > 1 else ''} {b})" if brokers else str(c))
    return "; ".join(parts)


class Timeline(_TimelineBase):
    """The Spark engine: every read is a Spark job over ``AuditContext.table`` (the live log)."""

    engine = "spark"

    def __init__(self, ctx, request: TimelineRequest) -> None:
        super().__init__(request)
        self.ctx = ctx  # auditor.engine.context.AuditContext (read-only use of its tables)

    # -- which copy ---------------------------------------------------------------
    def _partition_rows(self):
        from pyspark.sql import functions as F

        r = self.req
        return self.ctx.table("batches").where(
            (F.col("source") == "segment") & (F.col("topic") == r.topic) & (F.col("partition") == r.partition))

    def find_replicas(self) -> list[Replica]:
        """Every copy of the partition in the dump, the longest log first."""
        from pyspark.sql import functions as F

        rows = self._partition_rows().groupBy("cluster_id", "broker_id", "log_dir").agg(
            F.count("*").alias("n"), F.min("base_offset").alias("lo"), F.max("last_offset").alias("hi")).collect()
        reps = [Replica(r["cluster_id"], r["broker_id"], r["log_dir"], r["n"], r["lo"], r["hi"] + 1) for r in rows]
        self.replicas = _sort_replicas(reps)
        return self.replicas

    def topics_present(self) -> list[str]:
        return sorted(x[0] for x in self.ctx.table("batches").select("topic").distinct().collect() if x[0] is not None)

    def partitions_present(self) -> list[int]:
        from pyspark.sql import functions as F

        return sorted(x[0] for x in self.ctx.table("batches").where(F.col("topic") == self.req.topic)
                      .select("partition").distinct().collect())

    def _rows(self):
        """The chosen replica's live batches (``ctx.table``: the live log only)."""
        from pyspark.sql import functions as F

        rep = self.replica
        assert rep is not None
        return self._partition_rows().where(
            (F.col("cluster_id") == rep.cluster_id) & (F.col("log_dir") == rep.log_dir)
            & (F.col("broker_id").eqNullSafe(F.lit(rep.broker_id))))

    # -- bounds ---------------------------------------------------------------------
    def offset_range(self) -> tuple[int, int | None]:
        """``--from``/``--to`` as offsets. A time becomes the first offset whose batch
        timestamp is at or after it (Kafka's offsets-for-times); ``--to TIME`` ends
        just before the first batch stamped later than it."""
        from pyspark.sql import functions as F

        start, stop = self.req.start, self.req.stop
        lo = start.offset if start and start.offset is not None else 0
        hi = stop.offset if stop and stop.offset is not None else None
        aggs = []
        if start and start.time_ms is not None:
            aggs.append(F.min(F.when(F.col("max_timestamp") >= start.time_ms, F.col("base_offset"))).alias("lo"))
        if stop and stop.time_ms is not None:
            aggs.append(F.min(F.when(F.col("max_timestamp") > stop.time_ms, F.col("base_offset"))).alias("hi"))
        if aggs:
            row = self._rows().agg(*aggs).first()
            rep = self.replica
            assert rep is not None
            if start and start.time_ms is not None:
                lo = row["lo"] if row["lo"] is not None else rep.log_end
            if stop and stop.time_ms is not None and row["hi"] is not None:
                hi = row["hi"] - 1
        return lo, hi

    def _transactions(self):
        """The replica's transactions, from the producer-state model (one partition: small)."""
        from auditor.model.producer_state import spark as model

        return model.transactions(model.producer_batches(self._rows()))

    def _edges(self):
        """The batches the LSO depends on: each transaction's first data batch and its
        marker (from the model's transactions of this replica)."""
        from pyspark.sql import functions as F

        t = self._transactions()
        ends = t.select("producer_id", F.col("first_offset").alias("base_offset")).where("base_offset IS NOT NULL").union(
            t.select("producer_id", F.col("marker_offset").alias("base_offset")).where("base_offset IS NOT NULL"))
        return self._rows().join(ends, ["producer_id", "base_offset"], "left_semi")

    def open_at(self, lo: int) -> list[tuple[int, int, int]]:
        """Open transactions just before offset ``lo``: (producer id, first offset, epoch)."""
        from auditor.model.producer_state import spark as model

        if lo <= 0:
            return []
        return [(r[0], r[1], r[2]) for r in model.open_at(self._transactions(), lo).collect()]

    def batch_stream(self, lo: int, hi: int | None) -> Iterator[dict[str, Any]]:
        """The rows to replay, in offset order, streamed partition by partition."""
        from pyspark.sql import functions as F

        rows = self._rows()
        cond = F.col("last_offset") >= lo
        if hi is not None:
            cond = cond & (F.col("base_offset") <= hi)
        pid = self.req.producer_id
        if pid is None:
            df = rows.where(cond)
        else:
            mine = rows.where(cond & (F.col("producer_id") == pid))
            others = self._edges().where(cond & (F.col("producer_id") != pid))
            df = mine.unionByName(others)
        for r in df.select(*BATCH_COLUMNS).orderBy("base_offset").toLocalIterator():
            yield r.asDict()

    # -- coordinator ------------------------------------------------------------------
    def _coordinator_log(self):
        from pyspark.sql import functions as F

        if not self.ctx.has_rows("transaction_log"):
            return None
        rep = self.replica
        assert rep is not None
        return self.ctx.table("transaction_log").where(
            (F.col("record_type") == "transaction") & (F.col("cluster_id") == rep.cluster_id))

    def transactional_ids(self) -> tuple[dict[int, str], list[str]]:
        """(producer id -> transactional id(s), every id involved): ids whose records
        name a producer id of this partition's transactional batches (current,
        previous or next), or list this partition among their partitions.

        Two small jobs: the partition's distinct transactional producer ids, then
        one pass over the coordinator log aggregated per id."""
        from pyspark.sql import functions as F

        tl = self._coordinator_log()
        if tl is None:
            return {}, []
        r = self.req
        if r.producer_id is not None:
            pids = {r.producer_id}
        else:
            pids = {x[0] for x in self._rows().where("is_transactional AND producer_id >= 0")
                    .select("producer_id").distinct().collect()}
        here = F.exists("topic_partitions", lambda tp: (tp["topic"] == r.topic) & (tp["partition"] == r.partition))
        named = F.lit(False)
        if pids:
            plist = sorted(pids)
            named = (F.col("producer_id").isin(plist) | F.col("previous_producer_id").isin(plist)
                     | F.col("next_producer_id").isin(plist))
        rows = (tl.where(~F.col("is_tombstone") & (named | F.coalesce(here, F.lit(False))))
                .groupBy("transactional_id")
                .agg(F.array_union(F.array_union(F.collect_set("producer_id"), F.collect_set("previous_producer_id")),
                                   F.collect_set("next_producer_id")).alias("pids"))
                .collect())
        by_pid: dict[int, set[str]] = {}
        ids: set[str] = set()
        for row in rows:
            mine = pids.intersection(row["pids"])
            if r.producer_id is not None and not mine:
                continue  # names this partition, but for another producer
            ids.add(row["transactional_id"])
            for p in mine:
                by_pid.setdefault(p, set()).add(row["transactional_id"])
        return {p: ",".join(sorted(s)) for p, s in by_pid.items()}, sorted(ids)

    def coordinator_stream(self, ids: list[str]) -> Iterator[dict[str, Any]]:
        """Every record of the involved ids, in time order. When several brokers hold
        the ``__transaction_state`` partition, their copies of a record sort next to
        each other (same timestamp, partition, offset) and only the first is kept."""
        from pyspark.sql import functions as F

        tl = self._coordinator_log()
        if tl is None or not ids:
            return
        df = (tl.where(F.col("transactional_id").isin(ids))
              .select("partition", "offset", "timestamp", "transactional_id", "is_tombstone", "state", "producer_id",
                      "producer_epoch", "previous_producer_id", "next_producer_id", "transaction_timeout_ms",
                      "topic_partitions", "last_update_timestamp_ms", "broker_id"))
        last = None
        for r in df.orderBy("timestamp", "partition", "offset", "broker_id").toLocalIterator():
            key = (r["partition"], r["offset"])
            if key == last:
                continue
            last = key
            yield r.asDict(recursive=True)

    def log_bounds(self) -> dict[str, Any]:
        """The chosen replica's ``high_watermark`` (:class:`auditor.model.replica.HighWatermark`:
        :func:`auditor.model.producer_state.spark.high_watermarks` over
        :func:`auditor.model.replica.log_bounds` on this replica's rows and its log dir's
        ``stopped_log_dirs``, the audit's rule, so the end row says what ``stuck-lso`` says) and
        ``log_start_offset``: one small job. ``holes``: the offsets between its segments that none
        holds (:func:`auditor.model.replica.offset_holes`, a second small job), ``(from, to)``
        pairs, ``to`` exclusive."""
        from pyspark.sql import functions as F

        from auditor.model import replica as model
        from auditor.model.producer_state.spark import high_watermarks

        rep = self.replica
        assert rep is not None
        cp = None
        if (self.ctx.tables_dir / "checkpoints").is_dir():  # not when ingested with --table and without checkpoints
            cp = self.ctx.table("checkpoints").where(
                (F.col("cluster_id") == rep.cluster_id) & (F.col("log_dir") == rep.log_dir)
                & (F.col("topic") == self.req.topic) & (F.col("partition") == self.req.partition))
        rows = self._rows()
        stopped = self.ctx.stopped_log_dirs
        if stopped is not None:
            stopped = stopped.where((F.col("cluster_id") == rep.cluster_id) & (F.col("log_dir") == rep.log_dir))
        row = high_watermarks(model.log_bounds(rows, cp), stopped).select(
            "high_watermark", "hw", "hw_lower_bound", "log_start_offset").first()
        if row is None:
            return {"high_watermark": None, "log_start_offset": None, "holes": []}
        holes = model.offset_holes(rows).orderBy("hole_from_offset").collect()
        return {"high_watermark": model.HighWatermark(row["hw"], row["high_watermark"], row["hw_lower_bound"]),
                "log_start_offset": row["log_start_offset"],
                "holes": [(h["hole_from_offset"], h["hole_to_offset"]) for h in holes]}


# -- the pyarrow engine ---------------------------------------------------------------------------

_ARROW_BATCH_COLUMNS = ["cluster_id", "broker_id", "log_dir", "file", "position", "segment_base_offset", "source",
                        "magic"] + BATCH_COLUMNS
_RECORD_COLUMNS = ["cluster_id", "broker_id", "log_dir", "file", "batch_position", "record_type", "partition", "offset",
                   "timestamp", "transactional_id", "is_tombstone", "state", "producer_id", "producer_epoch",
                   "previous_producer_id", "next_producer_id", "transaction_timeout_ms", "topic_partitions",
                   "last_update_timestamp_ms", "client_transaction_version"]


def _null_last(v: int | None) -> tuple:
    return (v is not None, v if v is not None else 0)  # Spark sorts nulls first, ascending


class ArrowTimeline(_TimelineBase):
    """The pyarrow engine: the partition's rows read with filters, the live log, the
    transactions and the log bounds from the model's pure-Python functions. Reads the
    partition whole (:func:`partition_batches` first when it may be big)."""

    engine = "arrow"

    def __init__(self, tables_dir, request: TimelineRequest) -> None:
        super().__init__(request)
        from pathlib import Path

        self.root = Path(tables_dir)
        self._live_cache: Any = False
        self._all_rows: list[dict[str, Any]] | None = None
        self._txns: list[dict[str, Any]] | None = None

    # -- reading ---------------------------------------------------------------------
    def _dataset(self, name: str):
        from auditor.tables.source import arrow_dataset

        return arrow_dataset(self.root, name)

    def _live(self):
        """The model's live log (None: no inventory; retired directories by name, as ``AuditContext.table``)."""
        if self._live_cache is False:
            from auditor.model.livelog import decide_for_tables

            self._live_cache = decide_for_tables(self.root)
        return self._live_cache

    def _keep(self, rows: list[dict[str, Any]], table: str) -> list[dict[str, Any]]:
        """The rows of the live log only (the audit's filter, in its row form)."""
        from auditor.model.livelog import keep_rows

        return keep_rows(rows, table, self._live())

    def _partition_filter(self):
        import pyarrow.compute as pc

        r = self.req
        return (pc.field("source") == "segment") & (pc.field("topic") == r.topic) & (pc.field("partition") == r.partition)

    def partition_batches(self) -> int:
        """Batch rows of the partition (every replica, live or not): Parquet statistics and
        two filter columns, no row materialised."""
        d = self._dataset("batches")
        return 0 if d is None else d.count_rows(filter=self._partition_filter())

    def _rows_all(self) -> list[dict[str, Any]]:
        if self._all_rows is None:
            d = self._dataset("batches")
            rows: list[dict[str, Any]] = []
            if d is not None:
                cols = [c for c in _ARROW_BATCH_COLUMNS if c in d.schema.names]
                rows = d.to_table(columns=cols, filter=self._partition_filter()).to_pylist()
                for row in rows:
                    row["cluster_id"] = cluster_key(row["cluster_id"], row["log_dir"])
                rows = self._keep(rows, "batches")
            self._all_rows = rows
        return self._all_rows

    def _rows(self) -> list[dict[str, Any]]:
        """The chosen replica's live batches, in offset order."""
        rep = self.replica
        assert rep is not None
        key = (rep.cluster_id, rep.broker_id, rep.log_dir)
        rows = [r for r in self._rows_all() if (r["cluster_id"], r["broker_id"], r["log_dir"]) == key]
        rows.sort(key=lambda b: b["base_offset"])
        return rows

    # -- which copy -------------------------------------------------------------------
    def find_replicas(self) -> list[Replica]:
        agg: dict[tuple, list[int]] = {}
        for r in self._rows_all():
            k = (r["cluster_id"], r["broker_id"], r["log_dir"])
            a = agg.get(k)
            if a is None:
                agg[k] = [1, r["base_offset"], r["last_offset"]]
            else:
                a[0] += 1
                a[1] = min(a[1], r["base_offset"])
                a[2] = max(a[2], r["last_offset"])
        self.replicas = _sort_replicas([Replica(c, b, d, n, lo, hi + 1) for (c, b, d), (n, lo, hi) in agg.items()])
        return self.replicas

    def topics_present(self) -> list[str]:
        d = self._dataset("batches")
        if d is None:
            return []
        return sorted(t for t in set(d.to_table(columns=["topic"]).column("topic").to_pylist()) if t is not None)

    def partitions_present(self) -> list[int]:
        import pyarrow.compute as pc

        d = self._dataset("batches")
        if d is None:
            return []
        t = d.to_table(columns=["partition"], filter=pc.field("topic") == self.req.topic)
        return sorted(p for p in set(t.column("partition").to_pylist()) if p is not None)

    # -- bounds -------------------------------------------------------------------------
    def offset_range(self) -> tuple[int, int | None]:
        start, stop = self.req.start, self.req.stop
        lo = start.offset if start and start.offset is not None else 0
        hi = stop.offset if stop and stop.offset is not None else None
        rep = self.replica
        assert rep is not None
        if start and start.time_ms is not None:
            at = [b["base_offset"] for b in self._rows() if b["max_timestamp"] is not None and b["max_timestamp"] >= start.time_ms]
            lo = min(at) if at else rep.log_end
        if stop and stop.time_ms is not None:
            after = [b["base_offset"] for b in self._rows() if b["max_timestamp"] is not None and b["max_timestamp"] > stop.time_ms]
            if after:
                hi = min(after) - 1
        return lo, hi

    def _transactions(self) -> list[dict[str, Any]]:
        """The replica's transactions, from the reference producer-state model (the same
        batches as :func:`auditor.model.producer_state.spark.producer_batches` reads)."""
        if self._txns is None:
            from auditor.model.producer_state import reference

            self._txns = reference.transactions(
                b for b in self._rows() if b.get("magic", 2) == 2 and b["producer_id"] is not None and b["producer_id"] >= 0)
        return self._txns

    def open_at(self, lo: int) -> list[tuple[int, int, int]]:
        """Open transactions just before ``lo`` (:func:`auditor.model.producer_state.spark.unstable_at`'s rule)."""
        if lo <= 0:
            return []
        return [(t["producer_id"], t["first_offset"], t["data_epoch_min"]) for t in self._transactions()
                if t["first_offset"] is not None and t["first_offset"] < lo
                and (t["marker_offset"] is None or t["marker_offset"] >= lo)]

    def batch_stream(self, lo: int, hi: int | None) -> Iterator[dict[str, Any]]:
        pid = self.req.producer_id
        edges: set[tuple[int, int]] = set()
        if pid is not None:
            for t in self._transactions():
                for k in ("first_offset", "marker_offset"):
                    if t[k] is not None:
                        edges.add((t["producer_id"], t[k]))
        for b in self._rows():
            if b["last_offset"] < lo or (hi is not None and b["base_offset"] > hi):
                continue
            if pid is not None and b["producer_id"] != pid and (b["producer_id"], b["base_offset"]) not in edges:
                continue
            yield {c: b[c] for c in BATCH_COLUMNS}

    # -- coordinator ------------------------------------------------------------------
    def _coordinator_rows(self) -> list[dict[str, Any]]:
        import pyarrow.compute as pc

        d = self._dataset("transaction_log")
        rep = self.replica
        assert rep is not None
        if d is None:
            return []
        cond = pc.field("record_type") == "transaction"
        if rep.cluster_id is not None and not is_log_dir_key(rep.cluster_id):
            cond = cond & ((pc.field("cluster_id") == rep.cluster_id) | pc.field("cluster_id").is_null())
        cols = [c for c in _RECORD_COLUMNS if c in d.schema.names]
        rows = d.to_table(columns=cols, filter=cond).to_pylist()
        for r in rows:
            r["cluster_id"] = cluster_key(r["cluster_id"], r["log_dir"])
        return self._keep([r for r in rows if r["cluster_id"] == rep.cluster_id], "transaction_log")

    def transactional_ids(self) -> tuple[dict[int, str], list[str]]:
        """:meth:`Timeline.transactional_ids` over the same rows, in Python."""
        rows = self._coordinator_rows()
        self._coord = rows
        if not rows:
            return {}, []
        r = self.req
        if r.producer_id is not None:
            pids = {r.producer_id}
        else:
            pids = {b["producer_id"] for b in self._rows()
                    if b["is_transactional"] and b["producer_id"] is not None and b["producer_id"] >= 0}
        per_id: dict[str, set[int]] = {}
        for x in rows:
            if x["is_tombstone"]:
                continue
            mine = {x[k] for k in ("producer_id", "previous_producer_id", "next_producer_id") if x[k] is not None}
            here = any(tp["topic"] == r.topic and tp["partition"] == r.partition for tp in (x["topic_partitions"] or ()))
            if not (mine & pids) and not here:
                continue
            per_id.setdefault(x["transactional_id"], set()).update(mine)
        by_pid: dict[int, set[str]] = {}
        ids: set[str] = set()
        for tid, id_pids in per_id.items():
            mine = pids & id_pids
            if r.producer_id is not None and not mine:
                continue
            ids.add(tid)
            for p in mine:
                by_pid.setdefault(p, set()).add(tid)
        return {p: ",".join(sorted(s)) for p, s in by_pid.items()}, sorted(ids)

    def coordinator_stream(self, ids: list[str]) -> Iterator[dict[str, Any]]:
        """:meth:`Timeline.coordinator_stream`: one copy of each record, in time order."""
        if not ids:
            return
        want = set(ids)
        rows = [x for x in getattr(self, "_coord", None) or self._coordinator_rows() if x["transactional_id"] in want]
        rows.sort(key=lambda x: (_null_last(x["timestamp"]), _null_last(x["partition"]), _null_last(x["offset"]),
                                 _null_last(x["broker_id"])))
        keep = ("partition", "offset", "timestamp", "transactional_id", "is_tombstone", "state", "producer_id",
                "producer_epoch", "previous_producer_id", "next_producer_id", "transaction_timeout_ms",
                "topic_partitions", "last_update_timestamp_ms", "broker_id")
        last = None
        for x in rows:
            key = (x["partition"], x["offset"])
            if key == last:
                continue
            last = key
            yield {k: x.get(k) for k in keep}

    def log_bounds(self) -> dict[str, Any]:
        """The replica's high watermark (:func:`auditor.model.replica.high_watermark_of`: the audit's
        rule on rows, over its ``replication-offset-checkpoint`` entry, its log end and whether its
        log dir was cleanly stopped) and log start
        (:func:`auditor.model.producer_state.reference.log_start_offset`), as
        :func:`auditor.model.replica.log_bounds` gives them, and the holes between its segments
        (:func:`auditor.model.replica.offset_holes_of_rows`), from the same rows."""
        from auditor.model.producer_state.reference import log_start_offset
        from auditor.model.replica import high_watermark_of, offset_holes_of_rows

        rep = self.replica
        assert rep is not None
        rows = self._rows()
        if not rows:
            return {"high_watermark": None, "log_start_offset": None, "holes": []}
        hw, ls = self._checkpoint_entries(rep)
        first_seg = min((b["segment_base_offset"] for b in rows if b.get("segment_base_offset") is not None), default=None)
        log_end = max(b["last_offset"] for b in rows) + 1
        return {"high_watermark": high_watermark_of(hw, log_end, self._log_dir_stopped(rep)),
                "log_start_offset": log_start_offset(ls, first_seg), "holes": offset_holes_of_rows(rows)}

    def _checkpoint_entries(self, rep: Replica) -> tuple[int | None, int | None]:
        """The replica's ``replication-offset-checkpoint`` and ``log-start-offset-checkpoint``
        entries (None: none), joined on the replica key as the model joins them."""
        hw = ls = None
        d = self._dataset("checkpoints")
        if d is None:
            return hw, ls
        import pyarrow.compute as pc

        r = self.req
        cond = ((pc.field("topic") == r.topic) & (pc.field("partition") == r.partition)
                & pc.field("checkpoint_kind").isin(["replication-offset", "log-start-offset"]))
        cols = [c for c in ("cluster_id", "broker_id", "log_dir", "file", "partition", "checkpoint_kind", "offset")
                if c in d.schema.names]
        cps = d.to_table(columns=cols, filter=cond).to_pylist()
        for c in cps:
            c["cluster_id"] = cluster_key(c["cluster_id"], c["log_dir"])
        for c in self._keep(cps, "checkpoints"):
            # the model joins on the replica key: a null broker id or log dir matches nothing
            if rep.broker_id is None or c["broker_id"] != rep.broker_id or c["log_dir"] != rep.log_dir \
                    or c["cluster_id"] != rep.cluster_id or c["offset"] is None:
                continue
            if c["checkpoint_kind"] == "replication-offset":
                hw = c["offset"] if hw is None else max(hw, c["offset"])
            else:
                ls = c["offset"] if ls is None else max(ls, c["offset"])
        return hw, ls

    def _log_dir_stopped(self, rep: Replica) -> bool:
        """Whether the replica's log dir holds ``.kafka_cleanshutdown``
        (:func:`auditor.model.moving.stopped_log_dirs_of_rows` of the ``files`` inventory, every row
        of it as the audit reads it; no inventory or no row of the log dir: stopped)."""
        import pyarrow.compute as pc

        from auditor.model.moving import stopped_log_dirs_of_rows

        d = self._dataset("files")
        if d is None or not {"cluster_id", "log_dir", "kind"} <= set(d.schema.names):
            return True
        rows = d.to_table(columns=["cluster_id", "log_dir", "kind"], filter=pc.field("log_dir") == rep.log_dir).to_pylist()
        for f in rows:
            f["cluster_id"] = cluster_key(f["cluster_id"], f["log_dir"])
        return stopped_log_dirs_of_rows(rows).get((rep.cluster_id, rep.log_dir), True)


def open_timeline(tables: str, request: TimelineRequest, engine: str = "auto", spark_factory=None) -> _TimelineBase:
    """The timeline of ``request`` on ``tables`` with ``engine``: ``arrow``, ``spark``, or
    ``auto`` (arrow when the partition has fewer than :data:`ARROW_MAX_BATCHES` batches).
    ``spark_factory()`` gives the Spark session, only when the Spark engine is used."""
    if engine in ("auto", "arrow"):
        fast = ArrowTimeline(tables, request)
        if engine == "arrow" or fast.partition_batches() < ARROW_MAX_BATCHES:
            return fast
    from auditor.engine.context import AuditContext

    assert spark_factory is not None
    return Timeline(AuditContext(spark_factory(), tables), request)
