"""**What.** The producer epoch is an int16. The coordinator bumps it on every
``initTransactions`` (fencing the previous instance), on every timed-out or
fenced transaction, on KIP-360 recovery bumps of idempotent producers and — with
transaction.version 2 — on every commit or abort. At 32766 (``Short.MAX_VALUE -
1``) the epoch is *exhausted*: the coordinator must move the transactional id to
a new producer id (epoch 0) instead of bumping it again (KIP-360;
transaction.version 2 does it in the ``Complete*`` record). The rule reads the
highest epoch of every producer id in the data batches and in
``__transaction_state`` and reports, once per producer id:

* ``near-exhaustion`` — an epoch at or above ``epoch_exhaustion_warn`` (32000 by
  default): a few hundred more bumps and the id must be rotated;
* ``exhausted`` — an epoch at or above 32766: the next bump needs a new producer id;
* ``overflowed`` — a negative epoch other than -1: the epoch went past 32767;
* ``rotated`` — a producer id that its transactional id has already left (the
  latest coordinator record names another producer id): the coordinator handled it;
* ``near-exhaustion-tv2`` — near exhaustion under transaction.version 2, where
  high epochs are routine (one bump per transaction) and rotation is automatic.

**Why it matters.** A producer whose epoch cannot be bumped any more cannot be
fenced, recovered or (with transaction.version 2) finish another transaction:
before KAFKA-20090 the coordinator could neither fence nor rotate an id at
``Short.MAX_VALUE`` and the partition leaders rejected markers at that epoch, so
its transactions stayed open (pinning the LSO) and the application failed with
epoch errors. A high epoch is also a symptom: something fences or times out this
producer over and over.

**How it arises.** Producers that fence each other in a loop (two instances
with one ``transactional.id``, crash-restart loops), transactions that time out
over and over, and before the KAFKA-9666 fix repeated InitProducerId retries
while ``__transaction_state`` was unavailable. KAFKA-20090: an epoch that
reached ``Short.MAX_VALUE`` through timeouts left the coordinator unable to fence
or rotate, and markers at that epoch were rejected; the fix logs instead of
failing, accepts markers at MAX_VALUE and rotates the producer id.
"""

from __future__ import annotations

from auditor.engine.findings import evidence
from auditor.engine.rule import Evidence, Kind, Rule

EXHAUSTED = 32766  # Short.MAX_VALUE - 1: the coordinator must not bump past it


EVIDENCE = (
    Evidence("seen_in", "string", "where the highest epoch was seen: batches (a log) or transaction_log"),
    Evidence("sources", "array<string>", "every source that shows the producer at a high epoch"),
    Evidence("bumps_left", "int", "epoch bumps left before 32766"),
    Evidence("coordinator_producer_id", "bigint", "producer id of the transactional id's latest coordinator record"),
    Evidence("coordinator_producer_epoch", "int", "producer epoch in that record"),
    Evidence("coordinator_state", "string", "state in that record"),
    Evidence("client_transaction_version", "int", "transaction.version the client uses (2 bumps once per transaction)"),
    Evidence("warn_threshold", "int", "the epoch from which the rule reports (--epoch-exhaustion-warn)"),
)

_WHERE = ("producer id {producer_id}[[ (transactional id {transactional_id})]] reached epoch {producer_epoch} ({seen_in} "
          "{topic}-{partition} offset {last_offset}): ")
_ADVICE = ("find what keeps bumping the epoch (two instances sharing a transactional.id, crash-restart loops, "
           "transactions exceeding transaction.timeout.ms); if the id is exhausted and the producer fails with epoch "
           "errors, restart it (initTransactions) on brokers with the KAFKA-20090 fix so the coordinator allocates a "
           "new producer id")
KINDS = {
    "rotated": Kind("info", _WHERE + "the coordinator has since moved the id to producer {coordinator_producer_id} "
                    "epoch {coordinator_producer_epoch}", advice="none: the coordinator rotated the producer id"),
    "overflowed": Kind("error", _WHERE + "the int16 epoch overflowed past 32767 (KAFKA-20090)", advice=_ADVICE),
    "exhausted": Kind("error", _WHERE + "exhausted (>= 32766): the next bump needs a new producer id (KIP-360, "
                      "KAFKA-20090)", advice=_ADVICE),
    "near-exhaustion": Kind("warning", _WHERE + "{bumps_left} bumps left before the producer id must be rotated",
                            advice=_ADVICE),
    "near-exhaustion-tv2": Kind("info", _WHERE + "{bumps_left} bumps left before the producer id must be rotated "
                                "(transaction.version 2 bumps once per transaction: rotation is routine)"),
}


