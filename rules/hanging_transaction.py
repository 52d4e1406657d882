"""**What.** A producer's transactional batches on a partition that no COMMIT or
ABORT marker of that producer closes, classified with the coordinator's record
of the transaction (``__transaction_state``):

* ``in-flight`` — the coordinator has the transaction Ongoing with this
  partition, and it is younger than its timeout, or it decided the transaction
  (PrepareCommit/PrepareAbort listing the partition) less than
  ``transaction.max.timeout.ms`` ago and is writing the markers: normal;
* ``two-phase-commit`` — the coordinator has the transaction Ongoing with this
  partition and a transaction timeout of ``Integer.MAX_VALUE``: a producer with
  ``transaction.two.phase.commit.enable=true`` (KIP-939) keeps it open on
  purpose until an external transaction coordinator (a database, Flink) decides,
  and the coordinator never times it out
  (``TransactionStateManager.timedOutTransactions`` skips
  ``TransactionMetadata.isDistributedTwoPhaseCommitTxn()``, Kafka 4.3.1 and
  4.4.0). Info, whatever its age, and no abort command: aborting it breaks the
  external transaction;
* ``markers-undelivered`` — the coordinator decided the transaction
  (``PrepareCommit``/``PrepareAbort`` listing the partition, or under
  transaction.version 2 the same transaction's marker on another partition)
  longer ago than the transaction's own timeout (its ``transaction.timeout.ms``
  in the coordinator's record, at most ``transaction.max.timeout.ms``; the
  maximum where the input has no record) and the partition still has no
  marker: the coordinator keeps retrying (``TransactionMarkerChannelManager``)
  and cannot reach the partition's leader. Markers take milliseconds once every
  leader answers, so a decision older than the time the coordinator gives the
  whole transaction has overdue markers. Error, no abort command: the fix is
  the leader (or a coordinator move), and an abort where the coordinator decided
  COMMIT tears the transaction. Younger than the timeout it is ``in-flight``;
* ``closed-after-the-copy`` — the log dirs were read while the brokers ran:
  the coordinator's records in the input complete the transaction's own
  decision after the last write the partition as read holds, and the metadata log
  shows the partition had a leader then. The coordinator writes ``Complete*``
  only once every marker is written (or dropped for a partition without a
  leader: ``TransactionMarkerChannelManager``), so the marker was written after
  the segment was read. Info;
* ``closed-on-another-replica`` — another copy of the partition in the input
  holds the transaction's COMMIT or ABORT marker and this copy ends at or before
  its offset: this copy is behind, the transaction closed. Info, and no abort
  (the transaction is closed; aborting a committed one tears it). The message
  names the copy holding the marker (log dir, broker, marker type and offset)
  and what the input shows of why this one lags: a ``-future`` replica (a move
  between the broker's log dirs, which serves no client until it replaces the
  current replica), a replica the metadata log shows being added (a
  reassignment), a dump of the same broker taken earlier, a broker stopped
  cleanly, a log dir not cleanly stopped with nothing written after the marker
  (a crashed or killed broker), a log starting later than the other copy's (a
  replica created later), or a broker that wrote on after the marker (a follower
  not caught up). A copy that goes on past the marker's offset without it has
  diverged (an unclean leader election can leave a real hanging transaction so):
  it keeps its verdict, and ``replica-divergence`` reports the split;
* ``marker-skipped`` — the coordinator committed the transaction and wrote
  ``CompleteCommit`` without this partition's marker: it drops markers for
  partitions without a leader (``addTxnMarkersToBrokerQueue``, "likely deleted
  already", KAFKA-5202). Critical: the coordinator sends no more markers and
  the rest of the transaction is committed. The advice starts with the leader:
  a leader that was frozen may still write the marker of a WriteTxnMarkers
  request it took before it froze (seen on Kafka 4.3.1), and the LSO then moves
  by itself. Only once the leader is back and a new scan still shows no marker
  does an abort unblock the LSO, at the cost of this partition's records of the
  transaction (the advice says how to keep them). No command: the choice is the
  operator's. A decided ABORT completed without the marker is ``hanging`` (the
  abort finishes what the coordinator decided);
* ``late-write`` — the data belongs to a producer session (id, epoch) that has
  already had a marker on this partition, and the coordinator does not list the
  partition in an ongoing, unexpired transaction (the KAFKA-12671 pattern). With
  transaction.version 0/1 a producer keeps its epoch across transactions, so the
  same session writing again after a marker is normal *while* the coordinator
  has the partition in a new transaction. With transaction.version 2 the
  coordinator bumps the epoch at every commit or abort and the markers carry
  the bumped epoch, so data with the marker's epoch is the next transaction and
  only data *below* it is late (``ProducerAppendInfo.checkProducerEpoch``);
* ``unknown-to-coordinator`` — no ``__transaction_state`` record of the cluster
  names this producer id;
* ``hanging`` — the coordinator's record shows it did not decide COMMIT: it
  has completed, fenced or expired the transaction, does not list the
  partition, or decided ABORT;
* ``overdue`` — the transaction is older than ``transaction.max.timeout.ms``
  and the input holds no record of the coordinator's about it (no
  ``__transaction_state``, or not the partition of its id). A live coordinator
  aborts an Ongoing transaction by then, so it is hanging -- unless the
  coordinator decided COMMIT and cannot reach this partition's leader (the
  markers wait for the leader; an abort would tear the transaction), or it is a
  two-phase-commit transaction. Error; the commands ask the coordinator first
  (kafka-transactions.sh describe and find-hanging) and the abort is printed
  guarded by what they show (``auditor/model/advice.py``: the safety contract of every abort).

* ``undetermined`` — the input cannot tell: the partition's later segments
  were not given (the marker may be there), or the coordinator's record of the
  producer is not in the input (no ``__transaction_state``, or only some of its
  partitions) and the transaction is not older than
  ``transaction.max.timeout.ms``. The message says what is missing and what would settle it. A warning, never an
  all-clear: an open transaction that pins the LSO is only harmless once shown to
  be in flight.

Without the coordinator's records, age alone says the transaction is overdue,
never that the coordinator would have aborted it: a coordinator that decided
COMMIT never aborts, it retries the markers until the partition's leader is
back (``overdue`` above). The classification and the age (reference instant minus
the first batch's timestamp) are the model's (``auditor/model/verdicts.py``):
``stuck-lso`` reports the same verdict and age for the transaction pinning the
LSO.

**Why it matters.** While the transaction is open the partition's last stable
offset (LSO) cannot pass its first offset: ``read_committed`` consumers stop
there and see nothing written after it, the log cleaner cannot compact past it,
and on ``__consumer_offsets`` the group's pending offsets keep its consumers from
starting. Only a marker closes it, and for a hanging transaction none will come:
it stays until an administrator aborts it.

**How it arises.** The coordinator writes markers only to partitions it knows
are in the transaction. A produce request delayed past the abort of its
transaction (KAFKA-12671) or a buggy client that writes to a partition it never
added (AddPartitionsToTxn) leaves data no marker will ever close; so do lost
markers after unclean leader elections. KIP-890 (part 1: broker-side
verification, 3.6; part 2: epoch bump per transaction, transaction.version 2)
closes these holes for new clients.
"""

