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
* ``closed-on-another-replica`` — another copy of the partition in the input
  (another log dir: a follower, a ``-future`` replica of a move between log dirs, a
  reassignment's new replica, a dump of the same broker taken at another time)
  holds the transaction's marker, and this copy ends at or before that offset: it
  is behind, open there but closed. Info, whatever else this copy lacks; the reason
  names the copy holding the marker and what the input shows of why this one lags
  (:mod:`auditor.model.copies`). A copy that goes on past the marker's offset
  without it has diverged, and keeps its verdict;
* ``markers-undelivered`` — the coordinator decided the transaction (its
  ``Prepare*`` record listing the partition, or under transaction version 2 the
  same transaction's marker on another partition: :mod:`auditor.model.decisions`)
  longer than ``transaction.max.timeout.ms`` ago, and this partition has no
  marker yet: the coordinator keeps retrying (``TransactionMarkerChannelManager``).
  Younger, and decided by the coordinator's record, it is ``in-flight``;
* ``closed-after-the-copy`` — the log dirs were read while the brokers ran and the
  coordinator's records in the input complete the transaction's own decision
  (``Prepare*`` listing the partition, then ``Complete*``), after the newest
  batch read from the partition, which had a leader then (the metadata log): the
  coordinator writes ``Complete*`` only once every marker is written or dropped
  for a partition without a leader (``TransactionMarkerChannelManager``), so the
  marker was written after the segment was read. Info;
* ``marker-skipped`` — the coordinator decided COMMIT and wrote ``CompleteCommit``
  without this partition's marker (it drops markers for partitions without a
  leader); where the log may have moved while read and the data partition as read
  ends before the completion, only the metadata log showing the partition
  leaderless tells a dropped marker from one written after the read (else
  ``undetermined``). A decided ABORT completed so is ``hanging``: the abort
  finishes what the coordinator decided;
* ``late-write`` — the data belongs to a producer session (id, epoch) that already
  had a marker on this partition, and the coordinator does not list the partition
  in an ongoing, unexpired transaction (KAFKA-12671). With transaction version 0/1
  a session keeps its epoch across transactions, so the same session writing after
  a marker is normal *while* the coordinator has the partition in a new one. With
  transaction version 2 the marker carries the bumped epoch of the next
  transaction, so only data *below* the marker's epoch is late;
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
  producer is not in the input and the transaction is not provably too old; or,
  under transaction version 2, the coordinator's records of the producer are past
  the data's epoch (it ended the transaction) but the decision is no longer in the
  input (compacted) nor any of its markers. ``undetermined_reason`` says what is
  missing and ``settled_by`` what would settle it (for ``closed-on-another-replica``:
  where the marker is and why this copy may lag, and what to check of it).

The **age** is the reference instant (``as_of``: the newest timestamp of the
cluster's input, or ``--as-of``: :class:`auditor.model.clock.Clock`) minus the
transaction's first batch timestamp. Other times (how long the LSO has trailed the
newest data) are separate evidence.

Two halves: this module gathers the evidence with Spark (:func:`open_transaction_evidence`:
the joins, none of them depending on the reference instant), and the decision table
(:mod:`auditor.model.verdict_table`) turns a transaction's evidence and the clock into its
verdict, on the driver, once per audit and again for another ``--as-of`` without Spark.
"""

from __future__ import annotations

from auditor.model.coverage import SEGMENT_ALONE
from auditor.model.replica_key import REPLICA, join_replica
from auditor.model.verdict_table import FACTS

VERDICTS = ("in-flight", "two-phase-commit", "closed-after-the-copy", "closed-on-another-replica",
            "markers-undelivered", "marker-skipped",
            "late-write", "unknown-to-coordinator", "hanging", "overdue", "undetermined")
# TransactionMetadata.isDistributedTwoPhaseCommitTxn(): txnTimeoutMs == Integer.MAX_VALUE (Kafka 4.3.1, 4.4.0)
TWO_PHASE_COMMIT_TIMEOUT_MS = 2**31 - 1


def open_transaction_evidence(open_txns, partitions, *, transactions, coordinator=None, stopped=None,
                              replicated: bool = True, leaders=None, persist=None, written=None, copies=None):
    """``open_txns`` (the model's open transactions) with the replica's coverage
    (``partitions``: ``log_end_known``), the coordinator's view of the
    producer, its decision (:func:`auditor.model.decisions.with_decisions`) and the facts the
    verdict's decision table reads (``ev_*``: :data:`auditor.model.verdict_table.FACTS`, none of
    them depending on the reference instant).
    ``transactions``: the model's transactions of every replica (the decision's markers on other
    partitions; with ``replicated``, copies of the partition holding the marker: where another
    copy has the same transaction (producer id, first offset) closed by a marker and this one's
    log ends at or before that marker, the open one is ``closed-on-another-replica``: this copy is
    behind). ``copies``: :func:`auditor.model.copies.copy_facts` (why a copy may be behind, and which
    replicas are ``-future`` ones: the ``future_replica`` column), or None.
    ``coordinator``: None when no cluster of the input has ``__transaction_state`` records, else a
    dict of DataFrames ``ids`` (cluster_id, producer_id, transactional_id), ``latest`` (the latest
    record per transactional id), ``history`` (:func:`auditor.model.coordinator.history`),
    ``coverage`` (per cluster: ``coordinator_partitions_given``, ``coordinator_partitions_expected``,
    ``coordinator_complete``), ``in_input`` (per cluster: ``coordinator_partitions`` with records)
    and ``read_until`` (per ``__transaction_state`` partition: how far the input's view of it
    reaches, :func:`auditor.model.moving.coordinator_read_until`). ``stopped``: per cluster,
    ``log_dirs_stopped`` (:func:`auditor.model.moving.stopped_clusters`); None, or a cluster without
    a row: taken as stopped. ``written``: per replica, ``written_until_ms``
    (:func:`auditor.model.moving.replica_written_until`), or None: how far the replica as read
    reaches is then its newest batch timestamp alone.
    ``leaders``: :func:`auditor.model.decisions.partition_leaders`, or None.
    ``persist``: the engine's way to keep a DataFrame (``AuditContext.persist``), applied to the open
    transactions with their coordinator's view before the decisions join aggregates of them back to
    them four times (without it each join copies the whole lineage into the plan: 1.3 MB of plan text).

    Added columns: ``transactional_id``, ``coordinator_state``,
    ``coordinator_producer_id``, ``transaction_timeout_ms``, ``start_timestamp_ms``,
    ``coordinator_topic_partitions`` (``topic-N`` strings), ``coordinator_partitions_in_dump``,
    ``age_only`` (no coordinator record could be consulted), ``future_replica`` (the replica's
    directory is a ``-future`` one: it serves no client), the decision's columns
    (:data:`auditor.model.decisions.DECISION_COLUMNS`), the facts, and the rest of what the decision
    reads (:data:`auditor.model.verdict_table.INPUTS`)."""
    from pyspark.sql import functions as F

    from auditor.model import decisions

    o = open_txns
    cov = partitions.select(*REPLICA, "log_end_known", "given_as", "next_not_given_offset", "later_segments_not_given",
                            "segments_not_given_between", "gap_from_offset", "gap_to_offset",
                            "high_watermark", "log_end_offset", F.col("max_timestamp").alias("_read_until"))
    o = join_replica(o, cov, "left")
    if written is not None:  # how far the replica as read reaches: the earlier of the two clocks' bounds
        o = join_replica(o, written, "left").withColumn(
            "_read_until", F.least(F.col("written_until_ms"), F.col("_read_until"))).drop("written_until_ms")
    o, c = _with_coordinator(o, coordinator)
    if persist is not None:  # the decisions join the transactions to aggregates of themselves: one plan, not many
        o = persist(o)
    o = decisions.with_decisions(o, transactions=transactions, leaders=leaders, persist=persist, partitions=partitions,
                                 history=coordinator.get("history") if coordinator is not None else None)
    o = _with_closed_elsewhere(o, transactions if replicated else None, copies)
    if stopped is not None:
        o = o.join(F.broadcast(stopped), "cluster_id", "left")
        c["moving"] = ~F.coalesce(F.col("log_dirs_stopped"), F.lit(True))
    else:
        c["moving"] = F.lit(False)
    facts = _facts(c)
    return o.withColumns({
        "coordinator_topic_partitions": c["tps"],
        "coordinator_partitions_in_dump": F.col("coordinator_partitions").cast("int"),
        "age_only": ~c["consulted"],
        "_coordinator_given": c["given"],
        "_coordinator_expected": c["expected"],
        **{f"ev_{name}": facts[name] for name in FACTS},
    })


def _with_coordinator(o, coordinator):
    """``o`` joined with the coordinator's latest record of the producer's transactional id, and
    the conditions the verdict reads of it (a dict of Columns; all false without a coordinator)."""
    from pyspark.sql import functions as F

    c: dict = {}
    if coordinator is None:
        for name, t in (("transactional_id", "string"), ("coordinator_state", "string"),
                        ("coordinator_producer_id", "bigint"), ("coordinator_producer_epoch", "int"),
                        ("client_transaction_version", "int"), ("_latest_offset", "bigint"),
                        ("transaction_timeout_ms", "int"), ("start_timestamp_ms", "bigint"),
                        ("coordinator_partitions", "bigint")):
            o = o.withColumn(name, F.lit(None).cast(t))
        for name in ("has_log", "complete", "known", "ongoing_here", "two_phase", "coordinator_behind",
                     "marker_maybe_later"):
            c[name] = F.lit(False)
        c.update(tps=F.lit(None).cast("array<string>"), given=F.lit(0), expected=F.lit(None).cast("int"))
        c["consulted"] = F.lit(False)
        return o, c
    from auditor.model.coordinator import transactional_id_of

    latest = coordinator["latest"].select(
        "cluster_id", "transactional_id", F.col("state").alias("coordinator_state"),
        F.col("producer_id").alias("coordinator_producer_id"),
        F.col("producer_epoch").cast("int").alias("coordinator_producer_epoch"),
        F.col("client_transaction_version").cast("int").alias("client_transaction_version"),
        F.col("offset").alias("_latest_offset"),
        "transaction_timeout_ms", "start_timestamp_ms", F.col("topic_partitions").alias("_tps"),
        F.col("partition").alias("coordinator_partition"), F.col("last_update_timestamp_ms").alias("_coordinator_updated"))
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
    o = (o.join(transactional_id_of(coordinator["ids"]), ["cluster_id", "producer_id"], "left")
         .join(latest, ["cluster_id", "transactional_id"], "left")
         .join(F.broadcast(coordinator["coverage"]), "cluster_id", "left")
         .join(F.broadcast(coordinator["in_input"]), "cluster_id", "left"))
    _coordinator_conditions(c)
    return o, c


def _coordinator_conditions(c: dict) -> None:
    """The conditions on the coordinator's latest record the verdict reads, into ``c``."""
    from pyspark.sql import functions as F

    def names_partition(col):
        return F.exists(F.coalesce(F.col(col), F.array()),
                        lambda tp: (tp["topic"] == F.col("topic")) & (tp["partition"] == F.col("partition")))

    same_producer = F.col("coordinator_producer_id") == F.col("producer_id")
    c["has_log"] = F.col("coordinator_partitions").isNotNull()
    # a cluster the inventory does not list (hand-made tables) is taken as given whole
    c["complete"] = F.coalesce(F.col("coordinator_complete"), F.lit(True))
    c["known"] = F.col("transactional_id").isNotNull()
    c["consulted"] = c["has_log"] & (c["known"] | c["complete"])
    c["ongoing_here"] = (F.col("coordinator_state") == "Ongoing") & names_partition("_tps") & same_producer
    # a view that may not reach far enough (see auditor.model.moving)
    c["coordinator_behind"] = F.coalesce(F.col("coordinator_read_until_ms"), F.lit(-1)) < F.col("first_timestamp")
    # the producer's transaction with this partition is completing (Prepare*) or completed; a Complete*
    # record no longer lists the partitions (TransactionMetadata.prepareComplete clears them): the record
    # before it (PrepareCommit/PrepareAbort) does
    ends_here = ((F.col("coordinator_state").isin("PrepareCommit", "PrepareAbort") & names_partition("_tps"))
                 | (F.col("coordinator_state").isin("CompleteCommit", "CompleteAbort") & names_partition("_prev_tps")))
    c["marker_maybe_later"] = same_producer & ends_here & (F.col("_coordinator_updated") >= F.col("first_timestamp")) & (
        F.coalesce(F.col("_read_until"), F.lit(-1)) < F.col("_coordinator_updated"))
    c["two_phase"] = F.coalesce(F.col("transaction_timeout_ms") == TWO_PHASE_COMMIT_TIMEOUT_MS, F.lit(False))
    c["tps"] = F.transform(F.col("_tps"), lambda tp: F.concat(tp["topic"], F.lit("-"), tp["partition"].cast("string")))
    c["given"] = F.coalesce(F.col("coordinator_partitions_given"), F.lit(0))
    c["expected"] = F.col("coordinator_partitions_expected")


