"""The scheduled batch job over a log dir that changes like a live broker's
between runs: three runs in the test process (shared local Spark session, Delta
tables), and the same three runs on a second warehouse with the job killed
(SIGKILL of its JVM and itself) at several points and re-run. The killed runs are
CLI processes of their own; they run while the test process does the clean run
on its own warehouse.

Run 1 builds every table; run 2 finds nothing new; between runs 2 and 3 the
active segment grows (an ABORT marker closes a hanging transaction), a segment
rolls, retention deletes another, a partition appears and a checkpoint is
rewritten with the same size and mtime (see ``batch_support.mutate_to_v2``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from batch_support import build_v1, decoder_rows, delta_rows, mutate_to_v2
from auditor.batch.deltaio import in_predicate, sql_str
from auditor.batch.job import input_path, run_batch
from auditor.ingest.tables import TABLES

pytestmark = pytest.mark.spark

RULES = ("hanging-transaction", "stuck-lso")
# Kill points (auditor/batch/crash.py), chained on one warehouse: each re-run dies at the next
# point; the run that completes runs in the test process (a re-run is a re-run: same code).
#   decode:T       inside a decode task of table T's Delta write (the tables before T are committed)
#   after-merge    findings merged, run not marked finished: the re-run must not count the run twice
#   before-ledger  every keyed overwrite committed, the ledger not: the re-run redoes them
#   during:merge   while the findings MERGE's Spark jobs run, before its commit
KILLS_RUN_1 = ["decode:checkpoints", "after-merge"]
KILLS_RUN_3 = ["before-ledger", "during:merge"]
WALL_CLOCK = {"ledger": ("decoded_at_ms",), "findings": ("first_seen_ms", "last_seen_ms", "resolved_at_ms")}


def _versions(spark, wh: Path) -> dict[str, int]:
    from delta.tables import DeltaTable

    names = [f"tables/{n}" for n in (*TABLES, "files")] + ["ledger"]
    return {n: DeltaTable.forPath(spark, str(wh / n)).history(1).first()["version"] for n in names}


def _findings(spark, wh: Path) -> dict[tuple, dict]:
    rows = spark.read.format("delta").load(str(wh / "findings")).collect()
    return {(r["rule"], r["topic"], r["partition"], r["producer_id"]): r.asDict(recursive=True) for r in rows}


def _killed(log: Path, wh: Path, stage: str) -> None:
    """One run of the CLI in its own process, SIGKILLed at ``stage``."""
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "TXN_AUDIT_CRASH_AT": stage}
    cmd = [str(Path(sys.executable).parent / "txn-audit"), "batch", "--input", str(log), "--warehouse", str(wh),
           "--master", "local[2]", "--conf", "spark.sql.shuffle.partitions=2", "-q",
           # a short-lived JVM: C1 only starts the job about twice as fast
           "--conf", "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1"]
    for r in RULES:
        cmd += ["--rule", r]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == -signal.SIGKILL, f"{stage}: not killed (rc {proc.returncode}): {proc.stderr[-2000:]}"
    assert '"run"' not in proc.stdout, f"{stage}: the killed run printed a summary"


def _state(spark, wh: Path) -> dict[str, list]:
    """Every table of the warehouse, rows sorted, without wall-clock columns; of
    ``runs`` only what a clean run and a killed-and-resumed one must agree on."""
    out = {n: delta_rows(spark, str(wh / "tables" / n)) for n in (*TABLES, "files")}
    out["ledger"] = delta_rows(spark, str(wh / "ledger"), WALL_CLOCK["ledger"])
    out["findings"] = delta_rows(spark, str(wh / "findings"), WALL_CLOCK["findings"])
    runs = spark.read.format("delta").load(str(wh / "runs"))
    out["runs"] = sorted(tuple(r) for r in runs.select("run", "status", "inputs", "findings_open", "findings_new",
                                                        "findings_resolved").collect())
    return out


@pytest.fixture(scope="module")
def runs(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("batchlogs")
    log = build_v1(root)
    wh, crashed = root / "clean", root / "crashed"
    out = {"log": log, "wh": wh, "crashed": crashed, "results": [], "states": [], "resumed": []}

    def clean_run(inputs):
        out["results"].append(run_batch(spark, inputs, str(wh), only=RULES))
        out["states"].append({"versions": _versions(spark, wh), "findings": _findings(spark, wh)})

    def crashed_run(kills):
        """The killed attempts (started by ``kill_in_background``: they ran while the clean
        run did), then the attempt that completes the run."""
        if kills:
            kills.result()
        out["resumed"].append(run_batch(spark, [str(log)], str(crashed), only=RULES))

    def kill_in_background(stages):
        """The killed CLI runs of ``stages`` in their own processes, one after the other, while
        this process does the clean run on its own warehouse: a killed run is mostly its JVM's
        start, which then overlaps the clean run's Spark jobs instead of following them."""
        return pool.submit(lambda: [_killed(log, crashed, stage) for stage in stages])

    with ThreadPoolExecutor(1) as pool:
        kills = kill_in_background(KILLS_RUN_1)
        clean_run([str(log)])
        out["tables_after_run_1"] = decoder_rows([str(log)])
        crashed_run(kills)
        out["same_after_run_1"] = (_state(spark, wh), _state(spark, crashed))
        clean_run([str(log)])
        crashed_run(None)
        out["changes"] = mutate_to_v2(log)
        kills = kill_in_background(KILLS_RUN_3)
        clean_run(["file://" + str(log)])  # a file: URI names the same input
        crashed_run(kills)
    out["same_after_run_3"] = (_state(spark, wh), _state(spark, crashed))
    return out