from __future__ import annotations

from auditor.engine.findings import evidence
from auditor.engine.rule import Evidence, Kind, Rule
from auditor.engine.views import REPLICA, join_replica
from auditor.rules._common import ABORT, CHECK_THEN_ABORT, COORDINATOR_EPOCH

EVIDENCE = (
    Evidence("age_only", "boolean", "true when no coordinator record could be consulted for the producer"),
    Evidence("coordinator_partitions_in_dump", "int", "how many __transaction_state partitions the dump holds records of"),
    Evidence("coordinator_state", "string", "state of the coordinator's record of this transaction: its decision's "
                                            "newest record, else the newest of its producer id and epoch (null: none)"),
    Evidence("coordinator_record", "string", "that record (partition, offset, producer, epoch), or that the input has "
                                             "none, with the transactional id's newest record where it is another"),
    Evidence("coordinator_topic_partitions", "array<string>", "partitions that record lists in the transaction"),
    Evidence("transaction_timeout_ms", "int", "the transaction's timeout in that record"),
    Evidence("data_batches", "bigint", "transactional data batches of the open transaction"),
    Evidence("previous_marker_offset", "bigint", "offset of the producer's last marker on the partition before it"),
    Evidence("previous_marker_epoch", "int", "producer epoch of that marker"),
    COORDINATOR_EPOCH,
    Evidence("as_of_ms", "bigint", "the instant ages are measured against"),
    Evidence("transaction_version", "int", "the producer's transaction version where the input shows it (2: the "
             "coordinator's ClientTransactionVersion, or a COMMIT marker above its data's epoch)"),
    Evidence("decision", "string", "COMMIT or ABORT: what the coordinator decided for this transaction, where the "
                                   "input shows it (auditor/model/decisions.py)"),
    Evidence("decision_record", "string", "the coordinator's Prepare* record of that decision (and the record after it)"),
    Evidence("decision_marker", "string", "transaction version 2: this transaction's marker on another partition"),
    Evidence("partition_leader", "int", "the partition's leader as the metadata log last records it (-1: none)"),
    Evidence("partition_leader_then", "int", "the partition's leader when the coordinator completed the transaction "
                                             "(the metadata log; -1: none)"),
    Evidence("partition_leaderless", "boolean", "the metadata log shows the partition without a leader when the "
                                                "coordinator completed the transaction"),
    Evidence("undetermined_reason", "string", "what the input lacks to classify the transaction (undetermined), or "
             "which copy holds its marker and why this one may be behind (closed-on-another-replica)"),
    Evidence("settled_by", "string", "what would settle it (undetermined), what to check of a copy behind another "
                                     "(closed-on-another-replica), or tell a two-phase-commit transaction "
                                     "from it (hanging by age alone)"),
    Evidence("offset_commit_groups", "array<string>", "on __consumer_offsets: the groups whose offsets the transaction "
             "commits, with their protocol (classic or KIP-848 consumer) as of the commit (auditor/model/groups.py)"),
    Evidence("offset_commit_members", "array<string>", "on __consumer_offsets: those groups' members as of the commit "
             "(member id, client id and host, member epoch, assigned partitions)"),
)

