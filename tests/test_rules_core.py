"""Rule tests on small hand-built tables, one partition per branch of each rule."""

from __future__ import annotations

import pytest

from tables_builder import T0, TableSet
from auditor.engine.audit import audit

pytestmark = pytest.mark.spark

H = 3_600_000
AS_OF = T0 + 2 * H


def _by(findings, rule, topic=None):
    return [f for f in findings if f["rule"] == rule and (topic is None or f["topic"] == topic)]


@pytest.fixture(scope="module")
def findings(spark, tmp_path_factory):
    t = TableSet(tmp_path_factory.mktemp("rules") / "tables")
    t.batch("clock", 0, 0, ts=AS_OF)  # the newest timestamp in the dump: the audit's "now"
    # hanging: coordinator still says Ongoing with the partition, but two hours on
    t.batch("hang", 0, 0, 3, producer_id=10, producer_epoch=0, base_sequence=0, transactional=True, ts=T0)
    t.batch("hang", 0, 3, 7, ts=T0 + H)
    t.checkpoint("replication-offset", "hang", 0, 10)
    t.txn("t-hanging", 1, "Ongoing", 10, partitions=[("hang", 0)], start_ms=T0, updated_ms=T0)
    # late write: same producer session after its abort marker, coordinator completed
    t.batch("late", 0, 0, producer_id=20, producer_epoch=3, base_sequence=0, transactional=True, ts=T0)
    t.marker("late", 0, 1, 20, 3, commit=False, coordinator_epoch=2, ts=T0 + 1000)
    t.batch("late", 0, 2, producer_id=20, producer_epoch=3, base_sequence=1, transactional=True, ts=T0 + 2000)
    t.txn("t-late", 2, "CompleteAbort", 20, 3, partitions=[], updated_ms=T0 + 1000)
    # in flight: Ongoing with this partition, one second old
    t.batch("inflight", 0, 0, producer_id=30, producer_epoch=0, base_sequence=0, transactional=True, ts=AS_OF - 1000)
    t.txn("t-inflight", 3, "Ongoing", 30, partitions=[("inflight", 0)], start_ms=AS_OF - 1000, updated_ms=AS_OF - 1000)
    # unknown to the coordinator
    t.batch("unknown", 0, 0, producer_id=40, producer_epoch=0, base_sequence=0, transactional=True, ts=T0)
    # written to a partition the coordinator never added (young, Ongoing elsewhere)
    t.batch("unadded", 0, 0, producer_id=50, producer_epoch=0, base_sequence=0, transactional=True, ts=AS_OF - 500)
    t.txn("t-unadded", 4, "Ongoing", 50, partitions=[("elsewhere", 0)], start_ms=AS_OF - 600, updated_ms=AS_OF - 600)
    # committed: nothing to report
    t.batch("committed", 0, 0, producer_id=60, producer_epoch=0, base_sequence=0, transactional=True)
    t.marker("committed", 0, 1, 60, 0, commit=True)
    t.txn("t-committed", 5, "CompleteCommit", 60, partitions=[])
    # sequences
    t.batch("seq-gap", 0, 0, 2, producer_id=70, producer_epoch=0, base_sequence=0)
    t.batch("seq-gap", 0, 2, 1, producer_id=70, producer_epoch=0, base_sequence=5)
    t.batch("seq-dup", 0, 0, 2, producer_id=71, producer_epoch=0, base_sequence=0)
    t.batch("seq-dup", 0, 2, 2, producer_id=71, producer_epoch=0, base_sequence=0)
    t.batch("seq-reg", 0, 0, 5, producer_id=72, producer_epoch=0, base_sequence=0)
    t.batch("seq-reg", 0, 5, 1, producer_id=72, producer_epoch=0, base_sequence=2)
    t.batch("seq-epoch", 0, 0, 2, producer_id=73, producer_epoch=0, base_sequence=0)
    t.batch("seq-epoch", 0, 2, 1, producer_id=73, producer_epoch=1, base_sequence=3)
    t.batch("seq-zombie", 0, 0, 1, producer_id=74, producer_epoch=2, base_sequence=0)
    t.batch("seq-zombie", 0, 1, 1, producer_id=74, producer_epoch=1, base_sequence=1)
    t.checkpoint("log-start-offset", "seq-wrap", 0, 1000)  # the first 2**31 - 2 records are long gone
    t.batch("seq-wrap", 0, 1000, 2, producer_id=75, producer_epoch=0, base_sequence=2**31 - 2)
    t.batch("seq-wrap", 0, 1002, 2, producer_id=75, producer_epoch=0, base_sequence=0)
    t.batch("seq-compact", 0, 0, 4, producer_id=76, producer_epoch=0, base_sequence=0, records=2)  # cleaned batch
    t.batch("seq-compact", 0, 10, 1, producer_id=76, producer_epoch=0, base_sequence=9)
    t.batch("seq-compact-reg", 0, 0, 4, producer_id=77, producer_epoch=0, base_sequence=0, records=2)  # cleaned batch
    t.batch("seq-compact-reg", 0, 10, 1, producer_id=77, producer_epoch=0, base_sequence=1)  # goes back: not compaction
    # unknown producer
    t.checkpoint("log-start-offset", "ret", 0, 100)
    t.batch("ret", 0, 100, 1, producer_id=80, producer_epoch=0, base_sequence=57)
    t.batch("loss", 0, 0, 1, producer_id=81, producer_epoch=0, base_sequence=10)
    t.batch("snap", 0, 50, 1, producer_id=82, producer_epoch=0, base_sequence=5)
    t.add("producer_snapshots", "snap", 0, snapshot_offset=50, entry_index=0, producer_id=82, producer_epoch=0,
          last_sequence=4, first_sequence=4, last_offset=49, offset_delta=0, first_offset=49, last_timestamp=T0,
          coordinator_epoch=-1, current_txn_first_offset=None, crc_valid=True)
    # producer-id blocks: [0,999], [1000,1999], then a record going back to next=1500
    for off, nxt in ((10, 1000), (20, 2000), (30, 1500)):
        t.add("producer_id_blocks", "__cluster_metadata", 0, broker_id=1, broker_epoch=5, next_producer_id=nxt,
              block_start=nxt - 1000, block_end=nxt - 1, source="log", offset=off, timestamp=T0 + off)
    t.batch("pids", 0, 0, 1, producer_id=5000, producer_epoch=0, base_sequence=0)
    t.txn("shared-a", 6, "Empty", 90)
    t.txn("shared-b", 7, "Empty", 90)
    root = t.write()
    return audit(spark, str(root)).findings