def _assert_tables_equal(spark, wh: Path, expected: dict[str, list]) -> None:
    for name in TABLES:
        got = delta_rows(spark, str(wh / "tables" / name))
        assert got == expected[name], f"table {name}: {len(got)} rows in Delta, {len(expected[name])} decoded"


def test_first_run_decodes_everything_and_finds_the_hanging_transactions(runs):
    r1, s1 = runs["results"][0], runs["states"][0]
    assert (r1.run, r1.fresh, r1.files_gone) == (1, True, 0)
    assert r1.files_decoded == r1.files_seen == 6  # meta.properties, the checkpoint, 4 segments
    hanging = {k: f for k, f in s1["findings"].items() if k[0] == "hanging-transaction"}
    assert set(hanging) == {("hanging-transaction", "orders", 0, 9), ("hanging-transaction", "orders", 3, 11)}
    for f in hanging.values():
        assert (f["status"], f["first_seen_run"], f["last_seen_run"], f["runs_seen"]) == ("open", 1, 1, 1)
        assert f["kind"] == "overdue"  # older than the maximum timeout, no __transaction_state given
    clean, _ = runs["same_after_run_1"]
    assert clean["batches"] == runs["tables_after_run_1"]["batches"] and len(clean["batches"]) == 7


def test_second_run_on_unchanged_input_writes_no_table(runs):
    r2 = runs["results"][1]
    s1, s2 = runs["states"][0], runs["states"][1]
    assert (r2.run, r2.fresh, r2.files_decoded, r2.files_gone) == (2, False, 0, 0)
    # nothing the rules read changed: run 1's findings stand without running the rules again
    assert (runs["results"][0].audited, r2.audited, runs["results"][2].audited) == (True, False, True)
    assert sum(r2.rows_written.values()) == 0
    assert s2["versions"] == s1["versions"], "a table or the ledger got a commit although nothing changed"
    assert set(s2["findings"]) == set(s1["findings"])
    assert all(f["runs_seen"] == 2 and f["last_seen_run"] == 2 and f["first_seen_run"] == 1 for f in s2["findings"].values())


