"""**What.** When a producer ends a transaction the coordinator writes
``PrepareCommit`` (or ``PrepareAbort``) listing every partition of the
transaction, writes a COMMIT (ABORT) marker to each of them, and only when all
markers are acknowledged writes ``CompleteCommit`` (``CompleteAbort``). A
completed transaction is therefore atomic only if *every* listed partition
holds a marker of the decided type from that producer. This rule pairs each
``Complete*`` record with the ``Prepare*`` record just before it (Kafka writes
``Complete*`` with an empty partition list: the partitions and the epoch the
markers carry are the ``Prepare*`` record's) and looks, on every replica in the
dump of every listed partition, for that decision's markers among the producer's
markers of that epoch (below):

* ``wrong-marker`` — the partition got the *other* marker type: part of the
  transaction was committed and part aborted;
* ``missing-commit-marker``, ``missing-abort-marker`` — no marker of that
  producer and epoch that can be this decision's, although the replica's log
  reaches past the ``Complete*`` record.

Markers are matched by producer id and marker epoch (= the ``Prepare*`` record's
epoch), then by the log's order, and by time only where nothing else can tell
(:func:`auditor.model.decisions.decision_markers`). Under transaction.version 2
every transaction has an epoch of its own (bumped at EndTxn): the epoch alone
matches. Under 0/1 one epoch serves a producer session's transactions back to
back, often in one millisecond (on one broker the marker, the ``Complete*``
record and the id's next transaction share it), so:

* a decision's markers are stamped in [its transaction's start, the id's next
  transaction's start], both ends counted in, widened by
  ``auditor.model.decisions.CLOCK_SKEW_MS`` (20 ms) either way for the partition
  leader's clock against the coordinator's (the coordinator sends them after the
  ``Prepare*`` record and answers CONCURRENT_TRANSACTIONS until they are written):
  within that, a leader's clock may lag by up to the transaction's length;
* on a partition the markers of one producer and epoch are in the coordinator's
  decision order, and each decision listing the partition leaves at least one (a
  partition added but never written gets one; a coordinator that takes over
  resends the markers of a ``Prepare*`` it loads, so one may appear twice). So
  where windows overlap, a decision's first marker of its type ranks, in offset
  order, after one marker per earlier decision of that type, counted from a
  marker stamped before an earlier window on a replica that surely holds what
  follows it (not compacted, no offsets missing between segments): transactions
  in one millisecond are told apart by counting.

A decision with no marker of its type where its marker can be is reported; the
kind is ``wrong-marker`` when a marker of the other type in its window can be no
decision of that type's. Of transactions that neither time nor order tells apart
(one millisecond, no marker between), the finding names the last the count
leaves without one.

Only partitions that are in the dump are judged; a missing marker is not
judged on compacted topics (the cleaner removes markers), on a replica whose
newest timestamp is not past the ``Complete*`` record's append time by the clock
skew (it may just be behind), nor where retention has removed the producer's
history (log start above 0 and no marker of that epoch nor open data on the
replica, or its oldest batch not surely older than the transaction), nor, on a
tiered partition whose remote segments were not given, for a transaction that
started before the newest record of the remote part (its markers may be there),
nor on a replica with offsets missing between its segments as read (segments left
out, or a copy of a running broker that lost or cut one) unless the transaction's
open data follows the gap and was surely written before the decision (stamped
more than the clock skew before the ``Prepare*`` record: the id's next
transaction's data, still open, says nothing of this one's marker).

**Why it matters.** The transaction is no longer atomic. With a
``wrong-marker``, ``read_committed`` consumers of this partition see data the
rest of the transaction discarded, or lose data the rest kept — and they already
have. A missing marker leaves the transaction's data open on the partition
(``hanging-transaction``: the LSO is pinned) while the coordinator believes it
finished; a missing COMMIT cannot be written by hand, so the committed records
there will end up aborted.

**How it arises.** A delayed EndTxn applied to a later transaction of the same
producer epoch — typically a client that aborts after its commit timed out, or a
process pause (KAFKA-17754, found by Jepsen in 2024; transaction.version 2 of
KIP-890 closes it by bumping the epoch on every transaction), an admin abort (``kafka-transactions.sh abort``) of a
partition the coordinator was about to commit, markers lost with a replica
truncated after an unclean leader election, or a coordinator that wrote
``Complete*`` without all acknowledgements.
"""

