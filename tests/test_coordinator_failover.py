"""A coordinator killed just after a commit, on a real Kafka 4.3.1 cluster (issue 55, item 5).

Three KRaft nodes, ``__transaction_state`` and ``orders`` with replication factor 3. Kafka's own Java
producer commits a transaction on ``orders-0``; the coordinator broker, a follower of ``orders-0``, is
SIGKILLed the moment ``commitTransaction()`` returns, while the partition's leader is frozen so that
the killed broker cannot have fetched the marker first (``tests/coordinator_failover.py`` says why and
checks every premise as :class:`marker_outage.CaptureError`). The new coordinator completes the
transaction and the COMMIT marker lands on the two live replicas; the three log dirs are copied during
the outage (the killed broker's as it was left) and scanned.

The transaction committed, and a copy in the input holds its COMMIT: the killed broker's copy is
behind, not hanging nor undetermined. No finding about the transaction may be a warning, an error or
a critical, nor propose an abort; the behind replica is ``closed-on-another-replica`` (info) in
hanging-transaction and stuck-lso, naming the copy holding the marker and why the input says this one
lags (its log dir not cleanly stopped, nothing in it written after the marker: a crashed broker).
"""

from __future__ import annotations

import time

import pytest

import coordinator_failover as cf
import marker_outage as mo

pytestmark = pytest.mark.spark

KIND = "closed-on-another-replica"


@pytest.fixture(scope="module")
def failover(spark, tmp_path_factory) -> cf.Capture:
    """The capture (the cluster killed before the scan: the copies are all that is read), then the
    scan on the shared Spark session."""
    work = tmp_path_factory.mktemp("coordinator-failover")
    t0 = time.monotonic()
    cluster = cf.start_cluster(work / "cluster")
    try:
        cap = cf.capture(cluster, work)
    finally:
        cluster.kill()
    cap.seconds["captured"] = round(time.monotonic() - t0, 1)
    t1 = time.monotonic()
    cf.scan(spark, cap, work / "tables")
    cap.seconds["scanned"] = round(time.monotonic() - t1, 1)
    cf.save(cap, work / "capture.json")
    print("\n" + cf.describe(cap) + f"\nwork in {work}")
    return cap


def _brief(findings: list[dict]) -> list[tuple]:
    return [(f["rule"], f["kind"], f["severity"], f.get("broker_id"), f.get("topic"), f.get("partition"))
            for f in findings]


def test_the_capture_is_the_reported_failover(failover):
    """The premises, as captured (a failure here is the capture's, not the auditor's)."""
    cap = failover
    r = cap.roles
    assert len({r.coordinator, r.leader, r.other}) == 3
    assert cap.isr_before == sorted((r.coordinator, r.leader, r.other))
    assert cap.new_coordinator in (r.leader, r.other) and cap.coordinator_state == "CompleteCommit"
    assert cap.markers_in_copy[r.coordinator] == []
    for n in (r.leader, r.other):
        assert cap.markers_in_copy[n][0]["control"] == "COMMIT"


def test_no_warning_for_the_committed_transaction(failover):
    """Nothing about the committed transaction is worse than info, and nothing proposes an abort."""
    cap = failover
    about = cf.touching(cap, cap.findings)
    assert [f for f in about if f["severity"] != "info"] == [], _brief(about)
    assert [(f["rule"], f["kind"]) for f in about if mo.abort_commands(f)] == []


@pytest.mark.parametrize("rule", ["hanging-transaction", "stuck-lso"])
def test_the_killed_brokers_copy_is_closed_on_another_replica(failover, rule):
    """The killed broker's copy of orders-0 is the one finding of each rule on the transaction: info,
    naming a live copy with the COMMIT marker, and the crash the input shows."""
    cap = failover
    got = [f for f in cap.findings if f["rule"] == rule and (f["topic"], f["partition"]) == (cf.TOPIC, 0)]
    assert _brief(got) == [(rule, KIND, "info", cap.roles.coordinator, cf.TOPIC, 0)], _brief(got)
    f = got[0]
    assert f["first_offset"] == cap.first_offset and f["remediation_commands"] == []
    holders = {cap.roles.leader, cap.roles.other}
    named = [b for b in holders if f"broker {b}) has the transaction's COMMIT marker at offset" in f["message"]]
    assert named, f["message"]
    assert "not cleanly stopped and holds nothing written after the marker" in f["message"], f["message"]