_WHERE = ("on {topic}-{partition} from offset {first_offset} (producer {producer_id}, epoch {producer_epoch}"
          "[[, transactional id {transactional_id}]]), open for {duration_ms:duration}"
          "[[; it commits offsets of {offset_commit_groups:list}]][[; members at the commit: {offset_commit_members:list}]]")
_FIND_CLIENT = ("after the abort, find the client of the transactional id (or producer id) and upgrade it to a KIP-890 client "
                "(3.6+ brokers verify partitions; transaction.version 2 bumps the epoch per transaction)")
_SETTLE = ("not an all-clear: give the input the message names and audit again, or check it online with "
           "kafka-transactions.sh --bootstrap-server <broker:port> describe-producers --topic <topic> --partition <n> "
           "(a producer still listed with this current transaction start offset holds the LSO); abort it only once it "
           "proves hanging")
_TWO_PC = ("normal while its external transaction coordinator has not decided: that coordinator completes it "
           "through the transactional id's producer (KIP-939: a producer re-initialised with "
           "initTransactions(keepPreparedTxn=true), then completeTransaction(preparedTxnState); Kafka 4.3.1 and 4.4.0 "
           "coordinators answer keepPreparedTxn with UNSUPPORTED_VERSION, so there only the producer session that "
           "prepared it can still commit it). Abort it only once the external coordinator has decided to abort "
           "or is gone for good, and through the coordinator: kafka-transactions.sh --bootstrap-server <broker:port> "
           "forceTerminateTransaction --transactionalId <transactional id> (initialising a producer of that "
           "transactional id without keepPreparedTxn does the same); the partition-level abort command leaves the "
           "coordinator's transaction open")
_LEADER = ("the broker leading {topic}-{partition}[[ (broker {partition_leader} as the metadata log last records "
           "it; -1: no leader)]]")
_UNDELIVERED = ("bring back " + _LEADER + " (a paused, partitioned or fenced broker): the coordinator resends the "
                "markers until each is written (TransactionMarkerChannelManager), and moving leadership of its "
                "__transaction_state partition makes a new coordinator load the decision and send them again. Never "
                "abort this partition by hand: an ABORT marker where the coordinator decided COMMIT tears the "
                "transaction (its other partitions keep the records, this one loses them)")
_LEADER_FIRST = ("first the leader: make sure {topic}-{partition} has a live leader (kafka-topics.sh --describe); a "
                 "leader that was frozen or partitioned may still write the marker of a WriteTxnMarkers request it took "
                 "before, and the LSO then moves by itself: scan again (or kafka-transactions.sh describe-producers) once "
                 "it is back. ")
