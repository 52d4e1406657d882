"""**What.** A producer's transactional batches on a partition that no COMMIT or
ABORT marker of that producer closes, classified with the coordinator's record
of the transaction (``__transaction_state``):

* ``in-flight`` — the coordinator has the transaction Ongoing with this
  partition, and it is younger than its timeout: normal;
* ``two-phase-commit`` — the coordinator has the transaction Ongoing with this
  partition and a transaction timeout of ``Integer.MAX_VALUE``: a producer with
  ``transaction.two.phase.commit.enable=true`` (KIP-939) keeps it open on
  purpose until an external transaction coordinator (a database, Flink) decides,
  and the coordinator never times it out
  (``TransactionStateManager.timedOutTransactions`` skips
  ``TransactionMetadata.isDistributedTwoPhaseCommitTxn()``, Kafka 4.3.1 and
  4.4.0). Info, whatever its age, and no abort command: aborting it breaks the
  external transaction;
* ``late-write`` — the data belongs to a producer session (id, epoch) that has
  already had a marker on this partition, and the coordinator does not list the
  partition in an ongoing, unexpired transaction (the KAFKA-12671 pattern). With
  transaction.version 0/1 a producer keeps its epoch across transactions, so the
  same session writing again after a marker is normal *while* the coordinator
  has the partition in a new transaction;
* ``unknown-to-coordinator`` — no ``__transaction_state`` record of the cluster
  names this producer id;
* ``hanging`` — the coordinator has completed, fenced or expired the
  transaction, does not list the partition, or the transaction is older than its
  timeout (at most ``transaction.max.timeout.ms``).

* ``undetermined`` — the input cannot tell: the partition's later segments
  were not given (the marker may be there), or the coordinator's record of the
  producer is not in the input (no ``__transaction_state``, or only some of its
  partitions) and the transaction is not older than
  ``transaction.max.timeout.ms``; or another copy of the partition in the input
  (a follower, a dump of the broker taken at another time) holds the
  transaction's marker and this copy ends at or before it: this copy is behind
  (one that goes on past the marker's offset has diverged and keeps its verdict).
  The message says what is missing and what would settle it. A warning, never an
  all-clear: an open transaction that pins the LSO is only harmless once shown to
  be in flight.

Without the coordinator's records, age alone is decisive when it exceeds
``transaction.max.timeout.ms`` (``hanging``): a live coordinator aborts any
transaction by then — except a two-phase-commit one, which only the
coordinator's record shows; such a finding says so (``settled_by``), and the
transaction must be checked (``kafka-transactions.sh describe``) before an
abort. The classification and the age (reference instant minus
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
from auditor.rules._common import ABORT, COORDINATOR_EPOCH

EVIDENCE = (
    Evidence("age_only", "boolean", "true when no coordinator record could be consulted for the producer"),
    Evidence("coordinator_partitions_in_dump", "int", "how many __transaction_state partitions the dump holds records of"),
    Evidence("coordinator_state", "string", "state of the transactional id's latest coordinator record"),
    Evidence("coordinator_topic_partitions", "array<string>", "partitions that record lists in the transaction"),
    Evidence("transaction_timeout_ms", "int", "the transaction's timeout in that record"),
    Evidence("data_batches", "bigint", "transactional data batches of the open transaction"),
    Evidence("previous_marker_offset", "bigint", "offset of the producer's last marker on the partition before it"),
    Evidence("previous_marker_epoch", "int", "producer epoch of that marker"),
    COORDINATOR_EPOCH,
    Evidence("as_of_ms", "bigint", "the instant ages are measured against"),
    Evidence("undetermined_reason", "string", "what the input lacks to classify the transaction (undetermined only)"),
    Evidence("settled_by", "string", "what would settle it (undetermined), or tell a two-phase-commit transaction "
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
                       ABORT, _FIND_CLIENT),
    "unknown-to-coordinator": Kind("critical", "transaction unknown to the coordinator " + _WHERE + ": no "
                                   "__transaction_state record names producer {producer_id} (all "
                                   "{coordinator_partitions_in_dump} coordinator partitions with records were given)",
                                   ABORT, _FIND_CLIENT),
    "hanging": Kind("error", "hanging transaction " + _WHERE + ": [[the coordinator's state is {coordinator_state}, "
                    "without this partition in an unexpired transaction]][[{age_only:if}older than "
                    "transaction.max.timeout.ms, so a live coordinator would have aborted it, unless it is a two-phase-commit "
                    "transaction (KIP-939), which the coordinator never times out; the input lacks {settled_by}]]",
                    ABORT, _FIND_CLIENT),
}


def run(ctx):
    from pyspark.sql import functions as F

    from auditor.model import groups

    # the model's verdict and age (auditor.model.verdicts): stuck-lso reads the same row; on __consumer_offsets,
    # the groups the transaction commits offsets for, as of the commit (auditor.model.groups)
    o = join_replica(ctx.transaction_verdicts, groups.per_transaction(ctx.offset_commit_groups), "left",
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
        F.col("age_ms").alias("duration_ms"),
        F.col("verdict").alias("kind"),
        evidence(
            EVIDENCE,
            age_only=F.col("age_only"),
            coordinator_partitions_in_dump=F.col("coordinator_partitions_in_dump"),
            coordinator_state=F.col("coordinator_state"),
            coordinator_topic_partitions=F.col("coordinator_topic_partitions"),
            transaction_timeout_ms=F.col("transaction_timeout_ms"),
            data_batches=F.col("data_batches"),
            previous_marker_offset=F.col("prev_marker_offset"),
            previous_marker_epoch=F.col("prev_marker_epoch"),
            coordinator_epoch=F.col("prev_coordinator_epoch"),
            as_of_ms=F.col("as_of_ms"),
            undetermined_reason=F.col("undetermined_reason"),
            settled_by=F.col("settled_by"),
            offset_commit_groups=F.col("offset_commit_groups"),
            offset_commit_members=F.col("offset_commit_members"),
        ).alias("evidence"),
    )


RULE = Rule(
    id="hanging-transaction",
    title="Transactional data that no marker closes (open, hanging, late write)",
    run=run,
    kinds=KINDS,
    evidence=EVIDENCE,
    proposals=("KIP-890", "KIP-664", "KAFKA-12671"),
    views=("transaction_verdicts", "offset_commit_groups"),
    needs=("batches",),
)
