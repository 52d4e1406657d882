"""The same job through ``spark-submit`` (the path a real cluster uses), as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from builders import data_batch, marker
from conftest import PROJECT

pytestmark = pytest.mark.spark


def test_ingest_via_spark_submit(tmp_path):
    logdir = tmp_path / "broker"
    (logdir / "orders-0").mkdir(parents=True)
    (logdir / "meta.properties").write_text("version=0\nbroker.id=11\n")
    (logdir / "orders-0" / "00000000000000000000.log").write_bytes(
        data_batch(0, 2, producer_id=4, producer_epoch=0, base_sequence=0, transactional=True)
        + marker(2, 4, 0, commit=True, coordinator_epoch=1))
    pkg = tmp_path / "txn_audit.zip"
    with zipfile.ZipFile(pkg, "w") as z:
        for sub in ("auditor", "rules"):
            for p in (PROJECT / sub).rglob("*.py"):
                z.write(p, p.relative_to(PROJECT).as_posix())
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
