"""**What.** When a partition leader (or a follower, or log recovery) appends an
ABORT marker that closes a transaction with data on the partition, it adds an
entry (producer id, first offset of the transaction's data, marker offset, LSO)
to the ``.txnindex`` of the active segment. The rule matches entries with
markers per replica on (producer id, marker offset) and reports:

* ``missing-entry`` — an ABORT marker that closed a transaction with data but
  has no entry;
* ``first-offset-mismatch-exposed`` — the entry's first offset is above the
  first data offset of the aborted transaction: the records in between are not
  skipped; ``first-offset-mismatch`` — it is below it: harmless for consumers,
  but the index is wrong;
* ``no-marker`` — an entry with no ABORT marker of that producer at its last
  offset; ``not-an-abort`` when a COMMIT marker sits there;
* ``entry-without-data`` — an entry for an abort that closed no data (the broker
  writes none for those);
* ``out-of-order`` — an entry whose last offset is not above the previous entry's
  in the same file (the broker never appends such an entry).

A replica is judged for ``missing-entry`` only if the dump holds transaction
indexes for it (``txn-index`` files in the inventory, or entries in
``aborted_txns``): an index file is only created when a segment gets its first
entry, and a dump may leave the indexes out. Entries whose first offset lies
below the log start offset are not compared with the (partly deleted) data. On
compacted topics the cleaner keeps an aborted transaction's entry (and its
marker) in the pass that removes the transaction's data, and the entry keeps
the original first offset when the first batches go: ``entry-without-data`` and
a ``first-offset-mismatch`` below the data are not reported there, and a missing
marker or an exposed range is ``no-marker-compacted`` /
``first-offset-mismatch-compacted``.

What the input cannot show is not judged: an entry whose marker offset lies in
offsets missing between the segments as read, or past the log end of a log dir
not cleanly stopped; nor a missing entry for a marker in the newest segment of
such a log dir (the broker appends the marker, then the entry: a copy or a scan
of a running broker may read the index first).

**Why it matters.** ``read_committed`` consumers get these entries with every
fetch and drop the aborted records by producer id and offset range: the index,
not the marker, decides what they skip. A missing or short entry delivers
aborted records to them as if committed; an entry on a COMMIT marker silently
drops committed records — on every read of that range, and differently from a
replica whose index is right.

**How it arises.** A crash between appending the marker and writing the index
(the broker rebuilds indexes only for segments it recovers: after a clean
shutdown flag that lied, the index stays incomplete), a ``.txnindex`` deleted or
copied from another replica, disk corruption, or a broker bug in building the
entry (the transaction's first offset comes from producer state, so wrong
producer state — see ``snapshot-log-mismatch`` — yields wrong entries).
"""

from __future__ import annotations

from auditor.engine.findings import evidence
from auditor.engine.rule import Evidence, Kind, Rule
from auditor.engine.views import REPLICA, join_replica
from auditor.rules._common import COMPACTED

EVIDENCE = (
    Evidence("entry_first_offset", "bigint", "the .txnindex entry's first offset"),
    Evidence("entry_last_offset", "bigint", "its last offset (the ABORT marker's offset)"),
    Evidence("entry_last_stable_offset", "bigint", "the LSO it records"),
    Evidence("segment_base_offset", "bigint", "base offset of the segment whose index holds it"),
    Evidence("entry_index", "int", "its position in that index"),
    Evidence("marker_type", "string", "type of the marker at the entry's last offset"),
    Evidence("data_first_offset", "bigint", "first offset of the aborted transaction's data in the log"),
    Evidence("data_batches", "bigint", "data batches of that transaction"),
    COMPACTED,
)

_ENTRY = ("txnindex entry of segment {segment_base_offset} for producer {producer_id} [{entry_first_offset}, "
          "{entry_last_offset}] on {topic}-{partition}")
_MISMATCH = _ENTRY + ": the aborted transaction's data starts at offset {data_first_offset}"
_ADVICE = ("stop the broker and delete the partition's .txnindex/.index/.timeindex files and the clean-shutdown file so "
           "it rebuilds them on recovery, or re-replicate the replica; reprocess or reconcile what read_committed "
           "consumers read from the affected range")
