"""A COMMIT whose marker never reaches one partition, on a real Kafka 4.3.1 cluster (a user's report).

A transactional producer (Kafka's own Java client: transaction version 2) writes to ``orders-0`` and
``orders-1`` of a 3-node KRaft cluster (every node broker+controller), each partition with one
replica on its own node; it commits a few transactions over both, then writes one more and flushes.
The node leading ``orders-1`` (neither the transaction coordinator nor, where there is a choice, the
active controller) is frozen with SIGSTOP, as a long GC pause or a network partition would, and the
producer's ``commitTransaction()`` succeeds: the coordinator answers EndTxn once PrepareCommit is
written. The COMMIT marker lands on ``orders-0``; ``orders-1`` gets none. With transaction version 2
the coordinator bumps the producer epoch at EndTxn and the markers carry the bumped epoch
(``TransactionMetadata.prepareAbortOrCommit``), so the data left open on ``orders-1`` has the epoch
of the producer's previous COMMIT marker there: the pattern the auditor used to call a late write.
The log dirs of all nodes are copied during the outage (``shutil.copytree`` of each, the brokers
running, as an operator's ``cp -a``) and scanned as of the copy's wall clock with the cluster's own
``transaction.max.timeout.ms``. Two variants, one cluster (``tests/marker_outage.py``):

1. *retrying*: the controllers' ``broker.session.timeout.ms`` is long, the frozen node is never
   fenced and stays the leader, and the coordinator keeps the transaction in PrepareCommit and retries
   the marker. Copied once the PrepareCommit is older than the maximum timeout; then the node is
   thawed and the marker does land. The copy holds a transaction that is committed but whose marker is
   still on its way: ``markers-undelivered`` (error), never an abort (aborting a partition of a
   committed transaction breaks its atomicity).
2. *skipped*: all nodes restarted with the default session timeout (9 s). The controller fences the
   frozen node, ``orders-1`` has no leader, and when the in-flight WriteTxnMarkers request times out
   (30 s) the coordinator's retry finds no leader: ``TransactionMarkerChannelManager.addTxnMarkersToBrokerQueue``
   (Kafka 4.3.1) drops markers for partitions whose leader is unknown, logging "Couldn't find leader
   endpoint for partitions ... these partitions are likely deleted already and hence can be skipped",
   and completes the transaction (CompleteCommit). No marker will ever come: ``marker-skipped``
   (critical), and still no abort.

Each copy is also handed over as on-call engineers do (``marker_outage.PARTS``): the frozen leader's log
dir alone, scanned 20 minutes later with ``--as-of`` (no coordinator record: ``overdue``, the checks that
ask the coordinator first, every abort guarded by them), and the whole copy with default options. After
the skipped variant's copy the frozen node is thawed: it serves the WriteTxnMarkers request it took
before it froze, the COMMIT lands and the LSO moves, so an abort advised from the copy would have torn
a transaction about to heal: the findings lead with the leader and print no abort.

Everything the verdicts rest on is checked while capturing (``marker_outage.CaptureError``, a fixture
error rather than a test failure): transaction version 2 in use, the frozen node leading ``orders-1``,
the coordinator's state before and after the copy, the COMMIT marker on ``orders-0`` and none on
``orders-1`` in the copy (read with kafka-python's record reader, not the auditor's decoders).
"""

from __future__ import annotations

import time

import pytest

import marker_outage as mo

pytestmark = pytest.mark.spark

#: what each variant must be reported as: the verdict of hanging-transaction and stuck-lso, the severity of
#: hanging-transaction, and the coordinator's record of the transaction the finding quotes
EXPECTED = {
    "retrying": ("markers-undelivered", "error", "PrepareCommit"),
    "skipped": ("marker-skipped", "critical", "CompleteCommit"),
}


#: what each variant's whole copy is reported as with default options (no --as-of, no --max-timeout-ms)
DEFAULTS = {
    "retrying": {("markers-undelivered", "error")},
    "skipped": {("marker-skipped", "critical"), ("undetermined", "warning")},
}


