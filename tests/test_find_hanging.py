"""Against Kafka's own ``kafka-transactions.sh find-hanging`` on a live broker.

One broker per module (Kafka 3.5.2: before KIP-890 verification, so the broker
still accepts the writes that hang). Two hanging scenarios of the capture
package (``scripts.capture.transactions``) run on it — a late write after an ABORT marker
(KAFKA-12671) and a transactional write to a partition never added to the
transaction — then ``org.apache.kafka.tools.TransactionsCommand find-hanging``
(the class behind kafka-transactions.sh, from the same jars) is run while the
broker is up, the broker is stopped cleanly and its log dir audited offline.

Required: every partition find-hanging reports, we report too (same producer
id, epoch and start offset). What we report that it cannot (asserted below):
the classification of *why* it hangs (``late-write`` vs a partition the
coordinator never listed), the transactional id, the LSO lag, which the tool
never shows, and all of it without a running cluster.
"""

from __future__ import annotations

import re
import subprocess
import time

import pytest

from auditor.engine.runner import audit
from auditor.ingest.spark_job import ingest
from auditor.engine.context import AuditOptions
from scripts.capture import transactions
from scripts.capture.context import Ctx
from scripts.kafka.harness import PRE_VERIFICATION, classpath

pytestmark = pytest.mark.spark

ROW = re.compile(r"^(\S+)\s+(\d+)\s+(\d+)\s+(-?\d+)\s+(-?\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$")


def _find_hanging(version: str, bootstrap: str) -> list[dict]:
    proc = subprocess.run(
        ["java", "-cp", classpath(version), "org.apache.kafka.tools.TransactionsCommand",
         "--bootstrap-server", bootstrap, "find-hanging", "--broker-id", "1", "--max-transaction-timeout", "0"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = []
    for line in proc.stdout.splitlines():
        m = ROW.match(line.strip())
        if m:
            t, p, pid, epoch, ce, start, last_ts, dur = m.groups()
            rows.append({"topic": t, "partition": int(p), "producer_id": int(pid), "producer_epoch": int(epoch),
                         "coordinator_epoch": int(ce), "start_offset": int(start)})
    assert "Topic" in proc.stdout, proc.stdout  # the header of its table
    return rows


def _wait_past(ms: float) -> None:
    """Return once this machine's clock is past ``ms``. find-hanging lists an open transaction only
    when ``now - lastTimestamp > --max-transaction-timeout`` (Kafka 3.5.2,
    TransactionsCommand.FindHangingTransactionsCommand.collectCandidateOpenTransactions; 0 minutes
    here), and the producer state's lastTimestamp is its last batch's max timestamp
    (ProducerAppendInfo.append hands batch.maxTimestamp() to appendDataBatch): CreateTime, stamped by
    the clients on this machine before ``ms`` was read. A wait for that condition, not a guessed delay."""
    while time.time() * 1000 <= ms:
        time.sleep(0.001)


@pytest.fixture(scope="module")
def live(spark, tmp_path_factory):
    ctx = Ctx("find-hanging-live", PRE_VERIFICATION, {}, None)
    ctx.start()
    try:
        transactions.sc_hanging_late_write(ctx)
        transactions.sc_hanging_unadded(ctx)
        written_ms = time.time() * 1000  # after every batch of both scenarios was stamped
        ctx.close_clients()
        _wait_past(written_ms)
        tool = _find_hanging(ctx.version, ctx.broker.bootstrap)
        now = int(time.time() * 1000)
    finally:
        ctx.broker.stop()
    out = tmp_path_factory.mktemp("fh") / "tables"
    ingest(spark, [str(ctx.broker.log_dir)], str(out))
    res = audit(spark, str(out), options=AuditOptions(as_of_ms=now), only=["hanging-transaction", "stuck-lso"])
    return tool, res.findings


def test_find_hanging_reports_the_hanging_partitions(live):
    tool, _ = live
    assert {(r["topic"], r["partition"]) for r in tool} == {("transfers", 0), ("accounts", 1)}


def test_we_report_everything_find_hanging_reports(live):
    tool, findings = live
    ours = {(f["topic"], f["partition"], f["producer_id"], f["producer_epoch"], f["first_offset"]): f
            for f in findings if f["rule"] == "hanging-transaction"}
    for r in tool:
        key = (r["topic"], r["partition"], r["producer_id"], r["producer_epoch"], r["start_offset"])
        assert key in ours, f"find-hanging reports {r}, we do not"
        assert ours[key]["kind"] != "in-flight"


def test_what_we_add(live):
    _, findings = live
    h = {(f["topic"], f["partition"]): f for f in findings if f["rule"] == "hanging-transaction"}
    assert h[("transfers", 0)]["kind"] == "late-write"
    assert h[("transfers", 0)]["transactional_id"] == "transfers-txn"
    assert h[("accounts", 1)]["kind"] == "hanging"
    assert h[("accounts", 1)]["transactional_id"] == "accounts-txn"
    lso = {(f["topic"], f["partition"]): f for f in findings if f["rule"] == "stuck-lso"}
    assert int(lso[("transfers", 0)]["evidence"]["lag_offsets"]) > 0
    assert int(lso[("accounts", 1)]["evidence"]["lag_offsets"]) > 0