_COMPACTED_NOTE = " (compacted topic: the cleaner may have removed it)"
KINDS = {
    "missing-entry": Kind("error", "ABORT marker at {topic}-{partition} offset {last_offset} closed producer {producer_id}'s "
                          "transaction with data from offset {data_first_offset} but no .txnindex entry records it: "
                          "read_committed consumers see the aborted records", advice=_ADVICE),
    "no-marker": Kind("warning", _ENTRY + ": no ABORT marker of that producer at offset {entry_last_offset}",
                      advice=_ADVICE),
    "no-marker-compacted": Kind("info", _ENTRY + ": no ABORT marker of that producer at offset {entry_last_offset}"
                                + _COMPACTED_NOTE),
    "not-an-abort": Kind("error", _ENTRY + " points at a {marker_type} marker: read_committed consumers drop committed "
                         "records", advice=_ADVICE),
    "entry-without-data": Kind("warning", _ENTRY + ": the ABORT marker there closed no data (the broker writes no entry "
                               "for such aborts)", advice=_ADVICE),
    "first-offset-mismatch": Kind("warning", _MISMATCH, advice=_ADVICE),
    "first-offset-mismatch-exposed": Kind("error", _MISMATCH + "; read_committed consumers see its records from "
                                          "{data_first_offset} up to the entry's first offset", advice=_ADVICE),
    "first-offset-mismatch-compacted": Kind("info", _MISMATCH + "; read_committed consumers see its records from "
                                            "{data_first_offset} up to the entry's first offset" + _COMPACTED_NOTE),
    "out-of-order": Kind("error", "txnindex entry {entry_index} of segment {segment_base_offset} on {topic}-{partition} "
                         "has last offset {entry_last_offset}, not above the previous entry's: the index file is damaged",
                         advice=_ADVICE),
}


def _marker_not_read():
    """An entry's marker offset the replica as read does not hold: offsets missing between its
    segments (left out, or lost or cut short in a copy of a running broker), or past its log end in
    a log dir not cleanly stopped (the segment read before the broker appended the marker and
    indexed it). Whether the marker is there the input cannot show."""
    from pyspark.sql import functions as F

    in_gap = (F.col("offset") >= F.col("gap_from_offset")) & F.coalesce(F.col("offset") < F.col("gap_to_offset"), F.lit(True))
    past_end = ~F.coalesce(F.col("log_dir_stopped"), F.lit(True)) & (F.col("offset") >= F.col("log_end_offset"))
    return F.coalesce(in_gap, F.lit(False)) | F.coalesce(past_end, F.lit(False))


def _index_read_first():
    """A marker in the newest segment of a log dir not cleanly stopped: the broker appends the marker,
    then the entry to that segment's index, so an index read before the segment may lack it."""
    from pyspark.sql import functions as F

    return F.coalesce(~F.coalesce(F.col("log_dir_stopped"), F.lit(True))
                      & (F.col("offset") >= F.col("last_segment_base_offset")), F.lit(False))


