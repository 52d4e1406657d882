"""A healthy transaction-version-1 consume-transform-produce app at a high rate on one Kafka 4.3.1 broker
gets no torn-transaction findings (issue 55, item 4: a real report).

The report: a read_committed CTP app (``sendOffsetsToTransaction``, many small transactions a second)
with clients that speak transaction version 1 (every client before 4.0), on one broker that is the
transaction coordinator and every partition's leader, got 8 ``torn-transaction/missing-commit-marker``
errors in ~3 minutes, on markers DumpLogSegments shows in the log, while the cluster was exact end to
end (read_committed output = committed input, ``kafka-transactions.sh find-hanging`` empty, LSO = HW).
Under transaction version 0/1 one producer epoch serves every transaction of a session, and on one
broker the COMMIT marker, the coordinator's CompleteCommit and the id's next transaction start share a
millisecond often enough: time cannot tell which transaction a marker closes, the log's order can.

``tests/tv1_high_rate.py`` captures it: one 4.3.1 node formatted with ``transaction.version=1``
(verified from ApiVersions' finalized features), Kafka's own 3.5.2 Java clients running
``scripts/kafka/java/CtpLoop.java`` (a feeder, two CTP instances in one group) for ~80 s, the live
broker's ListTransactions/ListOffsets/group offsets checked, a clean stop, the log dir copied and
scanned with default options. The premises (transaction version 1 on the wire and in the log, every
decision's markers in the copy, committed output = committed input) are checked while capturing
(``tv1_high_rate.CaptureError``: a fixture error, not a test failure).
"""

from __future__ import annotations

import time

import pytest

import tv1_high_rate as hr

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def run(spark, tmp_path_factory) -> hr.Capture:
    work = tmp_path_factory.mktemp("tv1-high-rate")
    t0 = time.monotonic()
    cap = hr.capture(work)
    hr.scan(spark, cap, work / "tables")
    cap.seconds["total"] = round(time.monotonic() - t0, 1)
    hr.save(cap, work / "capture.json")
    print("\n" + hr.describe(cap) + f"\nwork in {work}")
    return cap


def test_the_capture_is_the_reported_app(run):
    """Transaction version 1 (finalized on the broker, the clients without version 2, one epoch for all of
    an id's transactions), a high rate, and the same-millisecond triples the false findings came from."""
    assert run.finalized_features["transaction.version"] == 1
    assert all(len(e) == 1 for e in run.epochs.values()) and len(run.epochs) == hr.INSTANCES
    assert run.committed_decisions >= hr.MIN_COMMITS, hr.describe(run)
    assert run.committed_decisions == run.committed_by_clients, hr.describe(run)
    assert run.same_ms_out, f"no {hr.OUT_TOPIC} marker, CompleteCommit and next start in one ms:\n{hr.describe(run)}"


def test_no_finding_of_warning_or_above(run):
    """The cluster was exact end to end: nothing of severity warning or above, torn-transaction above all."""
    found = hr.at_least_warning(run.findings)
    assert found == [], f"{len(found)} findings of severity warning or above:\n" + "\n".join(
        hr.explain(run, f) for f in found)