def test_third_run_decodes_only_what_changed(spark, runs):
    log, wh, r3, ch = runs["log"], runs["wh"], runs["results"][2], runs["changes"]
    assert (r3.run, r3.fresh, r3.files_gone) == (3, False, 1)
    ledger = {r["path"]: r["run"] for r in spark.read.format("delta").load(str(wh / "ledger")).collect()}
    assert ledger[ch["rolled"]] == 1 and ledger[ch["untouched"]] == 1, "an unchanged segment was decoded again"
    assert ledger[str(log / "meta.properties")] == 1
    for k in ("grown", "new", "new_partition", "checkpoint"):
        assert ledger[ch[k]] == 3, k
    assert ch["gone"] not in ledger
    # decoded: the grown, new and rewritten files, and the now empty orders-1 directory (inventoried)
    assert r3.files_decoded == 5
    assert r3.rows_written["batches"] == 3 + 1 + 1  # all of the grown 04.log (2 batches + the marker), 08.log, orders-2
    assert r3.rows_written["checkpoints"] == 2


def test_tables_hold_exactly_the_current_files(spark, runs):
    """The grown active segment was re-read without duplicating its rows, the deleted
    segment's rows are gone, the same-size same-mtime checkpoint rewrite was noticed."""
    log, wh, ch = runs["log"], runs["wh"], runs["changes"]
    _assert_tables_equal(spark, wh, decoder_rows([str(log)]))
    cps = spark.read.format("delta").load(str(wh / "tables" / "checkpoints")).where("topic = 'orders' AND partition = 0").collect()
    assert [r["offset"] for r in cps] == [9]
    files = {r["path"]: r for r in spark.read.format("delta").load(str(wh / "tables" / "files")).collect()}
    assert ch["gone"] not in files and files[ch["grown"]]["rows"] == 3 and files[ch["grown"]]["status"] == "ok"
    assert files[str(Path(ch["gone"]).parent)]["kind"] == "empty-dir"


def test_findings_history(spark, runs):
    wh, r3 = runs["wh"], runs["results"][2]
    f = _findings(spark, wh)
    aborted = f[("hanging-transaction", "orders", 0, 9)]
    assert (aborted["status"], aborted["resolved_run"], aborted["runs_seen"], aborted["last_seen_run"]) == ("resolved", 3, 2, 2)
    assert aborted["resolved_at_ms"] is not None and aborted["resolved_at_ms"] >= aborted["last_seen_ms"]
    still = f[("hanging-transaction", "orders", 3, 11)]
    assert (still["status"], still["first_seen_run"], still["runs_seen"], still["resolved_run"]) == ("open", 1, 3, None)
    new = f[("hanging-transaction", "orders", 2, 13)]
    # young, and the log dir holds no __transaction_state: undetermined (a warning), not an all-clear
    assert (new["status"], new["first_seen_run"], new["runs_seen"], new["severity"]) == ("open", 3, 1, "warning")
    assert r3.findings_new == sum(1 for x in f.values() if x["first_seen_run"] == 3)
    assert r3.findings_resolved == sum(1 for x in f.values() if x["resolved_run"] == 3) >= 1
    # the open findings are exactly what this run reported
    reported = {(x["rule"], x["topic"], x["partition"], x["producer_id"]) for x in r3.findings}
    assert {k for k, x in f.items() if x["status"] == "open"} == reported


def test_runs_table(spark, runs):
    wh, (r1, _, r3) = runs["wh"], runs["results"]
    rows = [r.asDict(recursive=True) for r in spark.read.format("delta").load(str(wh / "runs")).orderBy("run").collect()]
    assert [(r["run"], r["status"], r["attempts"]) for r in rows] == [(1, "finished", 1), (2, "finished", 1), (3, "finished", 1)]
    assert [r["files_decoded"] for r in rows] == [r1.files_decoded, 0, r3.files_decoded]
    assert rows[2]["table_rows_written"]["batches"] == r3.rows_written["batches"]


def _assert_same(clean: dict, crashed: dict) -> None:
    assert clean.keys() == crashed.keys()
    for name in clean:
        assert crashed[name] == clean[name], f"{name} differs after kill + re-run ({len(crashed[name])} vs {len(clean[name])} rows)"


