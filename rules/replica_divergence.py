"""**What.** Followers copy the leader's record batches byte for byte, so every
replica of a partition should hold the same batch at each offset: same producer
id, epoch and base sequence, same last offset, same control type (COMMIT/ABORT
marker or data) and the same CRC. When several brokers' log dirs of one
cluster are ingested together, the rule compares their copies of each partition
and reports, once per partition and kind (and per lacking broker for the
missing kinds):

* ``batch-mismatch`` — the replicas hold different batches at the same base
  offset;
* ``missing-marker`` — a COMMIT/ABORT marker one replica holds and another
  replica lacks, although that replica's log covers the offset (between its
  first batch and its log end);
* ``missing-batch`` — the same for a data batch.

A replica does not lack what falls in offsets missing between its segments as
read (segments left out of the input, or lost or cut short in a copy of a
running broker): the input cannot show whether that replica holds it.

Only the live log of each replica is compared (no ``.deleted`` copies).

On compacted topics each replica's log cleaner runs on its own schedule, so the
replicas legitimately hold different cleaned copies of one log; the rule then
reports only what Kafka's cleaner cannot produce. From Kafka's source
(``core/src/main/scala/kafka/log/LogCleaner.scala``: ``Cleaner.cleanInto``,
its ``checkBatchRetention`` with ``isBatchLastRecordOfProducer``,
``shouldDiscardBatch``, ``CleanedTransactionMetadata.onControlBatchRead`` /
``onBatchRead``; in newer trees ``storage/.../internals/log/LogCleaner.java``;
and ``clients/src/main/java/org/apache/kafka/common/record/MemoryRecords.java``:
``filterTo``, ``RecordFilter.BatchRetention``, ``buildRetainedRecordsInto``,
with ``DefaultRecordBatch.writeEmptyHeader``), a cleaning pass

* removes records (overwritten keys; tombstones, and the control record of a
  marker whose transaction has no data left, once the batch's delete horizon
  has passed) and whole batches (``DELETE``: aborted transactional data, markers
  past their delete horizon; ``DELETE_EMPTY``: batches left without records);
* keeps a batch left without records as an empty batch (``RETAIN_EMPTY``) when it
  is the producer's last batch — its last data batch or, when the marker bumped
  the epoch (transaction version 2, a coordinator abort), its COMMIT/ABORT marker —
  or the last batch of the cleaning round: record count 0, so no control type,
  but the control and transactional attributes kept;
* keeps in every v2 batch it rewrites or empties the base offset, the last offset
  (``overrideLastOffset``; the last offset delta of an empty one), the producer
  id, epoch and base sequence, the control and transactional attributes and the
  magic;
* rewrites the CRC, the record count, the base timestamp (the delete horizon it
  stamps on batches with tombstones or markers of emptied transactions) and the
  compression of an emptied batch. A legacy (v0/v1) batch it rebuilds takes its
  offsets from the records it keeps.

So on a compacted partition only these are divergence (``batch-mismatch``):
another producer id, epoch, base sequence or magic at the same base offset,
another last offset for a v2 batch, a data batch where another replica holds a
control batch, and a COMMIT where another replica holds an ABORT while both
control batches still hold their control record. A marker emptied on one replica
and whole on another, a thinned batch (other CRC and record count), a removed
record, batch or marker are not; the missing kinds are not judged there. A
partition counts as compacted when its ``cleanup.policy`` says so or any
replica shows the cleaner's work (thinned or emptied batches, delete horizons, a
``cleaner-offset-checkpoint`` entry). Brokers without a ``cluster.id`` are keyed
by log dir and never compared.

**Why it matters.** Consumers read from the leader, so what they get depends on
which replica leads: after the next leader change they may read other records
at the same offsets, or miss records they were already given. A marker present
on one replica only means ``read_committed`` consumers see different results
depending on the leader: on the replica without it the transaction is open and
pins the LSO.

**How it arises.** An unclean leader election (a replica outside the ISR became
leader and the others truncated to it — or have not yet), replicas restored from
different backups, a disk that lost a segment tail, a follower that could not
truncate (KIP-101/KIP-279 leader-epoch truncation bugs in old versions).
"""

from __future__ import annotations

from auditor.engine.findings import evidence
from auditor.engine.rule import Evidence, Kind, Rule

