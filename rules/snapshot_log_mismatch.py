"""snapshot-log-mismatch: producer-state snapshots that disagree with the log they describe.

**What.** A ``<offset>.snapshot`` file is the broker's own record of every
producer it knew on the partition at that offset: epoch, the producer's last
data batch (last offset, offset delta, last sequence), the last coordinator
epoch and — for an open transaction — its first offset. On restart the broker
loads the newest snapshot and replays the log from it, so a snapshot that
disagrees with the log becomes wrong producer state. Findings
(``evidence['kind']``):

* ``open-txn-below-log-start`` — an entry with an open transaction
  (``current_txn_first_offset``) that starts below the partition's log start
  offset, and no marker of that producer at or after the snapshot closes it:
  retention or DeleteRecords removed the beginning of a transaction that is
  still open. The LSO stays pinned (at the log start) and, with all of the
  transaction's data gone, no ``hanging-transaction`` finding can show it: only
  the snapshot remembers it.
* ``last-batch-mismatch`` — the batch the entry names as the producer's last one
  (``last_offset``, still inside the log) is not in the log as described: no
  batch of that producer ends there, or its producer id, epoch, first offset
  (``last_offset - offset_delta``) or last sequence differ. An entry with a last
  batch always carries that batch's epoch (a marker that changes the epoch clears
  the batch metadata), so the comparison is exact.
* ``snapshot-ahead-of-log`` — a snapshot whose offset is above the replica's log
  end offset: the snapshot describes records the log no longer has (lost
  unflushed data after a crash, a truncation the snapshot survived, or segments
  missing from the dump). The broker deletes such snapshots on load.

On compacted topics the cleaner drops a producer's older batches, so a
``last-batch-mismatch`` because *no* batch ends at ``last_offset`` is not
reported there (a different batch at that offset still is).

**How it arises.** Retention deleting segments below an open transaction
(retention is bounded by the high watermark, not by the LSO), DeleteRecords,
unclean leader elections and truncation after the snapshot was taken, copies of
a log dir assembled from different moments, disk corruption (the snapshot's CRC
is checked, the correspondence with the log is not).

**Evidence.** snapshot file offset, entry index, the entry's fields, the
batch found at ``last_offset`` (producer id, epoch, base offset, last
sequence), the log start and end offsets.

**Severity.** error for ``open-txn-below-log-start`` and ``last-batch-mismatch``,
warning for ``snapshot-ahead-of-log``.

**Remediation.** ``open-txn-below-log-start``: abort the transaction with
``kafka-transactions.sh abort`` (the command is in the finding; the broker still
has the producer's state). ``last-batch-mismatch``: stop the broker and delete the
partition's ``.snapshot`` files (the broker rebuilds producer state from the log,
slower start) or let the replica re-replicate; look for truncation around the
offset. ``snapshot-ahead-of-log``: check the dump is complete; otherwise compare
the replicas (``replica-divergence``) for the records this replica lost.
"""

from __future__ import annotations

from auditor.engine.findings import conform, evidence
from auditor.engine.rule import Rule
from auditor.engine.views import REPLICA
from rules._common import abort_command

ENTRY = [*REPLICA, "snapshot_offset", "entry_index", "producer_id"]