def run(ctx):
    from pyspark.sql import functions as F

    warn = ctx.options.epoch_exhaustion_warn
    high = f"producer_epoch >= {warn} OR producer_epoch < -1"
    seen = lambda src, ts, off: F.struct(  # noqa: E731
        F.col("producer_epoch").cast("int").alias("epoch"), F.lit(src).alias("source"), F.col("topic").alias("topic"),
        F.col("partition").alias("partition"), F.col(off).alias("offset"), F.col("broker_id").alias("broker_id"),
        F.col(ts).alias("ts"))
    d = ctx.producer_batches.where(high).select(
        "cluster_id", "producer_id", seen("batches", "max_timestamp", "base_offset").alias("s"),
        F.lit(None).cast("string").alias("transactional_id"))
    parts = [d]
    has_coord = ctx.has_rows("transaction_log")
    if has_coord:
        c = ctx.table("transaction_log").where(f"record_type = 'transaction' AND producer_id >= 0 AND ({high})").select(
            "cluster_id", "producer_id", seen("transaction_log", "last_update_timestamp_ms", "offset").alias("s"),
            "transactional_id")
        parts.append(c)
    u = parts[0]
    for p in parts[1:]:
        u = u.unionByName(p)
    # an overflowed (negative) epoch ranks above every positive one
    rank = F.when(F.col("s.epoch") < -1, F.col("s.epoch") + 65536).otherwise(F.col("s.epoch"))
    g = u.withColumn("rank", rank).groupBy("cluster_id", "producer_id").agg(
        F.max(F.struct(F.col("rank"), F.col("s"))).alias("top"),
        F.sort_array(F.collect_set("s.source")).alias("sources"),
        F.min("s.ts").alias("first_ts"), F.max("s.ts").alias("last_ts"),
        F.min("transactional_id").alias("transactional_id"),
    ).select("*", F.col("top.s.epoch").alias("epoch"))
    g = ctx.persist(g)  # few rows, read three times below: scan the batches once
    if has_coord:
        # only the few producers found above: name their transactional id and read its latest record
        from auditor.model import coordinator

        known = F.broadcast(g.select("cluster_id", "producer_id"))
        ids = coordinator.transactional_id_of(ctx.producer_transactional_ids.join(known, ["cluster_id", "producer_id"])
                                              ).withColumnRenamed("transactional_id", "tid")
        g = g.join(ids, ["cluster_id", "producer_id"], "left").withColumn(
            "transactional_id", F.coalesce("transactional_id", "tid")).drop("tid")
        mine = ctx.coordinator_records.join(
            F.broadcast(g.select("cluster_id", "transactional_id").where("transactional_id IS NOT NULL")),
            ["cluster_id", "transactional_id"], "left_semi")
        latest = coordinator.latest(mine, tombstones=False).select(
            "cluster_id", "transactional_id", F.col("producer_id").alias("latest_producer_id"),
            F.col("producer_epoch").alias("latest_epoch"), F.col("state").alias("latest_state"),
            F.col("client_transaction_version").alias("tv"))
        g = g.join(latest, ["cluster_id", "transactional_id"], "left")
    else:
        for c_, t in (("latest_producer_id", "long"), ("latest_epoch", "int"), ("latest_state", "string"), ("tv", "int")):
            g = g.withColumn(c_, F.lit(None).cast(t))
    overflow = F.col("epoch") < -1
    exhausted = overflow | (F.col("epoch") >= EXHAUSTED)
    rotated = F.col("latest_producer_id").isNotNull() & (F.col("latest_producer_id") != F.col("producer_id"))
    kind = (F.when(rotated, F.lit("rotated")).when(overflow, F.lit("overflowed")).when(exhausted, F.lit("exhausted"))
            .when(F.coalesce(F.col("tv"), F.lit(0)) >= 2, F.lit("near-exhaustion-tv2")).otherwise(F.lit("near-exhaustion")))
    return g.select(
        "cluster_id", F.col("top.s.broker_id").alias("broker_id"), F.col("top.s.topic").alias("topic"),
        F.col("top.s.partition").alias("partition"), "producer_id", F.col("epoch").alias("producer_epoch"), "transactional_id",
        F.col("top.s.offset").alias("last_offset"), F.col("first_ts").alias("first_timestamp"),
        F.col("last_ts").alias("last_timestamp"),
        kind.alias("kind"),
        evidence(
            EVIDENCE,
            seen_in=F.col("top.s.source"),
            sources=F.col("sources"),
            bumps_left=F.when(overflow, F.lit(0)).otherwise(F.greatest(F.lit(EXHAUSTED) - F.col("epoch"), F.lit(0))),
            coordinator_producer_id=F.col("latest_producer_id"),
            coordinator_producer_epoch=F.col("latest_epoch"),
            coordinator_state=F.col("latest_state"),
            client_transaction_version=F.col("tv"),
            warn_threshold=F.lit(warn),
        ).alias("evidence"),
    )


RULE = Rule(
    id="epoch-exhaustion",
    title="Producer epoch close to (or past) the int16 limit",
    run=run,
    kinds=KINDS,
    evidence=EVIDENCE,
    proposals=("KIP-360", "KIP-890", "KAFKA-9666", "KAFKA-20090"),
    views=("coordinator_records", "producer_batches", "producer_transactional_ids"),
    needs=("batches",),
    tables=("transaction_log",),
)