PARTITION = ["cluster_id", "topic", "partition"]
COMPARED = ("producer_id", "producer_epoch", "base_sequence", "last_offset", "control_type", "is_control", "magic")

EVIDENCE = (
    Evidence("offsets", "bigint", "base offsets where the replicas disagree this way"),
    Evidence("first_divergence", "string", "the first of them, what differs (min/max across brokers)"),
    Evidence("lacking_broker", "int", "the broker whose replica lacks batches or markers the others hold"),
    Evidence("replica_ranges", "array<string>", "each replica's offsets in the dump (broker: first..last)"),
)

_WHERE = " at {offsets} offset(s) from {first_offset} to {last_offset}; first: {first_divergence}"
_ADVICE = ("decide which replica is right (the leader of the highest leader epoch, leader-epoch-checkpoint) and rebuild "
           "the others from it: stop the broker, remove the partition directory and let it re-replicate, or reassign "
           "the partition; check unclean.leader.election.enable")
KINDS = {
    "batch-mismatch": Kind("error", "replicas of {topic}-{partition} disagree: different batches at the same base "
                           "offset" + _WHERE, advice=_ADVICE),
    "missing-marker": Kind("error", "replicas of {topic}-{partition} disagree: broker {lacking_broker} lacks transaction "
                           "markers the other replica(s) hold" + _WHERE, advice=_ADVICE),
    "missing-batch": Kind("error", "replicas of {topic}-{partition} disagree: broker {lacking_broker} lacks batches the "
                          "other replica(s) hold" + _WHERE, advice=_ADVICE),
}


def _empty(ctx):
    from pyspark.sql import functions as F

    return ctx.partitions.limit(0).select(*PARTITION, F.lit("batch-mismatch").alias("kind"),
                                          evidence(EVIDENCE).alias("evidence"))


def _lacking():
    """The brokers whose replica lacks the batch at ``base_offset`` although its log as read covers
    it: between its first batch and its log end, and not in offsets missing between its segments
    (left out of the input, or lost or cut short in a copy). None on compacted partitions."""
    from pyspark.sql import functions as F

    in_gap = lambda r: F.coalesce((F.col("base_offset") >= r["gap_from_offset"])  # noqa: E731
                                  & F.coalesce(F.col("base_offset") < r["gap_to_offset"], F.lit(True)), F.lit(False))
    lacking = F.transform(F.filter(
        "ranges", lambda r: (r["first_batch_offset"] <= F.col("base_offset")) & (F.col("base_offset") < r["log_end_offset"])
        & ~in_gap(r) & ~F.array_contains(F.col("brokers"), r["broker_id"])), lambda r: r["broker_id"])
    return F.when(F.col("is_compacted"), F.array().cast("array<int>")).otherwise(lacking)


