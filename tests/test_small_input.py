"""The small-input path of an interactive scan: a driver JVM that compiles with C1
only, rules collected on worker threads while the next is built, tables read as one partition.
What the findings are is checked elsewhere (tests/test_scenarios.py: the small path and the
rule-by-rule path give the same findings, summary and plots); here, that each piece does what
it says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from auditor.cli.audit_cmd import _c1_tables
from auditor.engine.collect import Pipeline
from auditor.ingest.plan import make_plan
from auditor.ingest.spark_job import SMALL_INPUT_BYTES, input_bytes
from auditor.perf import tuning
from auditor.perf.tuning import SMALL_INPUT_JAVA_OPTIONS
from conftest import PROJECT, SAMPLE_LOGS

_CHILD = ("import json, sys\n"
          "from auditor.spark.session import get_spark\n"
          "conf = {'spark.driver.extraJavaOptions': sys.argv[2]} if len(sys.argv) > 2 else None\n"
          "s = get_spark(conf=conf, delta=False, small_input=sys.argv[1] == 'small')\n"
          "args = list(s._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())\n"
          "print(json.dumps({'args': args, 'n': s.range(5).count(),\n"
          "                  'explain': s.conf.get('spark.sql.ui.explainMode')}))\n"
          "s.stop()\n")


def _driver(kind: str, *user_options: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    for e in tuning.USER_JVM_OPTION_ENVS:
        env.pop(e, None)
    proc = subprocess.run([sys.executable, "-c", _CHILD, kind, *user_options], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["n"] == 5  # the session runs jobs
    return got


def test_a_small_input_driver_jvm_compiles_with_c1_only_and_a_large_one_keeps_c2():
    small_driver, large_driver = _driver("small"), _driver("large")
    small, large = small_driver["args"], large_driver["args"]
    assert all(o in small for o in SMALL_INPUT_JAVA_OPTIONS.split())  # C1 only, one compiler thread
    # both render their plans as Spark does (a "simple" rendering for small inputs bought nothing
    # measurable: bench/README.md, "Performance machinery", dropped pieces)
    assert small_driver["explain"].lower() == large_driver["explain"].lower() == "formatted"
    assert not any(a.startswith(("-XX:TieredStopAtLevel", "-XX:CICompilerCount")) for a in large)
    # every embedded driver: the throughput collector, once
    assert small.count(tuning.LOCAL_JAVA_OPTIONS) == large.count(tuning.LOCAL_JAVA_OPTIONS) == 1
    # the class-data sharing archive (when built) is mapped either way: the flags only add to it
    assert [a for a in small if a.startswith("-XX:SharedArchiveFile")] == \
        [a for a in large if a.startswith("-XX:SharedArchiveFile")]


def test_a_users_own_collector_wins():
    """HotSpot refuses two collectors: with the user's G1 in ``spark.driver.extraJavaOptions`` the
    driver starts with G1 alone (it used to fail to start at all)."""
    args = _driver("large", "-XX:+UseG1GC")["args"]
    assert "-XX:+UseG1GC" in args and tuning.LOCAL_JAVA_OPTIONS not in args


@pytest.mark.parametrize("user, env, ours", [
    ("", {}, True),
    ("-Xss4m -XX:+UseZGC", {}, False),
    ("-XX:-UseCompressedOops", {}, True),  # not a collector
    ("", {"JAVA_TOOL_OPTIONS": "-XX:+UseSerialGC"}, False),
    ("", {"JDK_JAVA_OPTIONS": "-XX:+UseShenandoahGC -Xmx1g"}, False),
])
def test_the_throughput_collector_unless_the_user_chose_one(monkeypatch, user, env, ours):
    for e in tuning.USER_JVM_OPTION_ENVS:
        monkeypatch.delenv(e, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert tuning.local_java_options(user) == (tuning.LOCAL_JAVA_OPTIONS if ours else "")
    monkeypatch.setenv("TXN_AUDIT_DISABLE", "parallel_gc")
    assert tuning.local_java_options(user) == ""


def test_scan_sizes_its_input_before_spark_starts(tmp_path):
    plan = make_plan([str(SAMPLE_LOGS / "hanging-late-write")])
    assert 0 < input_bytes(plan) <= SMALL_INPUT_BYTES
    # a segment bigger than the bound is not small, whatever it holds (a sparse file: no disk used)
    big = tmp_path / "t-0"
    big.mkdir()
    with open(big / "00000000000000000000.log", "wb") as f:
        f.truncate(SMALL_INPUT_BYTES + 1)
    assert input_bytes(make_plan([str(big)])) > SMALL_INPUT_BYTES


@pytest.mark.parametrize("manifest, small", [
    ({"tables": {"batches": 79}}, True),
    # past the small path, C1 still pays up to C1_AUDIT_BATCHES (bench/README.md, "audit.py")
    ({"tables": {"batches": tuning.SMALL_AUDIT_BATCHES + 1}}, True),
    ({"tables": {"batches": tuning.C1_AUDIT_BATCHES}}, True),
    ({"tables": {"batches": tuning.C1_AUDIT_BATCHES + 1}}, False),
    ({"tables": {}}, False),
    ("not json", False),
    (None, False),
])
def test_audit_chooses_its_compiler_from_the_manifest(tmp_path, manifest, small):
    if manifest is not None:
        (tmp_path / "_ingest.json").write_text(manifest if isinstance(manifest, str) else json.dumps(manifest))
    assert _c1_tables(str(tmp_path)) is small


@pytest.mark.spark
def test_pipeline_collects_each_query_in_the_callers_job_group(spark):
    sc = spark.sparkContext
    sc.setJobGroup("pipeline-test", "pipeline-test")
    try:
        with Pipeline() as pipe:
            pipe.submit("a", spark.range(3).selectExpr("id AS x"))
            pipe.submit_many({"b": spark.range(2).selectExpr("id * 10 AS y"), "c": spark.range(0).selectExpr("id AS z")})
            got = pipe.results()
    finally:
        sc.setJobGroup("", "")
    assert got == {"a": [{"x": 0}, {"x": 1}, {"x": 2}], "b": [{"y": 0}, {"y": 10}], "c": []}
    assert len(sc.statusTracker().getJobIdsForGroup("pipeline-test")) == 2  # one job per submission


@pytest.mark.spark
def test_pipeline_raises_a_failed_query_after_every_other_has_ended(spark):
    from pyspark.errors import PySparkException
    from py4j.protocol import Py4JJavaError

    started = threading.active_count()
    with pytest.raises((PySparkException, Py4JJavaError)) as info:
        with Pipeline() as pipe:
            pipe.submit("bad", spark.range(1).selectExpr("raise_error('boom in a rule') AS x"))
            pipe.submit("good", spark.range(1))
            pipe.results()
    assert "boom in a rule" in str(info.value)
    assert threading.active_count() <= started  # no worker left running after the block


def test_a_persisted_view_reaches_the_rules_as_its_cache_entry_alone(spark, tmp_path):
    """auditor.perf.cached_leaf: the rules' DataFrame over a persisted view is a single
    InMemoryRelation (what Catalyst re-analyses at each operation no longer holds the
    views beneath), reads the same rows, and is planned as a scan of that cache."""
    from pyspark.sql import functions as F

    from auditor.engine.context import AuditContext

    base = spark.range(50).withColumn("g", F.col("id") % 7)
    view = base.join(base.groupBy("g").agg(F.count("*").alias("n")), "g").where("n > 0")
    ctx = AuditContext(spark, str(tmp_path))
    try:
        leaf = ctx.persist(view)
        assert leaf._jdf.queryExecution().logical().getClass().getSimpleName() == "InMemoryRelation"
        assert view._jdf.queryExecution().logical().children().size() > 0  # what it stands for is not a leaf
        assert sorted(leaf.collect()) == sorted(view.collect())
        derived = leaf.where("id > 10").select("id", "n")
        assert "InMemoryTableScan" in derived._jdf.queryExecution().executedPlan().toString()
        assert derived.count() == 39
    finally:
        ctx.close()
    # released with the view: nothing left in Spark's cache by this context
    assert spark._jsparkSession.sharedState().cacheManager().lookupCachedData(view._jdf).isEmpty()


@pytest.mark.spark
def test_call_site_names_the_jobs_of_the_block_and_of_its_pipeline_then_restores(spark):
    sc = spark.sparkContext
    sc.setLocalProperty(tuning.CALL_SITE_LONG, "before")
    try:
        with tuning.call_site(spark, "txn-audit test"):
            assert sc.getLocalProperty(tuning.CALL_SITE_SHORT) == "txn-audit test"
            assert sc.getLocalProperty(tuning.CALL_SITE_LONG) == "txn-audit test"
            sc.setJobGroup("call-site-test", "call-site-test")
            with Pipeline() as pipe:
                pipe.submit("a", spark.range(2))
                assert pipe.results() == {"a": [{"id": 0}, {"id": 1}]}
        assert sc.getLocalProperty(tuning.CALL_SITE_SHORT) is None
        assert sc.getLocalProperty(tuning.CALL_SITE_LONG) == "before"
    finally:
        sc.setLocalProperty(tuning.CALL_SITE_LONG, None)
        sc.setJobGroup("", "")
    (job,) = sc.statusTracker().getJobIdsForGroup("call-site-test")
    stages = sc.statusTracker().getJobInfo(job).stageIds
    store = sc._jsc.sc().statusStore()
    # the worker's job carries the name (its stages' long call site), not one walked from its stack
    assert stages and all(store.lastStageAttempt(s).details() == "txn-audit test" for s in stages)


def test_joins_of_one_partition_tables_shuffle_nothing_on_the_small_path(spark, tmp_path):
    """Tables read as one partition need no shuffle for a join, whatever the joins below
    them: under the small path's settings a chain of outer joins over three such tables plans
    no exchange, where Spark's own size check (a join's estimate is the product of its sides')
    re-shuffles both sides of every join above the first. (An inner join's output is a
    collection of its sides' partitionings, which that check does not take for one partition:
    the join above it still shuffles.)"""
    from pyspark.sql import functions as F

    from auditor.perf.tuning import small_sql_conf, sql_conf

    for name in ("a", "b", "c"):
        spark.range(2000).select(F.col("id").alias("k"), (F.col("id") * 7).alias(f"v_{name}")) \
            .write.parquet(str(tmp_path / name))

    def exchanges(conf) -> int:
        with sql_conf(spark, conf):
            a, b, c = (spark.read.parquet(str(tmp_path / n)).coalesce(1) for n in ("a", "b", "c"))
            q = (a.join(b, "k", "left").join(c, "k", "left").join(a.withColumnRenamed("v_a", "w"), "k", "left")
                 .groupBy("v_b").count())
            plan = q._jdf.queryExecution().executedPlan().toString()
            assert q.count() == 2000
        return plan.count("Exchange")

    small = small_sql_conf()
    spark_sizes = {**small, **{k: spark.conf.get(k) for k in (
        "spark.sql.maxSinglePartitionBytes", "spark.sql.sources.fileCompressionFactor",
        "spark.sql.defaultSizeInBytes")}}
    # the session's own values of the three size settings, the rest of the small path kept
    spark_sizes = {k: v for k, v in spark_sizes.items() if v is not None}
    assert exchanges(small) == 0
    assert exchanges(spark_sizes) > 0
