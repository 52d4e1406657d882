"""**What.** When a producer ends a transaction the coordinator writes
``PrepareCommit`` (or ``PrepareAbort``) listing every partition of the
transaction, writes a COMMIT (ABORT) marker to each of them, and only when all
markers are acknowledged writes ``CompleteCommit`` (``CompleteAbort``). A
completed transaction is therefore atomic only if *every* listed partition
holds a marker of the decided type from that producer. This rule pairs each
``Complete*`` record with the ``Prepare*`` record just before it (Kafka writes
``Complete*`` with an empty partition list: the partitions and the epoch the
markers carry are the ``Prepare*`` record's) and looks, on every replica in the
dump of every listed partition, for the producer's markers with that epoch
written in the transaction's time window (below):

* ``wrong-marker`` — the partition got the *other* marker type: part of the
  transaction was committed and part aborted;
* ``missing-commit-marker``, ``missing-abort-marker`` — no marker of that
  producer and epoch at all, although the replica's log reaches past the
  ``Complete*`` record.

Markers are matched by producer id, marker epoch (= the ``Prepare*`` record's
epoch, transaction.version 0/1 and 2 alike) and a time window the protocol
itself separates: a transaction's markers are written after its ``Prepare*``
record, hence after its start (``start_timestamp_ms``), and before the
transactional id's next transaction can start (the coordinator answers
CONCURRENT_TRANSACTIONS until the markers are done), while the previous
transaction's markers precede this start and the next one's follow the next
``Prepare*``. So the window is [this transaction's start, the next
transaction's start): windows of one id never overlap, and clock skew between
the coordinator and the partition leader is tolerated up to the transaction's
duration on one side and the pause before the next transaction on the other.
With transaction.version 2 every transaction has its own epoch as well. The
first COMMIT and the first ABORT marker at or after each window start are found
with one running window over the producer's markers (no pairwise join).

Only partitions that are in the dump are judged; a missing marker is not
judged on compacted topics (the cleaner removes markers), on a replica whose
newest timestamp is older than the ``Complete*`` record (it may just be
behind), nor where retention has removed the producer's history (log start
above 0 and no marker of that epoch nor open data on the replica), nor, on a
tiered partition whose remote segments were not given, for a transaction that
started before the newest record of the remote part (its markers may be there),
nor on a replica with offsets missing between its segments as read (segments left
out, or a copy of a running broker that lost or cut one) unless the transaction's
open data follows the gap (written before the id's next transaction started, as
its markers are: a later transaction's open data says nothing of this one's
marker).

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
from auditor.model.coordinator import HISTORY_KEY, transaction_start

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
    Evidence("window_start_ms", "bigint", "start of the transaction: markers before it belong to earlier ones"),
    Evidence("window_end_ms", "bigint", "start of the id's next transaction: markers after it belong to later ones"),
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
        advice="compare the partition's replicas first; a COMMIT marker cannot be written by hand: abort the open data "
               "(kafka-transactions.sh abort) and produce the records again"),
}


def run(ctx):
    """The decided transactions' listed replicas whose marker is missing or of the other type."""
    pairs = _decided(ctx)
    g = _classified(ctx, _next_markers(ctx, pairs))
    return _findings(g)


def _decided(ctx):
    """Each completed decision (a Prepare* then its Complete*), one row per partition it lists."""
    from pyspark.sql import functions as F

    # a Complete* record after its Prepare*; the id's next transaction starts the window after it
    f = ctx.coordinator_history.withColumn("next_start_ts", F.col("next_transaction_start_ms"))
    pairs = f.where(
        ((F.col("state") == "CompleteCommit") & (F.col("prev_state_label") == "PrepareCommit"))
        | ((F.col("state") == "CompleteAbort") & (F.col("prev_state_label") == "PrepareAbort"))
    ).select(
        *HISTORY_KEY,
        F.col("prev_producer_id").alias("producer_id"),
        F.col("prev_producer_epoch").cast("int").alias("epoch"),
        F.when(F.col("state") == "CompleteCommit", F.lit("COMMIT")).otherwise(F.lit("ABORT")).alias("decision"),
        F.col("prev_offset").alias("prepare_offset"), F.col("offset").alias("complete_offset"),
        F.col("prev_last_update_timestamp_ms").alias("prepare_ts"), F.col("last_update_timestamp_ms").alias("complete_ts"),
        transaction_start("prev_").alias("start_ts"), "next_start_ts",
        F.col("topic").alias("coordinator_topic"), F.col("partition").alias("coordinator_partition"),
        F.explode("prev_topic_partitions").alias("tp"),
    ).select("*", F.col("tp.topic").alias("topic"), F.col("tp.partition").alias("partition")).drop("tp")
    return pairs