from __future__ import annotations

from auditor.engine.findings import evidence
from auditor.engine.rule import Command, Evidence, Kind, Rule
from auditor.engine.views import REPLICA, join_replica
from auditor.rules._common import COORDINATOR_EPOCH
from auditor.model.decisions import CLOCK_SKEW_MS, STREAM, decision_markers, prepared, producer_markers

EVIDENCE = (
    Evidence("decision", "string", "COMMIT or ABORT: what the coordinator recorded (its Complete* record)"),
    Evidence("coordinator_partition", "int", "__transaction_state partition of the transactional id"),
    Evidence("prepare_offset", "bigint", "offset of the Prepare* record"),
    Evidence("complete_offset", "bigint", "offset of the Complete* record"),
    Evidence("marker_offset", "bigint", "offset of the marker of the other type"),
    Evidence("marker_type", "string", "its type"),
    Evidence("marker_timestamp", "bigint", "its timestamp"),
    Evidence("marker_coordinator_epoch", "int", "its coordinator epoch"),
    Evidence("open_data_first_offset", "bigint", "first offset of the producer's data still open on the partition"),
    Evidence("open_data_epoch", "int", "producer epoch of that data"),
    COORDINATOR_EPOCH,
    Evidence("window_start_ms", "bigint", "start of the transaction: markers stamped before it, less the clock skew, "
                                          "belong to earlier ones"),
    Evidence("window_end_ms", "bigint", "start of the id's next transaction: markers stamped after it, plus the clock "
                                        "skew, belong to later ones"),
)

_WHERE = ("torn transaction of transactional id {transactional_id} (producer {producer_id}, marker epoch "
          "{producer_epoch}): the coordinator recorded {decision} (__transaction_state-{coordinator_partition} offsets "
          "{prepare_offset}/{complete_offset}) but {topic}-{partition} ")
_MISSING = _WHERE + "has no marker of that producer and epoch[[; its data from offset {open_data_first_offset} is still open]]"
KINDS = {
    "wrong-marker": Kind("critical", _WHERE + "has an {marker_type} marker at offset {marker_offset} (KAFKA-17754)",
                         advice="cannot be repaired in Kafka: reconcile downstream consumers of these offsets with the "
                                "coordinator's decision; prevent it with transaction.version 2 and clients that never "
                                "abort after a commit timed out"),
    "missing-abort-marker": Kind(
        "error", _MISSING,
        (Command("kafka-transactions.sh --bootstrap-server <broker:port> abort --topic {topic} --partition {partition} "
                 "--start-offset {open_data_first_offset}"),
         Command("kafka-transactions.sh --bootstrap-server <broker:port> abort --topic {topic} --partition {partition} "
                 "--producer-id {producer_id} --producer-epoch {open_data_epoch} --coordinator-epoch "
                 "{coordinator_epoch:default=0}", applies_to="brokers before 3.0")),
        "compare the partition's replicas first: the marker may exist on the leader; abort the open data only where "
        "it is still open"),
    "missing-commit-marker": Kind(
        "error", _MISSING,
        advice="first the partition's leader and its replicas: make sure it has a live leader (a leader that was "
               "frozen may still write the COMMIT marker of a request it took before) and compare its replicas (the "
               "marker may be on the leader); scan again once the leader is back. A COMMIT marker cannot be written by "
               "hand: only if the marker is still missing then, abort the open data (kafka-transactions.sh abort), "
               "which costs this partition's committed records, and produce them again"),
}


