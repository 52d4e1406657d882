"""Two-phase-commit transactions (KIP-939) on the real capture ``sample_logs/prepared-2pc``.

The broker (Kafka 4.3.1, ``transaction.two.phase.commit.enable=true``,
``transaction.max.timeout.ms`` 4000) kept a prepared 2PC transaction open well
past its maximum timeout while it aborted an ordinary transaction that timed out
(``scripts/capture/two_phase_commit.py``, ``sc_prepared_2pc``; ground truth in
``expected.json`` from the clients). The coordinator's record is the only mark on
disk: transaction timeout ``Integer.MAX_VALUE``
(``TransactionMetadata.isDistributedTwoPhaseCommitTxn``). Audited with the
broker's own ``transaction.max.timeout.ms``, the transaction is reported as
``two-phase-commit`` (info, no abort command), never hanging; without
``__transaction_state`` its age alone makes it hanging, and the finding says that
the coordinator's record, not given, would tell a 2PC transaction from it.
"""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import SAMPLE_LOGS
from auditor.engine.runner import audit
from auditor.ingest.spark_job import ingest
from auditor.engine.context import AuditOptions

pytestmark = pytest.mark.spark

CAPTURE = SAMPLE_LOGS / "prepared-2pc"
EXPECTED = json.loads((CAPTURE / "expected.json").read_text())
MAX_TIMEOUT_MS = int(EXPECTED["broker"]["server_properties"]["transaction.max.timeout.ms"])
PREPARED = [a for a in EXPECTED["expect"]["anomalies"] if a["type"] == "two-phase-commit-transaction"]
INTEGER_MAX_VALUE = 2**31 - 1


def _audit(spark, dirs, tmp_path):
    out = tmp_path / "tables"
    ing = ingest(spark, [str(d) for d in dirs], str(out))
    assert ing.bad_files == []
    return audit(spark, str(out), options=AuditOptions(transaction_max_timeout_ms=MAX_TIMEOUT_MS)).findings


@pytest.fixture(scope="module")
def whole(spark, tmp_path_factory):
    return _audit(spark, [CAPTURE], tmp_path_factory.mktemp("twopc"))


@pytest.fixture(scope="module")
def without_coordinator(spark, tmp_path_factory):
    """The capture's log dir without its ``__transaction_state`` partitions (a copy: inputs stay read-only)."""
    root = tmp_path_factory.mktemp("twopc-no-coordinator")
    shutil.copytree(CAPTURE / "broker-1", root / "broker-1",
                    ignore=lambda d, names: [n for n in names if n.startswith("__transaction_state-")])
    return _audit(spark, [root / "broker-1"], root)


def _at(findings, rule, a):
    return [f for f in findings if f["rule"] == rule and (f["topic"], f["partition"]) == (a["topic"], a["partition"])]


def test_capture_ground_truth():
    """What the clients saw: the 2PC transaction still pinned the LSO after 3x the maximum timeout."""
    assert len(PREPARED) == 2 and MAX_TIMEOUT_MS == 4000
    assert EXPECTED["steps"]["seconds_open_after_prepare_at_check"] * 1000 > 2 * MAX_TIMEOUT_MS
    for a in PREPARED:
        eo = EXPECTED["steps"]["end_offsets_at_check"][f"{a['topic']}-{a['partition']}"]
        assert eo["last_stable_offset"] == a["first_offset"] < eo["high_watermark"]
    contrast = [t for t in EXPECTED["transactions"] if t["transactional_id"] == "plain-txn"]
    assert [t["outcome"] for t in contrast] == ["ABORT"], "the ordinary transaction was timed out by the coordinator"


def test_prepared_transaction_is_two_phase_commit_not_hanging(whole):
    assert [f for f in whole if f["severity"] in ("error", "critical")] == []
    for a in PREPARED:
        for rule in ("hanging-transaction", "stuck-lso"):
            got = _at(whole, rule, a)
            assert len(got) == 1, (rule, a, [f["message"] for f in whole])
            f = got[0]
            assert (f["kind"], f["severity"], f["remediation_commands"]) == ("two-phase-commit", "info", [])
            assert (f["producer_id"], f["first_offset"], f["transactional_id"]) == (
                a["producer_id"], a["first_offset"], a["transactional_id"])
            assert f["duration_ms"] > MAX_TIMEOUT_MS, "older than transaction.max.timeout.ms, yet not hanging"
        f = _at(whole, "hanging-transaction", a)[0]
        assert f["evidence"]["transaction_timeout_ms"] == INTEGER_MAX_VALUE
        assert f["evidence"]["coordinator_state"] == "Ongoing"
        assert "forceTerminateTransaction" in f["remediation"] and "external transaction coordinator" in f["remediation"]
        assert "by design" in _at(whole, "stuck-lso", a)[0]["message"]
    # the committed 2PC transaction and the timed-out ordinary one leave nothing behind
    assert {(f["topic"], f["partition"]) for f in whole} == {(a["topic"], a["partition"]) for a in PREPARED}


def test_without_coordinator_the_finding_says_what_is_missing(without_coordinator):
    """Age alone (older than transaction.max.timeout.ms) makes it overdue, not hanging: without the
    coordinator's record a two-phase-commit transaction (or a decided one waiting for its leader) cannot
    be told from a hanging one, so the finding names that record, the checks that ask the coordinator
    come first and the abort is guarded by them."""
    for a in PREPARED:
        got = _at(without_coordinator, "hanging-transaction", a)
        assert len(got) == 1, [f["message"] for f in without_coordinator]
        f = got[0]
        assert (f["kind"], f["severity"]) == ("overdue", "error")
        assert f["evidence"]["age_only"] is True and f["evidence"]["transaction_timeout_ms"] is None
        assert "__transaction_state" in f["evidence"]["settled_by"]
        assert "Integer.MAX_VALUE" in f["evidence"]["settled_by"]
        assert "two-phase-commit transaction (KIP-939) is never timed out" in f["message"]
        assert "__transaction_state" in f["message"]
        assert "2147483647: a two-phase-commit" in f["remediation"]
        assert "find-hanging" in f["remediation_commands"][0]["command"]
        stuck = _at(without_coordinator, "stuck-lso", a)
        assert [s["kind"] for s in stuck] == ["overdue"]
