"""**What.** For an idempotent or transactional producer the broker accepts a
batch only if its base sequence follows the last one it holds for the same
(producer id, epoch) — ``last + 1`` with wraparound from 2147483647 to 0 — and a
new epoch starts at 0 (ProducerAppendInfo). On disk, consecutive data batches of
one (partition, producer id, epoch) should therefore chain exactly. The rule
reports:

* ``gap`` — sequences missing between two batches;
* ``undetermined`` — such a gap where the input cannot show whether the topic is
  compacted (see below);
* ``duplicate`` — the same sequence range stored at two offsets within the
  broker's 5-batch deduplication window;
* ``regression`` — a batch whose sequence goes backwards;
* ``new-epoch-nonzero`` — the first batch of a new epoch does not start at 0;
* ``epoch-regression`` — a batch with an older epoch after a newer one (a zombie).

Batches of ``__consumer_offsets`` are skipped: transactional offset commits
carry the producer's id and epoch but are appended by the group coordinator,
whose appends are never sequence-checked. On compacted topics the cleaner
removes whole batches (``LogCleaner``: all but a producer's last one), so a
``gap`` there is what compaction leaves and is not reported; the other kinds
still are. Where the input cannot show whether the topic is compacted (a
partition directory given without its log dir's ``cleaner-offset-checkpoint``
and without the metadata log: ``auditor/model/coverage.py``), a gap is
``undetermined`` (warning) instead of loss. Nor is a ``gap`` or ``new-epoch-nonzero`` reported across
segments the user left out between the ones given (``auditor/model/coverage.py``),
nor across offsets no segment as read holds on a topic the cleaner does not
touch (a copy of a running broker that lost a segment deleted mid-copy, or took
one before the broker finished it: ``auditor/model/replica.py``): the missing
batches may be there.

**Why it matters.** Idempotence is what these sequences guarantee: a ``gap``
means records of the producer are missing from the log, a ``duplicate`` means
consumers process the same records twice (exactly-once is broken), and a
regression or an older epoch means the log holds writes the broker should have
rejected — a fenced zombie's, or those of a replica that diverged — which
consumers read as if they were valid.

**How it arises.** The broker rejects these on produce (OUT_OF_ORDER_SEQUENCE_NUMBER,
INVALID_PRODUCER_EPOCH), but replication and log recovery skip the checks, so
they reach disk through log truncation after an unclean leader election,
divergent replicas, or a broker bug (KAFKA-5793, KIP-185 follow-up, KIP-360).
"""

from __future__ import annotations

from auditor.engine.findings import evidence
from auditor.engine.rule import Evidence, Kind, Rule
from auditor.engine.views import INT32_MAX as INT_MAX, REPLICA, join_replica
from auditor.rules._common import COMPACTED

EVIDENCE = (
    Evidence("batch_offset", "bigint", "offset of the batch out of order"),
    Evidence("base_sequence", "int", "its first sequence"),
    Evidence("last_sequence", "int", "its last sequence"),
    Evidence("expected_sequence", "int", "the sequence the broker expected (after the previous batch)"),
    Evidence("previous_last_sequence", "int", "last sequence of the producer's previous batch"),
    Evidence("previous_epoch", "int", "producer epoch of that batch"),
    Evidence("other_offset", "bigint", "offset of the previous batch, or of the earlier copy of a duplicate"),
    COMPACTED,
)

_WHERE = ("in producer {producer_id} epoch {producer_epoch} on {topic}-{partition} at offset {batch_offset}: sequences "
          "{base_sequence}..{last_sequence}")
_ADVICE = ("compare the partition's replicas and look for unclean leader elections or truncation around these offsets")
KINDS = {
    "duplicate": Kind("critical", "duplicate " + _WHERE + " also stored at offset {other_offset}",
                      advice=_ADVICE + "; consumers see the records twice: deduplicate downstream"),
    "gap": Kind("error", "gap " + _WHERE + ", expected {expected_sequence} after offset {other_offset}", advice=_ADVICE),
    "undetermined": Kind("warning", "gap " + _WHERE + ", expected {expected_sequence} after offset {other_offset}: "
                         "records lost, or removed by the log cleaner if the topic is compacted, which the input "
                         "cannot show (no cleaner-offset-checkpoint of its log dir, no metadata log)",
                         advice="scan the whole log dir (its cleaner-offset-checkpoint lists the partitions the cleaner "
                                "has compacted), or check the topic online: kafka-configs.sh --bootstrap-server "
                                "<broker:port> --describe --topic <topic> (cleanup.policy); if it is not compacted, "
                                "the records are lost: " + _ADVICE),
    "regression": Kind("error", "regression " + _WHERE + ", expected {expected_sequence} after offset {other_offset}",
                       advice=_ADVICE),
    "new-epoch-nonzero": Kind("error", "new epoch starting at a non-zero sequence " + _WHERE + " (previous epoch "
                              "{previous_epoch}; a new epoch must start at 0)", advice=_ADVICE),
    "epoch-regression": Kind("error", "epoch regression " + _WHERE + " after epoch {previous_epoch} at offset {other_offset}",
                             advice=_ADVICE),
}

