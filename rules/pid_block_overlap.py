"""**What.** Producer ids are handed out in blocks of 1000. With KRaft the
controller grants ``[next, next+999]`` and appends a ProducerIdsRecord with
NextProducerId = ``next + 1000`` to ``__cluster_metadata`` (KIP-730); with
ZooKeeper the znode ``/latest_producer_id_block`` holds the last grant. Blocks
must never overlap and NextProducerId must only grow. The rule reports:

* ``backwards`` — a ProducerIdsRecord whose NextProducerId is not above the previous one;
* ``overlap`` — two different grants whose blocks intersect (also a KRaft grant
  inside the exported ZooKeeper block);
* ``never-granted`` — a producer id in the data above every block the
  controller ever granted;
* ``shared-id`` — one producer id recorded for two transactional ids in
  ``__transaction_state``.

**Why it matters.** Brokers hand the ids of a block to producers one by one:
two grants of the same ids give two producers one producer id, and they corrupt
each other's state on every partition they share — spurious
OutOfOrderSequence / InvalidProducerEpoch errors, one producer fencing the
other, one producer's marker closing the other's transaction.

**How it arises.** A ZooKeeper-to-KRaft migration that imported a stale block
(KAFKA-15552), a broker accepting a block that starts at its current block's
last id (KAFKA-20031: the sanity check used ``<`` instead of ``<=``), a
controller failover replaying an old record.
"""

from __future__ import annotations

from auditor.engine.findings import evidence
from auditor.engine.rule import Evidence, Kind, Rule

EVIDENCE = (
    Evidence("next_producer_id", "bigint", "NextProducerId of the ProducerIdsRecord that goes backwards"),
    Evidence("previous_next_producer_id", "bigint", "NextProducerId of the record before it"),
    Evidence("granted_to_broker", "int", "broker the backwards block was granted to"),
    Evidence("first_block", "string", "the first of two overlapping blocks, start-end"),
    Evidence("first_block_broker", "int", "broker it was granted to"),
    Evidence("first_sources", "array<string>", "where the dump shows it (log, snapshot, zookeeper)"),
    Evidence("second_block", "string", "the second block, start-end"),
    Evidence("second_block_broker", "int", "broker it was granted to"),
    Evidence("second_sources", "array<string>", "where the dump shows it"),
    Evidence("max_granted", "bigint", "highest producer id any grant of the cluster covers"),
    Evidence("transactional_ids", "array<string>", "transactional ids recorded with one producer id"),
)

_ADVICE = ("stop producers using the affected ids, upgrade brokers with the fix (KAFKA-15552, KAFKA-20031) and restart "
           "them so they take fresh blocks above the highest id in use")
KINDS = {
    "backwards": Kind("critical", "ProducerIdsRecord at metadata offset {last_offset} sets NextProducerId "
                      "{next_producer_id}, not above the previous {previous_next_producer_id} (offset {first_offset}): "
                      "ids will be handed out twice", advice=_ADVICE),
    "overlap": Kind("critical", "producer-id blocks [{first_block}] ({first_sources:list}, broker {first_block_broker}) and "
                    "[{second_block}] ({second_sources:list}, broker {second_block_broker}) overlap: the same producer ids "
                    "were granted twice", advice=_ADVICE),
    "never-granted": Kind("error", "producer id {producer_id} is used on {topic}-{partition} but the controller never "
                          "granted a block above {max_granted} (ids from another cluster, a lost metadata log, or an "
                          "overlap)", advice=_ADVICE),
    "shared-id": Kind("error", "producer id {producer_id} is recorded for transactional ids {transactional_ids:list} in "
                      "__transaction_state: two producers share one id",
                      advice="re-initialise one of the transactional producers (initTransactions) so it gets a new id"),
}


def _blocks(ctx):
    from pyspark.sql import functions as F

    b = ctx.table("producer_id_blocks")
    order = F.when(F.col("source") == "log", F.col("offset")).otherwise(F.lit(None))
    return b.withColumn("log_order", order)


