"""The same job through ``spark-submit`` (the path a real cluster uses), as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from batch_support import build_v1
from builders import data_batch, marker
from conftest import PROJECT
from submit_support import code_zip, errors

pytestmark = pytest.mark.spark


def test_ingest_via_spark_submit(tmp_path):
    logdir = tmp_path / "broker"
    (logdir / "orders-0").mkdir(parents=True)
    (logdir / "meta.properties").write_text("version=0\nbroker.id=11\n")
    (logdir / "orders-0" / "00000000000000000000.log").write_bytes(
        data_batch(0, 2, producer_id=4, producer_epoch=0, base_sequence=0, transactional=True)
        + marker(2, 4, 0, commit=True, coordinator_epoch=1))
    pkg = code_zip(tmp_path)
    submit = Path(sys.executable).parent / "spark-submit"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    out = tmp_path / "tables"
    proc = subprocess.run(
        [str(submit), "--master", "local[2]", "--conf", "spark.ui.enabled=false", "--py-files", str(pkg),
         str(PROJECT / "scripts" / "spark_submit_entry.py"), "ingest", str(logdir), "--out", str(out), "--quiet"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["tables"]["batches"] == 2 and summary["bad_files"] == 0
    rows = ds.dataset(str(out / "batches")).to_table().to_pylist()
    assert {r["broker_id"] for r in rows} == {11}
    assert [r["control_type"] for r in rows if r["is_control"]] == ["COMMIT"]


def test_batch_via_spark_submit_with_delta_from_maven_central(tmp_path):
    """docs/operations.md's ``--packages`` route, literally: spark-submit resolves Delta
    itself (into an empty Ivy cache here) and the batch job writes its Delta tables.
    The project's own jars are hidden, so Delta can only come from the resolution."""
    log = build_v1(tmp_path / "logs")
    wh = tmp_path / "wh"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "TXN_AUDIT_DELTA_JARS": str(tmp_path / "no-jars-here")}
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]",
         "--packages", "io.delta:delta-spark_2.13:4.0.1", "--exclude-packages", "org.antlr:antlr4-runtime",
         "--conf", f"spark.jars.ivy={tmp_path / 'ivy'}", "--conf", "spark.ui.enabled=false",
         "--conf", "spark.sql.shuffle.partitions=2",
         "--conf", "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1", "--py-files", str(code_zip(tmp_path)),
         str(PROJECT / "scripts" / "spark_submit_entry.py"), "batch", "--input", str(log), "--warehouse", str(wh),
         "--rule", "hanging-transaction", "-q"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600,
    )
    assert proc.returncode == 0, errors(proc.stderr)
    resolved = {p.name for p in (tmp_path / "ivy" / "jars").glob("*.jar")}
    assert "io.delta_delta-spark_2.13-4.0.1.jar" in resolved and not any("antlr4-runtime" in n for n in resolved)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (summary["run"], summary["files_decoded"], summary["findings"]["open"]) == (1, 6, 2)
    for table in ("tables/batches", "ledger", "findings", "runs"):
        assert (wh / table / "_delta_log" / "00000000000000000000.json").is_file(), table
