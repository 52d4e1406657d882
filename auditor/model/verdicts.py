"""The one classification of every open transaction, and its one age.

A transaction is *open* on a replica when transactional data of a producer has no
COMMIT/ABORT marker after it (:func:`auditor.model.producer_state.spark.transactions`).
What that means depends on evidence the input may or may not hold, so the
classification lives here, once, and ``hanging-transaction``, ``stuck-lso``, the
report and the forensic commands read it:

* ``in-flight`` — the coordinator (``__transaction_state``) has the transaction
  Ongoing with this partition, and it is younger than its timeout: normal;
* ``two-phase-commit`` — the coordinator has the transaction Ongoing with this
  partition and its record's transaction timeout is ``Integer.MAX_VALUE``: a
  two-phase-commit transaction (KIP-939), open on purpose until an external
  transaction coordinator decides, whatever its age. The timeout is the only mark
  on disk: ``TransactionCoordinator.handleInitProducerId`` (Kafka 4.3.1, 4.4.0)
  stores ``Integer.MAX_VALUE`` when the InitProducerId request enables 2PC,
  ``TransactionMetadata.isDistributedTwoPhaseCommitTxn()`` is exactly
  ``txnTimeoutMs == Integer.MAX_VALUE``, and
  ``TransactionStateManager.timedOutTransactions`` skips such transactions, so
  the coordinator never aborts them (``TransactionLogValue`` has no 2PC field);
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
  evidence: a live coordinator aborts any transaction by then — except a
  two-phase-commit one, which only the coordinator's record shows, so such a
  verdict's ``settled_by`` names the missing ``__transaction_state``);
* ``undetermined`` — the input cannot tell: later segments of the partition were
  not given (the marker may be there), or the coordinator's record of the
  producer is not in the input and the transaction is not provably too old; or
  another copy of the partition in the input (another log dir: a follower, or a
  dump of the same broker taken at another time) holds the transaction's marker
  and this copy ends at or before that offset: it is behind, open there but not
  hanging (a copy that goes on past the marker's offset without it has diverged,
  and keeps its verdict).
  ``undetermined_reason`` says what is missing and ``settled_by`` what would
  settle it.

The **age** is the reference instant (``as_of``: the newest timestamp of the
cluster's input, or ``--as-of``) minus the transaction's first batch timestamp.
Other times (how long the LSO has trailed the newest data) are separate evidence.
"""

from __future__ import annotations

from auditor.model.coverage import SEGMENT_ALONE
from auditor.model.replica_key import REPLICA, join_replica

VERDICTS = ("in-flight", "two-phase-commit", "late-write", "unknown-to-coordinator", "hanging", "undetermined")
# TransactionMetadata.isDistributedTwoPhaseCommitTxn(): txnTimeoutMs == Integer.MAX_VALUE (Kafka 4.3.1, 4.4.0)
TWO_PHASE_COMMIT_TIMEOUT_MS = 2**31 - 1
# a hanging verdict by age alone: what would tell a two-phase-commit transaction from it
AGE_ONLY_CANNOT_RULE_OUT_2PC = ("the coordinator's record of the producer (__transaction_state): a two-phase-commit "
                                "transaction's has transaction timeout Integer.MAX_VALUE")
# verdicts after which the pinned LSO will not move without an administrator
CLOSED_BY_NOBODY = ("late-write", "unknown-to-coordinator", "hanging")