def _next_markers(ctx, pairs):
    """Per decision and replica of a listed partition: the first COMMIT and the first ABORT marker
    of the producer and epoch at or after the transaction's start, and whether the decision's
    marker lies before the id's next transaction (``right_in``) or the other one does (``wm``)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    # every replica of the listed partitions that the dump holds: one probe each
    reps = ctx.partitions.select(*REPLICA, "log_start_offset", "max_timestamp", "min_timestamp", "is_compacted",
                                 "remote_not_given", "remote_max_timestamp", "gap_from_offset", "gap_to_offset")
    probes = pairs.join(reps, ["cluster_id", "topic", "partition"]).withColumn("ts", F.col("start_ts")).withColumn(
        "is_event", F.lit(1))

    # the markers of those producers on those partitions, one row per marker
    wanted = pairs.select("cluster_id", "topic", "partition", "producer_id").distinct()
    markers = ctx.transactions.where("marker_offset IS NOT NULL").join(
        wanted, ["cluster_id", "topic", "partition", "producer_id"], "left_semi").select(
        *REPLICA, "producer_id", F.col("marker_epoch").cast("int").alias("epoch"),
        F.col("marker_timestamp").alias("ts"), "marker_type", "marker_offset", "coordinator_epoch",
        F.col("first_offset").alias("txn_first_offset"), F.lit(0).alias("is_event"))

    # for each probe, the first COMMIT and the first ABORT marker of (producer, epoch) at or after the window
    # start: walk newest first, so "the next one" is a running last() (linear, no quadratic frame)
    u = probes.unionByName(markers, allowMissingColumns=True)
    w = Window.partitionBy(*REPLICA, "producer_id", "epoch").orderBy(F.col("ts").desc(), F.col("is_event").asc())
    upto = w.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    info = lambda t: F.when((F.col("is_event") == 0) & (F.col("marker_type") == t), F.struct(  # noqa: E731
        F.col("ts").alias("ts"), F.col("marker_offset").alias("offset"), F.col("marker_type").alias("type"),
        F.col("coordinator_epoch").alias("coordinator_epoch"), F.col("txn_first_offset").alias("first_offset")))
    u = (u.withColumn("next_commit", F.last(info("COMMIT"), ignorenulls=True).over(upto))
         .withColumn("next_abort", F.last(info("ABORT"), ignorenulls=True).over(upto))
         .withColumn("session_markers", F.sum(1 - F.col("is_event")).over(
             w.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing))))
    g = u.where("is_event = 1")
    inside = lambda m: m.isNotNull() & (F.col("next_start_ts").isNull() | (m["ts"] < F.col("next_start_ts")))  # noqa: E731
    is_commit = F.col("decision") == "COMMIT"
    right = F.when(is_commit, F.col("next_commit")).otherwise(F.col("next_abort"))
    wrong = F.when(is_commit, F.col("next_abort")).otherwise(F.col("next_commit"))
    g = g.withColumn("right_in", inside(right)).withColumn("wm", F.when(inside(wrong), wrong))
    return g


def _classified(ctx, g):
    """``classification``: wrong-marker, missing-marker, or nothing to report (rows dropped)
    where the replica as read cannot show the marker."""
    from pyspark.sql import functions as F

    opened = ctx.open_transactions.select(*REPLICA, "producer_id", F.col("first_offset").alias("open_first_offset"),
                                          F.col("data_epoch_min").alias("open_epoch"),
                                          F.col("first_timestamp").alias("open_first_ts"), "prev_coordinator_epoch")
    g = join_replica(g, opened, "left", on=["producer_id"]).withColumn(
        "open_first_offset", F.when(F.col("open_epoch") <= F.col("epoch"), F.col("open_first_offset"))).withColumn(
        "open_epoch", F.when(F.col("open_first_offset").isNotNull(), F.col("open_epoch")))
    # open data after a gap is this transaction's only if written before the id's next transaction started
    # (the markers' window); a later transaction's, still open, says nothing of this one's marker
    after_gap = (F.col("open_first_offset") >= F.col("gap_to_offset")) & (
        F.col("next_start_ts").isNull() | (F.col("open_first_ts") < F.col("next_start_ts")))
    traced = (F.col("log_start_offset") == 0) | (F.col("session_markers") > 0) | F.col("open_first_offset").isNotNull()
    cls = (
        F.when(F.col("right_in"), F.lit(None))
        .when(F.col("wm").isNotNull(), F.lit("wrong-marker"))
        .when(F.col("is_compacted"), F.lit(None))
        .when(F.col("max_timestamp") < F.col("complete_ts"), F.lit(None))  # the replica's log stops before the decision
        .when(~traced, F.lit(None))  # retention removed the producer's history here
        # the replica as read starts after the transaction began, its earlier batches removed (retention,
        # DeleteRecords): the transaction's data and marker may have gone with them
        .when((F.col("log_start_offset") > 0) & (F.col("min_timestamp") > F.col("start_ts")), F.lit(None))
        # tiered storage without the remote store: markers written before the remote part's newest record
        # may be there (a marker's timestamp is at or after its transaction's start)
        .when(F.coalesce(F.col("remote_not_given") & (F.col("start_ts") <= F.col("remote_max_timestamp")), F.lit(False)),
              F.lit(None))
        # offsets missing between the segments as read (left out, or gone or unfinished in a copy of a running
        # broker): the marker may be there, unless the transaction's open data lies after the gap (its marker
        # would follow it)
        .when(F.col("gap_from_offset").isNotNull() & ~F.coalesce(after_gap, F.lit(False)), F.lit(None))
        .otherwise(F.lit("missing-marker"))
    )
    g = g.withColumn("classification", cls).where("classification IS NOT NULL")
    return g


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
