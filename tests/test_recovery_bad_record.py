"""A record the coordinator could not have written does not cut the log.

Kafka's log recovery after an unclean shutdown (``LogSegment.recover``) validates batches — size,
CRC, offsets — and truncates at the first invalid one; it never decodes the records of
``__transaction_state``. A batch with a valid CRC whose record key is not UTF-8 is therefore kept
by the broker, and so are the valid records after it. The inventory calls it ``bad-record`` and
the live log keeps everything after it, so the coordinator's later records still count.
"""

from __future__ import annotations

import pytest

from builders import kp_batch, txn_log_value_v0
from hostile_tree import TS, _complete, _txn_record_batch, write

pytestmark = pytest.mark.spark

SEG0 = "00000000000000000000.log"


def _log_dir(root):
    d = root / "broker-1"
    write(d / "meta.properties", b"version=1\nnode.id=1\ncluster.id=badrecord-test-clusterA\n")
    # no .kafka_cleanshutdown: the broker would run recovery on every segment
    ok = _txn_record_batch(0, "t-first", _complete(7))
    # offset 1: a valid batch (its CRC is computed over these bytes) whose key is not UTF-8
    bad_key = b"\x00\x00" + b"\x00\x04" + b"\xff\xfe\xfd\xfc"
    bad = kp_batch([(0, TS + 1, bad_key, _complete(8), [])], base_offset=1)
    ongoing = txn_log_value_v0(9, 0, 60_000, 1, [("orders", [0])], TS, TS)  # Ongoing with orders-0
    after = _txn_record_batch(2, "t-after", ongoing)
    write(d / "__transaction_state-0" / SEG0, ok + bad + after)
    return d


def test_a_bad_record_in_a_valid_batch_is_reported_and_the_log_goes_on(spark, tmp_path):
    from auditor.ingest.spark_job import ingest
    from auditor.engine.context import AuditContext

    d = _log_dir(tmp_path)
    out = tmp_path / "t"
    res = ingest(spark, [str(d)], str(out))
    seg = next(f for f in res.files if f["path"].endswith(f"__transaction_state-0/{SEG0}"))
    assert seg["status"] == "bad-record", seg
    assert seg["error_position"] == len(_txn_record_batch(0, "t-first", _complete(7)))
    ctx = AuditContext(spark, str(out))
    try:
        live = ctx.live_log[seg["path"]]
        assert live.live and live.end_position is None, live  # recovery would not cut the segment
        ids = sorted(r["transactional_id"] for r in ctx.table("transaction_log").select("transactional_id").collect())
    finally:
        ctx.close()
    assert ids == ["t-after", "t-first"]
