"""replica-divergence on a compacted partition whose replicas' cleaners ran at different times.

The capture ``sample_logs/compacted-cleaner-lag`` (``scripts/capture_scenarios.py --only
compacted-cleaner-lag``): node 3 runs without a cleaner, nodes 1 and 2 emptied the ABORT marker that
is the Java producer's last batch (LogCleaner keeps it, BatchRetention.RETAIN_EMPTY: record count 0,
so no control type, control attribute kept) while node 3 holds it with its control record. That is
the cleaner's work on a healthy cluster, not divergence: the dump must give no finding at all.

The same pair as hand-built rows (the case files' ``marker`` call cannot write an emptied control
batch): an emptied marker against a full one is no finding; against another producer epoch it is.
"""

from __future__ import annotations

import json

import pyarrow.dataset as ds
import pytest

from conftest import SAMPLE_LOGS
from auditor.engine.runner import audit
from auditor.ingest.spark_job import ingest
from tables_builder import TableSet

pytestmark = pytest.mark.spark

SCENARIO = SAMPLE_LOGS / "compacted-cleaner-lag"
TOPIC = "kvlag"


@pytest.fixture(scope="module")
def scanned(spark, tmp_path_factory):
    assert (SCENARIO / "expected.json").is_file(), "run scripts/capture_scenarios.py --only compacted-cleaner-lag"
    out = tmp_path_factory.mktemp("cleaner-lag") / "tables"
    ing = ingest(spark, [str(SCENARIO)], str(out))
    assert not ing.bad_files
    return out, audit(spark, str(out)).findings


def test_capture_holds_an_emptied_marker_against_a_full_one(scanned):
    out, _ = scanned
    exp = json.loads((SCENARIO / "expected.json").read_text())
    offset = exp["steps"]["last_abort_marker_offset"]
    abort = exp["transactions"][-1]
    assert abort["outcome"] == "ABORT" and abort["partitions"][f"{TOPIC}-0"]["marker_offset"] == offset
    rows = ds.dataset(str(out / "batches")).to_table().to_pylist()
    at = {r["broker_id"]: r for r in rows if r["topic"] == TOPIC and r["source"] == "segment"
          and r["base_offset"] == offset and r["file"].endswith(".log")}
    assert sorted(at) == [1, 2, 3]
    for b in (1, 2):  # emptied by the cleaner: no record left, so no control type; the header kept
        assert (at[b]["is_control"], at[b]["record_count"], at[b]["control_type"]) == (True, 0, None)
    assert (at[3]["is_control"], at[3]["record_count"], at[3]["control_type"]) == (True, 1, "ABORT")
    for r in at.values():
        assert (r["producer_id"], r["producer_epoch"], r["last_offset"]) == (
            abort["producer_id"], abort["marker_epoch"], offset)
    # node 3 never cleaned: it still holds the aborted transaction's data, the others do not
    data = abort["partitions"][f"{TOPIC}-0"]["record_offsets"]

    def holds(broker: int, o: int) -> bool:
        return any(r["broker_id"] == broker and r["topic"] == TOPIC and r["source"] == "segment"
                   and r["base_offset"] <= o <= r["last_offset"] and r["record_count"] > 0 for r in rows)

    assert all(holds(3, o) for o in data)
    assert not any(holds(b, o) for b in (1, 2) for o in data)


def test_no_replica_divergence_and_no_finding(scanned):
    _, findings = scanned
    assert not [f for f in findings if f["rule"] == "replica-divergence"], findings
    assert findings == []


def _emptied_marker_case(spark, root, epoch_on_2: int) -> list[dict]:
    t = TableSet(root, cluster="emptied-marker")
    t.config("cleanup.policy", "compact", topic="rep")
    for b in (1, 2):
        t.batch("rep", 0, 0, 2, producer_id=730, producer_epoch=0, base_sequence=0, transactional=True, broker_id=b)
        t.marker("rep", 0, 2, 730, 1 if b == 1 else epoch_on_2, commit=False, broker_id=b)
    t.rows["batches"][-1].update(record_count=0, control_type=None)  # broker 2's marker, emptied (RETAIN_EMPTY)
    t.write()
    return [f for f in audit(spark, str(root), only=["replica-divergence"]).findings if f["rule"] == "replica-divergence"]


def test_emptied_marker_against_full_marker_is_no_divergence(spark, tmp_path):
    assert _emptied_marker_case(spark, tmp_path / "same", 1) == []


def test_emptied_marker_of_another_epoch_is_divergence(spark, tmp_path):
    got = _emptied_marker_case(spark, tmp_path / "other", 2)
    assert [(f["kind"], f["first_offset"]) for f in got] == [("batch-mismatch", 2)]
    assert "producer_epoch 1/2" in got[0]["evidence"]["first_divergence"]
