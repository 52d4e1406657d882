"""A replica's log as its broker reports it: log start, log end, high watermark, compaction.

Per replica (cluster_id, broker_id, log_dir, topic, partition), from the live
log's segment batches and the log dir's checkpoints:

* **log end** — the offset after the last batch (``UnifiedLog.logEndOffset``);
* **high watermark** — the ``replication-offset-checkpoint`` entry
  (``high_watermark``, null without one). The model counts with it capped at the
  log end, the log end when there is none or where the log dir was not cleanly
  stopped (the checkpoint is only a lower bound there): ``hw`` of
  :func:`auditor.model.producer_state.spark.high_watermarks` (Spark), and
  :func:`high_watermark_of` for the readers without Spark (the timeline's pyarrow
  engine), one rule in two forms;
* **log start** — the larger of the ``log-start-offset-checkpoint`` entry and the
  first segment's base offset (``LogLoader.load``;
  :func:`auditor.model.producer_state.reference.log_start_offset` is the same rule
  for one replica);
* **compaction** — whether the cleaner runs on the partition (``cleanup.policy``
  from :mod:`auditor.model.config`, the internal topics, or traces of the cleaner in
  any replica);
* **what the input shows of them** (:mod:`auditor.model.coverage`).

Every function takes DataFrames and returns one; none collects or persists (the
audit context persists :func:`replica_facts`, the ``partitions`` view; the
forensic timeline runs :func:`log_bounds` and :func:`offset_holes` on its one replica's
rows). Two execute a rule on rows instead, for the readers without Spark:
:func:`offset_holes_of_rows` and :func:`high_watermark_of`.
"""

from __future__ import annotations

from dataclasses import dataclass

from auditor.model.coverage import SEGMENT_ALONE
from auditor.model.producer_state.reference import effective_high_watermark
from auditor.model.replica_key import REPLICA, join_null_safe, join_replica

#: a remote segment's file name (LocalTieredStorage: ``<offset>-<segment id>.log``,
#: :mod:`auditor.ingest.remote_store`): its batches are the replica's remote part
REMOTE_SEGMENT_FILE = r"(^|/)[0-9]{20}-[A-Za-z0-9_-]{22}\.log$"

INTERNAL_COMPACTED = ("__consumer_offsets", "__transaction_state")


def segment_extents(batches):
    """Per segment of each replica (``source = 'segment'`` rows of ``batches``): its batches'
    first and last offsets, newest and oldest timestamps, the batches the cleaner thinned or
    stamped, and ``remote`` (a remote segment: :data:`REMOTE_SEGMENT_FILE`). One row per
    segment, so the replica's bounds and the holes between its segments come from one pass over the batches."""
    from pyspark.sql import functions as F

    b = batches.where("source = 'segment'")
    remote = F.coalesce(F.col("file").rlike(REMOTE_SEGMENT_FILE), F.lit(False)) if "file" in b.columns else F.lit(False)
    return b.groupBy(*REPLICA, "segment_base_offset", remote.alias("remote")).agg(
        F.min("base_offset").alias("first_offset"),
        F.max("last_offset").alias("last_offset"),
        F.max("max_timestamp").alias("max_timestamp"),
        F.min("max_timestamp").alias("min_timestamp"),
        F.count(F.lit(1)).alias("batches"),
        F.min("magic").alias("min_magic"),
        F.sum(F.when((F.col("magic") == 2) & (F.col("record_count") < F.col("last_offset_delta") + 1), 1).otherwise(0)).alias("compacted_batches"),
        F.sum(F.when(F.col("has_delete_horizon"), 1).otherwise(0)).alias("delete_horizon_batches"),
    )