def run(ctx):
    """The decided transactions' listed replicas whose marker is missing or of the other type."""
    return _findings(_classified(ctx, _matched(ctx, _completed(ctx))))


def _completed(ctx):
    """Each completed decision (a ``Complete*`` record after its ``Prepare*``): the ``Prepare*`` record's
    offset, and the times and offsets the finding quotes."""
    from pyspark.sql import functions as F

    h = ctx.coordinator_history
    return h.where(
        ((F.col("state") == "CompleteCommit") & (F.col("prev_state_label") == "PrepareCommit"))
        | ((F.col("state") == "CompleteAbort") & (F.col("prev_state_label") == "PrepareAbort"))
    ).select(
        "cluster_id", "transactional_id", F.col("prev_offset").alias("prepare_offset"),
        F.col("offset").alias("complete_offset"), F.col("prev_last_update_timestamp_ms").alias("prepare_ts"),
        F.col("last_update_timestamp_ms").alias("complete_ts"),
        # appended once every marker was written (its last update time is when they were queued)
        F.col("timestamp").alias("complete_append_ts"), F.col("partition").alias("coordinator_partition"))


def _matched(ctx, completed):
    """Per completed decision and replica of a listed partition that the dump holds: where its markers
    can be (:func:`auditor.model.decisions.decision_markers`: ``markers_matched``, ``stream_markers``)
    and ``wm``, the first marker of the other type in its window that no decision of that type can own,
    where it has none of its own."""
    from pyspark.sql import functions as F

    reps = ctx.partitions.select(*REPLICA, "log_start_offset", "max_timestamp", "min_timestamp", "is_compacted",
                                 "remote_not_given", "remote_max_timestamp", "gap_from_offset", "gap_to_offset")
    matched, owned = decision_markers(prepared(ctx.coordinator_history), producer_markers(ctx.transactions), reps)
    g = matched.join(completed, ["cluster_id", "transactional_id", "prepare_offset"])
    key = ["producer_id", "epoch", "prepare_offset"]
    flagged = g.where(~F.col("markers_matched")).select(*STREAM, "prepare_offset", "decision", "lo_ts", "hi_ts")
    stray = owned.where(~F.col("ownable")).select(
        *STREAM, F.struct(F.col("marker_offset").alias("offset"), F.col("marker_ts").alias("ts"),
                          F.col("marker_type").alias("type"), "coordinator_epoch",
                          F.col("txn_first_offset").alias("first_offset")).alias("m"))
    wrong = join_replica(flagged, stray, on=["producer_id", "epoch"]).where(
        (F.col("m.type") != F.col("decision")) & F.col("m.ts").between(F.col("lo_ts"), F.col("hi_ts"))
    ).groupBy(*STREAM, "prepare_offset").agg(F.min("m").alias("wm"))
    return join_replica(g, wrong, "left", on=key)


