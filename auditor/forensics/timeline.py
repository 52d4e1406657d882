"""The Spark side of ``txn-audit timeline``: select, bound and sort one partition's rows.

A partition can hold millions of batches, so nothing here collects it: Spark
applies the topic/partition/replica/offset filters (pushed down to Parquet),
sorts, and the rows are streamed to the driver with ``toLocalIterator`` into
:class:`auditor.forensics.replay.Replay`. What *is* collected is small by
construction: the replicas of the partition, the open transactions at the
start of the view (at most one per producer), the producer id -> transactional
id map of the producers involved, and the replica's high watermark and log start
(the model's: :func:`auditor.model.replica.log_bounds`).

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

BATCH_COLUMNS = ["base_offset", "last_offset", "producer_id", "producer_epoch", "base_sequence", "last_sequence",
                 "record_count", "is_transactional", "is_control", "control_type", "coordinator_epoch", "max_timestamp"]


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
        return f"broker {self.broker_id}, log dir {self.log_dir} (offsets {self.first_offset}..{self.log_end - 1}, {self.batches} batches)"


@dataclass
class TimelineRequest:
    topic: str
    partition: int
    producer_id: int | None = None
    start: Bound | None = None
    stop: Bound | None = None
    broker: int | None = None
    summary: bool = True


class Timeline:
    """Resolves a :class:`TimelineRequest` against an ingested tables directory."""

    def __init__(self, ctx, request: TimelineRequest) -> None:
        self.ctx = ctx  # auditor.engine.views.AuditContext (read-only use of its tables)
        self.req = request
        self.replicas: list[Replica] = []
        self.replica: Replica | None = None

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
        reps.sort(key=lambda x: (-x.log_end, x.broker_id if x.broker_id is not None else 1 << 40, x.log_dir))
        self.replicas = reps
        return reps

    def choose(self) -> Replica:
        """The replica to replay: ``--broker``'s (its longest log dir), else the longest log."""
        from pyspark.sql import functions as F

        reps = self.replicas or self.find_replicas()
        r = self.req
        if not reps:
            parts = sorted(x[0] for x in self.ctx.table("batches").where(F.col("topic") == r.topic)
                           .select("partition").distinct().collect())
            if parts:
                raise TimelineError(f"topic {r.topic!r} has no partition {r.partition} in this dump "
                                    f"(partitions present: {', '.join(map(str, parts))})")
            raise TimelineError(f"topic {r.topic!r} is not in this dump (no batches)")
        if r.broker is not None:
            mine = [x for x in reps if x.broker_id == r.broker]
            if not mine:
                have = ", ".join(sorted({str(x.broker_id) for x in reps}))
                raise TimelineError(f"broker {r.broker} has no copy of {r.topic}-{r.partition} (brokers with one: {have})")
            reps = mine
        self.replica = reps[0]
        return reps[0]

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
        """The chosen replica's ``high_watermark`` (its ``replication-offset-checkpoint``
        entry, None without one) and ``log_start_offset``, as the model derives them for
        the audit (:func:`auditor.model.replica.log_bounds` on this replica's rows): one
        small job. The replay counts with the high watermark capped at the log end, the
        log end when there is none (``reference.effective_high_watermark``)."""
        from pyspark.sql import functions as F

        from auditor.model import replica as model

        rep = self.replica
        assert rep is not None
        cp = None
        if (self.ctx.tables_dir / "checkpoints").is_dir():  # not when ingested with --table and without checkpoints
            cp = self.ctx.table("checkpoints").where(
                (F.col("cluster_id") == rep.cluster_id) & (F.col("log_dir") == rep.log_dir)
                & (F.col("topic") == self.req.topic) & (F.col("partition") == self.req.partition))
        row = model.log_bounds(self._rows(), cp).select("high_watermark", "log_start_offset").first()
        if row is None:
            return {"high_watermark": None, "log_start_offset": None}
        return row.asDict()

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
        )
        replay = Replay(opts, tid_by_pid, self.open_at(lo))
        yield from replay.run(self.batch_stream(lo, hi), self.coordinator_stream(ids))