def run(ctx):
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    out = []
    b = _blocks(ctx)
    # one row per distinct grant (a snapshot restates the latest one; replicas repeat the log)
    grants = b.groupBy("cluster_id", "next_producer_id").agg(
        F.min("block_start").alias("block_start"), F.max("block_end").alias("block_end"),
        F.max("broker_id").alias("broker_id"), F.min("offset").alias("offset"),
        F.sort_array(F.collect_set("source")).alias("sources"),
    )
    # backwards: metadata log order per metadata replica -- one log dir's copy of __cluster_metadata (two
    # copies of one broker's log dir, two dumps taken at different times, are two sequences, not one with
    # every record twice)
    log = b.where("source = 'log'")
    w = Window.partitionBy("cluster_id", "log_broker_id", "log_dir").orderBy("offset")
    back = log.withColumn("prev_next", F.lag("next_producer_id").over(w)).withColumn(
        "prev_offset", F.lag("offset").over(w)).where("next_producer_id <= prev_next")
    out.append(back.select(
        "cluster_id", F.col("log_broker_id").alias("broker_id"), F.lit("backwards").alias("kind"),
        F.col("offset").alias("last_offset"), F.col("prev_offset").alias("first_offset"),
        F.col("timestamp").alias("last_timestamp"),
        evidence(EVIDENCE, next_producer_id=F.col("next_producer_id"), previous_next_producer_id=F.col("prev_next"),
                 granted_to_broker=F.col("broker_id")).alias("evidence"),
    ))
    # overlap between distinct grants (ZooKeeper blocks are grants too)
    a, c = grants.alias("a"), grants.alias("c")
    ov = a.join(c, (F.col("a.cluster_id").eqNullSafe(F.col("c.cluster_id"))) & (F.col("a.next_producer_id") < F.col("c.next_producer_id"))
                & (F.col("a.block_start") <= F.col("c.block_end")) & (F.col("c.block_start") <= F.col("a.block_end")))
    out.append(ov.select(
        F.col("a.cluster_id").alias("cluster_id"), F.lit("overlap").alias("kind"),
        F.col("c.block_start").alias("first_offset"), F.least("a.block_end", "c.block_end").alias("last_offset"),
        evidence(EVIDENCE, first_block=F.concat_ws("-", F.col("a.block_start"), F.col("a.block_end")),
                 first_block_broker=F.col("a.broker_id"), first_sources=F.col("a.sources"),
                 second_block=F.concat_ws("-", F.col("c.block_start"), F.col("c.block_end")),
                 second_block_broker=F.col("c.broker_id"), second_sources=F.col("c.sources")).alias("evidence"),
    ))
    # ids in data above every grant of the cluster (only where the dump holds grants at all)
    top = grants.groupBy("cluster_id").agg(F.max("block_end").alias("max_granted"))
    used = ctx.producer_batches.join(F.broadcast(top.select("cluster_id")), "cluster_id").groupBy("cluster_id", "producer_id").agg(
        F.min("base_offset").alias("first_offset"), F.first("topic").alias("topic"), F.first("partition").alias("partition"),
        F.min("max_timestamp").alias("first_timestamp"))
    never = used.join(top, "cluster_id").where(F.col("producer_id") > F.col("max_granted"))
    out.append(never.select(
        "cluster_id", "topic", "partition", "producer_id", "first_offset", "first_timestamp", F.lit("never-granted").alias("kind"),
        evidence(EVIDENCE, max_granted=F.col("max_granted")).alias("evidence"),
    ))
    if ctx.has_rows("transaction_log"):
        shared = ctx.producer_transactional_ids.groupBy("cluster_id", "producer_id").agg(
            F.sort_array(F.collect_set("transactional_id")).alias("ids")).where(F.size("ids") > 1)
        out.append(shared.select(
            "cluster_id", "producer_id", F.col("ids")[0].alias("transactional_id"), F.lit("shared-id").alias("kind"),
            evidence(EVIDENCE, transactional_ids=F.col("ids")).alias("evidence"),
        ))
    res = out[0]
    for df in out[1:]:
        res = res.unionByName(df, allowMissingColumns=True)
    return res


RULE = Rule(
    id="pid-block-overlap",
    title="Producer-id blocks that overlap or go backwards; producer ids used twice",
    run=run,
    kinds=KINDS,
    evidence=EVIDENCE,
    proposals=("KIP-730", "KAFKA-15552", "KAFKA-20031"),
    views=("producer_batches", "producer_transactional_ids"),
    needs=("batches",),
    tables=("producer_id_blocks", "transaction_log"),
)