def run(ctx):
    from pyspark.sql import functions as F

    reps = ctx.partitions.groupBy(*PARTITION).agg(
        F.count(F.lit(1)).alias("replicas"),
        F.sort_array(F.collect_list(F.struct("broker_id", "first_batch_offset", "log_end_offset", "gap_from_offset",
                                             "gap_to_offset"))).alias("ranges"),
        F.max(F.col("is_compacted").cast("int")).cast("boolean").alias("is_compacted"),
    ).where("replicas > 1")
    # one replica per partition: nothing to compare. The inventory tells without a job; otherwise
    # the query runs, and on a large dump an empty ``reps`` ends it once broadcast (adaptive
    # execution drops a join with an empty build side: no scan of the batches). A job asking first
    # held the driver's building of every later rule for as long as it ran (6 s of a 1 M-batch audit)
    if ctx.replicated_partitions is False:
        return _empty(ctx)

    b = ctx.table("batches").where("source = 'segment'").withColumn("control_type", F.coalesce("control_type", F.lit("")))
    b = b.join(F.broadcast(reps), PARTITION)
    # compacted: compare only what the cleaner keeps (see the docstring). An emptied control batch has no
    # record, hence no control type: a control type counts only from a control batch still holding its
    # record (a data batch against a control batch differs in is_control). A legacy batch the cleaner
    # rebuilds takes its offsets from the records it keeps: its last offset is compared only in v2
    strict = ~F.col("is_compacted")
    b = b.withColumn("control_type", F.when(strict | (F.col("is_control") & (F.col("record_count") > 0)),
                                            F.col("control_type")))
    b = b.withColumn("last_offset", F.when(strict | (F.col("magic") >= 2), F.col("last_offset")))
    aggs = [F.sort_array(F.collect_set("broker_id")).alias("brokers"),
            F.first("ranges").alias("ranges"), F.first("is_compacted").alias("is_compacted"),
            F.min("crc").alias("min_crc"), F.max("crc").alias("max_crc"),
            F.min("record_count").alias("min_record_count"), F.max("record_count").alias("max_record_count"),
            F.max((F.col("is_control") & F.col("control_type").isin("COMMIT", "ABORT")).cast("int")).alias("is_marker")]
    for c in COMPARED:
        aggs += [F.min(c).alias(f"min_{c}"), F.max(c).alias(f"max_{c}")]
    g = b.groupBy(*PARTITION, "base_offset").agg(*aggs)

    differs = lambda c: F.when(~F.col(f"min_{c}").eqNullSafe(F.col(f"max_{c}")), F.concat(  # noqa: E731
        F.lit(c + " "), F.col(f"min_{c}").cast("string"), F.lit("/"), F.col(f"max_{c}").cast("string")))
    fields = [differs(c) for c in COMPARED]
    # a cleaner rewrites the batches it thins, and stamps a delete horizon on those holding tombstones or
    # markers (new base timestamp, new CRC, same records): independent cleaners make different bytes
    fields.append(F.when(~F.col("is_compacted"), differs("crc")))
    fields.append(F.when(~F.col("is_compacted"), differs("record_count")))
    g = g.withColumn("diff", F.concat_ws(", ", *fields))
    g = g.withColumn("lacking", _lacking())
    g = g.where((F.col("diff") != "") | (F.size("lacking") > 0))

    detail = F.concat(F.lit("offset "), F.col("base_offset").cast("string"), F.lit(": "))
    mism = g.where("diff != ''").select(
        *PARTITION, F.lit(None).cast("int").alias("broker_id"), F.lit("batch-mismatch").alias("kind"), "base_offset",
        F.concat(detail, F.col("diff"), F.lit(" (min/max across brokers "), F.array_join("brokers", ","), F.lit(")")).alias("detail"),
        "brokers", "ranges")
    miss = g.where(F.size("lacking") > 0).select(
        *PARTITION, F.explode("lacking").alias("broker_id"),
        F.when(F.col("is_marker") == 1, F.lit("missing-marker")).otherwise(F.lit("missing-batch")).alias("kind"),
        "base_offset",
        F.concat(detail, F.when(F.col("is_marker") == 1, F.concat(F.col("max_control_type"), F.lit(" marker")))
                 .otherwise(F.lit("data batch")), F.lit(" of producer "), F.col("max_producer_id").cast("string"),
                 F.lit(" epoch "), F.col("max_producer_epoch").cast("string"),
                 F.lit(" held by broker(s) "), F.array_join("brokers", ",")).alias("detail"),
        "brokers", "ranges")
    f = mism.unionByName(miss).groupBy(*PARTITION, "broker_id", "kind").agg(
        F.min("base_offset").alias("first_offset"), F.max("base_offset").alias("last_offset"),
        F.count(F.lit(1)).alias("offsets"), F.min(F.struct("base_offset", "detail")).alias("first"),
        F.first("ranges").alias("ranges"))
    ranges = F.transform("ranges", lambda r: F.concat(
        F.lit("broker "), r["broker_id"].cast("string"), F.lit(": "), r["first_batch_offset"].cast("string"), F.lit(".."),
        (r["log_end_offset"] - 1).cast("string")))
    return f.select(
        *PARTITION, "broker_id", "first_offset", "last_offset", "kind",
        evidence(
            EVIDENCE,
            offsets=F.col("offsets"),
            first_divergence=F.col("first.detail"),
            lacking_broker=F.col("broker_id"),
            replica_ranges=ranges,
        ).alias("evidence"),
    )


RULE = Rule(
    id="replica-divergence",
    title="Replicas of one partition that hold different batches or markers",
    run=run,
    kinds=KINDS,
    evidence=EVIDENCE,
    proposals=("KIP-101", "KIP-279"),
    views=("partitions",),
    needs=("batches",),
    tables=("batches",),
)
