"""A topic deleted and re-created: the old partition directory, renamed
``orders-0.<uuid>-delete``, sits next to the new, live ``orders-0`` in the same
log dir until the broker's delayed delete removes it. The rules must audit the
live replica only (the retired one's offsets and sequences start over in the
live one: merged, they would fake regressions, duplicates and a hanging
transaction), while the tables keep the retired rows for forensics.

Segments are real bytes (kafka-python's encoder and hand-built markers, see
builders.py), ingested and audited end to end.
"""

from __future__ import annotations

import pytest

from batch_support import HOUR, T0
from batch_support import write as _write
from builders import data_batch, marker
from auditor.engine.runner import audit
from auditor.ingest.spark_job import ingest
from auditor.engine.context import AuditOptions

pytestmark = pytest.mark.spark

UUID = "5a1e0c3f9b2d4e6f8a7b9c0d1e2f3a4b"


@pytest.fixture(scope="module")
def audited(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("retired")
    log = root / "broker-1"
    _write(log / "meta.properties", b"version=1\nnode.id=1\ncluster.id=retired-test\n")
    seg = "00000000000000000000.log"
    # the old orders-0: producer 5 wrote sequences 0-9, producer 8 left a transaction open
    # (the topic was deleted under it), and for the stray replica of payments-0 the same
    old = (data_batch(0, 10, producer_id=5, producer_epoch=0, base_sequence=0, timestamp=T0)
           + data_batch(10, 2, producer_id=8, producer_epoch=0, base_sequence=0, transactional=True,
                        timestamp=T0 + 1000))
    _write(log / f"orders-0.{UUID}-delete" / seg, old)
    _write(log / f"payments-0.{UUID[::-1]}-stray" / seg, old)
    # the re-created topics: producer 5 starts again at offset 0, sequence 0, and commits;
    # two hours of traffic later (so an open transaction would be old enough to hang)
    new = (data_batch(0, 3, producer_id=5, producer_epoch=0, base_sequence=0, transactional=True,
                      timestamp=T0 + HOUR)
           + marker(3, 5, 0, commit=True, timestamp=T0 + HOUR + 10)
           + data_batch(4, 1, timestamp=T0 + 3 * HOUR))
    _write(log / "orders-0" / seg, new)
    _write(log / "payments-0" / seg, new)
    tables = root / "tables"
    ingest(spark, [str(log)], str(tables))
    result = audit(spark, str(tables), options=AuditOptions())
    batches = spark.read.parquet(str(tables / "batches"))
    return result, batches, tables


def test_the_live_replicas_have_no_findings(audited):
    result, _, _ = audited
    on_live = [(f["rule"], f["topic"], f["producer_id"]) for f in result.findings
               if f["topic"] in ("orders", "payments")]
    assert on_live == []


def test_the_retired_rows_are_still_in_the_tables(audited):
    _, batches, _ = audited
    files = {r["file"].split("/")[-2]: r["n"] for r in batches.groupBy("file").count().withColumnRenamed("count", "n")
             .collect()}
    assert files == {f"orders-0.{UUID}-delete": 2, f"payments-0.{UUID[::-1]}-stray": 2, "orders-0": 3, "payments-0": 3}


def test_without_the_live_replica_nothing_is_invented_either(spark, tmp_path):
    """A deleted topic alone (not re-created): its open transaction is not a hanging
    transaction of a partition anyone reads; nothing is reported for it."""
    log = tmp_path / "broker-1"
    _write(log / "meta.properties", b"version=1\nnode.id=1\ncluster.id=retired-only\n")
    _write(log / f"orders-0.{UUID}-delete" / "00000000000000000000.log",
           data_batch(0, 2, producer_id=8, producer_epoch=0, base_sequence=0, transactional=True, timestamp=T0)
           + data_batch(2, 1, timestamp=T0 + 3 * HOUR))
    _write(log / "clock-0" / "00000000000000000000.log", data_batch(0, 1, timestamp=T0 + 3 * HOUR))
    ingest(spark, [str(log)], str(tmp_path / "tables"))
    result = audit(spark, str(tmp_path / "tables"))
    assert [f for f in result.findings if f["topic"] == "orders"] == []


def test_retired_directories_are_recognised_without_the_inventory(spark, audited, tmp_path):
    """Tables without the ``files`` inventory (copied partially, or made by hand): the
    directory names in the ``file`` column tell the rules the same."""
    import shutil

    from auditor.engine.context import AuditContext

    _, _, tables = audited
    partial = tmp_path / "tables"
    shutil.copytree(tables, partial, ignore=shutil.ignore_patterns("files"))
    ctx = AuditContext(spark, str(partial))
    assert ctx.live_log is None
    live = {r["file"].split("/")[-2] for r in ctx.table("batches").select("file").distinct().collect()}
    assert live == {"orders-0", "payments-0"}
    result = audit(spark, str(partial))
    assert [f for f in result.findings if f["topic"] in ("orders", "payments")] == []
    full = AuditContext(spark, str(tables))
    retired = sorted({p.split("/")[-2] for p, lv in full.live_log.items() if not lv.live})
    assert retired == [f"orders-0.{UUID}-delete", f"payments-0.{UUID[::-1]}-stray"]
    assert all("partition directory" in lv.reason for lv in full.live_log.values() if not lv.live)