@pytest.fixture(scope="module")
def outage(spark, tmp_path_factory) -> dict[str, mo.Capture]:
    """Both variants captured on one cluster (killed before the scans: the copies are all that is read),
    then each copy scanned on the shared Spark session."""
    work = tmp_path_factory.mktemp("marker-outage")
    t0 = time.monotonic()
    cluster = mo.start_cluster(work / "cluster")
    try:
        retrying = mo.capture_retrying(cluster, work)
        skipped = mo.capture_skipped(cluster, retrying.roles, work)
    finally:
        cluster.kill()
    captured_s = time.monotonic() - t0
    caps = {c.variant: c for c in (retrying, skipped)}
    for cap in caps.values():
        mo.scan(spark, cap, work / f"tables-{cap.variant}")
        for part in mo.PARTS:
            mo.scan_part(spark, cap, part, work / f"tables-{cap.variant}-{part}")
        mo.save(cap, work / f"capture-{cap.variant}.json")
        print("\n" + mo.describe(cap))
    print(f"marker outage: captured in {captured_s:.0f} s, scanned in {time.monotonic() - t0 - captured_s:.0f} s; "
          f"work in {work}")
    return caps


def _at_orders1(cap: mo.Capture, rule: str) -> list[dict]:
    return [f for f in cap.findings if f["rule"] == rule and (f["topic"], f["partition"]) == (mo.TOPIC, 1)
            and f["first_offset"] == cap.first_offset]


def _brief(findings: list[dict]) -> list[tuple]:
    return [(f["rule"], f["kind"], f["severity"], f.get("topic"), f.get("partition")) for f in findings]


@pytest.mark.parametrize("variant", sorted(EXPECTED))
def test_the_capture_is_the_reported_outage(outage, variant):
    """The premises, as captured (a failure here is the capture's, not the auditor's)."""
    cap = outage[variant]
    assert cap.tv2 and cap.commits_before_on_orders1 >= mo.PRE_COMMITS
    assert cap.roles.frozen != cap.roles.coordinator
    assert cap.coordinator_state == EXPECTED[variant][2]
    assert cap.orders1_leader_at_copy == (cap.roles.frozen if variant == "retrying" else -1)
    assert cap.marker_orders0["control"] == "COMMIT" and cap.marker_orders0["producer_epoch"] == cap.data_epoch + 1
    assert cap.as_of_ms - cap.commit_returned_ms > mo.MAX_TIMEOUT_MS


@pytest.mark.parametrize("variant", sorted(EXPECTED))
def test_verdict_on_orders_1(outage, variant):
    """hanging-transaction and stuck-lso name what happened to the marker, and quote the coordinator's record."""
    cap = outage[variant]
    kind, severity, coordinator_state = EXPECTED[variant]
    hanging = _at_orders1(cap, "hanging-transaction")
    assert len(hanging) == 1, _brief(mo.touching(cap, cap.findings))
    f = hanging[0]
    assert (f["kind"], f["severity"]) == (kind, severity), (f["kind"], f["severity"], f["message"])
    assert (f["producer_id"], f["transactional_id"]) == (cap.producer_id, cap.transactional_id)
    assert f["evidence"]["coordinator_state"] == coordinator_state
    stuck = _at_orders1(cap, "stuck-lso")
    assert [s["kind"] for s in stuck] == [kind], _brief(stuck)


@pytest.mark.parametrize("variant", sorted(EXPECTED))
def test_no_abort_for_the_committed_transaction(outage, variant):
    """The client was told the transaction committed and orders-0 holds its COMMIT: aborting orders-1's
    part would break the transaction's atomicity, so no finding about it may propose an abort
    (transaction-state-violation's prepare-never-completed, if reported, says never to abort too)."""
    cap = outage[variant]
    offending = [(f["rule"], f["kind"], mo.abort_commands(f)) for f in mo.touching(cap, cap.findings)
                 if mo.abort_commands(f)]
    assert offending == []


def test_the_retried_marker_lands_once_the_node_is_back(outage):
    """In the retrying variant the coordinator never gave up: once the frozen node runs again, the COMMIT
    marker (with the epoch orders-0's carries) lands on orders-1 and the coordinator completes the
    transaction. What the copy showed was a delay, not a loss."""
    cap = outage["retrying"]
    assert cap.landed is not None, f"no marker on orders-1 within {mo.LAND_WAIT_S:.0f}s of the thaw"
    assert cap.landed["control"] == "COMMIT"
    assert cap.landed["producer_epoch"] == cap.marker_orders0["producer_epoch"]
    assert cap.landed["coordinator_state"] == "CompleteCommit"