def test_hanging_transaction_branches(findings):
    h = {f["topic"]: f for f in _by(findings, "hanging-transaction")}
    assert set(h) == {"hang", "late", "inflight", "unknown", "unadded"}
    cls = {k: (v["kind"], v["severity"]) for k, v in h.items()}
    assert cls == {
        "hang": ("hanging", "error"), "late": ("late-write", "critical"), "inflight": ("in-flight", "info"),
        "unknown": ("unknown-to-coordinator", "critical"), "unadded": ("hanging", "error"),
    }
    f = h["hang"]
    assert (f["producer_id"], f["producer_epoch"], f["transactional_id"], f["first_offset"], f["last_offset"]) == (10, 0, "t-hanging", 0, 2)
    assert f["duration_ms"] == AS_OF - T0
    commands = " ".join(c["command"] for c in f["remediation_commands"])
    assert "--start-offset 0" in commands and "--producer-id 10 --producer-epoch 0" in commands
    late = h["late"]
    assert (late["first_offset"], late["evidence"]["previous_marker_offset"]) == (2, 1)
    assert late["remediation_commands"][1]["command"].endswith("--coordinator-epoch 2")
    assert h["inflight"]["remediation_commands"] == []  # never an abort for a transaction that may still complete
    assert h["unadded"]["evidence"]["coordinator_state"] == "Ongoing"


def test_stuck_lso(findings):
    s = {f["topic"]: f for f in _by(findings, "stuck-lso")}
    assert set(s) == {"hang", "late", "inflight", "unknown", "unadded"}
    f = s["hang"]
    assert f["severity"] == "error" and f["first_offset"] == 0
    assert (f["evidence"]["high_watermark"], f["evidence"]["lag_offsets"]) == (10, 10)
    assert s["inflight"]["severity"] == "info" and s["inflight"]["remediation_commands"] == []


def test_out_of_order_sequence_branches(findings):
    o = {f["topic"]: f for f in _by(findings, "out-of-order-sequence")}
    kinds = {k: (v["kind"], v["severity"]) for k, v in o.items()}
    assert kinds == {
        "seq-gap": ("gap", "error"), "seq-dup": ("duplicate", "critical"), "seq-reg": ("regression", "error"),
        "seq-epoch": ("new-epoch-nonzero", "error"), "seq-zombie": ("epoch-regression", "error"),
        "seq-compact-reg": ("regression", "error"),  # a gap on a compacted topic ("seq-compact") is what the cleaner leaves
    }
    assert o["seq-gap"]["evidence"]["expected_sequence"] == 2
    assert (o["seq-dup"]["first_offset"], o["seq-dup"]["last_offset"]) == (0, 2)


def test_unknown_producer_gap(findings):
    u = {f["topic"]: f for f in _by(findings, "unknown-producer-gap")}
    assert set(u) == {"ret", "loss", "seq-wrap"}  # snap: the producer snapshot still knows producer 82
    assert (u["ret"]["kind"], u["ret"]["severity"]) == ("retention", "warning")
    assert (u["loss"]["kind"], u["loss"]["severity"]) == ("unexplained", "error")
    assert u["seq-wrap"]["kind"] == "retention"


