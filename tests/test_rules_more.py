"""Rule tests for the rest of the catalog (issue 4 "Also:"), on small hand-built tables.

One module-scoped audit over one TableSet; each branch of each rule lives on its own
topic (or transactional id), so every assertion names concrete offsets, producers and kinds.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tables_builder import CLUSTER, T0, TableSet
from auditor.engine.audit import audit
from auditor.engine.views import AuditOptions
from auditor.ingest.inventory import FILES_SCHEMA

pytestmark = pytest.mark.spark

H = 3_600_000
AS_OF = T0 + 2 * H
DAY = 86_400_000
RULES = ["coordinator-epoch-regression", "transaction-state-violation", "torn-transaction", "snapshot-log-mismatch",
         "txnindex-mismatch", "epoch-exhaustion", "replica-divergence"]


def _by(findings, rule, topic=None):
    return [f for f in findings if f["rule"] == rule and (topic is None or f["topic"] == topic)]


def _tombstone(t: TableSet, transactional_id: str, offset: int, txn_partition: int) -> None:
    t.txn(transactional_id, offset, "Empty", 0, txn_partition=txn_partition)
    t.rows["transaction_log"][-1].update(
        is_tombstone=True, value_version=None, producer_id=None, previous_producer_id=None, next_producer_id=None,
        producer_epoch=None, transaction_timeout_ms=None, state_id=None, state=None, topic_partitions=None,
        last_update_timestamp_ms=None, start_timestamp_ms=None)


def _file(topic: str, partition: int, kind: str, base_offset: int, broker: int = 1) -> dict:
    d = f"/data/broker-{broker}/{topic}-{partition}"
    ext = {"txn-index": "txnindex", "producer-snapshot": "snapshot"}[kind]
    return {"path": f"{d}/{base_offset:020d}.{ext}", "input_root": f"/data/broker-{broker}", "log_dir": f"/data/broker-{broker}",
            "cluster_id": CLUSTER, "broker_id": broker, "topic": topic, "partition": partition, "dir_status": "live",
            "kind": kind, "file_status": "live", "base_offset": base_offset, "size": 0, "status": "empty", "problem_count": 0}


def _coordinator_epoch(t: TableSet) -> None:
    # cer-0: same producer, coordinator epoch 5 then 3, 10 ms apart
    t.batch("cer", 0, 0, producer_id=100, producer_epoch=0, base_sequence=0, transactional=True, ts=T0)
    t.marker("cer", 0, 1, 100, 0, commit=True, coordinator_epoch=5, ts=T0 + 10)
    t.batch("cer", 0, 2, producer_id=100, producer_epoch=0, base_sequence=1, transactional=True, ts=T0 + 20)
    t.marker("cer", 0, 3, 100, 0, commit=False, coordinator_epoch=3, ts=T0 + 30)
    # cer-1: the producer idles longer than producer.id.expiration.ms before the zombie's marker (KAFKA-9144)
    t.batch("cer", 1, 0, producer_id=101, producer_epoch=0, base_sequence=0, transactional=True, ts=T0)
    t.marker("cer", 1, 1, 101, 0, commit=True, coordinator_epoch=5, ts=T0 + 1000)
    t.marker("cer", 1, 2, 101, 0, commit=False, coordinator_epoch=4, ts=T0 + 1000 + DAY + 5)
    # cer-2: two producers of __transaction_state-7 (epoch 9 then 8), one of partition 8 (epoch 1): only 103 is reported
    t.batch("cer", 2, 0, producer_id=102, producer_epoch=0, base_sequence=0, transactional=True)
    t.marker("cer", 2, 1, 102, 0, commit=True, coordinator_epoch=9)
    t.batch("cer", 2, 2, producer_id=103, producer_epoch=0, base_sequence=0, transactional=True)
    t.marker("cer", 2, 3, 103, 0, commit=False, coordinator_epoch=8)
    t.batch("cer", 2, 4, producer_id=104, producer_epoch=0, base_sequence=0, transactional=True)
    t.marker("cer", 2, 5, 104, 0, commit=True, coordinator_epoch=1)
    t.txn("cer-a", 1, "CompleteCommit", 102, partitions=[], txn_partition=7)
    t.txn("cer-b", 2, "CompleteAbort", 103, partitions=[], txn_partition=7)
    t.txn("cer-c", 1, "CompleteCommit", 104, partitions=[], txn_partition=8)
    # cer-3: coordinator epochs 2, 2, 3: fine
    for off, ce in ((1, 2), (3, 2), (5, 3)):
        t.batch("cer", 3, off - 1, producer_id=105, producer_epoch=0, base_sequence=off // 2, transactional=True)
        t.marker("cer", 3, off, 105, 0, commit=True, coordinator_epoch=ce)


def _state_machine(t: TableSet) -> None:
    p = 20  # __transaction_state-20
    for broker in (1, 2):  # both replicas hold the records: one finding, not two
        t.txn("tsv-bad", 100, "Empty", 200, txn_partition=p)
        t.txn("tsv-bad", 101, "Ongoing", 200, partitions=[("x", 0)], start_ms=T0, txn_partition=p)
        t.txn("tsv-bad", 102, "CompleteCommit", 200, partitions=[], txn_partition=p)
        for r in t.rows["transaction_log"][-3:]:
            r.update(broker_id=broker, log_dir=f"/data/broker-{broker}")
    t.txn("tsv-epoch", 110, "Empty", 201, 5, txn_partition=p)
    t.txn("tsv-epoch", 111, "Empty", 201, 3, txn_partition=p)
    t.txn("tsv-stuck", 120, "Ongoing", 202, partitions=[("stuck", 0)], start_ms=T0, updated_ms=T0, txn_partition=p)
    t.txn("tsv-stuck", 121, "PrepareCommit", 202, partitions=[("stuck", 0), ("stuck", 1)], start_ms=T0,
          updated_ms=T0 + 1000, txn_partition=p)
    t.txn("tsv-fresh", 125, "Ongoing", 209, partitions=[("y", 0)], start_ms=AS_OF - 2000, updated_ms=AS_OF - 2000, txn_partition=p)
    t.txn("tsv-fresh", 126, "PrepareAbort", 209, partitions=[("y", 0)], start_ms=AS_OF - 2000, updated_ms=AS_OF - 1000,
          txn_partition=p)
    t.txn("tsv-ongoing", 130, "Ongoing", 203, partitions=[("z", 0)], timeout_ms=60_000, start_ms=T0, updated_ms=T0, txn_partition=p)
    t.txn("tsv-young", 135, "Ongoing", 210, partitions=[("z", 1)], timeout_ms=60_000, start_ms=AS_OF - 5000,
          updated_ms=AS_OF - 5000, txn_partition=p)
    t.txn("tsv-dup", 140, "Ongoing", 204, partitions=[("w", 0)], start_ms=T0, txn_partition=p)
    t.txn("tsv-dup", 141, "PrepareCommit", 204, partitions=[("w", 0)], start_ms=T0, txn_partition=p)
    t.txn("tsv-dup", 142, "PrepareCommit", 204, partitions=[("w", 0)], start_ms=T0, txn_partition=p)  # retried append
    t.txn("tsv-dup", 143, "CompleteCommit", 204, partitions=[], start_ms=T0, txn_partition=p)
    t.txn("tsv-tomb", 150, "CompleteAbort", 205, partitions=[], txn_partition=p)
    _tombstone(t, "tsv-tomb", 151, p)
    t.txn("tsv-tomb", 152, "Empty", 206, txn_partition=p)
    t.txn("tsv-fence", 160, "PrepareEpochFence", 207, partitions=[("v", 0)], txn_partition=p)
    t.txn("tsv-tv2", 180, "Empty", 208, 1, txn_partition=p)
    t.txn("tsv-tv2", 181, "PrepareAbort", 208, 2, partitions=[("u", 0)], txn_partition=p)
    t.txn("tsv-tv2", 182, "CompleteAbort", 208, 2, partitions=[], txn_partition=p)


def _torn(t: TableSet) -> None:
    # transaction.version 0/1: one epoch for two transactions of torn-a, COMMIT then ABORT
    first = [("torn", p) for p in (0, 1, 2, 3, 5, 6)] + [("gone", 0)]
    second = [("torn", 0), ("torn", 1), ("torn", 6)]
    t.txn("torn-a", 200, "Ongoing", 300, partitions=first, start_ms=T0, updated_ms=T0, txn_partition=30)
    t.txn("torn-a", 201, "PrepareCommit", 300, partitions=first, start_ms=T0, updated_ms=T0 + 1000, txn_partition=30)
    t.txn("torn-a", 202, "CompleteCommit", 300, partitions=[], start_ms=T0, updated_ms=T0 + 1001, txn_partition=30)
    t.txn("torn-a", 203, "Ongoing", 300, partitions=second, start_ms=T0 + 10_000, updated_ms=T0 + 10_000, txn_partition=30)
    t.txn("torn-a", 204, "PrepareAbort", 300, partitions=second, start_ms=T0 + 10_000, updated_ms=T0 + 11_000,
          txn_partition=30)
    t.txn("torn-a", 205, "CompleteAbort", 300, partitions=[], start_ms=T0 + 10_000, updated_ms=T0 + 11_001, txn_partition=30)
    for p in (0, 1, 2, 3, 5, 6):
        t.batch("torn", p, 0, producer_id=300, producer_epoch=0, base_sequence=0, transactional=True, ts=T0 + 100)
    # the leader stamps markers after the Complete record's timestamp (taken when the markers are queued)
    t.marker("torn", 0, 1, 300, 0, commit=True, coordinator_epoch=1, ts=T0 + 1002)
    t.marker("torn", 1, 1, 300, 0, commit=False, coordinator_epoch=1, ts=T0 + 1002)  # wrong type
    for p in (0, 1):
        t.batch("torn", p, 2, producer_id=300, producer_epoch=0, base_sequence=1, transactional=True, ts=T0 + 10_100)
        t.marker("torn", p, 3, 300, 0, commit=False, coordinator_epoch=1, ts=T0 + 11_002)  # second transaction: right
    t.batch("torn", 2, 1, ts=T0 + 5000)  # no marker, but the log goes on past the Complete record
    # torn-3: no marker and nothing after the data: the replica may just be behind -> not judged
    t.marker("torn", 5, 1, 300, 0, commit=True, coordinator_epoch=1, ts=T0 + 500)  # leader clock behind the coordinator's
    t.batch("torn", 5, 2, ts=T0 + 5000)
    # torn-6: the first transaction's COMMIT never arrived; the ABORT there is the second transaction's
    t.batch("torn", 6, 1, producer_id=300, producer_epoch=0, base_sequence=1, transactional=True, ts=T0 + 10_100)
    t.marker("torn", 6, 2, 300, 0, commit=False, coordinator_epoch=1, ts=T0 + 11_002)
    # transaction.version 2: data epoch 4, markers epoch 5 (an older transaction committed with epoch 4)
    t.txn("torn-b", 210, "Ongoing", 301, 4, partitions=[("torn2", 0), ("torn2", 1)], start_ms=T0, updated_ms=T0,
          txn_partition=31)
    t.txn("torn-b", 211, "PrepareAbort", 301, 5, partitions=[("torn2", 0), ("torn2", 1)], start_ms=T0,
          updated_ms=T0 + 1000, txn_partition=31)
    t.txn("torn-b", 212, "CompleteAbort", 301, 5, partitions=[], start_ms=T0, updated_ms=T0 + 3000, txn_partition=31)
    for p in (0, 1):
        t.batch("torn2", p, 0, producer_id=301, producer_epoch=3, base_sequence=0, transactional=True, ts=T0 - 100)
        t.marker("torn2", p, 1, 301, 4, commit=True, coordinator_epoch=1, ts=T0 - 50)
        t.batch("torn2", p, 2, producer_id=301, producer_epoch=4, base_sequence=0, transactional=True, ts=T0 + 100)
    t.marker("torn2", 0, 3, 301, 5, commit=False, coordinator_epoch=1, ts=T0 + 2000)  # right epoch and type
    t.marker("torn2", 1, 3, 301, 4, commit=False, coordinator_epoch=1, ts=T0 + 2000)  # epoch 4: not this transaction's
    t.batch("torn2", 1, 4, ts=T0 + 5000)


def _snapshots(t: TableSet) -> None:
    def entry(topic, partition, snapshot_offset, index, pid, epoch, *, last_offset=-1, delta=0, last_seq=-1,
              txn_first=None, coordinator_epoch=-1):
        t.add("producer_snapshots", topic, partition, snapshot_offset=snapshot_offset, entry_index=index, producer_id=pid,
              producer_epoch=epoch, last_sequence=last_seq, first_sequence=-1 if last_seq < 0 else last_seq - delta,
              last_offset=last_offset, offset_delta=delta, first_offset=-1 if last_offset < 0 else last_offset - delta,
              last_timestamp=T0, coordinator_epoch=coordinator_epoch, current_txn_first_offset=txn_first, crc_valid=True)

    t.checkpoint("log-start-offset", "snap", 0, 100)
    t.batch("snap", 0, 100, 2, producer_id=400, producer_epoch=2, base_sequence=10)  # offsets 100-101, sequences 10-11
    t.marker("snap", 0, 103, 402, 0, commit=False, coordinator_epoch=3)  # closes 402's transaction after the snapshot
    t.batch("snap", 0, 104, 1)
    entry("snap", 0, 102, 0, 401, 1, txn_first=50, coordinator_epoch=7)  # open since 50 < log start 100, never closed
    entry("snap", 0, 102, 1, 400, 2, last_offset=101, delta=1, last_seq=11)  # agrees with the log
    entry("snap", 0, 102, 2, 402, 0, txn_first=60)  # below log start too, but closed at 103
    entry("snap", 0, 102, 3, 403, 1, last_offset=101, delta=1, last_seq=11)  # offset 101 is producer 400's
    entry("snap", 0, 105, 0, 400, 2, last_offset=101, delta=1, last_seq=15)  # wrong last sequence
    t.batch("snap", 1, 0, 10)  # log end 10
    entry("snap", 1, 20, 0, 404, 0)  # snapshot 20 above the log end
    t.batch("snap", 2, 0, 5)  # log end 5; an empty snapshot file at 50 (only in the inventory)
    t.batch("snap", 3, 0, 3, records=1)  # compacted partition
    t.batch("snap", 3, 10, 1)
    entry("snap", 3, 3, 0, 405, 0, last_offset=7, delta=0, last_seq=4)  # no batch ends at 7: the cleaner removed it


def _txnindex(t: TableSet) -> None:
    def idx(topic, partition, index, pid, first, last, in_order=True, segment=0):
        t.add("aborted_txns", topic, partition, entry_index=index, version=0, producer_id=pid, first_offset=first,
              last_offset=last, last_stable_offset=last + 1, in_order=in_order, segment_base_offset=segment)

    tx = dict(producer_epoch=0, transactional=True)
    t.batch("tix", 0, 0, 2, producer_id=500, base_sequence=0, **tx)
    t.marker("tix", 0, 2, 500, 0, commit=False)
    t.batch("tix", 0, 3, producer_id=501, base_sequence=0, **tx)
    t.marker("tix", 0, 4, 501, 0, commit=False)  # no entry
    t.batch("tix", 0, 5, 2, producer_id=502, base_sequence=0, **tx)
    t.marker("tix", 0, 7, 502, 0, commit=False)  # entry says first offset 6
    t.batch("tix", 0, 8, producer_id=503, base_sequence=0, **tx)
    t.marker("tix", 0, 9, 503, 0, commit=True)  # entry on a COMMIT
    t.marker("tix", 0, 13, 506, 0, commit=False)  # abort without data, yet an entry
    idx("tix", 0, 0, 502, 6, 7)
    idx("tix", 0, 1, 500, 0, 2, in_order=False)  # 2 is not above 7
    idx("tix", 0, 2, 503, 8, 9)
    idx("tix", 0, 3, 504, 10, 12)  # nothing at 12
    idx("tix", 0, 4, 506, 13, 13)
    # tix-1: no .txnindex in the dump for it: not judged
    t.batch("tix", 1, 0, producer_id=510, base_sequence=0, **tx)
    t.marker("tix", 1, 1, 510, 0, commit=False)
    # tix-2: the inventory lists a .txnindex file (empty): judged
    t.batch("tix", 2, 0, producer_id=520, base_sequence=0, **tx)
    t.marker("tix", 2, 1, 520, 0, commit=False)
    # tix-3: compacted; an entry whose marker the cleaner removed
    t.batch("tix", 3, 0, 3, records=1)
    idx("tix", 3, 0, 530, 0, 5)


def _epochs(t: TableSet) -> None:
    t.batch("epx", 0, 0, producer_id=600, producer_epoch=32100, base_sequence=0)
    t.batch("epx", 1, 0, producer_id=601, producer_epoch=32766, base_sequence=0)
    t.txn("epx-ex", 300, "Empty", 601, 32766, txn_partition=40)
    t.txn("epx-rot", 301, "Empty", 602, 32766, txn_partition=40)
    t.txn("epx-rot", 302, "Empty", 603, 0, txn_partition=40)  # moved to a new producer id
    t.txn("epx-tv2", 303, "Empty", 604, 32500, txn_partition=40)
    t.rows["transaction_log"][-1]["client_transaction_version"] = 2
    t.batch("epx", 2, 0, producer_id=605, producer_epoch=-32768, base_sequence=0)  # 32768 read as int16
    t.batch("epx", 3, 0, producer_id=606, producer_epoch=31999, base_sequence=0)


def _replicas(t: TableSet) -> None:
    for b in (1, 2):
        t.batch("rep", 0, 0, producer_id=700, producer_epoch=0, base_sequence=0, transactional=True, broker_id=b)
        t.marker("rep", 0, 1, 700, 0, commit=True, broker_id=b)
        t.batch("rep", 0, 4, broker_id=b)
    t.batch("rep", 0, 2, producer_id=701, producer_epoch=0, base_sequence=0, broker_id=1)
    t.batch("rep", 0, 2, producer_id=709, producer_epoch=0, base_sequence=0, broker_id=2)  # diverged at 2
    t.marker("rep", 0, 3, 702, 0, commit=False, broker_id=1)  # broker 2 covers 3 but lacks the marker
    t.batch("rep", 0, 5, crc=1, broker_id=1)
    t.batch("rep", 0, 5, crc=2, broker_id=2)
    # rep-1: broker 2 is a follower that stops at offset 0: it does not cover 5
    for b in (1, 2):
        t.batch("rep", 1, 0, broker_id=b)
    t.batch("rep", 1, 5, broker_id=1)
    # rep-2: compacted; broker 1 cleaned the batch at 0 and dropped the one at 2
    t.batch("rep", 2, 0, 2, records=1, crc=5, broker_id=1)
    t.batch("rep", 2, 0, 2, crc=6, broker_id=2)
    t.batch("rep", 2, 2, broker_id=2)
    for b in (1, 2):
        t.batch("rep", 2, 4, broker_id=b)


@pytest.fixture(scope="module")
def findings(spark, tmp_path_factory):
    t = TableSet(tmp_path_factory.mktemp("rules_more") / "tables")
    t.batch("clock", 0, 0, ts=AS_OF)
    _coordinator_epoch(t)
    _state_machine(t)
    _torn(t)
    _snapshots(t)
    _txnindex(t)
    _epochs(t)
    _replicas(t)
    root = t.write()
    files = [_file("tix", 2, "txn-index", 0), _file("snap", 2, "producer-snapshot", 50)]
    pq.write_table(pa.Table.from_pylist(files, schema=FILES_SCHEMA), root / "files" / "part-00000.parquet")
    return audit(spark, str(root), options=AuditOptions(as_of_ms=AS_OF), only=RULES).findings


def test_coordinator_epoch_regression(findings):
    c = {(f["partition"], f["last_offset"]): f for f in _by(findings, "coordinator-epoch-regression", "cer")}
    assert set(c) == {(0, 3), (1, 2), (2, 3)}
    f = c[(0, 3)]
    assert (f["severity"], f["producer_id"], f["first_offset"]) == ("error", 100, 1)
    assert f["kind"] == "same-producer"
    assert (f["evidence"]["coordinator_epoch"], f["evidence"]["earlier_coordinator_epoch"]) == (3, 5)
    assert f["evidence"]["idle_ms"] == 10
    assert "TRANSACTION_COORDINATOR_FENCED" in f["message"]
    e = c[(1, 2)]
    assert (e["kind"], e["duration_ms"]) == ("same-producer-expired-state", DAY + 5)
    assert "KAFKA-9144" in e["message"]
    w = c[(2, 3)]
    assert (w["severity"], w["producer_id"], w["transactional_id"]) == ("info", 103, "cer-b")
    assert (w["kind"], w["evidence"]["earlier_marker_producer_id"], w["evidence"]["coordinator_partition"]) == (
        "same-coordinator-partition", 102, 7)
    assert not _by(findings, "coordinator-epoch-regression", "torn")  # every other marker set is monotonic


def test_transaction_state_violation(findings):
    s = {f["transactional_id"]: f for f in _by(findings, "transaction-state-violation")}
    assert len(_by(findings, "transaction-state-violation")) == len(s)  # one finding per id (replicas read once)
    kinds = {k: (v["kind"], v["severity"]) for k, v in s.items()}
    assert kinds == {
        "tsv-bad": ("invalid-transition", "error"),
        "tsv-epoch": ("epoch-regression", "error"),
        "tsv-stuck": ("prepare-never-completed", "error"),
        "tsv-ongoing": ("ongoing-timed-out", "warning"),
        "tsv-fence": ("in-memory-state", "warning"),
    }
    bad = s["tsv-bad"]
    assert (bad["first_offset"], bad["last_offset"], bad["partition"]) == (101, 102, 20)
    assert (bad["evidence"]["previous_state"], bad["evidence"]["state"]) == ("Ongoing", "CompleteCommit")
    assert bad["evidence"]["allowed_previous_states"] == ["PrepareCommit"]
    ep = s["tsv-epoch"]
    assert (ep["producer_id"], ep["producer_epoch"], ep["evidence"]["previous_producer_epoch"]) == (201, 3, 5)
    st = s["tsv-stuck"]
    assert st["duration_ms"] == AS_OF - (T0 + 1000)
    assert st["evidence"]["partitions"] == ["stuck-0", "stuck-1"]
    assert "never completed" in st["message"] and "KAFKA-16352" in st["remediation"]
    assert "stuck-0, stuck-1" in st["message"] and st["remediation_commands"] == []
    og = s["tsv-ongoing"]
    assert (og["duration_ms"], og["first_timestamp"]) == (AS_OF - T0, T0)
    assert [c["command"] for c in og["remediation_commands"]] == [
        "kafka-transactions.sh --bootstrap-server <broker:port> describe --transactional-id tsv-ongoing"]


def test_torn_transaction(findings):
    t = {(f["topic"], f["partition"]): f for f in _by(findings, "torn-transaction")}
    assert len(t) == len(_by(findings, "torn-transaction"))
    assert set(t) == {("torn", 1), ("torn", 2), ("torn", 6), ("torn2", 1)}
    w = t[("torn", 1)]
    assert (w["severity"], w["kind"], w["evidence"]["decision"]) == ("critical", "wrong-marker", "COMMIT")
    assert (w["first_offset"], w["last_offset"], w["evidence"]["marker_type"]) == (0, 1, "ABORT")
    assert (w["producer_id"], w["producer_epoch"], w["transactional_id"]) == (300, 0, "torn-a")
    assert (w["evidence"]["prepare_offset"], w["evidence"]["complete_offset"]) == (201, 202)
    m = t[("torn", 2)]
    assert (m["severity"], m["kind"], m["first_offset"]) == ("error", "missing-commit-marker", 0)
    assert m["evidence"]["open_data_first_offset"] == 0
    assert m["remediation_commands"] == []  # a COMMIT decision: no abort command offered
    n = t[("torn", 6)]
    assert (n["kind"], n["evidence"]["complete_offset"], n["evidence"]["decision"]) == (
        "missing-commit-marker", 202, "COMMIT")
    assert (n["evidence"]["window_start_ms"], n["evidence"]["window_end_ms"]) == (T0, T0 + 10_000)
    v2 = t[("torn2", 1)]
    assert (v2["kind"], v2["producer_epoch"], v2["evidence"]["decision"]) == ("missing-abort-marker", 5, "ABORT")
    assert v2["evidence"]["open_data_first_offset"] is None  # epoch 4's marker closed the data, but it is not this one
    assert v2["remediation_commands"] == []  # nothing open to abort


def test_snapshot_log_mismatch(findings):
    s = _by(findings, "snapshot-log-mismatch")
    got = sorted((f["partition"], f["kind"], f["producer_id"], f["evidence"]["snapshot_offset"]) for f in s)
    assert got == [
        (0, "last-batch-mismatch", 400, 105),
        (0, "last-batch-mismatch", 403, 102),
        (0, "open-txn-below-log-start", 401, 102),
        (1, "snapshot-ahead-of-log", None, 20),
        (2, "snapshot-ahead-of-log", None, 50),
    ]
    by = {(f["kind"], f["producer_id"]): f for f in s}
    o = by[("open-txn-below-log-start", 401)]
    assert (o["severity"], o["first_offset"], o["evidence"]["log_start_offset"]) == ("error", 50, 100)
    assert o["remediation_commands"][0]["command"].endswith("--start-offset 50")
    assert o["remediation_commands"][1]["command"].endswith("--coordinator-epoch 7")
    x = by[("last-batch-mismatch", 403)]
    assert (x["evidence"]["log_producer_id"], x["evidence"]["log_base_offset"], x["first_offset"]) == (400, 100, 100)
    q = by[("last-batch-mismatch", 400)]
    assert (q["evidence"]["snapshot_last_sequence"], q["evidence"]["log_last_sequence"]) == (15, 11)
    a = [f for f in s if f["partition"] == 1][0]
    assert (a["severity"], a["first_offset"], a["last_offset"]) == ("warning", 10, 20)


def test_txnindex_mismatch(findings):
    x = _by(findings, "txnindex-mismatch")
    got = sorted((f["partition"], f["kind"], f["producer_id"], f["last_offset"], f["severity"]) for f in x)
    assert got == [
        (0, "entry-without-data", 506, 13, "warning"),
        (0, "first-offset-mismatch-exposed", 502, 7, "error"),
        (0, "missing-entry", 501, 4, "error"),
        (0, "no-marker", 504, 12, "warning"),
        (0, "not-an-abort", 503, 9, "error"),
        (0, "out-of-order", 500, 2, "error"),
        (2, "missing-entry", 520, 1, "error"),
        (3, "no-marker-compacted", 530, 5, "info"),
    ]
    fo = [f for f in x if f["kind"] == "first-offset-mismatch-exposed"][0]
    assert (fo["evidence"]["entry_first_offset"], fo["evidence"]["data_first_offset"], fo["first_offset"]) == (6, 5, 5)
    assert "see its records from 5 up to the entry's first offset" in fo["message"]
    assert [f["evidence"]["marker_type"] for f in x if f["kind"] == "not-an-abort"] == ["COMMIT"]


def test_epoch_exhaustion(findings):
    e = {f["producer_id"]: f for f in _by(findings, "epoch-exhaustion")}
    assert {k: (v["kind"], v["severity"]) for k, v in e.items()} == {
        600: ("near-exhaustion", "warning"),
        601: ("exhausted", "error"),
        602: ("rotated", "info"),
        604: ("near-exhaustion-tv2", "info"),
        605: ("overflowed", "error"),
    }
    assert (e[600]["producer_epoch"], e[600]["evidence"]["bumps_left"], e[600]["topic"]) == (32100, 666, "epx")
    assert (e[601]["transactional_id"], e[601]["evidence"]["sources"]) == ("epx-ex", ["batches", "transaction_log"])
    assert (e[602]["evidence"]["coordinator_producer_id"], e[602]["topic"]) == (603, "__transaction_state")
    assert e[605]["producer_epoch"] == -32768


def test_replica_divergence(findings):
    r = {(f["partition"], f["kind"]): f for f in _by(findings, "replica-divergence")}
    assert set(r) == {(0, "batch-mismatch"), (0, "missing-marker")}
    m = r[(0, "batch-mismatch")]
    assert (m["severity"], m["first_offset"], m["last_offset"], m["evidence"]["offsets"]) == ("error", 2, 5, 2)
    assert m["evidence"]["first_divergence"].startswith("offset 2: producer_id 701/709")
    k = r[(0, "missing-marker")]
    assert (k["broker_id"], k["first_offset"], k["evidence"]["lacking_broker"]) == (2, 3, 2)
    assert "ABORT marker of producer 702" in k["message"]
    assert k["evidence"]["replica_ranges"] == ["broker 1: 0..5", "broker 2: 0..5"]
