"""epoch-exhaustion: producer epochs close to the int16 limit.

**What.** The producer epoch is an int16. The coordinator bumps it on every
``initTransactions`` (fencing the previous instance), on every timed-out or
fenced transaction, on KIP-360 recovery bumps of idempotent producers and — with
transaction.version 2 — on every commit or abort. At 32766 (``Short.MAX_VALUE -
1``) the epoch is *exhausted*: the coordinator must move the transactional id to
a new producer id (epoch 0) instead of bumping it again (KIP-360;
transaction.version 2 does it in the ``Complete*`` record). The rule reads the
highest epoch of every producer id in the data batches and in
``__transaction_state`` and reports (one finding per producer id):

* epoch ≥ ``epoch_exhaustion_warn`` (32000 by default) — warning: a few hundred
  more bumps and the id must be rotated;
* epoch ≥ 32766 — error: exhausted; the next bump needs a new producer id;
* a negative epoch other than -1 — error: the epoch overflowed past 32767.

With the coordinator log in the dump, a producer id that the transactional id
has already left (its latest record names another producer id) is reported as
info (``rotated``): the coordinator handled it. With transaction.version 2
high epochs are routine (one bump per transaction), so below 32766 they are
info as well.

**How it arises.** Producers that fence each other in a loop (two instances
with one ``transactional.id``, crash-restart loops), transactions that time out
over and over, and before the KAFKA-9666 fix repeated InitProducerId retries
while ``__transaction_state`` was unavailable. KAFKA-20090: an epoch that
reached ``Short.MAX_VALUE`` through timeouts left the coordinator unable to fence
or rotate, and markers at that epoch were rejected; the fix logs instead of
failing, accepts markers at MAX_VALUE and rotates the producer id.

**Evidence.** highest epoch, where it was seen (table, topic-partition,
offset), the sources (``batches``, ``transaction_log``), the transactional id
and the producer id / epoch / transaction version of its latest coordinator record.

**Severity.** error when exhausted or overflowed and not rotated; warning when
near exhaustion; info when already rotated, or near exhaustion with
transaction.version 2.

**Remediation.** Find what keeps bumping the epoch (fencing loops: two
instances with the same ``transactional.id``; transactions that exceed
``transaction.timeout.ms``). If an exhausted id is not rotated and its producer
fails with epoch errors, restart the producer (``initTransactions``) on a broker
with the KAFKA-20090 fix so the coordinator allocates a new producer id.
"""

from __future__ import annotations

from auditor.engine.findings import evidence
from auditor.engine.rule import Rule

EXHAUSTED = 32766  # Short.MAX_VALUE - 1: the coordinator must not bump past it


