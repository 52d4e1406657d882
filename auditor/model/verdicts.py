"""The one classification of every open transaction, and its one age.

A transaction is *open* on a replica when transactional data of a producer has no
COMMIT/ABORT marker after it (:func:`auditor.model.producer_state.spark.transactions`).
What that means depends on evidence the input may or may not hold, so the
classification lives here, once, and ``hanging-transaction``, ``stuck-lso``, the
report and the forensic commands read it:

* ``in-flight`` — the coordinator (``__transaction_state``) has the transaction
  Ongoing with this partition, and it is younger than its timeout: normal;
* ``late-write`` — the data belongs to a producer session (id, epoch) that already
  had a marker on this partition, and the coordinator does not list the partition
  in an ongoing, unexpired transaction (KAFKA-12671). With transaction version 0/1
  a session keeps its epoch across transactions, so the same session writing after
  a marker is normal *while* the coordinator has the partition in a new one;
* ``unknown-to-coordinator`` — every ``__transaction_state`` partition of the
  cluster was given and no record names the producer id;
* ``hanging`` — the coordinator completed, fenced or expired the transaction, does
  not list the partition, or the transaction is older than its timeout; without
  the coordinator's records, older than ``transaction.max.timeout.ms`` (local
  evidence: a live coordinator aborts any transaction by then);
* ``undetermined`` — the input cannot tell: later segments of the partition were
  not given (the marker may be there), or the coordinator's record of the
  producer is not in the input and the transaction is not provably too old.
  ``undetermined_reason`` says what is missing and ``settled_by`` what would
  settle it.

The **age** is the reference instant (``as_of``: the newest timestamp of the
cluster's input, or ``--as-of``) minus the transaction's first batch timestamp.
Other times (how long the LSO has trailed the newest data) are separate evidence.
"""

from __future__ import annotations

from auditor.model.producer_state.spark import REPLICA

VERDICTS = ("in-flight", "late-write", "unknown-to-coordinator", "hanging", "undetermined")
# verdicts after which the pinned LSO will not move without an administrator
CLOSED_BY_NOBODY = ("late-write", "unknown-to-coordinator", "hanging")


