"""**What.** A ``<offset>.snapshot`` file is the broker's own record of every
producer it knew on the partition at that offset: epoch, the producer's last
data batch (last offset, offset delta, last sequence), the last coordinator
epoch and — for an open transaction — its first offset. The rule compares the
snapshots with the log they describe and reports:

* ``open-txn-below-log-start`` — an entry with an open transaction
  (``current_txn_first_offset``) that starts below the partition's log start
  offset, and no marker of that producer at or after the snapshot closes it:
  retention or DeleteRecords removed the beginning of a transaction that is
  still open;
* ``last-batch-mismatch`` — the batch the entry names as the producer's last one
  (``last_offset``, still inside the log) is not in the log as described: no
  batch of that producer ends there, or its producer id, epoch, first offset
  (``last_offset - offset_delta``) or last sequence differ. An entry with a last
  batch always carries that batch's epoch (a marker that changes the epoch clears
  the batch metadata), so the comparison is exact;
* ``snapshot-ahead-of-log`` — a snapshot whose offset is above the replica's log
  end offset: the snapshot describes records the log no longer has (lost
  unflushed data after a crash, a truncation the snapshot survived, or segments
  missing from the dump), or a log dir read while its broker ran (the snapshot of a
  segment rolled after the partition was read). The broker deletes such snapshots on load.

Neither the first two is judged on what the input lacks: an entry's last batch in
offsets missing between the segments as read (segments left out, or lost or cut
short in a copy of a running broker), nor an open transaction below the log
start when such offsets follow the snapshot (its marker may be there). On
compacted topics the cleaner drops a producer's older batches, so a
``last-batch-mismatch`` because *no* batch ends at ``last_offset`` is not
reported there (a different batch at that offset still is); nor in a cluster
whose log dirs were not all cleanly stopped (:mod:`auditor.model.moving`): a
segment sized before the broker appended to it and rolled, read beside the
snapshot of that roll, lacks the batches the snapshot names.

**Why it matters.** On restart the broker loads the newest snapshot and replays
the log from it, so a snapshot that disagrees with the log becomes wrong
producer state: valid appends rejected as out of sequence, retries accepted as
new records. An open transaction below the log start pins the LSO at the log
start (``read_committed`` consumers stall there), and with all its data deleted
no ``hanging-transaction`` finding can show it: only the snapshot remembers it.

**How it arises.** Retention deleting segments below an open transaction
(retention is bounded by the high watermark, not by the LSO), DeleteRecords,
unclean leader elections and truncation after the snapshot was taken, copies of
a log dir assembled from different moments, disk corruption (the snapshot's CRC
is checked, the correspondence with the log is not).
"""

from __future__ import annotations

from auditor.engine.findings import evidence
from auditor.engine.rule import Evidence, Kind, Rule
from auditor.engine.views import REPLICA, join_replica
from auditor.rules._common import CHECK_THEN_ABORT, COMPACTED, COORDINATOR_EPOCH

# a producer snapshot entry: its replica, then these
ENTRY_KEY = ["snapshot_offset", "entry_index", "producer_id"]
ENTRY = [*REPLICA, *ENTRY_KEY]

EVIDENCE = (
    Evidence("snapshot_offset", "bigint", "the snapshot's offset (its file name)"),
    Evidence("entry_index", "int", "the producer's entry in it"),
    Evidence("current_txn_first_offset", "bigint", "first offset of the transaction the entry has open"),
    Evidence("log_start_offset", "bigint", "the replica's log start offset"),
    Evidence("log_end_offset", "bigint", "the replica's log end offset"),
    COORDINATOR_EPOCH,
    Evidence("snapshot_last_sequence", "int", "last sequence the entry records"),
    Evidence("snapshot_first_offset", "bigint", "first offset of the last batch the entry records"),
    Evidence("log_producer_id", "bigint", "producer of the data batch the log has ending at that offset"),
    Evidence("log_epoch", "int", "its epoch"),
    Evidence("log_base_offset", "bigint", "its base offset"),
    Evidence("log_last_sequence", "int", "its last sequence"),
    COMPACTED,
)