def run(ctx):
    from pyspark.sql import functions as F

    # transactional offset commits in __consumer_offsets carry the producer's id and epoch but are
    # appended by the group coordinator (origin COORDINATOR): the broker never checks their sequences.
    # A segment given without its partition directory (no topic) is not judged either: whether its
    # topic is compacted (the cleaner removes whole batches, leaving sequence gaps) is not known
    pb = ctx.sequence_breaks.where("base_sequence >= 0 AND topic IS NOT NULL AND topic != '__consumer_offsets'")
    prev_last = F.col("prev_data_last_sequence")
    expected = F.when(prev_last == INT_MAX, F.lit(0)).otherwise(prev_last + 1)
    same_epoch = F.col("producer_epoch") == F.col("prev_data_epoch")
    kind = (
        F.when(F.col("prev_data_epoch").isNull(), F.lit(None))
        .when(F.col("producer_epoch") < F.col("prev_data_epoch"), F.lit("epoch-regression"))
        .when(~same_epoch & (F.col("base_sequence") != 0), F.lit("new-epoch-nonzero"))
        .when(~same_epoch, F.lit(None))
        .when(F.col("base_sequence") == expected, F.lit(None))
        .when((F.col("base_sequence") == F.col("prev_data_base_sequence")) & (F.col("last_sequence") == prev_last), F.lit("duplicate"))
        .when(F.col("base_sequence") > expected, F.lit("gap"))
        .otherwise(F.lit("regression"))
    )
    # what the broker expects: the next sequence in the same epoch, 0 in a new one; nothing from an older epoch
    broker_expects = (F.when(F.col("producer_epoch") < F.col("prev_data_epoch"), F.lit(None))
                      .when(~same_epoch, F.lit(0)).otherwise(expected))
    chained = pb.withColumn("kind", kind).where("kind IS NOT NULL").withColumn("expected", broker_expects).withColumn(
        "other_offset", F.col("prev_data_offset"))

    # duplicates of an earlier batch within the broker's 5-batch window (the adjacent one is above)
    dup = pb.where("duplicate_of_offset IS NOT NULL").select(
        *REPLICA, "producer_id", "producer_epoch", "base_sequence", "last_sequence", "max_timestamp", "base_offset",
        F.col("duplicate_of_offset").alias("other_offset"), F.lit("duplicate").alias("kind"),
        F.lit(None).cast("int").alias("expected"), F.lit(None).cast("int").alias("prev_data_last_sequence"),
        F.lit(None).cast("int").alias("prev_data_epoch"),
    )
    cols = [*REPLICA, "producer_id", "producer_epoch", "base_sequence", "last_sequence", "max_timestamp", "base_offset",
            "other_offset", "kind", "expected", "prev_data_last_sequence", "prev_data_epoch"]
    # a duplicate is also seen by the chained check (as a regression): keep the duplicate
    f = chained.select(*cols).unionByName(dup.select(*cols))
    from pyspark.sql import Window

    f = f.withColumn("_rank", F.row_number().over(Window.partitionBy(*REPLICA, "producer_id", "base_offset").orderBy(
        F.when(F.col("kind") == "duplicate", 0).otherwise(1)))).where("_rank = 1").drop("_rank")
    f = join_replica(f, ctx.partitions.select(*REPLICA, "is_compacted", "compaction_known", "gap_from_offset",
                                              "gap_to_offset"), "left")
    # segments between the given ones were left out (auditor.model.coverage): a gap, or a new epoch's
    # first batch, across them is what the input lacks, not what the log holds
    across = (F.col("gap_from_offset").isNotNull() & (F.col("other_offset") < F.col("gap_to_offset"))
              & (F.col("base_offset") >= F.col("gap_from_offset")))
    f = f.where(~(F.coalesce(across, F.lit(False)) & F.col("kind").isin("gap", "new-epoch-nonzero")))
    # the cleaner removes whole batches (a producer's last batch excepted): on a compacted topic a
    # forward gap is what compaction leaves, not a finding
    f = f.where(~(F.coalesce(F.col("is_compacted"), F.lit(False)) & (F.col("kind") == "gap")))
    # where the input cannot show whether the topic is compacted (a partition directory given alone), a
    # gap may be the cleaner's: undetermined, not loss
    f = f.withColumn("kind", F.when((F.col("kind") == "gap") & ~F.coalesce(F.col("compaction_known"), F.lit(True)),
                                    F.lit("undetermined")).otherwise(F.col("kind")))
    return f.select(
        *REPLICA, "producer_id", "producer_epoch",
        F.least("other_offset", "base_offset").alias("first_offset"),
        F.greatest("other_offset", "base_offset").alias("last_offset"),
        F.col("max_timestamp").alias("last_timestamp"),
        "kind",
        evidence(EVIDENCE, batch_offset=F.col("base_offset"), base_sequence=F.col("base_sequence"),
                 last_sequence=F.col("last_sequence"), expected_sequence=F.col("expected"),
                 previous_last_sequence=F.col("prev_data_last_sequence"), previous_epoch=F.col("prev_data_epoch"),
                 other_offset=F.col("other_offset"), compacted=F.col("is_compacted")).alias("evidence"),
    )

RULE = Rule(
    id="out-of-order-sequence",
    title="Producer sequence numbers that skip, repeat or go backwards on disk",
    run=run,
    kinds=KINDS,
    evidence=EVIDENCE,
    proposals=("KIP-98", "KIP-185", "KIP-360", "KAFKA-5793"),
    views=("partitions", "sequence_breaks"),
    needs=("batches",),
)