def open_transaction_verdicts(open_txns, partitions, as_of, *, max_timeout_ms: int, coordinator=None):
    """``open_txns`` (the model's open transactions) with the replica's coverage
    (``partitions``: ``log_end_known``), ``as_of_ms``, the coordinator's view of the
    producer and the verdict. ``coordinator``: None when no cluster of the input has
    ``__transaction_state`` records, else a dict of DataFrames ``ids`` (cluster_id,
    producer_id, transactional_id), ``latest`` (the latest record per transactional
    id), ``coverage`` (per cluster: ``coordinator_partitions_given``,
    ``coordinator_partitions_expected``, ``coordinator_complete``) and ``in_input``
    (per cluster: ``coordinator_partitions`` with records).

    Added columns: ``as_of_ms``, ``age_ms``, ``transactional_id``,
    ``coordinator_state``, ``coordinator_producer_id``, ``transaction_timeout_ms``,
    ``coordinator_topic_partitions`` (``topic-N`` strings),
    ``coordinator_partitions_in_dump``, ``age_only`` (no coordinator record could be
    consulted), ``verdict``, ``undetermined_reason``, ``settled_by``."""
    from pyspark.sql import functions as F

    o = open_txns.join(F.broadcast(as_of), "cluster_id", "left")
    cov = partitions.select(*REPLICA, "log_end_known", "next_not_given_offset", "later_segments_not_given",
                            "high_watermark", "log_end_offset")
    o = o.join(cov, REPLICA, "left")
    as_of_ms = F.col("as_of_ms")
    max_timeout = F.lit(max_timeout_ms)
    age = as_of_ms - F.col("first_timestamp")
    old = age > max_timeout
    session_had_marker = F.col("prev_marker_epoch").isNotNull() & (F.col("data_epoch_min") <= F.col("prev_marker_epoch"))

    if coordinator is not None:
        from auditor.model.coordinator import transactional_id_of

        ids = transactional_id_of(coordinator["ids"])
        latest = coordinator["latest"].select(
            "cluster_id", "transactional_id", F.col("state").alias("coordinator_state"),
            F.col("producer_id").alias("coordinator_producer_id"), "transaction_timeout_ms", "start_timestamp_ms",
            F.col("topic_partitions").alias("_tps"))
        o = (o.join(ids, ["cluster_id", "producer_id"], "left").join(latest, ["cluster_id", "transactional_id"], "left")
             .join(F.broadcast(coordinator["coverage"]), "cluster_id", "left")
             .join(F.broadcast(coordinator["in_input"]), "cluster_id", "left"))
        has_log = F.col("coordinator_partitions").isNotNull()
        # a cluster the inventory does not list (hand-made tables) is taken as given whole
        complete = F.coalesce(F.col("coordinator_complete"), F.lit(True))
        listed = F.exists(F.coalesce(F.col("_tps"), F.array()),
                          lambda tp: (tp["topic"] == F.col("topic")) & (tp["partition"] == F.col("partition")))
        ongoing_here = (F.col("coordinator_state") == "Ongoing") & listed & (
            F.col("coordinator_producer_id") == F.col("producer_id"))
        timeout = F.least(F.coalesce(F.col("transaction_timeout_ms"), max_timeout), max_timeout)
        young = (as_of_ms - F.coalesce(F.col("start_timestamp_ms"), F.col("first_timestamp"))) <= timeout
        known = F.col("transactional_id").isNotNull()
        tps = F.transform(F.col("_tps"), lambda tp: F.concat(tp["topic"], F.lit("-"), tp["partition"].cast("string")))
        given = F.coalesce(F.col("coordinator_partitions_given"), F.lit(0))
        expected = F.col("coordinator_partitions_expected")
    else:
        for c, t in (("transactional_id", "string"), ("coordinator_state", "string"), ("coordinator_producer_id", "bigint"),
                     ("transaction_timeout_ms", "int"), ("coordinator_partitions", "bigint")):
            o = o.withColumn(c, F.lit(None).cast(t))
        has_log = complete = known = ongoing_here = young = F.lit(False)
        tps = F.lit(None).cast("array<string>")
        given, expected = F.lit(0), F.lit(None).cast("int")

    log_end_known = F.coalesce(F.col("log_end_known"), F.lit(True))
    consulted = has_log & (known | complete)
    verdict = (
        F.when(~log_end_known, F.lit("undetermined"))
        .when(consulted & known & ongoing_here & young, F.lit("in-flight"))
        .when(consulted & known & session_had_marker, F.lit("late-write"))
        .when(consulted & known, F.lit("hanging"))
        .when(consulted, F.lit("unknown-to-coordinator"))
        .when(old, F.lit("hanging"))
        .otherwise(F.lit("undetermined"))
    )
    later = F.concat(
        F.lit("the marker may be in what was not given: "),
        F.when(F.col("later_segments_not_given") > 0, F.concat(
            F.col("later_segments_not_given").cast("string"), F.lit(" later segment(s) of the partition's directory, from "
                                                                   "offset "), F.col("next_not_given_offset").cast("string")))
        .otherwise(F.concat(F.lit("the high watermark "), F.col("high_watermark").cast("string"),
                            F.lit(" lies beyond the last given offset "), (F.col("log_end_offset") - 1).cast("string"))))
    no_coordinator = F.when(
        given == 0, F.lit("no __transaction_state partition of the cluster was given, and it is not older than "
                          "transaction.max.timeout.ms"),
    ).otherwise(F.concat(
        F.lit("no record of the given __transaction_state partitions ("), given.cast("string"), F.lit(" of "),
        F.coalesce(expected.cast("string"), F.lit("?")),
        F.lit(") names the producer, and it is not older than transaction.max.timeout.ms")))
    reason = F.when(verdict != "undetermined", F.lit(None).cast("string")).when(~log_end_known, later).otherwise(no_coordinator)
    settle = (F.when(verdict != "undetermined", F.lit(None).cast("string"))
              .when(~log_end_known, F.lit("scan the whole partition directory"))
              .otherwise(F.lit("scan with the log dirs holding the cluster's __transaction_state partitions, or with "
                               "--as-of now if the broker still runs")))
    return o.withColumns({
        "age_ms": age,
        "coordinator_topic_partitions": tps,
        "coordinator_partitions_in_dump": F.col("coordinator_partitions").cast("int"),
        "age_only": ~consulted,
        "verdict": verdict,
        "undetermined_reason": reason,
        "settled_by": settle,
    }).drop("_tps", "log_end_known", "high_watermark", "log_end_offset", "later_segments_not_given", "next_not_given_offset")