_SNAP = "producer snapshot {snapshot_offset} of {topic}-{partition}"
KINDS = {
    "open-txn-below-log-start": Kind(
        "error", _SNAP + ": producer {producer_id} (epoch {producer_epoch}) has a transaction open since offset "
        "{current_txn_first_offset}, below the log start offset {log_start_offset}, and no later marker closes it: its "
        "first records were deleted while it is still open", CHECK_THEN_ABORT,
        "ask the coordinator first (describe, find-hanging): the snapshot says the transaction is open, not what the "
        "coordinator decided, and where it decided COMMIT an abort tears the transaction; the --start-offset is the "
        "transaction's first offset as the broker's producer state holds it, below the log start offset"),
    "last-batch-mismatch": Kind(
        "error", _SNAP + ": entry for producer {producer_id} says its last batch is epoch {producer_epoch}, offsets "
        "{snapshot_first_offset}..{last_offset}, last sequence {snapshot_last_sequence}; "
        "[[the log has producer {log_producer_id} epoch {log_epoch}, offsets {log_base_offset}..{last_offset}, last "
        "sequence {log_last_sequence}]][[!{log_producer_id:if}no data batch of a producer ends there]]",
        advice="stop the broker and delete this partition's .snapshot files (producer state is rebuilt from the log) or "
               "let the replica re-replicate; look for truncation around the offset"),
    "snapshot-ahead-of-log": Kind(
        "warning", _SNAP + " is above the replica's log end offset {log_end_offset}: it describes offsets the log no "
        "longer has", advice="check that the dump holds every segment of the partition, and that the broker was stopped "
                             "when its log dir was read (a running broker writes a snapshot when it rolls a segment, "
                             "possibly after the partition was read: scan again once it is stopped); otherwise "
                             "compare its replicas (replica-divergence) for the records this one lost"),
}


