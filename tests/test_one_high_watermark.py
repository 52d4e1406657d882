"""One fact, one place: the high watermark and the pin's age that ``stuck-lso`` reports are the
ones ``txn-audit timeline`` and the metrics file show (issue 55, item 6).

Seen on a real capture: the finding said "pinned at 20 ... behind the high watermark 23", the
timeline it points to said "high watermark 20 (replication-offset-checkpoint)", and the LSO
pinned for 1m46s was "3 offsets (0ms of data) behind" with ``txn_audit_lso_lag_seconds`` 0. Here
a replica like it: producer 7's open transaction, offsets 20..22, the partition's newest data,
written in one millisecond; the cluster's newest record (the reference instant) 1m46s later. Its
log dir either was not cleanly stopped (the checkpoint's 20 lags the log: a lower bound, the high
watermark is the log end, 23) or was (the checkpoint says 23). Both timeline engines must show
the finding's high watermark, say where it comes from as the finding does, and ask the LSO at it;
the metrics file must show the pin's age, 106 s.
"""

from __future__ import annotations

import json

import pytest

from tables_builder import T0, TableSet
from auditor.engine.context import AuditContext, AuditOptions
from auditor.engine.runner import audit
from auditor.forensics.timeline import ArrowTimeline, Timeline, TimelineRequest
from auditor.report import metrics as M

pytestmark = pytest.mark.spark

TOPIC = "pay"
PINNED_MS = 106_000  # 1m46s
LOWER_BOUND = "the replication-offset-checkpoint's 20 is only a lower bound, the log dir was not cleanly stopped"


def _tables(root, stopped: bool):
    """The replica of the module doc; ``stopped``: its log dir holds ``.kafka_cleanshutdown`` and
    its checkpoint the log end (a clean shutdown writes it), else the checkpoint says 20."""
    t = TableSet(root)
    t.inventory_file(TOPIC, 0, "segment", 0)
    if stopped:
        t.clean_shutdown()
    t.batch("clock", 0, 0, ts=T0 + PINNED_MS)
    t.batch(TOPIC, 0, 0, count=20, producer_id=6, producer_epoch=0, base_sequence=0, ts=T0 - 60_000)
    t.batch(TOPIC, 0, 20, count=3, producer_id=7, producer_epoch=0, base_sequence=0, transactional=True, ts=T0)
    t.checkpoint("replication-offset", TOPIC, 0, 23 if stopped else 20)
    t.txn("t-pay", 0, "Ongoing", 7, partitions=[(TOPIC, 0)], timeout_ms=60_000, start_ms=T0, updated_ms=T0)
    return t.write()


def _end(tl) -> dict:
    """The timeline's last row, as ``--format jsonl`` writes it."""
    tl.choose()
    return json.loads(json.dumps(list(tl.events())[-1], default=str))


@pytest.mark.parametrize("stopped", [False, True], ids=["not-cleanly-stopped", "cleanly-stopped"])
def test_timeline_and_finding_show_one_high_watermark(spark, tmp_path, stopped):
    root = _tables(tmp_path / "t", stopped)
    findings = audit(spark, str(root), options=AuditOptions(), only=["hanging-transaction", "stuck-lso"]).findings
    (f,) = [x for x in findings if x["rule"] == "stuck-lso"]
    ev = f["evidence"]
    assert (ev["last_stable_offset"], ev["high_watermark"], ev["log_end_offset"]) == (20, 23, 23)
    assert ev["high_watermark_checkpoint"] == (None if stopped else 20)
    assert "behind the high watermark 23" in f["message"]
    assert (LOWER_BOUND in f["message"]) is not stopped

    ctx = AuditContext(spark, str(root))
    try:
        ends = {tl.engine: _end(tl) for tl in (ArrowTimeline(root, TimelineRequest(TOPIC, 0)),
                                               Timeline(ctx, TimelineRequest(TOPIC, 0)))}
    finally:
        ctx.close()
    assert ends["arrow"] == ends["spark"]
    end = ends["arrow"]
    assert (end["lso"], end["high_watermark"], end["high_watermark_checkpoint"], end["log_end"]) == (
        ev["last_stable_offset"], ev["high_watermark"], ev["high_watermark_checkpoint"], ev["log_end_offset"])
    assert "high watermark 23 (" in end["detail"] and "high watermark 20" not in end["detail"]
    assert (LOWER_BOUND in end["detail"]) is not stopped
    if stopped:
        assert "high watermark 23 (replication-offset-checkpoint)" in end["detail"]


def test_the_metrics_show_how_long_the_lso_has_been_pinned(spark, tmp_path):
    """The finding says "pinned ... for 1m46s" (its ``duration_ms``, the verdict's age), and the
    metrics file's ``txn_audit_lso_lag_seconds`` says 106, where the span of data behind the LSO
    (``lag_ms``) is 0: nothing says 0 for it."""
    root = _tables(tmp_path / "t", stopped=False)
    findings = audit(spark, str(root), options=AuditOptions(), only=["hanging-transaction", "stuck-lso"]).findings
    (hang,) = [x for x in findings if x["rule"] == "hanging-transaction"]
    (f,) = [x for x in findings if x["rule"] == "stuck-lso"]
    assert f["duration_ms"] == hang["duration_ms"] == PINNED_MS and f["evidence"]["lag_ms"] == 0
    assert f" by producer 7 for 1m46s, 3 offsets behind" in f["message"] and "0ms" not in f["message"]
    assert f["severity"] in ("error", "critical"), f  # past its 60 s timeout: counted by the file
    text = M.success_text(M.Outcome(findings, [f["cluster_id"]], [], 0, 900_000), 1.0, 1.0)
    series = [line.split() for line in text.splitlines() if line.startswith("txn_audit_lso_")]
    pinned = [float(v) for name, v in series if name.startswith("txn_audit_lso_lag_seconds{")]
    assert pinned == [PINNED_MS / 1000]
    assert all(float(v) > 0 for _, v in series), series