_SKIPPED = (_LEADER_FIRST + "Only if the leader is back and the marker still missing, an abort unblocks the LSO "
            "(kafka-transactions.sh --bootstrap-server <broker:port> abort --topic {topic} --partition {partition} "
            "--start-offset {first_offset}), and it costs this partition's records of the committed transaction (offsets "
            "{first_offset}..{last_offset}): read_committed consumers never see them, while the rest of the transaction "
            "stays committed. Before aborting, copy them (txn-audit timeline on the partition, or a consumer with "
            "isolation.level=read_uncommitted from offset {first_offset}, producer {producer_id}) and produce them "
            "again after the abort if they must be delivered; torn-transaction reports the same transaction")
# where the abort is the fix (the input shows no decision to COMMIT): it needs the partition's leader
_ABORT_ADVICE = ("abort once the partition has a leader, then upgrade the client of the transactional id (or producer "
                 "id) to a KIP-890 client (3.6+ brokers verify partitions; transaction.version 2 bumps the epoch per "
                 "transaction)")
_CHECK_FIRST = ("ask the coordinator before anything else: describe shows the transactional id's state "
                "(PrepareCommit, or CompleteCommit of this transaction: the coordinator decided COMMIT, so bring back "
                "the partition's leader and never abort; Ongoing with transaction timeout 2147483647: a two-phase-commit "
                "transaction); find-hanging lists the partition only when the coordinator no longer has it in a "
                "transaction, and fails while the partition's leader is down (restore the leader first). Abort only what "
                "find-hanging lists, or scan again with the cluster's __transaction_state partitions, which settles it; "
                + _FIND_CLIENT)
KINDS = {
    "in-flight": Kind("info", "open transaction " + _WHERE + ": the coordinator has it {coordinator_state} with this "
                      "partition, within its timeout"),
    "two-phase-commit": Kind("info", "two-phase-commit transaction " + _WHERE + ": the coordinator has it "
                             "{coordinator_state} with this partition and transaction timeout {transaction_timeout_ms} "
                             "(Integer.MAX_VALUE: transaction.two.phase.commit.enable, KIP-939), so it never times it "
                             "out; it waits for its external transaction coordinator to commit or abort it",
                             advice=_TWO_PC),
    "undetermined": Kind("warning", "open transaction the input cannot judge " + _WHERE + ": {undetermined_reason}; "
                         "to settle it: {settled_by}",
                         advice=_SETTLE),
    "late-write": Kind("critical", "late write " + _WHERE + ": written by producer session {producer_id}/{producer_epoch} "
                       "after that session's marker at offset {previous_marker_offset}; no marker will close it (KAFKA-12671)",
                       ABORT, _ABORT_ADVICE),
    "unknown-to-coordinator": Kind("critical", "transaction unknown to the coordinator " + _WHERE + ": no "
                                   "__transaction_state record names producer {producer_id} (all "
                                   "{coordinator_partitions_in_dump} coordinator partitions with records were given)",
                                   ABORT, _ABORT_ADVICE),
    "markers-undelivered": Kind(
        "error", "markers undelivered " + _WHERE + ": the coordinator decided {decision}[[ ({decision_record})]] "
        "longer ago than its transaction timeout[[ ({transaction_timeout_ms} ms in its record)]] or "
        "transaction.max.timeout.ms, whichever is shorter[[ (the transaction's {decision_marker} is written)]], and this "
        "partition still has no marker: its leader has not taken it (paused, partitioned or fenced)",
        advice=_UNDELIVERED),
    "marker-skipped": Kind(
        "critical", "marker skipped " + _WHERE + ": the coordinator committed the transaction and completed it "
        "without this partition's marker[[ ({decision_record})]][[{partition_leaderless:if}; the partition had no "
        "leader then (TransactionMarkerChannelManager drops markers for partitions without a leader, KAFKA-5202)]]: "
        "the rest of the transaction is committed, and the coordinator sends this partition no more markers",
        advice=_SKIPPED),
    "closed-on-another-replica": Kind(
        "info", "transaction closed on another replica, not yet in this copy (log dir {log_dir}[[, broker {broker_id}]]), "
        + _WHERE + ": {undetermined_reason}",
        advice="no action on the transaction, and never an abort: it is closed where its marker is, and this copy "
               "gets the marker by replication (or is superseded). To check this copy: {settled_by}"),
    "closed-after-the-copy": Kind(
        "info", "transaction closed after the copy " + _WHERE + ": the coordinator completed it ({decision_record}) "
        "after the last write this partition as read holds, which had a leader then[[ (broker {partition_leader_then})]]: "
        "its {decision} marker was written after the segment was read (the coordinator writes Complete* only once "
        "every marker is written)",
        advice="no action: a copy taken later, or the broker online (kafka-transactions.sh describe-producers), shows "
               "the marker"),
    "hanging": Kind("error", "hanging transaction " + _WHERE + ": [[the coordinator's record of it: {coordinator_record}; ]]"
                    "this partition is in no unexpired transaction of the producer[[ (the coordinator decided "
                    "{decision})]]", ABORT, _ABORT_ADVICE),
    "overdue": Kind("error", "overdue transaction " + _WHERE + ": older than transaction.max.timeout.ms, and the input "
                    "holds no record of the coordinator's about it (__transaction_state): hanging if the coordinator "
                    "ended it without this partition's marker; but if it decided COMMIT and cannot reach this "
                    "partition's leader (paused, partitioned or fenced), the marker comes once the leader is back and "
                    "an abort would tear the transaction; and a two-phase-commit transaction (KIP-939) is never timed "
                    "out", CHECK_THEN_ABORT, _CHECK_FIRST),
}