_CLOSED_TYPE = ("struct<marker_offset:bigint,log_dir:string,broker_id:int,marker_type:string,marker_timestamp:bigint,"
                "log_start_offset:bigint>")
_COPY_TYPE = ("struct<future_replica:boolean,log_dir_stopped:boolean,log_dir_newest_ms:bigint,log_start_offset:bigint,"
              "being_added:boolean>")


def _with_closed_elsewhere(o, transactions, copies=None):
    """``_closed``: the marker another copy of the partition holds for the same transaction
    (producer id, first offset; of several, the lowest marker offset), with that copy's log start;
    null without one, or when ``transactions`` is None. ``_copy``: what the input shows of this
    copy (:func:`auditor.model.copies.copy_facts`, ``being_added``: the metadata log lists its broker
    as being added), which the verdict table reads to say why a copy may be behind the one holding
    the marker; null without ``copies``. ``future_replica``: this replica's directory is a
    ``-future`` one (false without ``copies``): it serves no client."""
    from pyspark.sql import functions as F

    from auditor.model.replica_key import join_null_safe

    if transactions is None:
        o = o.withColumn("_c", F.lit(None).cast(_CLOSED_TYPE))
    else:
        closed = transactions.where(F.col("state").isin("commit", "abort")).groupBy(
            "cluster_id", "topic", "partition", "producer_id", "first_offset").agg(
            F.min(F.struct("marker_offset", "log_dir", "broker_id", "marker_type", "marker_timestamp")).alias("_c"))
        o = o.join(closed, ["cluster_id", "topic", "partition", "producer_id", "first_offset"], "left")
    if copies is None:
        o = o.withColumns({"_copy": F.lit(None).cast(_COPY_TYPE), "future_replica": F.lit(False),
                           "_h_start": F.lit(None).cast("bigint")})
    else:
        mine = copies.select(*REPLICA, "future_replica", F.struct(
            "future_replica", "log_dir_stopped", "log_dir_newest_ms", "log_start_offset",
            F.array_contains("adding", F.col("broker_id")).alias("being_added")).alias("_copy"))
        o = join_replica(o, F.broadcast(mine), "left")
        holder = copies.select("cluster_id", "topic", "partition", F.col("broker_id").alias("_h_broker"),
                               F.col("log_dir").alias("_h_dir"), F.col("log_start_offset").alias("_h_start"))
        o = o.withColumns({"_h_broker": F.col("_c.broker_id"), "_h_dir": F.col("_c.log_dir")})
        o = join_null_safe(o, F.broadcast(holder), ["_h_broker"], "left",
                           on=["cluster_id", "_h_dir", "topic", "partition"]).drop("_h_broker", "_h_dir")
    closed = F.when(F.col("_c").isNotNull(), F.struct(*(F.col(f"_c.{k}").alias(k) for k in (
        "marker_offset", "log_dir", "broker_id", "marker_type", "marker_timestamp")), F.col("_h_start").alias(
        "log_start_offset")))
    return o.withColumns({"_closed": closed, "future_replica": F.coalesce("future_replica", F.lit(False))}).drop(
        "_c", "_h_start")


