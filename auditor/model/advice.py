"""When an abort may be advised: the safety contract every finding's advice is held to.

``kafka-transactions.sh abort`` (KIP-664) sends the partition's leader the WriteTxnMarkers
request a coordinator would send, with an ABORT marker: it closes the open data on that one
partition whatever the coordinator decided. Where the coordinator decided COMMIT, the
transaction's other partitions keep their records and this one loses them for
``read_committed`` consumers: the transaction is torn, for good. A tool used in incidents must
therefore never advise an abort the input cannot justify. The contract, by what the input
shows of the coordinator's decision (the open transaction's verdict,
:mod:`auditor.model.verdict_table`):

* :data:`ABORT_SAFE` -- the input shows the coordinator did not decide COMMIT: its record of
  the producer lists the partition in no unexpired transaction, or it names no such producer
  (every coordinator partition given), or it decided ABORT, or the data came after the
  session's marker (a late write). The abort is the fix, printed as a command.
* :data:`CHECK_FIRST` -- the input holds no record of the coordinator's, only the age: the
  transaction may be hanging, or decided COMMIT with this partition's leader absent or frozen
  (the coordinator retries the marker until the leader is back,
  ``TransactionMarkerChannelManager``). The check that consults the coordinator comes first
  (``describe --transactional-id`` where the id is known; ``find-hanging``, which lists a
  partition only when the coordinator no longer has it in a transaction,
  ``TransactionsCommand.FindHangingTransactionsCommand``), and the abort is printed only as
  guarded by it (:data:`GUARD`), never as a command to paste alone.
* :data:`LEADER_FIRST` -- the coordinator decided COMMIT and completed it without this
  partition's marker. It sends no more markers, but a leader that was frozen may still write
  one it took before it froze. Restoring the leader comes first; an abort, which costs the
  committed records here, only once the leader is back and a new scan still shows no marker:
  in the advice, never as a command.
* every other verdict -- no abort at all (in flight, markers still being delivered, closed
  after the copy or on another replica, two-phase commit, undetermined).

``tests/test_advice_contract.py`` holds the decision table and every rule's kinds to it over
generated evidence.
"""

from __future__ import annotations

ABORT_SAFE = frozenset({"hanging", "late-write", "unknown-to-coordinator"})
CHECK_FIRST = frozenset({"overdue"})
LEADER_FIRST = frozenset({"marker-skipped"})

#: the ``applies_to`` of a command's form for brokers before 3.0 (no ``--start-offset``): an alternative
#: form, not a condition
LEGACY_FORM = "brokers before 3.0"
#: what a guarded abort's ``applies_to`` says: the condition the checks before it must show
GUARD = "only if find-hanging lists the partition and describe shows no PrepareCommit or CompleteCommit of it"
#: the words that claim what a coordinator would have done: only where its record was read
COORDINATOR_CLAIM = "a live coordinator would have aborted it"


def abort_advice(verdict: str | None) -> str:
    """How an abort may be advised for an open transaction of ``verdict``: ``"command"``
    (:data:`ABORT_SAFE`), ``"after-check"`` (:data:`CHECK_FIRST`), ``"last-resort"``
    (:data:`LEADER_FIRST`) or ``"never"``."""
    if verdict in ABORT_SAFE:
        return "command"
    if verdict in CHECK_FIRST:
        return "after-check"
    if verdict in LEADER_FIRST:
        return "last-resort"
    return "never"


def is_abort(command: str) -> bool:
    """Whether a rendered command writes an ABORT marker (``kafka-transactions.sh ... abort``)."""
    return " abort " in f" {command} " and "kafka-transactions" in command


def is_check(command: str) -> bool:
    """Whether a rendered command asks the coordinator what it decided (read-only)."""
    return "kafka-transactions" in command and (" describe " in f" {command} " or " find-hanging " in f" {command} ")
