"""The batch job on a real Spark standalone cluster (a master and a worker JVM
started from the venv's PySpark on 127.0.0.1), over every scenario in sample_logs/.

Run 1 goes through ``spark-submit`` with ``--jars`` and ``--py-files``, as
docs/operations.md tells operators to; run 2 is ``txn-audit batch --master
spark://...`` (the embedded driver ships the Delta jars with ``spark.jars``). The
tables must hold what the decoders read from the files, and the findings must be
exactly the union of the scenarios' expected findings, computed as
tests/test_scenarios.py computes them from each ``expected.json`` (plus the open
transaction the synthetic log dir's ``expected.json`` lists).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from batch_support import decoder_rows, delta_rows
from conftest import PROJECT, SAMPLE_LOGS
from submit_support import code_zip, errors
from test_scenarios import RULES_FOR, SCENARIOS, _cluster_of
from auditor.spark.session import delta_jars
from auditor.ingest.tables import TABLES

from scripts.spark_standalone import StandaloneCluster

pytestmark = pytest.mark.spark

BIN = Path(sys.executable).parent


def _env() -> dict:
    import pyspark

    return {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
            "SPARK_HOME": os.path.dirname(pyspark.__file__)}


def _summary(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, errors(proc.stderr)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]  # the summary is one JSON line
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        raise AssertionError(f"no JSON summary on stdout: {proc.stdout[-2000:]!r}\nstderr: {errors(proc.stderr)}") from None


# short-lived JVMs: C1 only starts them about twice as fast
C1 = ["--conf", "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1",
      "--conf", "spark.executor.extraJavaOptions=-XX:TieredStopAtLevel=1"]


@pytest.fixture(scope="module")
def cluster_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cluster")
    wh = tmp / "warehouse"
    pkg = code_zip(tmp)
    jars = delta_jars()
    assert jars, "Delta jars missing: make setup"
    common = ["--conf", f"spark.pyspark.python={sys.executable}", "--conf", "spark.sql.shuffle.partitions=2", *C1]
    with StandaloneCluster(tmp / "spark", cores=2) as cluster:
        first = _summary(subprocess.run(
            [str(BIN / "spark-submit"), "--master", cluster.url, "--jars", ",".join(jars), "--py-files", str(pkg),
             "--conf", "spark.ui.enabled=false", *common,
             str(PROJECT / "scripts" / "spark_submit_entry.py"), "batch", "--input", str(SAMPLE_LOGS),
             "--warehouse", str(wh), "-q"],
            capture_output=True, text=True, env=_env(), timeout=900, cwd=tmp))
        second = _summary(subprocess.run(
            [str(BIN / "txn-audit"), "batch", "--input", str(SAMPLE_LOGS), "--warehouse", str(wh),
             "--master", cluster.url, *common, "-q"],
            capture_output=True, text=True, env=_env(), timeout=900))
        app_logs = sorted((tmp / "spark" / "worker").glob("app-*"))
    return wh, first, second, app_logs


def test_ran_on_the_cluster(cluster_runs):
    _, first, second, app_logs = cluster_runs
    assert len(app_logs) == 2, "both runs must have had executors on the standalone worker"
    assert (first["run"], first["rebuilt"], first["bad_files"]) == (1, True, 0)
    assert first["files_decoded"] == first["files_seen"] > 700
    assert (second["run"], second["files_decoded"], second["rows_written"]) == (2, 0, 0)


def test_tables_hold_what_the_files_hold(spark, cluster_runs):
    wh, first, _, _ = cluster_runs
    expected = decoder_rows([str(SAMPLE_LOGS)])
    for name in TABLES:
        got = delta_rows(spark, str(wh / "tables" / name))
        assert got == expected[name], f"{name}: {len(got)} rows in Delta, {len(expected[name])} decoded"
        assert first["table_rows_written"][name] == len(got)
    files = spark.read.format("delta").load(str(wh / "tables" / "files"))
    assert files.count() == first["files_seen"] and files.where("status NOT IN ('ok', 'empty', 'skipped')").count() == 0


def test_findings_equal_the_scenarios_expected_findings(spark, cluster_runs):
    wh, first, _, _ = cluster_runs
    scenario_of = {_cluster_of(s): s.name for s in SCENARIOS}
    assert len(scenario_of) == len(SCENARIOS), "two scenarios share a cluster id: one run would mix them"
    expected: set[tuple] = set()
    for s in SCENARIOS:
        for a in json.loads((s / "expected.json").read_text())["expect"]["anomalies"]:
            for rule in RULES_FOR[a["type"]]:
                where = (None, None, None) if rule == "pid-block-overlap" else (a.get("topic"), a.get("partition"), a.get("producer_id"))
                expected.add((s.name, rule, *where))
    # the synthetic log dir (not a capture: no "expect" section) lists its transactions per partition;
    # an OPEN one is an open-transaction anomaly
    synthetic = json.loads((SAMPLE_LOGS / "synthetic-kafka-python" / "expected.json").read_text())
    scenario_of[synthetic["cluster_id"]] = "synthetic-kafka-python"
    for part in synthetic["partitions"].values():
        for t in part.get("transactions") or []:
            if t["outcome"] == "OPEN":
                for rule in RULES_FOR["open-transaction"]:
                    expected.add(("synthetic-kafka-python", rule, part["topic"], part["partition"], t["producer_id"]))
    assert len(scenario_of) == len(SCENARIOS) + 1 and len(expected) > 10
    rows = [r.asDict(recursive=True) for r in spark.read.format("delta").load(str(wh / "findings")).collect()]
    found: dict[tuple, list] = defaultdict(list)
    for f in rows:
        where = (None, None, None) if f["rule"] == "pid-block-overlap" else (f["topic"], f["partition"], f["producer_id"])
        found[(scenario_of.get(f["cluster_id"]), f["rule"], *where)].append(f)
    assert set(found) == expected
    assert all(f["status"] == "open" for f in rows) and first["findings"]["open"] == len(rows)


def test_second_run_merged_into_the_history(spark, cluster_runs):
    """Run 2: same files, same rules: run 1's findings stand (no rule re-run) and
    every finding has been seen twice."""
    wh, _, second, _ = cluster_runs
    assert second["audited"] is False
    rows = spark.read.format("delta").load(str(wh / "findings")).collect()
    assert {(r["runs_seen"], r["first_seen_run"], r["last_seen_run"], r["status"]) for r in rows} == {(2, 1, 2, "open")}
    assert second["findings"] == {"open": len(rows), "new": 0, "resolved": 0}
    runs = spark.read.format("delta").load(str(wh / "runs")).orderBy("run").collect()
    assert [(r["run"], r["status"], r["attempts"], r["audited"]) for r in runs] == [
        (1, "finished", 1, True), (2, "finished", 1, False)]