def _facts(c: dict) -> dict:
    """The facts the decision table reads (:data:`auditor.model.verdict_table.FACTS`), from
    ``c``'s conditions and the decision's columns: none depends on the reference instant."""
    from pyspark.sql import functions as F

    d = {k: c[k] for k in ("consulted", "known", "ongoing_here", "two_phase", "moving", "coordinator_behind",
                           "marker_maybe_later")}
    # behind, not diverged: this copy ends at or before the other's marker (a copy that goes on past that
    # offset without the marker has diverged -- an unclean leader election can leave a real hanging
    # transaction so, beside the old leader's copy with the marker: replica-divergence reports the split)
    d["closed_elsewhere"] = F.coalesce(F.col("log_end_offset") <= F.col("_closed.marker_offset"), F.lit(False))
    d["log_end_known"] = F.coalesce(F.col("log_end_known"), F.lit(True))
    # segments of the partition missing between the ones read (left out by the user, gone or replaced while
    # a running broker was read: auditor.ingest.tables.replaced, or offsets no segment as read holds:
    # auditor.model.replica.log_bounds) where they may hold the marker: the gap ends after the
    # transaction's first offset (an unknown end: anywhere)
    d["gap_after_start"] = F.col("gap_from_offset").isNotNull() & F.coalesce(
        F.col("gap_to_offset") > F.col("first_offset"), F.lit(True))
    # the log end is unknown only because the high watermark checkpoint was written after the segment was
    # read (every segment of the directory given, the log dirs not stopped)
    d["log_moved"] = c["moving"] & (F.coalesce(F.col("later_segments_not_given"), F.lit(0)) == 0) & (
        F.coalesce(F.col("given_as"), F.lit("")) != SEGMENT_ALONE)
    # data after its session's marker: with transaction version 2 the next transaction has the marker's
    # (bumped) epoch, so only an epoch below it is late (ProducerAppendInfo.checkProducerEpoch)
    after = F.when(F.col("_tv2"), F.col("data_epoch_min") < F.col("prev_marker_epoch")).otherwise(
        F.col("data_epoch_min") <= F.col("prev_marker_epoch"))
    d["session_had_marker"] = F.col("prev_marker_epoch").isNotNull() & after
    d["decided"] = F.col("decision").isNotNull()
    d["by_coordinator"] = F.col("decision_source") == "coordinator"
    d["completed"] = F.coalesce(F.col("decision_completed"), F.lit(False))
    # the partition as read ends before the coordinator completed: its marker may have come after the read,
    # unless the metadata log shows the partition had no leader then (the marker was dropped)
    d["marker_after_read"] = c["moving"] & (
        F.coalesce(F.col("_read_until"), F.lit(-1)) < F.coalesce(F.col("completed_ms"), F.lit(-1))) & ~F.coalesce(
        F.col("partition_leaderless"), F.lit(False))
    d["leader_then_known"] = F.col("partition_leader_then").isNotNull()
    d["decision_commit"] = F.col("decision") == "COMMIT"
    d["moved_past"] = F.col("coordinator_moved_past")
    return d
