"""The batch job across upgrades of the tool, and its one-run-per-warehouse lock.

* Files decoded by other decoding code (the ledger's ``decoder`` digest differs,
  or an old ledger has none) are decoded again: every table is rebuilt, even one
  whose schema the old code wrote differently; the next run is incremental again.
* A change to the rules or the engine makes the job audit again although no file changed.
* ``versions.source_digest`` really follows the source of every module of a package.
* A second run on a locked warehouse stops before reading or writing anything, and a
  holder killed with SIGKILL leaves no lock behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from batch_support import build_v1, decoder_rows, delta_rows
from auditor.batch import job as batch_job
from auditor.batch.job import run_batch
from auditor.batch.lock import LOCK_NAME, WarehouseBusy, local_path, warehouse_lock
from auditor.tables.versions import source_digest
from auditor.ingest.tables import TABLES

RULES = ("stuck-lso",)


def _ledger(spark, wh: Path) -> list[dict]:
    return [r.asDict() for r in spark.read.format("delta").load(str(wh / "ledger")).collect()]


def _assert_tables_are_the_decode(spark, wh: Path, log: Path) -> None:
    expected = decoder_rows([str(log)])
    for name in TABLES:
        got = delta_rows(spark, str(wh / "tables" / name))
        assert got == expected[name], f"table {name}: {len(got)} rows in Delta, {len(expected[name])} decoded"


@pytest.mark.spark
def test_a_decoder_upgrade_rebuilds_every_table_once(spark, tmp_path, monkeypatch):
    log, wh = build_v1(tmp_path / "logs"), tmp_path / "wh"
    first = run_batch(spark, [str(log)], str(wh), only=RULES)
    assert first.fresh and first.files_decoded == first.files_seen == 6
    current = {r["decoder"] for r in _ledger(spark, wh)}
    assert len(current) == 1 and None not in current

    # what an older release left: a ledger without the decoder column, and a table with a column
    # this release does not write
    spark.read.format("delta").load(str(wh / "ledger")).drop("decoder").write.format("delta") \
        .mode("overwrite").option("overwriteSchema", "true").save(str(wh / "ledger"))
    old_batches = spark.read.format("delta").load(str(wh / "tables" / "batches"))
    old_batches.selectExpr("*", "1 AS dropped_in_this_release").write.format("delta").mode("overwrite") \
        .option("overwriteSchema", "true").save(str(wh / "tables" / "batches"))

    rebuilt = run_batch(spark, [str(log)], str(wh), only=RULES)
    assert rebuilt.fresh and rebuilt.files_decoded == rebuilt.files_seen == 6
    assert {r["decoder"] for r in _ledger(spark, wh)} == current
    batches = spark.read.format("delta").load(str(wh / "tables" / "batches"))
    assert "dropped_in_this_release" not in batches.columns
    _assert_tables_are_the_decode(spark, wh, log)

    monkeypatch.setattr(batch_job, "decoder_digest", lambda: "a-later-release")
    upgraded = run_batch(spark, [str(log)], str(wh), only=RULES)
    assert upgraded.fresh and upgraded.files_decoded == 6
    assert {r["decoder"] for r in _ledger(spark, wh)} == {"a-later-release"}
    _assert_tables_are_the_decode(spark, wh, log)

    again = run_batch(spark, [str(log)], str(wh), only=RULES)  # same release: incremental again
    assert (again.fresh, again.files_decoded, sum(again.rows_written.values()), again.audited) == (False, 0, 0, False)

    monkeypatch.setattr(batch_job, "audit_digest", lambda: "changed-rules")
    reaudit = run_batch(spark, [str(log)], str(wh), only=RULES)
    assert (reaudit.files_decoded, reaudit.audited) == (0, True)
    assert reaudit.findings_open == again.findings_open


def test_source_digest_follows_every_module_of_a_package(tmp_path, monkeypatch):
    pkg = tmp_path / "digestpkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    leaf = pkg / "sub" / "leaf.py"
    leaf.write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = source_digest(("digestpkg",))
    source_digest.cache_clear()
    assert source_digest(("digestpkg",)) == before  # deterministic
    leaf.write_text("X = 2\n")
    source_digest.cache_clear()
    changed = source_digest(("digestpkg",))
    assert changed != before
    (pkg / "sub" / "other.py").write_text("")
    source_digest.cache_clear()
    assert source_digest(("digestpkg",)) not in (before, changed)
    source_digest.cache_clear()


def test_lock_paths():
    assert local_path("/srv/wh") == "/srv/wh"
    assert local_path("file:///srv/wh") == "/srv/wh"
    assert local_path("file:/srv/wh") == "/srv/wh"
    assert local_path("file://localhost/srv/wh") == "/srv/wh"
    assert local_path("s3a://bucket/wh") is None
    assert local_path("hdfs://nn:8020/wh") is None


@pytest.mark.spark
def test_a_second_run_on_a_locked_warehouse_stops_before_touching_it(spark, tmp_path):
    log, wh = build_v1(tmp_path / "logs"), tmp_path / "wh"
    with warehouse_lock(str(wh)) as held:
        assert held == str(wh / LOCK_NAME)
        with pytest.raises(WarehouseBusy, match=rf"pid {os.getpid()} on "):
            run_batch(spark, [str(log)], str(wh), only=RULES)
    assert sorted(p.name for p in wh.iterdir()) == [LOCK_NAME]  # no table, no ledger, no runs row


def test_a_killed_holder_leaves_no_lock(tmp_path):
    wh = tmp_path / "wh"
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from auditor.batch.lock import warehouse_lock
            with warehouse_lock({str(wh)!r}):
                print("held", flush=True)
                time.sleep(600)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(WarehouseBusy, match=rf"pid {holder.pid} on "):
            with warehouse_lock(str(wh)):
                pass
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    finally:
        if holder.poll() is None:
            holder.kill()
    with warehouse_lock(str(wh)) as held:  # non-blocking: it would raise WarehouseBusy if still held
        assert held is not None


@pytest.mark.spark
def test_a_findings_table_of_an_older_release_gains_the_new_columns(spark, tmp_path):
    """A findings history written before findings had ``kind``, ``replicas`` and
    ``remediation_commands`` takes the next run's merge: the columns are added (null in
    the old rows), the old finding is resolved or seen again by its key, nothing is lost."""
    from pyspark.sql.types import StructType

    from auditor.batch import history

    uri = str(tmp_path / "findings")
    new = {"kind", "replicas", "remediation_commands"}
    old_cols = [(n, t) for n, t in history.HISTORY_COLUMNS if n not in new]
    old = {n: None for n, _ in old_cols}
    old.update(finding_key="k-old", rule="stuck-lso", severity="error", message="old", status="open",
               evidence={"lag_offsets": "10"}, first_seen_run=1, last_seen_run=1, runs_seen=1)
    schema = StructType.fromDDL(", ".join(f"`{n}` {t}" for n, t in old_cols))
    spark.createDataFrame([tuple(old[n] for n, _ in old_cols)], schema).write.format("delta").save(uri)

    f = {"rule": "stuck-lso", "severity": "error", "kind": "stuck", "cluster_id": "c", "broker_id": 1, "log_dir": "/d",
         "topic": "t", "partition": 0, "producer_id": 5, "first_offset": 3, "message": "m",
         "evidence": {"lag_offsets": 10, "consumer_groups": ["g"]},
         "remediation_commands": [{"command": "kafka-transactions.sh x", "applies_to": None}],
         "replicas": [{"broker_id": 1, "log_dir": "/d"}, {"broker_id": 2, "log_dir": "/e"}]}
    history.merge_findings(spark, uri, [f], run=2, now_ms=1000, rules=["stuck-lso"])
    rows = {r["message"]: r.asDict(recursive=True) for r in spark.read.format("delta").load(uri).collect()}
    assert set(rows) == {"old", "m"}
    assert rows["old"]["status"] == "resolved" and rows["old"]["kind"] is None
    assert rows["m"]["kind"] == "stuck" and [r["broker_id"] for r in rows["m"]["replicas"]] == [1, 2]
    assert rows["m"]["evidence"] == {"lag_offsets": "10", "consumer_groups": '["g"]'}  # typed again by report