def run(ctx):
    from pyspark.sql import functions as F

    parts = ctx.partitions.select(*REPLICA, "log_start_offset", "log_end_offset", "is_compacted", "gap_from_offset",
                                  "gap_to_offset")
    e = join_replica(ctx.table("producer_snapshots").where("producer_id IS NOT NULL"), parts)
    out = []

    # open transaction whose first offset was deleted, not closed by any later marker (judged where the log as
    # read holds every offset after the snapshot: a marker may be in offsets missing between its segments)
    o = e.where("current_txn_first_offset >= 0 AND current_txn_first_offset < log_start_offset").where(
        F.col("gap_from_offset").isNull() | F.coalesce(F.col("gap_to_offset") <= F.col("snapshot_offset"), F.lit(False)))
    closers = join_replica(
        ctx.transactions.where("marker_offset IS NOT NULL").select(*REPLICA, "producer_id", "marker_offset"),
        F.broadcast(o.select(*ENTRY)), on=["producer_id"]).where("marker_offset >= snapshot_offset").select(*ENTRY)
    o = join_replica(o, closers, "left_anti", on=ENTRY_KEY)
    out.append(o.select(
        *REPLICA, "producer_id", "producer_epoch", F.col("current_txn_first_offset").alias("first_offset"),
        F.col("snapshot_offset").alias("last_offset"), F.col("last_timestamp"), F.lit("open-txn-below-log-start").alias("kind"),
        evidence(EVIDENCE, snapshot_offset=F.col("snapshot_offset"), entry_index=F.col("entry_index"),
                 current_txn_first_offset=F.col("current_txn_first_offset"), log_start_offset=F.col("log_start_offset"),
                 log_end_offset=F.col("log_end_offset"), coordinator_epoch=F.col("coordinator_epoch"),
                 compacted=F.col("is_compacted")).alias("evidence"),
    ))

    # the entry's last batch, where the log as read holds that offset (not in offsets missing between its segments)
    c = e.where("last_offset >= 0 AND last_offset >= log_start_offset AND last_offset < log_end_offset").where(
        ~F.coalesce((F.col("last_offset") >= F.col("gap_from_offset"))
                    & F.coalesce(F.col("last_offset") < F.col("gap_to_offset"), F.lit(True)), F.lit(False)))
    at = join_replica(ctx.producer_batches.where("is_data").select(
        *REPLICA, "last_offset", F.col("producer_id").alias("b_producer_id"), F.col("producer_epoch").alias("b_epoch"),
        F.col("base_offset").alias("b_base_offset"), F.col("last_sequence").alias("b_last_sequence"),
    ), F.broadcast(c.select(*ENTRY, "last_offset")), on=["last_offset"])
    ok = ((F.col("b_producer_id") == F.col("producer_id")) & (F.col("b_epoch") == F.col("producer_epoch"))
          & (F.col("b_base_offset") == F.col("last_offset") - F.col("offset_delta"))
          & (F.col("b_last_sequence") == F.col("last_sequence")))
    m = join_replica(c, at, "left", on=[*ENTRY_KEY, "last_offset"]).groupBy(*c.columns).agg(
        F.max(ok.cast("int")).alias("ok"),
        F.min(F.struct("b_producer_id", "b_epoch", "b_base_offset", "b_last_sequence")).alias("found"))
    m = m.where(F.coalesce(F.col("ok"), F.lit(0)) == 0)
    # "no batch ends there" is judged only where nothing else explains it: not compacted, not read while moving
    judged = ~F.col("is_compacted")
    if ctx.stopped_clusters is not None:
        m = m.join(F.broadcast(ctx.stopped_clusters), "cluster_id", "left")
        judged = judged & F.coalesce(F.col("log_dirs_stopped"), F.lit(True))
    m = m.where(F.col("found.b_producer_id").isNotNull() | judged)
    out.append(m.select(
        *REPLICA, "producer_id", "producer_epoch", (F.col("last_offset") - F.col("offset_delta")).alias("first_offset"),
        "last_offset", "last_timestamp", F.lit("last-batch-mismatch").alias("kind"),
        evidence(EVIDENCE, snapshot_offset=F.col("snapshot_offset"), entry_index=F.col("entry_index"),
                 log_start_offset=F.col("log_start_offset"), log_end_offset=F.col("log_end_offset"),
                 snapshot_last_sequence=F.col("last_sequence"),
                 snapshot_first_offset=F.col("last_offset") - F.col("offset_delta"),
                 log_producer_id=F.col("found.b_producer_id"), log_epoch=F.col("found.b_epoch"),
                 log_base_offset=F.col("found.b_base_offset"), log_last_sequence=F.col("found.b_last_sequence"),
                 compacted=F.col("is_compacted")).alias("evidence"),
    ))

    # snapshot files above the log end (also empty snapshots, known only from the file inventory)
    offs = ctx.table("producer_snapshots").select(*REPLICA, "snapshot_offset")
    files = ctx.tables_dir / "files"
    if files.exists():
        offs = offs.unionByName(ctx.table("files").where(
            "kind = 'producer-snapshot' AND coalesce(file_status, 'live') = 'live' AND base_offset IS NOT NULL").select(
            *REPLICA, F.col("base_offset").alias("snapshot_offset")))
    a = join_replica(offs.distinct(), parts).where("snapshot_offset > log_end_offset")

    out.append(a.select(
        *REPLICA, F.col("log_end_offset").alias("first_offset"), F.col("snapshot_offset").alias("last_offset"),
        F.lit("snapshot-ahead-of-log").alias("kind"),
        evidence(EVIDENCE, snapshot_offset=F.col("snapshot_offset"), log_end_offset=F.col("log_end_offset"),
                 log_start_offset=F.col("log_start_offset"), compacted=F.col("is_compacted")).alias("evidence"),
    ))
    res = out[0]
    for df in out[1:]:
        res = res.unionByName(df, allowMissingColumns=True)
    return res


RULE = Rule(
    id="snapshot-log-mismatch",
    title="Producer-state snapshot that disagrees with the log (open txn below log start, wrong last batch)",
    run=run,
    kinds=KINDS,
    evidence=EVIDENCE,
    proposals=("KIP-98", "KIP-360"),
    views=("partitions", "producer_batches", "transactions", "stopped_clusters"),
    needs=("batches", "producer_snapshots"),
    tables=("files", "producer_snapshots"),
)