def run(ctx):
    from pyspark.sql import Window
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
        tl = ctx.table("transaction_log").where("record_type = 'transaction' AND NOT is_tombstone")
        known = F.broadcast(g.select("cluster_id", "producer_id"))
        ids = tl.select("cluster_id", "transactional_id", F.explode(F.array(
            "producer_id", "previous_producer_id", "next_producer_id")).alias("producer_id")).join(
            known, ["cluster_id", "producer_id"]).groupBy("cluster_id", "producer_id").agg(
            F.min("transactional_id").alias("tid"))
        g = g.join(ids, ["cluster_id", "producer_id"], "left").withColumn(
            "transactional_id", F.coalesce("transactional_id", "tid")).drop("tid")
        w = Window.partitionBy("cluster_id", "transactional_id").orderBy(F.col("offset").desc(), F.col("broker_id").asc_nulls_last())
        latest = tl.join(F.broadcast(g.select("cluster_id", "transactional_id").where("transactional_id IS NOT NULL")),
                         ["cluster_id", "transactional_id"], "left_semi").withColumn("_rn", F.row_number().over(w)).where(
            "_rn = 1").select(
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
    status = (F.when(rotated, F.lit("rotated")).when(overflow, F.lit("overflowed")).when(exhausted, F.lit("exhausted"))
              .otherwise(F.lit("near-exhaustion")))
    sev = (F.when(rotated, F.lit("info")).when(exhausted, F.lit("error"))
           .when(F.coalesce(F.col("tv"), F.lit(0)) >= 2, F.lit("info")).otherwise(F.lit("warning")))
    return g.select(
        "cluster_id", F.col("top.s.broker_id").alias("broker_id"), F.col("top.s.topic").alias("topic"),
        F.col("top.s.partition").alias("partition"), "producer_id", F.col("epoch").alias("producer_epoch"), "transactional_id",
        F.col("top.s.offset").alias("last_offset"), F.col("first_ts").alias("first_timestamp"),
        F.col("last_ts").alias("last_timestamp"),
        sev.alias("severity"),
        F.concat(
            F.lit("producer id "), F.col("producer_id").cast("string"),
            F.coalesce(F.concat(F.lit(" (transactional id "), F.col("transactional_id"), F.lit(")")), F.lit("")),
            F.lit(" reached epoch "), F.col("epoch").cast("string"), F.lit(" ("), F.col("top.s.source"), F.lit(" "),
            F.col("top.s.topic"), F.lit("-"), F.col("top.s.partition").cast("string"), F.lit(" offset "),
            F.col("top.s.offset").cast("string"), F.lit("): "),
            F.when(rotated, F.concat(F.lit("the coordinator has since moved the id to producer "),
                                     F.col("latest_producer_id").cast("string"), F.lit(" epoch "),
                                     F.col("latest_epoch").cast("string")))
            .when(overflow, F.lit("the int16 epoch overflowed past 32767 (KAFKA-20090)"))
            .when(exhausted, F.lit("exhausted (>= 32766): the next bump needs a new producer id (KIP-360, KAFKA-20090)"))
            .otherwise(F.concat((F.lit(EXHAUSTED) - F.col("epoch")).cast("string"),
                                F.lit(" bumps left before the producer id must be rotated"),
                                F.when(F.col("tv") >= 2, F.lit(" (transaction.version 2 bumps once per transaction: "
                                                              "rotation is routine)")).otherwise(F.lit("")))),
        ).alias("message"),
        evidence(
            status=status,
            epoch=F.col("epoch"),
            seen_in=F.col("top.s.source"),
            sources=F.array_join("sources", ","),
            bumps_left=F.greatest(F.lit(EXHAUSTED) - F.col("epoch"), F.lit(0)),
            coordinator_producer_id=F.col("latest_producer_id"),
            coordinator_producer_epoch=F.col("latest_epoch"),
            coordinator_state=F.col("latest_state"),
            client_transaction_version=F.col("tv"),
            warn_threshold=F.lit(warn),
        ).alias("evidence"),
        F.when(rotated, F.lit("none: the coordinator rotated the producer id"))
        .otherwise(F.lit("find what keeps bumping the epoch (two instances sharing a transactional.id, crash-restart "
                         "loops, transactions exceeding transaction.timeout.ms); if the id is exhausted and the producer "
                         "fails with epoch errors, restart it (initTransactions) on brokers with the KAFKA-20090 fix so "
                         "the coordinator allocates a new producer id")).alias("remediation"),
    )


RULE = Rule(
    id="epoch-exhaustion",
    title="Producer epoch close to (or past) the int16 limit",
    severity="warning",
    run=run,
    proposals=("KIP-360", "KIP-890", "KAFKA-9666", "KAFKA-20090"),
    evidence=("status", "epoch", "seen_in", "sources", "bumps_left", "coordinator_producer_id",
        "coordinator_producer_epoch", "coordinator_state", "client_transaction_version",
        "warn_threshold"),
    remediation="stop the fencing/timeout loop that bumps the epoch; restart an exhausted producer on a fixed broker",
    needs=("batches",),
)