def test_killed_first_run_leaves_the_tables_of_one_clean_run(spark, runs):
    clean, crashed = runs["same_after_run_1"]
    assert len(clean["findings"]) >= 2 and len(clean["files"]) == 6  # not trivially equal
    _assert_same(clean, crashed)
    done = runs["resumed"][0]
    assert (done.run, done.attempt) == (1, len(KILLS_RUN_1) + 1)
    # the after-merge kill came after the ledger commit: the last attempt decoded nothing itself, yet
    # the run's record says what the run wrote, as the clean run's does
    first = runs["results"][0]
    assert (done.files_decoded, done.rows_written) == (first.files_decoded, first.rows_written) and first.files_decoded == 6
    recorded = {r["run"]: r for r in spark.read.format("delta").load(str(runs["crashed"] / "runs")).collect()}[1]
    assert (recorded["files_decoded"], recorded["rows_written"]) == (6, sum(first.rows_written.values()))
    assert dict(recorded["table_rows_written"]) == first.rows_written


def test_killed_incremental_run_leaves_the_tables_of_one_clean_run(spark, runs):
    clean, crashed = runs["same_after_run_3"]
    assert clean["batches"] != runs["same_after_run_1"][0]["batches"]
    assert any(r for r in clean["findings"] if ("status", "resolved") in r)
    _assert_same(clean, crashed)
    done = runs["resumed"][2]
    assert (done.run, done.attempt) == (3, len(KILLS_RUN_3) + 1)
    attempts = {r["run"]: r["attempts"] for r in spark.read.format("delta").load(str(runs["crashed"] / "runs")).collect()}
    assert attempts == {1: len(KILLS_RUN_1) + 1, 2: 1, 3: len(KILLS_RUN_3) + 1}


def test_input_uris_and_predicates():
    assert input_path("file:///var/lib/kafka") == "/var/lib/kafka"
    assert input_path("file:/var/lib/kafka/") == "/var/lib/kafka"
    assert input_path("s3a://bucket/kafka/") == "s3a://bucket/kafka"
    assert input_path("hdfs://nn:8020/logs/./a/") == "hdfs://nn:8020/logs/a"
    with pytest.raises(ValueError, match="mount"):
        input_path("ftp://host/kafka")
    assert sql_str("a'b\\c") == "'a\\'b\\\\c'"
    assert in_predicate("file", ["/b", "/a'x", "/b"]) == "`file` IN ('/a\\'x', '/b')"


def test_batch_without_delta_jars_fails_clearly(tmp_path):
    """A session without the Delta jars: exit status 2 and a message that says how to get them."""
    exe = Path(sys.executable).parent / "txn-audit"
    env = {**os.environ, "TXN_AUDIT_DELTA_JARS": str(tmp_path / "no-jars"), "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = subprocess.run([str(exe), "batch", "--input", str(tmp_path), "--warehouse", str(tmp_path / "wh"),
                           "--master", "local[1]", "-q", "--conf", "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    msg = " ".join(proc.stderr.split())
    assert "Delta Lake is not available" in msg and "scripts/delta/fetch.sh" in msg and "--packages io.delta:delta-spark_2.13:4.0.1" in msg
    assert not (tmp_path / "wh").exists()


def test_missing_or_emptied_input_is_refused(tmp_path):
    """An unmounted volume looks like an empty directory: refused (nothing written) if files
    were decoded from it before, instead of recording every one of them as deleted."""
    from auditor.batch.job import InputError, check_inputs
    from auditor.ingest.plan import make_plan

    mnt = tmp_path / "mnt"
    (mnt / "orders-0").mkdir(parents=True)
    root = str(mnt)
    before = [{"path": f"{root}/orders-0/00000000000000000000.log", "input_root": root}]
    with pytest.raises(InputError, match="unmounted"):
        check_inputs(make_plan([root]), before, [root], allow_empty=False)
    check_inputs(make_plan([root]), before, [root], allow_empty=True)
    check_inputs(make_plan([root]), [], [root], allow_empty=False)  # nothing decoded from it yet: just empty
    (mnt / "orders-0" / "00000000000000000000.log").write_bytes(b"")
    check_inputs(make_plan([root]), before, [root], allow_empty=False)  # a file is there
    gone = str(tmp_path / "nope")
    with pytest.raises(InputError, match="does not exist"):
        check_inputs(make_plan([gone]), [], [gone], allow_empty=False)