def test_pid_block_overlap(findings):
    p = _by(findings, "pid-block-overlap")
    kinds = sorted(f["kind"] for f in p)
    assert kinds == ["backwards", "never-granted", "overlap", "overlap", "shared-id"]  # 500-1499 hits both neighbours
    never = [f for f in p if f["kind"] == "never-granted"][0]
    assert (never["producer_id"], never["evidence"]["max_granted"]) == (5000, 1999)
    pairs = {frozenset((f["evidence"]["first_block"], f["evidence"]["second_block"])) for f in p if f["kind"] == "overlap"}
    assert pairs == {frozenset({"0-999", "500-1499"}), frozenset({"500-1499", "1000-1999"})}


def test_age_fallback_without_coordinator_log(spark, tmp_path):
    t = TableSet(tmp_path / "tables")
    t.batch("clock", 0, 0, ts=AS_OF)
    t.batch("old", 0, 0, producer_id=10, producer_epoch=0, base_sequence=0, transactional=True, ts=T0)
    t.batch("young", 0, 0, producer_id=11, producer_epoch=0, base_sequence=0, transactional=True, ts=AS_OF - 1000)
    res = audit(spark, str(t.write()), only=["hanging-transaction"]).findings
    cls = {f["topic"]: (f["kind"], f["evidence"]["age_only"]) for f in res}
    assert cls == {"old": ("hanging", True), "young": ("in-flight", True)}


def test_one_finding_per_subject_over_its_replicas(spark, tmp_path):
    """Three replicas of a partition that hold the same hanging transaction give one finding
    listing the three (as find-hanging reports it once); a lagging replica whose copy ends
    earlier disagrees and stays a finding of its own."""
    t = TableSet(tmp_path / "tables")
    for b in (1, 2, 3):
        t.batch("clock", 0, 0, ts=AS_OF, broker_id=b)
        t.batch("rf3", 0, 0, 2, producer_id=10, producer_epoch=0, base_sequence=0, transactional=True, ts=T0, broker_id=b)
        if b != 3:  # broker 3 lags: it lacks the second batch of the transaction
            t.batch("rf3", 0, 2, 1, producer_id=10, producer_epoch=0, base_sequence=2, transactional=True, ts=T0, broker_id=b)
    t.txn("t-rf3", 1, "CompleteAbort", 10, partitions=[], updated_ms=T0 + 1000)
    res = audit(spark, str(t.write()), only=["hanging-transaction"]).findings
    by_last = {f["last_offset"]: f for f in res}
    assert sorted(by_last) == [1, 2] and len(res) == 2
    assert [r["broker_id"] for r in by_last[2]["replicas"]] == [1, 2] and by_last[2]["broker_id"] == 1
    assert [r["broker_id"] for r in by_last[1]["replicas"]] == [3]
    assert len(by_last[2]["remediation_commands"]) == 2  # one abort (and its older form), not one per replica


def test_clusters_are_kept_apart(spark, tmp_path):
    """Several clusters in one dump: a cluster without __transaction_state is judged by age
    (not as unknown to a coordinator whose log is another cluster's), the coordinator
    partitions are counted per cluster, and consumer groups are a cluster's own."""
    t = TableSet(tmp_path / "tables")
    t.cluster = "a"  # its coordinator log (one partition) does not know producer 40; group g-a reads shared-0
    t.batch("clock", 0, 0, ts=AS_OF)
    t.batch("shared", 0, 0, producer_id=40, producer_epoch=0, base_sequence=0, transactional=True, ts=T0)
    t.txn("t-a", 0, "Empty", 41)
    t.offset_commit("g-a", "shared", 0, 0, offset=0)
    t.cluster = "b"  # two coordinator partitions, nothing open
    t.txn("t-b", 0, "Empty", 42, txn_partition=3)
    t.txn("t-c", 0, "Empty", 43, txn_partition=4)
    t.cluster = "c"  # no coordinator log, no consumer group
    t.batch("clock", 0, 0, ts=AS_OF)
    t.batch("shared", 0, 0, producer_id=10, producer_epoch=0, base_sequence=0, transactional=True, ts=T0)
    res = audit(spark, str(t.write()), only=["hanging-transaction", "stuck-lso"]).findings
    h = {f["cluster_id"]: f for f in _by(res, "hanging-transaction")}
    assert {c: (f["kind"], f["evidence"]["age_only"], f["evidence"]["coordinator_partitions_in_dump"])
            for c, f in h.items()} == {"a": ("unknown-to-coordinator", False, 1), "c": ("hanging", True, None)}
    s = {f["cluster_id"]: f["evidence"]["consumer_groups"] for f in _by(res, "stuck-lso")}
    assert s == {"a": ["g-a"], "c": []}