def run(ctx):
    from pyspark.sql import functions as F

    from auditor.model import groups

    # the model's verdict and age (auditor.model.verdicts): stuck-lso reads the same row; on __consumer_offsets,
    # the groups the transaction commits offsets for, as of the commit (auditor.model.groups)
    o = join_replica(ctx.transaction_evidence, groups.per_transaction(ctx.offset_commit_groups), "left",
                     on=["producer_id", "first_offset"])
    return o.select(
        *REPLICA,
        "producer_id",
        F.col("data_epoch_max").alias("producer_epoch"),
        "transactional_id",
        "first_offset",
        F.col("last_data_offset").alias("last_offset"),
        "first_timestamp",
        F.col("last_data_timestamp").alias("last_timestamp"),
        F.lit(None).cast("string").alias("kind"),  # the verdict: decide()
        evidence(
            EVIDENCE,
            age_only=F.col("age_only"),
            coordinator_partitions_in_dump=F.col("coordinator_partitions_in_dump"),
            coordinator_state=F.col("transaction_coordinator_state"),
            coordinator_record=F.col("coordinator_record"),
            coordinator_topic_partitions=F.col("coordinator_topic_partitions"),
            transaction_timeout_ms=F.col("transaction_timeout_ms"),
            data_batches=F.col("data_batches"),
            previous_marker_offset=F.col("prev_marker_offset"),
            previous_marker_epoch=F.col("prev_marker_epoch"),
            coordinator_epoch=F.col("prev_coordinator_epoch"),
            transaction_version=F.col("transaction_version"),
            decision=F.col("decision"),
            decision_record=F.col("decision_record"),
            decision_marker=F.col("decision_marker"),
            partition_leader=F.col("partition_leader"),
            partition_leader_then=F.col("partition_leader_then"),
            partition_leaderless=F.col("partition_leaderless"),
            offset_commit_groups=F.col("offset_commit_groups"),
            offset_commit_members=F.col("offset_commit_members"),
        ).alias("evidence"),
    )


def decide(finding: dict, verdicts) -> dict:
    """The transaction's verdict (the kind), its age and what the verdict rests on, as of the
    audit's reference instant (:class:`auditor.model.verdict_table.Verdicts`)."""
    v = verdicts.of(finding) or {}
    ev = {**finding["evidence"], "as_of_ms": v.get("as_of_ms"), "undetermined_reason": v.get("undetermined_reason"),
          "settled_by": v.get("settled_by")}
    return {**finding, "kind": v.get("verdict"), "duration_ms": v.get("age_ms"), "evidence": ev}


RULE = Rule(
    id="hanging-transaction",
    title="Transactional data that no marker closes (open, hanging, late write)",
    run=run,
    kinds=KINDS,
    evidence=EVIDENCE,
    proposals=("KIP-890", "KIP-664", "KAFKA-12671"),
    views=("transaction_evidence", "offset_commit_groups"),
    needs=("batches",),
    decide=decide,
)
