"""Ingestion of real broker log dirs (found in public repositories) on real Spark.

Expected values are the facts stated in ``real_logs/SOURCES.md`` (counted by
its author's own triage script) and properties of the Kafka format, not
figures taken from this decoder's output.
"""

from __future__ import annotations

from collections import Counter

import pyarrow.dataset as ds
import pytest

from conftest import REAL_LOGS
from auditor.ingest.spark_job import ingest
from auditor.ingest.plan import make_plan

pytestmark = [pytest.mark.spark, pytest.mark.real_logs]  # every test reads the external corpus

NOVA = REAL_LOGS / "NOVA-RICS-Open-Lab__agentic-data-pipelines" / "broker" / "data"
RONEM = REAL_LOGS / "ronem123__rupia-transaction-service" / "kafka-logs"


@pytest.fixture(scope="module")
def tables(spark, tmp_path_factory):
    out = tmp_path_factory.mktemp("real") / "tables"
    result = ingest(spark, [str(NOVA), str(RONEM)], str(out))
    return result, out


def _rows(out, table, **eq):
    t = ds.dataset(str(out / table)).to_table().to_pylist()
    return [r for r in t if all(r.get(k) == v for k, v in eq.items())]


def test_real_dirs_ingest_without_problems(tables):
    result, _ = tables
    assert result.bad_files == []
    statuses = Counter(f["status"] for f in result.files)
    assert set(statuses) <= {"ok", "empty", "skipped"}
    assert statuses["ok"] > 300


def test_transaction_state_and_markers_agree(tables):
    _, out = tables
    txn = _rows(out, "transaction_log", topic="__transaction_state", partition=4)
    assert len(txn) == 36  # SOURCES.md: 36 v2 batches of one record each
    assert {r["transactional_id"] for r in txn} == {"agentic_ksql_"}
    cmd = "_confluent-ksql-agentic_ksql__command_topic"
    markers = _rows(out, "batches", topic=cmd, is_control=True)
    assert len(_rows(out, "batches", topic=cmd)) == 18
    assert [m["control_type"] for m in markers] == ["COMMIT"] * 9
    assert sorted(m["producer_epoch"] for m in markers) == list(range(9))  # epoch 0..8
    committed = {(r["producer_id"], r["producer_epoch"]) for r in txn if r["state"] == "CompleteCommit"}
    assert committed == {(m["producer_id"], m["producer_epoch"]) for m in markers}
    assert {tp["topic"] for r in txn for tp in (r["topic_partitions"] or [])} == {cmd}


def test_producer_snapshot_matches_log(tables):
    _, out = tables
    snap = _rows(out, "producer_snapshots", topic="OPCUA_KUKA_RAW_CLEANSED")
    assert len(snap) == 24  # SOURCES.md: 24 entries
    batches = _rows(out, "batches", topic="OPCUA_KUKA_RAW_CLEANSED")
    assert len(batches) == 12389
    assert len({b["producer_id"] for b in batches}) == 25
    last = {}
    for b in batches:
        if b["last_offset"] < 11685:
            last[b["producer_id"]] = b
    for e in snap:
        b = last[e["producer_id"]]
        assert (b["last_offset"], b["last_sequence"], b["producer_epoch"]) == (
            e["last_offset"], e["last_sequence"], e["producer_epoch"])


def test_metadata_and_checkpoints(tables):
    _, out = tables
    meta = _rows(out, "metadata_records", topic="__cluster_metadata", source="log")
    assert len({r["offset"] for r in meta}) == len(meta)
    assert len(_rows(out, "batches", topic="__cluster_metadata", source="segment")) == 12105  # SOURCES.md
    snaps = {r["file"] for r in _rows(out, "metadata_records", source="snapshot", topic="__cluster_metadata")}
    assert len(snaps) == 125  # SOURCES.md: 125 KRaft snapshot files (+ bootstrap.checkpoint at the root)
    assert len(_rows(out, "metadata_records", source="snapshot", topic=None)) > 0  # bootstrap.checkpoint
    hw = _rows(out, "checkpoints", checkpoint_kind="replication-offset")
    assert hw and all(r["offset"] >= 0 for r in hw)
    brokers = _rows(out, "broker_files", file_kind="meta-properties")
    assert {r["log_dir"] for r in brokers} == {str(NOVA), str(RONEM)}


def test_index_split_gives_the_same_batches(spark, tmp_path):
    """A segment split into byte-range tasks at .index positions decodes to the same rows."""
    seg_dir = RONEM / "__cluster_metadata-0"
    plan = make_plan([str(seg_dir)], split_bytes=64 * 1024)
    ranges = [t for t in plan.tasks if t["kind"] == "segment"]
    assert len(ranges) > 5  # the 874 KB active segment was split
    assert all(a["range_end"] == b["range_start"] for a, b in zip(ranges, ranges[1:]))
    whole = ingest(spark, [str(seg_dir)], str(tmp_path / "a"), tables=["batches"])
    split = ingest(spark, [str(seg_dir)], str(tmp_path / "b"), tables=["batches"], split_bytes=64 * 1024)
    key = lambda r: (r["file"], r["position"])  # noqa: E731
    a = sorted(ds.dataset(str(tmp_path / "a" / "batches")).to_table().to_pylist(), key=key)
    b = sorted(ds.dataset(str(tmp_path / "b" / "batches")).to_table().to_pylist(), key=key)
    assert whole.table_rows["batches"] == split.table_rows["batches"] == len(b)
    assert a == b
