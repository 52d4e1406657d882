"""Which ``Prepare*`` record decides open data, when the previous marker of its producer is stamped
in the millisecond the id's next transaction started (``auditor.model.decisions``): the log's order
and the decision's completion place that marker, not its time against a midpoint.

Each scenario is its own cluster in one table set, audited once with ``hanging-transaction`` and
``torn-transaction``; the last one again with the replicas' facts handed to the decisions (the count
of markers from an earlier decision).
"""

from __future__ import annotations

import pytest

from auditor.engine.context import AuditOptions
from auditor.engine.runner import audit
from tables_builder import T0, TableSet

pytestmark = pytest.mark.spark


def _txns(t: TableSet, tid: str, pid: int, topic: str, steps: list[tuple[str, int, int]]) -> None:
    """The coordinator's records of ``tid`` (producer ``pid``, epoch 0, one partition ``topic``-0):
    ``(state, start, updated)`` each, in ms after T0."""
    for offset, (state, start, updated) in enumerate(steps):
        parts = [] if state.startswith("Complete") else [[topic, 0]]
        t.txn(tid, offset, state, pid, partitions=parts, start_ms=T0 + start, updated_ms=T0 + updated)


def _in_flight_same_ms(t: TableSet) -> None:
    """The next transaction, started and prepared in the millisecond the previous one's COMMIT marker
    was stamped, has its data open while its own markers are on their way: in flight."""
    t.cluster = "in-flight-same-ms"
    _txns(t, "t-f", 950, "f", [("Ongoing", 0, 0), ("PrepareCommit", 0, 4), ("CompleteCommit", 0, 5),
                               ("Ongoing", 5, 5), ("PrepareCommit", 5, 5)])
    t.batch("f", 0, 0, producer_id=950, producer_epoch=0, base_sequence=0, transactional=True, ts=T0 + 1)
    t.marker("f", 0, 1, 950, 0, commit=True, coordinator_epoch=1, ts=T0 + 5)
    t.batch("f", 0, 2, producer_id=950, producer_epoch=0, base_sequence=1, transactional=True, ts=T0 + 5)


def _late_write_leader_behind(t: TableSet) -> None:
    """A committed transaction's marker, stamped by a leader 8 ms behind the coordinator (before the
    midpoint of the transaction's start and its PrepareCommit), then a produce delayed past the
    commit: a late write, not data the commit left without its marker."""
    t.cluster = "late-write-leader-behind"
    _txns(t, "t-g", 951, "g", [("Ongoing", 0, 0), ("PrepareCommit", 0, 10), ("CompleteCommit", 0, 12)])
    t.batch("g", 0, 0, producer_id=951, producer_epoch=0, base_sequence=0, transactional=True, ts=T0 + 1)
    t.marker("g", 0, 1, 951, 0, commit=True, coordinator_epoch=1, ts=T0 + 4)
    t.batch("g", 0, 2, producer_id=951, producer_epoch=0, base_sequence=1, transactional=True, ts=T0 + 3000)


def _torn_same_ms(t: TableSet) -> None:
    """Two commits in one millisecond; the second's COMMIT marker never reached h-0, its data open
    after the first's marker."""
    t.cluster = "torn-same-ms"
    _txns(t, "t-h", 952, "h", [("Ongoing", 0, 0), ("PrepareCommit", 0, 4), ("CompleteCommit", 0, 5),
                               ("Ongoing", 5, 5), ("PrepareCommit", 5, 5), ("CompleteCommit", 5, 5)])
    t.batch("h", 0, 0, producer_id=952, producer_epoch=0, base_sequence=0, transactional=True, ts=T0 + 1)
    t.marker("h", 0, 1, 952, 0, commit=True, coordinator_epoch=1, ts=T0 + 5)
    t.batch("h", 0, 2, producer_id=952, producer_epoch=0, base_sequence=1, transactional=True, ts=T0 + 5)
    t.batch("h", 0, 3, ts=T0 + 5000)


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    root = tmp_path_factory.mktemp("decision-markers") / "tables"
    t = TableSet(root)
    for scenario in (_in_flight_same_ms, _late_write_leader_behind, _torn_same_ms):
        scenario(t)
    t.write()
    return root


@pytest.fixture(scope="module")
def findings(spark, tables) -> list[dict]:
    return audit(spark, str(tables), options=AuditOptions(), only=["hanging-transaction", "torn-transaction"]).findings


@pytest.fixture(scope="module")
def kinds(findings) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for f in findings:
        out.setdefault((f["cluster_id"], f["rule"]), set()).add(f["kind"])
    return out


def test_data_after_a_same_millisecond_marker_is_the_next_decision_in_flight(kinds):
    """Its marker stamped at the next transaction's start and PrepareCommit, the earlier commit's
    marker is not the next decision's: that data is in flight (it was a late write, with an abort
    command for data the coordinator had decided to commit)."""
    assert kinds[("in-flight-same-ms", "hanging-transaction")] == {"in-flight"}
    assert ("in-flight-same-ms", "torn-transaction") not in kinds


def test_a_completed_decisions_own_marker_from_a_lagging_leader(kinds):
    """The commit's own marker, however its leader's clock lags within the transaction's window:
    the data after it is a late write (it was marker-skipped, critical)."""
    assert kinds[("late-write-leader-behind", "hanging-transaction")] == {"late-write"}
    assert ("late-write-leader-behind", "torn-transaction") not in kinds


def test_a_same_millisecond_tear(kinds, findings):
    """torn-transaction finds the second commit's missing marker by counting (its PrepareCommit at
    offset 4, not the first's at offset 1, whose marker is there); the decisions, given the replicas'
    log start and compaction (as the verdicts call them), count the markers from the first commit: the
    marker before the open data is the first commit's, so the second decides it, completed without its
    marker -- marker-skipped (no abort of committed data). The other scenarios keep their verdicts."""
    torn = [f for f in findings if (f["cluster_id"], f["rule"]) == ("torn-same-ms", "torn-transaction")]
    assert [(f["kind"], f["evidence"]["prepare_offset"], f["first_offset"]) for f in torn] == [
        ("missing-commit-marker", 4, 2)]
    assert kinds[("torn-same-ms", "hanging-transaction")] == {"marker-skipped"}
    assert kinds[("in-flight-same-ms", "hanging-transaction")] == {"in-flight"}
    assert kinds[("late-write-leader-behind", "hanging-transaction")] == {"late-write"}


def test_the_clock_skew_is_stated_where_it_is_used():
    """The rule's page and the operations guide give the skew the model uses."""
    from pathlib import Path

    import auditor.rules.torn_transaction as torn
    from auditor.model.decisions import CLOCK_SKEW_MS

    ops = (Path(__file__).resolve().parents[1] / "docs" / "operations.md").read_text()
    assert f"({CLOCK_SKEW_MS} ms)" in torn.__doc__ and f"`CLOCK_SKEW_MS` ({CLOCK_SKEW_MS} ms)" in ops