def _classified(ctx, g):
    """``classification``: wrong-marker, missing-marker, or nothing to report (rows dropped)
    where the replica as read cannot show the marker."""
    from pyspark.sql import functions as F

    skew = F.lit(CLOCK_SKEW_MS)
    opened = ctx.open_transactions.select(*REPLICA, "producer_id", F.col("first_offset").alias("open_first_offset"),
                                          F.col("data_epoch_min").alias("open_epoch"),
                                          F.col("first_timestamp").alias("open_first_ts"), "prev_coordinator_epoch")
    g = join_replica(g, opened, "left", on=["producer_id"]).withColumn(
        "open_first_offset", F.when(F.col("open_epoch") <= F.col("epoch"), F.col("open_first_offset"))).withColumn(
        "open_epoch", F.when(F.col("open_first_offset").isNotNull(), F.col("open_epoch")))
    # open data after a gap is this transaction's only if surely written before its decision: the id's next
    # transaction's data, created once the producer heard of the decision, is stamped after the Prepare*
    # record's time (less the clock skew); a later transaction's, still open, says nothing of this one's marker
    after_gap = (F.col("open_first_offset") >= F.col("gap_to_offset")) & (
        F.col("open_first_ts") < F.col("prepare_ts") - skew)
    traced = (F.col("log_start_offset") == 0) | (F.col("stream_markers") > 0) | F.col("open_first_offset").isNotNull()
    cls = (
        F.when(F.col("markers_matched"), F.lit(None))
        .when(F.col("wm").isNotNull(), F.lit("wrong-marker"))
        .when(F.col("is_compacted"), F.lit(None))
        # the replica's log may stop before the markers: nothing surely appended after the Complete* record
        .when(F.col("max_timestamp") <= F.col("complete_append_ts") + skew, F.lit(None))
        .when(~traced, F.lit(None))  # retention removed the producer's history here
        # the replica as read starts after the transaction began, its earlier batches removed (retention,
        # DeleteRecords): the transaction's data and marker may have gone with them
        .when((F.col("log_start_offset") > 0) & (F.col("min_timestamp") >= F.col("start_ts") - skew), F.lit(None))
        # tiered storage without the remote store: markers written before the remote part's newest record
        # may be there (a marker is stamped at or after its transaction's start, less the clock skew)
        .when(F.coalesce(F.col("remote_not_given") & (F.col("start_ts") - skew <= F.col("remote_max_timestamp")),
                         F.lit(False)), F.lit(None))
        # offsets missing between the segments as read (left out, or gone or unfinished in a copy of a running
        # broker): the marker may be there, unless the transaction's open data lies after the gap (its marker
        # would follow it)
        .when(F.col("gap_from_offset").isNotNull() & ~F.coalesce(after_gap, F.lit(False)), F.lit(None))
        .otherwise(F.lit("missing-marker"))
    )
    return g.withColumn("classification", cls).where("classification IS NOT NULL")


def _findings(g):
    """The findings' columns of the classified rows."""
    from pyspark.sql import functions as F

    wrong_c = F.col("classification") == "wrong-marker"
    kind = F.when(wrong_c, F.lit("wrong-marker")).when(F.col("decision") == "ABORT", F.lit("missing-abort-marker")).otherwise(
        F.lit("missing-commit-marker"))
    return g.select(
        *REPLICA, "producer_id", F.col("epoch").alias("producer_epoch"), "transactional_id",
        F.when(wrong_c, F.coalesce(F.col("wm.first_offset"), F.col("wm.offset"))).otherwise(
            F.col("open_first_offset")).alias("first_offset"),
        F.when(wrong_c, F.col("wm.offset")).alias("last_offset"),
        F.col("prepare_ts").alias("first_timestamp"), F.col("complete_ts").alias("last_timestamp"),
        (F.col("complete_ts") - F.col("prepare_ts")).alias("duration_ms"),
        kind.alias("kind"),
        evidence(
            EVIDENCE,
            decision=F.col("decision"),
            coordinator_partition=F.col("coordinator_partition"),
            prepare_offset=F.col("prepare_offset"),
            complete_offset=F.col("complete_offset"),
            marker_offset=F.col("wm.offset"),
            marker_type=F.col("wm.type"),
            marker_timestamp=F.col("wm.ts"),
            marker_coordinator_epoch=F.col("wm.coordinator_epoch"),
            open_data_first_offset=F.col("open_first_offset"),
            open_data_epoch=F.col("open_epoch"),
            coordinator_epoch=F.col("prev_coordinator_epoch"),
            window_start_ms=F.col("start_ts"),
            window_end_ms=F.col("next_start_ts"),
        ).alias("evidence"),
    )


RULE = Rule(
    id="torn-transaction",
    title="Completed transaction whose partitions got a different marker type, or none",
    run=run,
    kinds=KINDS,
    evidence=EVIDENCE,
    proposals=("KIP-98", "KIP-890", "KAFKA-17754"),
    views=("coordinator_history", "open_transactions", "partitions", "transactions"),
    needs=("batches", "transaction_log"),
)