def _offset_hole():
    """Whether a segment row (:func:`segment_extents`, with ``_prev_end``: the previous local
    segment's last offset + 1) starts after offsets no local segment as read holds. Kafka appends a
    partition's offsets without a hole: a segment rolls at the log end offset (``LocalLog.roll``:
    the larger of the appended batch's first offset and the log end offset), and recovery
    truncating a segment deletes the ones after it (``LogLoader.recoverLog``), so, but for the
    cleaner's removals, each segment's last offset + 1 is the next segment's base offset. A hole
    there is a segment missing from the directory (deleted between a copy's listing and its read)
    or one read before the broker finished it (a copy taking each file at its own moment); where
    the cleaner's removals may explain one is said in :func:`_with_offset_holes`. A follower rolls
    at the first offset of the leader's batch, which for a legacy (magic 0/1) compressed wrapper
    Kafka takes as its last offset: no hole is read across a segment holding legacy entries."""
    from pyspark.sql import functions as F

    placed = F.col("topic").isNotNull() & F.col("partition").isNotNull()
    return (~F.col("remote") & placed & (F.col("_prev_end") < F.least("segment_base_offset", "first_offset"))
            & (F.col("min_magic") >= 2))


def _segments_in_order(batches):
    """:func:`segment_extents` with ``_prev_end``: local segments first, in offset order, each
    with its predecessor's last offset + 1 (null for the first)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy(*REPLICA).orderBy("remote", "segment_base_offset")
    return segment_extents(batches).withColumn("_prev_end", F.lag(F.col("last_offset") + 1).over(w))


def offset_holes(batches):
    """Each hole between the local segments of a replica as read (:func:`_offset_hole`), one row
    per hole: the replica, ``hole_from_offset`` (the previous segment's last offset + 1) and
    ``hole_to_offset`` (the base offset of the segment after it: the hole's end, exclusive).
    :func:`log_bounds` counts the same holes; the forensic timeline shows each one."""
    from pyspark.sql import functions as F

    return _segments_in_order(batches).where(_offset_hole()).select(
        *REPLICA, F.col("_prev_end").alias("hole_from_offset"), F.col("segment_base_offset").alias("hole_to_offset"))


def offset_holes_of_rows(rows) -> list[tuple[int, int]]:
    """:func:`offset_holes` of one replica's batch rows (dicts with ``source``, ``file``,
    ``segment_base_offset``, ``base_offset``, ``last_offset``, ``magic``), for the readers
    without Spark (the timeline's pyarrow engine): ``(hole_from_offset, hole_to_offset)`` pairs
    in offset order, by the same rule (``tests/test_broker_oracle.py`` compares the two on every
    partition of sample_logs/ and the corpus)."""
    import re

    remote_file = re.compile(REMOTE_SEGMENT_FILE)
    segs: dict[tuple[bool, int | None], list] = {}
    for b in rows:
        if b.get("source") != "segment":
            continue
        key = (bool(b.get("file") and remote_file.search(b["file"])), b.get("segment_base_offset"))
        s = segs.get(key)
        if s is None:
            segs[key] = [b["base_offset"], b["last_offset"], b["magic"]]
        else:
            s[0], s[1], s[2] = min(s[0], b["base_offset"]), max(s[1], b["last_offset"]), min(s[2], b["magic"])
    holes, prev_end = [], None
    for (remote, base), (first, last, magic) in sorted(segs.items(), key=lambda kv: (kv[0][0], _none_first(kv[0][1]))):
        start = first if base is None else min(base, first)
        if not remote and prev_end is not None and prev_end < start and magic >= 2:
            holes.append((prev_end, start if base is None else base))
        prev_end = last + 1
    return holes


def _none_first(v: int | None) -> tuple:
    return (v is not None, v or 0)


@dataclass(frozen=True)
class HighWatermark:
    """A replica's high watermark as the model counts with it, and where it comes from: what the
    timeline shows beside the LSO, so that it says what ``stuck-lso`` says (its evidence's
    ``high_watermark`` and ``high_watermark_checkpoint``).

    ``offset``: the high watermark (``hw``); ``checkpoint``: the ``replication-offset-checkpoint``
    entry as read (None without one); ``lower_bound``: the log dir was not cleanly stopped, so the
    entry lags the log and ``offset`` is the log end."""

    offset: int
    checkpoint: int | None
    lower_bound: bool

    def describe(self) -> str:
        """``high watermark N (where it comes from)``: a lower-bound checkpoint is said to be one."""
        if self.lower_bound:
            return (f"high watermark {self.offset} (the log end: the replication-offset-checkpoint's "
                    f"{self.checkpoint} is only a lower bound, the log dir was not cleanly stopped)")
        if self.checkpoint is None:
            return f"high watermark {self.offset} (the log end: no replication-offset-checkpoint entry)"
        if self.checkpoint > self.offset:
            return (f"high watermark {self.offset} (the log end: the replication-offset-checkpoint's "
                    f"{self.checkpoint} lies past it)")
        return f"high watermark {self.offset} (replication-offset-checkpoint)"


def high_watermark_of(checkpoint: int | None, log_end_offset: int, log_dir_stopped: bool = True) -> HighWatermark:
    """:func:`auditor.model.producer_state.spark.high_watermarks` for one replica, for the readers
    without Spark: ``checkpoint`` is its ``replication-offset-checkpoint`` entry (None without one),
    ``log_dir_stopped`` whether its log dir holds ``.kafka_cleanshutdown``
    (:func:`auditor.model.moving.stopped_log_dirs_of_rows`; True when the input has no inventory).
    The same rule, so the timeline and the audit never show two high watermarks for one replica."""
    return HighWatermark(effective_high_watermark(checkpoint, log_end_offset, log_dir_stopped), checkpoint,
                         checkpoint is not None and not log_dir_stopped)


def log_bounds(batches, checkpoints=None):
    """Per replica of ``batches`` (the live log's ``batches`` rows; only ``source =
    'segment'`` ones are read): ``first_batch_offset``, ``log_end_offset``,
    ``first_segment_base_offset``, ``last_segment_base_offset`` (the newest local segment: the
    active one of a running broker), ``max_timestamp``, ``min_timestamp`` (the oldest batch's
    newest record: how far back the replica as read reaches), ``compacted_batches`` (batches
    the cleaner thinned), ``delete_horizon_batches``, ``high_watermark`` (the
    replication checkpoint's entry), ``checkpoint_log_start_offset`` and
    ``log_start_offset`` (the larger of that entry and the first segment's base
    offset, 0 for an unknown one: :func:`~auditor.model.producer_state.reference.log_start_offset`).

    The holes between the local segments as read (:func:`_offset_hole`): ``offset_holes``
    counts them, ``hole_from_offset`` is where the first one starts and ``hole_to_offset`` the
    base offset of the segment after the last one.

    ``checkpoints``: the ``checkpoints`` table, or None when the input has none
    (both checkpoint columns are then null)."""
    from pyspark.sql import functions as F

    s = _segments_in_order(batches)
    hole = _offset_hole()
    p = s.groupBy(*REPLICA).agg(
        F.min("first_offset").alias("first_batch_offset"),
        F.min(F.when(~F.col("remote"), F.col("segment_base_offset"))).alias("local_first_segment_base_offset"),
        F.sum(F.when(F.col("remote"), F.col("batches")).otherwise(0)).alias("remote_batches_given"),
        (F.max("last_offset") + 1).alias("log_end_offset"),
        F.min("segment_base_offset").alias("first_segment_base_offset"),
        F.max(F.when(~F.col("remote"), F.col("segment_base_offset"))).alias("last_segment_base_offset"),
        F.max("max_timestamp").alias("max_timestamp"),
        F.min("min_timestamp").alias("min_timestamp"),
        F.sum("compacted_batches").alias("compacted_batches"),
        F.sum("delete_horizon_batches").alias("delete_horizon_batches"),
        F.sum(hole.cast("int")).cast("int").alias("offset_holes"),
        F.min(F.when(hole, F.col("_prev_end"))).alias("hole_from_offset"),
        F.max(F.when(hole, F.col("segment_base_offset"))).alias("hole_to_offset"),
    )
    if checkpoints is None:
        p = p.withColumns({"high_watermark": F.lit(None).cast("long"), "checkpoint_log_start_offset": F.lit(None).cast("long")})
    else:
        keys = [F.col("cluster_id"), F.col("broker_id"), F.col("log_dir"), F.col("topic"), F.col("partition")]
        hw = checkpoints.where("checkpoint_kind = 'replication-offset'").groupBy(*keys).agg(F.max("offset").alias("high_watermark"))
        ls = checkpoints.where("checkpoint_kind = 'log-start-offset'").groupBy(*keys).agg(
            F.max("offset").alias("checkpoint_log_start_offset"))
        p = join_replica(join_replica(p, hw, "left"), ls, "left")
    return p.withColumn(
        "log_start_offset",
        F.greatest(F.coalesce("checkpoint_log_start_offset", F.lit(0)), F.coalesce("first_segment_base_offset", F.lit(0))),
    )


def replica_facts(batches, checkpoints, compacted_topics, replica_coverage, log_dir_coverage, remote_extents=None):
    """:func:`log_bounds` per replica, with compaction and what the input shows of the log:

    * ``cleaned_by_cleaner``, ``is_compacted``: the cleaner ran on the partition if any
      replica shows it (batches it emptied or thinned, a delete horizon it stamped, an
      entry of the partition in a cleaner-offset-checkpoint: replicas clean
      independently, a lagging one may show nothing yet); the partition is compacted
      if so, if its topic's ``cleanup.policy`` includes compact
      (``compacted_topics``: :func:`auditor.model.config.compacted_topics`), or if it
      is an internal compacted topic;
    * from ``replica_coverage`` and ``log_dir_coverage`` (:mod:`auditor.model.coverage`):
      ``given_as``, the segments left out, ``log_start_checkpoint_given``,
      ``compaction_known`` (compacted, or the log dir's cleaner-offset-checkpoint or the
      cluster's metadata log given: whether the topic is compacted is known), and
      ``log_start_known`` (every segment of the directory and the log dir's
      log-start-offset-checkpoint given), ``log_end_known`` (no later segment left
      out, the high watermark not beyond the last given batch);
    * tiered storage, from ``remote_extents`` (:func:`auditor.model.remote.extents`, None: no
      ``__remote_log_metadata`` in the input): ``remote_log_start_offset``,
      ``remote_log_end_offset``, ``remote_segments``, ``remote_max_timestamp`` of the readable
      remote segments; ``local_log_start_offset`` (UnifiedLog.localLogStartOffset: the first local
      segment, not below the checkpoint); ``partition_log_start_offset`` (UnifiedLog.logStartOffset:
      the smaller of the remote start and the log start); ``remote_given`` (remote segments are in
      the given log) and ``remote_not_given`` (readable remote segments lie below the given log and
      the remote store was not given: the producers' and transactions' history there is not in the
      input)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    p = log_bounds(batches, checkpoints)
    cleaned = checkpoints.where("checkpoint_kind = 'cleaner-offset'").select("cluster_id", "topic", "partition").distinct() \
        .withColumn("cleaner_checkpoint", F.lit(True))
    p = p.join(cleaned, ["cluster_id", "topic", "partition"], "left")
    seen = (F.col("compacted_batches") > 0) | (F.col("delete_horizon_batches") > 0) | F.coalesce("cleaner_checkpoint", F.lit(False))
    p = p.withColumn("cleaned_by_cleaner", F.max(seen.cast("int")).over(
        Window.partitionBy("cluster_id", "topic", "partition")) == 1)
    p = p.join(compacted_topics, ["cluster_id", "topic"], "left").withColumn(
        "is_compacted",
        F.coalesce(F.col("config_compact"), F.lit(False)) | F.col("topic").isin(*INTERNAL_COMPACTED) | F.col("cleaned_by_cleaner"),
    )
    cov = replica_coverage.drop("broker_id")
    # null-safe: a segment given alone has no topic or partition (coverage.SEGMENT_ALONE)
    p = join_null_safe(p, F.broadcast(cov), ["cluster_id", "log_dir", "topic", "partition"], "left")
    dirs = log_dir_coverage.drop("broker_id", "producer_id_expiration_known")
    p = p.join(F.broadcast(dirs), ["cluster_id", "log_dir"], "left")
    zero = F.lit(0)
    p = p.withColumns({
        "given_as": F.coalesce("given_as", F.lit("directory")),
        "earlier_segments_not_given": F.coalesce("earlier_segments_not_given", zero),
        "later_segments_not_given": F.coalesce("later_segments_not_given", zero),
        "segments_not_given_between": F.coalesce("segments_not_given_between", zero),
        # a log dir the inventory does not list (hand-made tables) is taken as given whole
        "log_start_checkpoint_given": F.coalesce("log_start_checkpoint_given", F.lit(True)),
        # compacted (or not) as far as the input shows: cleaned, or its log dir's cleaner checkpoint or
        # the metadata log given (auditor.model.coverage); an uninventoried log dir counts as given whole
        "compaction_known": F.col("is_compacted") | F.coalesce("compaction_known", F.lit(True)),
    })
    p = _with_offset_holes(p)
    p = _with_remote(p, remote_extents)
    placed = F.col("given_as") != SEGMENT_ALONE  # a segment given alone: what precedes and follows it is unknown
    return p.withColumns({
        "log_start_known": (F.col("earlier_segments_not_given") == 0) & F.col("log_start_checkpoint_given") & placed,
        "log_end_known": (F.col("later_segments_not_given") == 0)
        & F.coalesce(F.col("high_watermark") <= F.col("log_end_offset"), F.lit(True)) & placed,
    })


def _with_offset_holes(p):
    """``offsets_missing_between``: the holes between the replica's segments as read
    (:func:`_offset_hole`). Their offsets join the segments left out in ``gap_from_offset`` (the
    first offset missing; null when the replica as read has no gap, the one test of whether it has
    one) and ``gap_to_offset`` (the segment after the last gap; null, anywhere, when a segment left
    out has no known end), so every reader of a gap reads both.

    On a compacted topic the cleaner leaves holes too, but only below the last stable offset: it
    cleans whole segments below the one holding it (``LogCleanerManager.cleanableOffsets``,
    ``calculateCleanableBytes``), so a hole it leaves ends at or before the first offset of any
    transaction open since. A hole
    ending after an open transaction's first offset is missing input there as well; the rules that
    read a gap as possibly the cleaner's (sequences, producer history, markers) skip compacted
    topics on their own."""
    from pyspark.sql import functions as F

    p = p.withColumn("offsets_missing_between", F.coalesce("offset_holes", F.lit(0)).cast("int"))
    has = F.col("offsets_missing_between") > 0
    left_out = F.col("segments_not_given_between") > 0
    return p.withColumns({
        "gap_from_offset": F.when(has, F.least("gap_from_offset", "hole_from_offset")).otherwise(F.col("gap_from_offset")),
        "gap_to_offset": F.when(has & ~left_out, F.col("hole_to_offset"))
        .when(has & F.col("gap_to_offset").isNotNull(), F.greatest("gap_to_offset", "hole_to_offset"))
        .otherwise(F.col("gap_to_offset")),
    }).drop("offset_holes", "hole_from_offset", "hole_to_offset")


def _with_remote(p, remote_extents):
    """The tiered-storage columns of :func:`replica_facts` (see there)."""
    from pyspark.sql import functions as F

    if remote_extents is None:
        p = p.withColumns({"remote_log_start_offset": F.lit(None).cast("long"), "remote_log_end_offset": F.lit(None).cast("long"),
                           "remote_segments": F.lit(None).cast("int"), "remote_max_timestamp": F.lit(None).cast("long")})
    else:
        ext = remote_extents.groupBy("cluster_id", "topic", "partition").agg(
            F.min("remote_log_start_offset").alias("remote_log_start_offset"),
            F.max("remote_log_end_offset").alias("remote_log_end_offset"),
            F.sum("remote_segments").cast("int").alias("remote_segments"),
            F.max("remote_max_timestamp").alias("remote_max_timestamp"))
        p = p.join(F.broadcast(ext), ["cluster_id", "topic", "partition"], "left")
    local_start = F.greatest(F.coalesce("checkpoint_log_start_offset", F.lit(0)),
                             F.coalesce("local_first_segment_base_offset", "log_end_offset"))
    given = F.coalesce(F.col("remote_batches_given"), F.lit(0)) > 0
    return p.withColumns({
        "local_log_start_offset": local_start,
        "partition_log_start_offset": F.when(F.col("remote_log_start_offset").isNotNull(), F.least(
            "log_start_offset", "remote_log_start_offset")).otherwise(F.col("log_start_offset")),
        "remote_given": given,
        # remote offsets below the first batch given (the log start may sit below it: the checkpoint of a
        # remote-enabled log keeps the partition's log start)
        "remote_not_given": F.coalesce(~given & (F.col("remote_log_start_offset") < F.col("first_batch_offset")), F.lit(False)),
    })