def open_transaction_verdicts(open_txns, partitions, as_of, *, max_timeout_ms: int, coordinator=None, stopped=None,
                              transactions=None):
    """``open_txns`` (the model's open transactions) with the replica's coverage
    (``partitions``: ``log_end_known``), ``as_of_ms``, the coordinator's view of the
    producer and the verdict. ``coordinator``: None when no cluster of the input has
    ``__transaction_state`` records, else a dict of DataFrames ``ids`` (cluster_id,
    producer_id, transactional_id), ``latest`` (the latest record per transactional
    id), ``coverage`` (per cluster: ``coordinator_partitions_given``,
    ``coordinator_partitions_expected``, ``coordinator_complete``) and ``in_input``
    (per cluster: ``coordinator_partitions`` with records) and ``read_until`` (per
    ``__transaction_state`` partition: how far the input's view of it reaches,
    :func:`auditor.model.moving.coordinator_read_until`). ``stopped``: per cluster,
    ``log_dirs_stopped`` (:func:`auditor.model.moving.stopped_clusters`); None, or a
    cluster without a row: taken as stopped. ``transactions``: the model's transactions of every
    replica; where another copy of the partition has the same transaction (producer id, first
    offset) closed by a marker and this one's log ends at or before that marker, the open one is
    ``undetermined`` (this copy is behind).

    A log that may have moved while it was read (a cluster not stopped) is called
    late or hanging only when the views reach far enough (:mod:`auditor.model.moving`):
    the coordinator's partition as read reaches the transaction's first batch, and, when
    the coordinator's latest record of the producer completes (or prepares to complete)
    a transaction begun no earlier, the data partition as read reaches that record (its
    marker comes before it). Otherwise, and while the transaction is not older than
    ``transaction.max.timeout.ms``, it is ``undetermined``.
    A coordinator in PrepareCommit/PrepareAbort that lists the partition is writing the
    markers (``TransactionMarkerChannelManager``): ``in-flight`` while young.

    Added columns: ``as_of_ms``, ``age_ms``, ``transactional_id``,
    ``coordinator_state``, ``coordinator_producer_id``, ``transaction_timeout_ms``,
    ``coordinator_topic_partitions`` (``topic-N`` strings),
    ``coordinator_partitions_in_dump``, ``age_only`` (no coordinator record could be
    consulted), ``verdict``, ``undetermined_reason``, ``settled_by``."""
    from pyspark.sql import functions as F

    o = open_txns.join(F.broadcast(as_of), "cluster_id", "left")
    cov = partitions.select(*REPLICA, "log_end_known", "given_as", "next_not_given_offset", "later_segments_not_given",
                            "high_watermark", "log_end_offset", F.col("max_timestamp").alias("_read_until"))
    o = join_replica(o, cov, "left")
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
            F.col("topic_partitions").alias("_tps"), F.col("partition").alias("coordinator_partition"),
            F.col("last_update_timestamp_ms").alias("_coordinator_updated"))
        if coordinator.get("read_until") is not None:
            latest = latest.join(coordinator["read_until"], ["cluster_id", "coordinator_partition"], "left")
        else:
            latest = latest.withColumn("coordinator_read_until_ms", F.lit(None).cast("long"))
        if coordinator.get("history") is not None:  # the partitions of the transaction a Complete* record ends
            last = coordinator["history"].where("is_last").select(
                "cluster_id", "transactional_id", F.col("prev_topic_partitions").alias("_prev_tps"))
            latest = latest.join(last, ["cluster_id", "transactional_id"], "left")
        else:
            latest = latest.withColumn("_prev_tps", F.lit(None).cast("array<struct<topic:string,partition:int>>"))
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
        completing_here = F.col("coordinator_state").isin("PrepareCommit", "PrepareAbort") & listed & (
            F.col("coordinator_producer_id") == F.col("producer_id"))
        # a view that may not reach far enough (see auditor.model.moving)
        coordinator_behind = F.coalesce(F.col("coordinator_read_until_ms"), F.lit(-1)) < F.col("first_timestamp")
        # the producer's transaction with this partition is completing (Prepare*) or completed; a Complete*
        # record no longer lists the partitions (TransactionMetadata.prepareComplete clears them): the record
        # before it (PrepareCommit/PrepareAbort) does
        prev_listed = F.exists(F.coalesce(F.col("_prev_tps"), F.array()),
                               lambda tp: (tp["topic"] == F.col("topic")) & (tp["partition"] == F.col("partition")))
        ends_here = ((F.col("coordinator_state").isin("PrepareCommit", "PrepareAbort") & listed)
                     | (F.col("coordinator_state").isin("CompleteCommit", "CompleteAbort") & prev_listed))
        marker_maybe_later = (F.col("coordinator_producer_id") == F.col("producer_id")) & ends_here & (
            F.col("_coordinator_updated") >= F.col("first_timestamp")) & (
            F.coalesce(F.col("_read_until"), F.lit(-1)) < F.col("_coordinator_updated"))
        two_phase = F.coalesce(F.col("transaction_timeout_ms") == TWO_PHASE_COMMIT_TIMEOUT_MS, F.lit(False))
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
        has_log = complete = known = ongoing_here = young = two_phase = F.lit(False)
        completing_here = coordinator_behind = marker_maybe_later = F.lit(False)
        tps = F.lit(None).cast("array<string>")
        given, expected = F.lit(0), F.lit(None).cast("int")

    if transactions is not None:
        closed = transactions.where(F.col("state").isin("commit", "abort")).groupBy(
            "cluster_id", "topic", "partition", "producer_id", "first_offset").agg(
            F.min(F.struct("marker_offset", "log_dir", "broker_id", "marker_type")).alias("_closed"))
        o = o.join(closed, ["cluster_id", "topic", "partition", "producer_id", "first_offset"], "left")
    else:
        o = o.withColumn("_closed", F.lit(None).cast(
            "struct<marker_offset:bigint,log_dir:string,broker_id:int,marker_type:string>"))
    # behind, not diverged: this copy ends at or before the other's marker (a copy that goes on past that
    # offset without the marker has diverged -- an unclean leader election can leave a real hanging
    # transaction so, beside the old leader's copy with the marker: replica-divergence reports the split)
    closed_elsewhere = F.coalesce(F.col("log_end_offset") <= F.col("_closed.marker_offset"), F.lit(False))
    log_end_known = F.coalesce(F.col("log_end_known"), F.lit(True))
    consulted = has_log & (known | complete)
    if stopped is not None:
        o = o.join(F.broadcast(stopped), "cluster_id", "left")
        moving = ~F.coalesce(F.col("log_dirs_stopped"), F.lit(True))
    else:
        moving = F.lit(False)
    view_short = moving & ~old & (coordinator_behind | marker_maybe_later)
    verdict = (
        F.when(~log_end_known | closed_elsewhere, F.lit("undetermined"))
        # before the age test: the coordinator never times a two-phase-commit transaction out
        .when(consulted & known & ongoing_here & two_phase, F.lit("two-phase-commit"))
        .when(consulted & known & (ongoing_here | completing_here) & young, F.lit("in-flight"))
        .when(consulted & known & view_short, F.lit("undetermined"))
        .when(consulted & known & session_had_marker, F.lit("late-write"))
        .when(consulted & known, F.lit("hanging"))
        .when(consulted, F.lit("unknown-to-coordinator"))
        .when(old, F.lit("hanging"))
        .otherwise(F.lit("undetermined"))
    )
    later = F.concat(
        F.lit("the marker may be in what was not given: "),
        F.when(F.col("given_as") == SEGMENT_ALONE, F.lit(
            "the partition of the segment is not known (given without its partition directory, or in a directory not "
            "named topic-N), so the segments after it are not known"))
        .when(F.col("later_segments_not_given") > 0, F.concat(
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
    read_while_moving = F.concat(
        F.lit("the log dirs were not all cleanly stopped (a broker may have written while they were read) and "),
        F.when(coordinator_behind, F.concat(
            F.lit("the coordinator's __transaction_state partition as read ends before this transaction's first "
                  "batch: a record written after it was read may list the partition")))
        .otherwise(F.lit("the coordinator completed the transaction after the newest batch read from this partition: "
                         "its marker may have been written after the partition was read")))
    copy_behind = F.concat(
        F.lit("another copy of the partition in the input (log dir "), F.coalesce(F.col("_closed.log_dir"), F.lit("?")),
        F.lit(", broker "), F.coalesce(F.col("_closed.broker_id").cast("string"), F.lit("?")), F.lit(") has the "
        "transaction's "), F.coalesce(F.col("_closed.marker_type"), F.lit("?")), F.lit(" marker at offset "),
        F.col("_closed.marker_offset").cast("string"),
        F.lit(": this copy ends before it (a follower not caught up, or a dump taken earlier)"))
    reason = (F.when(verdict != "undetermined", F.lit(None).cast("string")).when(closed_elsewhere, copy_behind)
              .when(~log_end_known, later)
              .when(consulted & known & view_short, read_while_moving).otherwise(no_coordinator))
    settle = (F.when((verdict == "hanging") & ~consulted, F.lit(AGE_ONLY_CANNOT_RULE_OUT_2PC))
              .when(verdict != "undetermined", F.lit(None).cast("string"))
              .when(closed_elsewhere, F.lit("this broker's state online (kafka-transactions.sh describe-producers): a "
                                           "follower catches up by itself; an earlier dump is superseded by the "
                                           "copy holding the marker"))
              .when(~log_end_known, F.lit("scan the whole partition directory"))
              .when(consulted & known & view_short, F.lit("scan again once the brokers are stopped (or a copy taken "
                                                         "while they were), or describe the transaction online "
                                                         "(kafka-transactions.sh describe)"))
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
    }).drop("_closed", "_tps", "_prev_tps", "_read_until", "_coordinator_updated", "log_dirs_stopped", "coordinator_read_until_ms",
            "coordinator_partition", "log_end_known", "high_watermark", "log_end_offset", "later_segments_not_given", "next_not_given_offset")
