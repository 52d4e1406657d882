"""**What.** The broker rebuilds producer state from snapshots and the log. If the
earliest batch a partition still holds for a producer id has a non-zero base
sequence, and no producer snapshot taken before that batch remembers the producer
unexpired with the sequence the batch continues, the broker had *no state* for
it (retention alone does not drop a producer's state since KIP-360; expiry after
``producer.id.expiration.ms`` does, and so does a restart that loads no snapshot
holding it). The rule reports:

* ``retention`` — the log start offset is above 0: the producer's earlier
  batches went with deleted segments or records;
* ``unexplained`` — nothing was deleted (the log still starts at 0), yet the
  producer's earlier sequences are missing.

Both need to know where the partition's log starts, which only the whole
partition directory with its log dir's ``log-start-offset-checkpoint`` shows
(``auditor/model/coverage.py``). When the input lacks it:

* ``undetermined`` — every segment of the directory was given but not the
  checkpoint (a partition directory alone, a copy of some segments): the
  sequences are missing, but whether they were removed (retention,
  DeleteRecords) or lost the input cannot tell;
* ``earlier-segments-not-given`` — segments of the directory before the first
  given one were left out: the producer's earlier batches may simply be there.
  Info: the input shows nothing wrong.
* ``offsets-missing-before`` — offsets of the partition before the batch are in
  no segment as read, between two that are (segments left out between the given
  ones, or a copy of a running broker that lost a segment deleted mid-copy or took
  one before the broker finished it: ``auditor/model/replica.py``): the earlier
  batches may be there. Info.
* ``earlier-batches-remote`` — tiered storage (KIP-405): ``__remote_log_metadata``
  lists readable remote segments below the given log, and the remote store was not
  given (``--remote-store``). The producer's earlier batches may be there, and the
  broker had its state: RemoteLogManager copies the producer snapshot with every
  remote segment and a replica rebuilding from remote storage loads it
  (``buildProducerSnapshotFile``), and local retention of a tiered log keeps
  producer state like any retention (KIP-360). Info: neither retention nor loss.
* ``earlier-batches-tiered`` — tiered storage the input shows without
  ``__remote_log_metadata`` (a broker hosting no replica of it, or a partition
  directory alone): the replica's own checkpoints place its log start below its
  first local segment. Kafka writes that only for a remote-enabled log: local
  deletion of a tiered log moves the *local* log start and leaves the
  leader-epoch cache as it was (``UnifiedLog.deleteSegments`` ->
  ``maybeIncrementLocalLogStartOffset``), any other deletion moves the log start
  and truncates the cache to it (``maybeIncrementLogStartOffset`` ->
  ``LeaderEpochFileCache.truncateFromStartAsyncFlush``), and
  ``LogManager.checkpointLogStartOffsetsInDir`` checkpoints a log start below the
  first segment only for a remote-enabled log (Kafka 4.3.1). The offsets between
  are in remote storage, not lost: info, neither retention nor loss. (On a running
  broker the cache file is flushed asynchronously and may briefly lag a deletion.)

On compacted topics the cleaner removes a producer's earlier batches by design
and keeps its last one (so the broker keeps its state): not reported there.

**Why it matters.** ``retention`` is not data loss but spurious errors: the
producer's next write meets no state and gets UNKNOWN_PRODUCER_ID before Kafka
2.5 (misreported as OutOfOrderSequence, as the KIP-185 follow-up discussion
showed), an error the application has to handle: older clients fail the send.
``unexplained`` is data loss:
the producer's earlier records are gone from a log that was never trimmed.

**How it arises.** Retention or DeleteRecords removed the producer's earlier
batches (the log start offset moved past them) while the producer was still
alive, or its state expired (``producer.id.expiration.ms``). KIP-360 made the
broker accept such producers (any sequence when it has no state) and lets the
client bump its epoch safely. The same on-disk pattern in a log that still
starts at its first offset has no such explanation: truncation (an unclean
leader election) or loss.
"""

from __future__ import annotations

from auditor.engine.findings import evidence
from auditor.engine.rule import Evidence, Kind, Rule
from auditor.engine.views import REPLICA, join_broker, join_replica
from auditor.model.producer_state.spark import snapshot_remembers
from auditor.model.remote import lineage_starts
from auditor.rules._common import COMPACTED