def run(ctx):
    from pyspark.sql import functions as F

    a = ctx.table("aborted_txns").where("producer_id IS NOT NULL").select(
        *REPLICA, "producer_id", F.col("first_offset").alias("entry_first_offset"), F.col("last_offset").alias("offset"),
        F.col("last_stable_offset").alias("entry_lso"), "in_order", "segment_base_offset", "entry_index")
    judged = a.select(*REPLICA)
    files = ctx.tables_dir / "files"
    if files.exists():
        judged = judged.unionByName(ctx.table("files").where("kind = 'txn-index'").select(*REPLICA))
    judged = judged.distinct()  # segments whose partition is unknown too: their directory is their replica
    t = join_replica(ctx.transactions.where("marker_offset IS NOT NULL"), F.broadcast(judged)).select(
        *REPLICA, "producer_id", F.col("marker_offset").alias("offset"), "marker_type", "state", "data_batches",
        F.col("first_offset").alias("data_first_offset"), "last_data_offset", "marker_timestamp", "marker_epoch")
    j = join_replica(a, t, "full_outer", on=["producer_id", "offset"])
    j = join_replica(j, ctx.partitions.select(*REPLICA, "log_start_offset", "is_compacted", "log_end_offset",
                                              "gap_from_offset", "gap_to_offset", "last_segment_base_offset"), "left")
    moving = ctx.stopped_log_dirs
    if moving is None:
        j = j.withColumn("log_dir_stopped", F.lit(True))
    else:
        j = j.join(F.broadcast(moving), ["cluster_id", "log_dir"], "left")
    has_entry = F.col("entry_index").isNotNull()
    has_marker = F.col("marker_type").isNotNull()
    deleted = F.col("entry_first_offset") < F.coalesce(F.col("log_start_offset"), F.lit(0))
    kind = (
        F.when(~has_entry & (F.col("state") == "abort") & ~_index_read_first(), F.lit("missing-entry"))
        .when(has_entry & ~has_marker & ~_marker_not_read(), F.lit("no-marker"))
        .when(has_entry & (F.col("marker_type") != "ABORT"), F.lit("not-an-abort"))
        .when(has_entry & (F.col("state") == "marker-only") & ~deleted, F.lit("entry-without-data"))
        .when(has_entry & (F.col("state") == "abort") & ~deleted
              & (F.col("entry_first_offset") != F.col("data_first_offset")), F.lit("first-offset-mismatch"))
    )
    f = j.withColumn("kind", kind).where("kind IS NOT NULL")
    exposed = (F.col("kind") == "first-offset-mismatch") & (F.col("entry_first_offset") > F.col("data_first_offset"))
    compacted = F.coalesce(F.col("is_compacted"), F.lit(False))
    # what the cleaner does by design (LogCleaner / CleanedTransactionMetadata): it keeps an aborted
    # transaction's entry (and marker) in the pass that removes the transaction's data, and the
    # entry keeps the original first offset when the first data batches go — not findings at all
    f = f.where(~(compacted & ((F.col("kind") == "entry-without-data")
                               | ((F.col("kind") == "first-offset-mismatch") & ~exposed))))
    kind = (F.when(compacted & (F.col("kind") == "no-marker"), F.lit("no-marker-compacted"))
            .when(compacted & exposed, F.lit("first-offset-mismatch-compacted"))
            .when(exposed, F.lit("first-offset-mismatch-exposed")).otherwise(F.col("kind")))
    main = f.select(
        *REPLICA, "producer_id", F.col("marker_epoch").alias("producer_epoch"),
        F.coalesce(F.least("data_first_offset", "entry_first_offset"), F.col("offset")).alias("first_offset"),
        F.col("offset").alias("last_offset"), F.col("marker_timestamp").alias("last_timestamp"),
        kind.alias("kind"),
        evidence(EVIDENCE, entry_first_offset=F.col("entry_first_offset"), entry_last_offset=F.when(has_entry, F.col("offset")),
                 entry_last_stable_offset=F.col("entry_lso"), segment_base_offset=F.col("segment_base_offset"),
                 entry_index=F.col("entry_index"), marker_type=F.col("marker_type"),
                 data_first_offset=F.col("data_first_offset"), data_batches=F.col("data_batches"),
                 compacted=F.col("is_compacted")).alias("evidence"),
    )
    order = a.where("in_order = false").select(
        *REPLICA, "producer_id", F.col("entry_first_offset").alias("first_offset"), F.col("offset").alias("last_offset"),
        F.lit("out-of-order").alias("kind"),
        evidence(EVIDENCE, entry_index=F.col("entry_index"), segment_base_offset=F.col("segment_base_offset"),
                 entry_first_offset=F.col("entry_first_offset"), entry_last_offset=F.col("offset")).alias("evidence"),
    )
    return main.unionByName(order, allowMissingColumns=True)


RULE = Rule(
    id="txnindex-mismatch",
    title="Transaction index (.txnindex) entries that disagree with the ABORT markers",
    run=run,
    kinds=KINDS,
    evidence=EVIDENCE,
    proposals=("KIP-98", "KAFKA-5121"),
    views=("partitions", "stopped_log_dirs", "transactions"),
    needs=("batches",),
    tables=("aborted_txns", "files"),
)