def _unguarded_aborts(findings: list[dict]) -> list[tuple]:
    """Abort commands printed to be pasted: not guarded by the checks that ask the coordinator."""
    from auditor.model.advice import GUARD

    return [(f["rule"], f["kind"], c["command"]) for f in findings for c in f.get("remediation_commands") or []
            if c["command"] in mo.abort_commands(f) and c.get("applies_to") != GUARD]


@pytest.mark.parametrize("variant", sorted(EXPECTED))
def test_the_frozen_leaders_log_dir_alone_aged_20_minutes_gets_no_unguarded_abort(outage, variant):
    """The broker leading the stuck partition is the log dir an SRE grabs first; scanned alone 20 minutes
    after the copy (--as-of, as the undetermined verdict's hint says), Kafka's default timeouts. The input
    has no coordinator record and the coordinator decided COMMIT: the open transaction is overdue (error),
    the checks that ask the coordinator come first, every abort is guarded by them, and no text claims a
    live coordinator would have aborted it."""
    from auditor.model.advice import COORDINATOR_CLAIM, is_check

    cap = outage[variant]
    found = mo.touching(cap, cap.parts["frozen-alone-20m"])
    assert _unguarded_aborts(found) == [], mo.describe(cap)
    assert not any(COORDINATOR_CLAIM in f["message"] for f in found)
    lead = [f for f in found if f["rule"] == "hanging-transaction" and f["first_offset"] == cap.first_offset]
    assert [(f["kind"], f["severity"]) for f in lead] == [("overdue", "error")], _brief(found)
    cmds = [c["command"] for c in lead[0]["remediation_commands"]]
    assert is_check(cmds[0]) and "abort" in cmds[-1], cmds


@pytest.mark.parametrize("variant", sorted(EXPECTED))
def test_the_whole_copy_with_default_options_is_at_least_a_warning(outage, variant):
    """The whole copy, no --as-of and no --max-timeout-ms (ages then end at the copy's newest record, and the
    maximum is Kafka's 15 minutes): never in-flight, and nothing aborts. Retrying: the coordinator's record
    gives the transaction's own timeout (10 s) and its PrepareCommit is older than that, so its markers are
    overdue (markers-undelivered, error). Skipped: the brokers ran while copied and the coordinator completed
    after the frozen partition's last write, so the marker may come after the copy -- and it did (the test
    below): marker-skipped, or undetermined (read-while-moving) while the transaction is younger than the
    maximum, both at least a warning."""
    cap = outage[variant]
    found = mo.touching(cap, cap.parts["whole-defaults"])
    hanging = [f for f in found if f["rule"] == "hanging-transaction" and (f["topic"], f["partition"]) == (mo.TOPIC, 1)]
    assert len(hanging) == 1 and (hanging[0]["kind"], hanging[0]["severity"]) in DEFAULTS[variant], _brief(found)
    assert [f for f in found if mo.abort_commands(f)] == []


def test_the_skipped_marker_lands_when_the_leader_is_back_and_the_advice_said_leader_first(outage):
    """The coordinator dropped orders-1's marker and completed the commit; once the frozen leader runs
    again it serves the WriteTxnMarkers request it took before it froze: the COMMIT lands and the LSO
    moves (the live broker's ListOffsets). An abort would have torn a transaction about to heal, so the
    marker-skipped findings lead with the leader and print no abort command."""
    cap = outage["skipped"]
    assert cap.landed is not None and cap.landed["control"] == "COMMIT", mo.describe(cap)
    hw, lso = cap.offsets_after_thaw
    assert lso > max(cap.open_offsets[1]) and lso == hw
    for f in _at_orders1(cap, "hanging-transaction") + _at_orders1(cap, "stuck-lso"):
        text = f["remediation"]
        assert text.index("leader") < text.index("abort"), text
        assert mo.abort_commands(f) == []