EVIDENCE = (
    Evidence("base_sequence", "int", "sequence of the producer's first retained batch"),
    Evidence("log_start_offset", "bigint", "the partition's log start offset"),
    Evidence("first_batch_offset", "bigint", "offset of the first batch the log holds"),
    Evidence("log_start_known", "boolean", "the input shows where the log starts (every segment of the directory and "
                                           "its log dir's log-start-offset-checkpoint given)"),
    Evidence("earlier_segments_not_given", "int", "segments of the directory before the first given one, left out"),
    Evidence("undetermined_reason", "string", "what the input lacks (undetermined only)"),
    Evidence("remote_log_start_offset", "bigint", "tiered storage: the first offset of the readable remote segments "
                                                  "(earlier-batches-tiered: the log start the replica's checkpoints "
                                                  "place below its local log)"),
    Evidence("remote_segments", "int", "tiered storage: readable remote segments of the partition"),
    Evidence("gap_from_offset", "bigint", "the first offset of the partition missing between its segments as read"),
    Evidence("gap_to_offset", "bigint", "the base offset of the segment after the last such gap (null: not known)"),
    COMPACTED,
)

_WHERE = ("producer {producer_id} (epoch {producer_epoch}) first appears on {topic}-{partition} at offset {first_offset} "
          "with sequence {base_sequence}: ")
KINDS = {
    "retention": Kind("warning", _WHERE + "its earlier batches were removed (log start offset {log_start_offset}) and no "
                      "producer snapshot remembers it: the broker has no state for it, so its next write gets "
                      "UNKNOWN_PRODUCER_ID / OutOfOrderSequence (KIP-360)",
                      advice="no data action; keep producer state alive longer (retention.ms, producer.id.expiration.ms) "
                             "or use KIP-360 clients (2.5+) that bump the epoch on UNKNOWN_PRODUCER_ID"),
    "unexplained": Kind("error", _WHERE + "the log still starts at offset {log_start_offset}, yet the sequences before "
                        "{base_sequence} are missing: unexplained loss",
                        advice="investigate truncation / unclean leader election before this offset; compare the "
                               "partition's replicas"),
    "undetermined": Kind("warning", _WHERE + "its earlier sequences are not in the input, and whether the broker still "
                         "had state for it the input cannot tell: {undetermined_reason}",
                         advice="scan the whole log dir (it holds log-start-offset-checkpoint and, on KRaft, the "
                                "metadata log with producer.id.expiration.ms): a log start above the first batch means "
                                "removal, not loss"),
    "earlier-segments-not-given": Kind("info", _WHERE + "{earlier_segments_not_given} earlier segment(s) of its directory "
                                       "were not given, and may hold its earlier batches",
                                       advice="scan the whole partition directory to tell whether the broker had state "
                                              "for the producer"),
    "offsets-missing-before": Kind("info", _WHERE + "the offsets from {gap_from_offset} to the segment at "
                                   "{gap_to_offset}, before it, are in no segment as read (segments left out, missing from or "
                                   "unfinished in a copy of a running broker, or removed by the log cleaner), and may "
                                   "hold its earlier batches",
                                   advice="scan the whole partition directory of the broker itself (or a copy taken "
                                          "while it was stopped) to tell whether the broker had state for the producer"),
    "earlier-batches-remote": Kind("info", _WHERE + "the partition's offsets from {remote_log_start_offset} up to {first_batch_offset} "
                                   "are in remote storage (tiered, {remote_segments} segment(s) in __remote_log_metadata), "
                                   "which was not given, and may hold its earlier batches",
                                   advice="scan with --remote-store pointing at the remote storage's copy to replay the "
                                          "whole log"),
    "earlier-batches-tiered": Kind("info", _WHERE + "the replica's checkpoints place its log start at offset "
                                   "{remote_log_start_offset}, below its local log ({first_batch_offset}), which Kafka "
                                   "writes only for a tiered (remote-enabled) log: the offsets between are in remote "
                                   "storage, which was not given, and may hold its earlier batches",
                                   advice="scan the whole log dir of a broker hosting __remote_log_metadata and pass the "
                                          "remote store with --remote-store to replay the whole log"),
}