def run(ctx):
    from pyspark.sql import functions as F

    parts = ctx.partitions.select(*REPLICA, "log_start_offset", "log_end_offset", "is_compacted")
    e = ctx.table("producer_snapshots").where("producer_id IS NOT NULL").join(parts, REPLICA)
    tp = F.concat(F.col("topic"), F.lit("-"), F.col("partition").cast("string"))
    snap = F.concat(F.lit("snapshot "), F.col("snapshot_offset").cast("string"), F.lit(" of "), tp,
                    F.lit(" on broker "), F.col("broker_id").cast("string"))
    out = []

    # open transaction whose first offset was deleted, not closed by any later marker
    o = e.where("current_txn_first_offset >= 0 AND current_txn_first_offset < log_start_offset")
    closers = ctx.transactions.where("marker_offset IS NOT NULL").select(*REPLICA, "producer_id", "marker_offset").join(
        F.broadcast(o.select(*ENTRY)), [*REPLICA, "producer_id"]).where("marker_offset >= snapshot_offset").select(*ENTRY)
    o = o.join(closers, ENTRY, "left_anti")
    out.append(o.select(
        *REPLICA, "producer_id", "producer_epoch", F.col("current_txn_first_offset").alias("first_offset"),
        F.col("snapshot_offset").alias("last_offset"), F.col("last_timestamp"), F.lit("error").alias("severity"),
        F.concat(snap, F.lit(": producer "), F.col("producer_id").cast("string"), F.lit(" (epoch "),
                 F.col("producer_epoch").cast("string"), F.lit(") has a transaction open since offset "),
                 F.col("current_txn_first_offset").cast("string"), F.lit(", below the log start offset "),
                 F.col("log_start_offset").cast("string"),
                 F.lit(", and no later marker closes it: its first records were deleted while it is still open")).alias("message"),
        evidence(kind=F.lit("open-txn-below-log-start"), snapshot_offset=F.col("snapshot_offset"),
                 entry_index=F.col("entry_index"), current_txn_first_offset=F.col("current_txn_first_offset"),
                 log_start_offset=F.col("log_start_offset"), coordinator_epoch=F.col("coordinator_epoch")).alias("evidence"),
        abort_command(F.col("topic"), F.col("partition"), F.col("current_txn_first_offset"), F.col("producer_id"),
                      F.col("producer_epoch"), F.col("coordinator_epoch")).alias("remediation"),
    ))

    # the entry's last batch, where the log still has that offset
    c = e.where("last_offset >= 0 AND last_offset >= log_start_offset AND last_offset < log_end_offset")
    at = ctx.producer_batches.where("is_data").select(
        *REPLICA, "last_offset", F.col("producer_id").alias("b_producer_id"), F.col("producer_epoch").alias("b_epoch"),
        F.col("base_offset").alias("b_base_offset"), F.col("last_sequence").alias("b_last_sequence"),
    ).join(F.broadcast(c.select(*ENTRY, "last_offset")), [*REPLICA, "last_offset"])
    ok = ((F.col("b_producer_id") == F.col("producer_id")) & (F.col("b_epoch") == F.col("producer_epoch"))
          & (F.col("b_base_offset") == F.col("last_offset") - F.col("offset_delta"))
          & (F.col("b_last_sequence") == F.col("last_sequence")))
    m = c.join(at, [*ENTRY, "last_offset"], "left").groupBy(*c.columns).agg(
        F.max(ok.cast("int")).alias("ok"),
        F.min(F.struct("b_producer_id", "b_epoch", "b_base_offset", "b_last_sequence")).alias("found"))
    m = m.where(F.coalesce(F.col("ok"), F.lit(0)) == 0).where(F.col("found.b_producer_id").isNotNull() | ~F.col("is_compacted"))
    found = F.when(F.col("found.b_producer_id").isNull(), F.lit("no data batch of a producer ends there")).otherwise(F.concat(
        F.lit("the log has producer "), F.col("found.b_producer_id").cast("string"), F.lit(" epoch "),
        F.col("found.b_epoch").cast("string"), F.lit(", offsets "), F.col("found.b_base_offset").cast("string"), F.lit(".."),
        F.col("last_offset").cast("string"), F.lit(", last sequence "), F.col("found.b_last_sequence").cast("string")))
    out.append(m.select(
        *REPLICA, "producer_id", "producer_epoch", (F.col("last_offset") - F.col("offset_delta")).alias("first_offset"),
        "last_offset", "last_timestamp", F.lit("error").alias("severity"),
        F.concat(snap, F.lit(": entry for producer "), F.col("producer_id").cast("string"), F.lit(" says its last batch is "),
                 F.lit("epoch "), F.col("producer_epoch").cast("string"), F.lit(", offsets "),
                 (F.col("last_offset") - F.col("offset_delta")).cast("string"), F.lit(".."), F.col("last_offset").cast("string"),
                 F.lit(", last sequence "), F.col("last_sequence").cast("string"), F.lit("; "), found).alias("message"),
        evidence(kind=F.lit("last-batch-mismatch"), snapshot_offset=F.col("snapshot_offset"), entry_index=F.col("entry_index"),
                 snapshot_epoch=F.col("producer_epoch"), snapshot_last_sequence=F.col("last_sequence"),
                 snapshot_first_offset=F.col("last_offset") - F.col("offset_delta"),
                 log_producer_id=F.col("found.b_producer_id"), log_epoch=F.col("found.b_epoch"),
                 log_base_offset=F.col("found.b_base_offset"), log_last_sequence=F.col("found.b_last_sequence"),
                 compacted=F.col("is_compacted")).alias("evidence"),
        F.lit("stop the broker and delete this partition's .snapshot files (producer state is rebuilt from the log) or let "
              "the replica re-replicate; look for truncation around the offset").alias("remediation"),
    ))

    # snapshot files above the log end (also empty snapshots, known only from the file inventory)
    offs = ctx.table("producer_snapshots").select(*REPLICA, "snapshot_offset")
    files = ctx.tables_dir / "files"
    if files.exists():
        offs = offs.unionByName(ctx.table("files").where(
            "kind = 'producer-snapshot' AND coalesce(file_status, 'live') = 'live' AND base_offset IS NOT NULL").select(
            *REPLICA, F.col("base_offset").alias("snapshot_offset")))
    a = offs.distinct().join(parts, REPLICA).where("snapshot_offset > log_end_offset")
    out.append(a.select(
        *REPLICA, F.col("log_end_offset").alias("first_offset"), F.col("snapshot_offset").alias("last_offset"),
        F.lit("warning").alias("severity"),
        F.concat(snap, F.lit(" is above the replica's log end offset "), F.col("log_end_offset").cast("string"),
                 F.lit(": it describes "), (F.col("snapshot_offset") - F.col("log_end_offset")).cast("string"),
                 F.lit(" offset(s) the log no longer has")).alias("message"),
        evidence(kind=F.lit("snapshot-ahead-of-log"), snapshot_offset=F.col("snapshot_offset"),
                 log_end_offset=F.col("log_end_offset"), log_start_offset=F.col("log_start_offset")).alias("evidence"),
        F.lit("check that the dump holds every segment of the partition; otherwise compare its replicas "
              "(replica-divergence) for the records this one lost").alias("remediation"),
    ))
    res = None
    for df in out:
        df = conform(df, RULE.id)
        res = df if res is None else res.unionByName(df)
    return res


RULE = Rule(
    id="snapshot-log-mismatch",
    title="Producer-state snapshot that disagrees with the log (open txn below log start, wrong last batch)",
    severity="error",
    run=run,
    proposals=("KIP-98", "KIP-360"),
    evidence=("kind", "snapshot_offset", "entry_index", "current_txn_first_offset", "log_start_offset",
        "coordinator_epoch", "snapshot_epoch", "snapshot_last_sequence", "snapshot_first_offset",
        "log_producer_id", "log_epoch", "log_base_offset", "log_last_sequence", "compacted",
        "log_end_offset"),
    remediation=("open txn below log start: kafka-transactions.sh abort; wrong last batch: delete the snapshots and let the "
                 "broker rebuild state; snapshot ahead of the log: check the dump, compare replicas"),
    needs=("batches", "producer_snapshots"),
)