def run(ctx):
    from pyspark.sql import functions as F

    # __consumer_offsets batches are written by the group coordinator, which never checks sequences; a
    # segment given without its partition directory (no topic) shows nothing of the producer's past
    first = ctx.sequence_breaks.where(
        "prev_data_epoch IS NULL AND base_sequence > 0 AND topic IS NOT NULL AND topic != '__consumer_offsets'")
    part = ctx.partitions.select(*REPLICA, "log_start_offset", "first_batch_offset", "is_compacted", "log_start_known",
                                 "earlier_segments_not_given", "remote_not_given", "remote_log_start_offset",
                                 "remote_segments", "checkpoint_log_start_offset", "local_first_segment_base_offset",
                                 "gap_from_offset", "gap_to_offset")
    first = join_replica(first, part, "left")
    # a tiered log the replica's own checkpoints show (auditor.model.remote.lineage_starts)
    if ctx.has_rows("leader_epochs"):
        first = join_replica(first, lineage_starts(ctx.table("leader_epochs"), REPLICA), "left")
    else:
        first = first.withColumn("epoch_lineage_start_offset", F.lit(None).cast("long"))
    # the broker still has state for the producer if a snapshot remembers it, unexpired, with the
    # sequence this batch continues (auditor.model.producer_state): retention alone does not drop state
    first = join_broker(first, F.broadcast(ctx.producer_id_expiration), "left")
    expiration = F.coalesce(F.col("producer_id_expiration_ms"), F.lit(ctx.options.producer_id_expiration_ms))
    snapshots = ctx.table("producer_snapshots")
    first = snapshot_remembers(first, snapshots, expiration)
    # whether a snapshot's entry had expired depends on producer.id.expiration.ms: where the input cannot
    # show it, only an entry kept alive by its open transaction is remembered for sure
    expiration_known = F.coalesce(F.col("producer_id_expiration_known"), F.lit(True))
    first = first.where(~F.col("remembered") | (~expiration_known & ~F.col("remembered_whatever_expiration")))
    remembered_if = F.col("remembered") & ~expiration_known  # remembered under the assumed default only
    known = F.coalesce(F.col("log_start_known"), F.lit(False))
    # on a compacted topic the cleaner removes a producer's earlier batches by design (it keeps the
    # last one, so the broker's state for the producer survives): nothing to report there unless the
    # log provably starts above 0
    compacted = F.coalesce(F.col("is_compacted"), F.lit(False))
    first = first.where(~(compacted & ~(known & (F.col("log_start_offset") > 0))))
    # no __remote_log_metadata about the partition in the input, but its checkpoints start below its local log
    # (the checkpointed log start as written, before LogLoader raises it to the first segment of a log it
    # does not know is remote-enabled; compared with the first local segment)
    tiered_start = F.when(F.col("remote_log_start_offset").isNull(), F.least(
        F.when(known, F.col("checkpoint_log_start_offset")), F.col("epoch_lineage_start_offset")))
    local_start = F.coalesce(F.col("local_first_segment_base_offset"), F.col("first_batch_offset"))
    tiered = F.coalesce(tiered_start < local_start, F.lit(False))
    # offsets missing between the segments as read, before this batch: its earlier batches may be there
    after_gap = F.coalesce(F.col("base_offset") >= F.col("gap_from_offset"), F.lit(False))
    kind = (F.when(F.col("earlier_segments_not_given") > 0, F.lit("earlier-segments-not-given"))
            .when(after_gap, F.lit("offsets-missing-before"))
            .when(F.coalesce(F.col("remote_not_given"), F.lit(False)), F.lit("earlier-batches-remote"))
            .when(tiered, F.lit("earlier-batches-tiered"))
            .when(~known | remembered_if, F.lit("undetermined"))
            .when(F.col("log_start_offset") > 0, F.lit("retention")).otherwise(F.lit("unexplained")))
    return first.select(
        *REPLICA, "producer_id", "producer_epoch",
        F.col("base_offset").alias("first_offset"), F.col("last_offset"),
        F.col("max_timestamp").alias("first_timestamp"),
        kind.alias("kind"),
        evidence(EVIDENCE, base_sequence=F.col("base_sequence"), log_start_offset=F.col("log_start_offset"),
                 first_batch_offset=F.col("first_batch_offset"), compacted=F.col("is_compacted"),
                 log_start_known=known,
                 earlier_segments_not_given=F.col("earlier_segments_not_given"),
                 remote_log_start_offset=F.when(kind == "earlier-batches-tiered", tiered_start)
                 .otherwise(F.col("remote_log_start_offset")), remote_segments=F.col("remote_segments"),
                 gap_from_offset=F.col("gap_from_offset"), gap_to_offset=F.col("gap_to_offset"),
                 undetermined_reason=F.when(kind != "undetermined", F.lit(None).cast("string")).when(
                     remembered_if, F.lit("a producer snapshot remembers it unless its entry had expired, and the "
                                          "cluster's metadata log (producer.id.expiration.ms) was not given"))
                 .otherwise(F.lit("no log-start-offset-checkpoint of its log dir was given, so where the log starts "
                                  "(removed by retention or DeleteRecords, or lost) is not known"))).alias("evidence"),
    )


RULE = Rule(
    id="unknown-producer-gap",
    title="Producer whose first retained batch has a non-zero sequence (lost producer state)",
    run=run,
    kinds=KINDS,
    evidence=EVIDENCE,
    proposals=("KIP-360", "KIP-185"),
    views=("partitions", "producer_id_expiration", "sequence_breaks"),
    needs=("batches",),
    tables=("leader_epochs", "producer_snapshots"),
)
