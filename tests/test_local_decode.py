"""A local input decoded by processes of the driver's own, each writing its Parquet parts
(auditor/ingest/local_decode.py): the same tables, in the same order, and the same counts and
problems as Spark's decode job of the same tasks, and only where it applies (local files)."""

from __future__ import annotations

import pyarrow.dataset as ds
import pytest

from auditor.ingest import envelope
from auditor.ingest.spark_job import decode_envelope, ingest, start_local_decode
from auditor.ingest.local_decode import LocalDecode, runs
from auditor.ingest.plan import RECORD_TOPIC_COST, RECORD_TOPICS, decode_cost, make_plan, task_bytes
from auditor.ingest.tables import TABLES
from conftest import SAMPLE_LOGS

CAPTURES = [str(SAMPLE_LOGS / "hanging-late-write"), str(SAMPLE_LOGS / "legacy-message-formats")]


def _tasks(inputs: list[str]) -> list[dict]:
    return [t for t in make_plan(inputs).tasks if any(TABLES[n].accepts(t) for n in TABLES)]


@pytest.mark.parametrize("n", [1, 2, 3, 7, 1000])
def test_runs_are_contiguous_non_empty_and_share_the_cost(n):
    tasks = _tasks(CAPTURES)
    parts = runs(tasks, n)
    assert [t for p in parts for t in p] == tasks  # in order, nothing lost or repeated
    assert all(parts) and len(parts) <= min(n, len(tasks))
    if n == 2:  # the first run stops once it holds half the cost: the second is never the larger by more than a task
        a, b = (sum(decode_cost(t) for t in p) for p in parts)
        assert b <= a + max(decode_cost(t) for t in tasks)


def test_a_segment_of_an_internal_topic_weighs_more_than_its_bytes():
    """Its records are decoded one by one: a few MB of __transaction_state cost as much CPU as GBs
    of data segments (plan.RECORD_TOPIC_COST), so the runs share out costs, not bytes."""
    tasks = _tasks([str(SAMPLE_LOGS / "hanging-late-write")])
    txn = [t for t in tasks if t["kind"] == "segment" and t["topic"] == "__transaction_state"]
    data = [t for t in tasks if t["kind"] == "segment" and not t["topic"].startswith("__")]
    assert txn and data
    assert all(decode_cost(t) == task_bytes(t) * RECORD_TOPIC_COST for t in txn)
    assert all(decode_cost(t) == task_bytes(t) for t in data)
    # the planner's list is the catalog's: every topic some table decodes record by record
    assert RECORD_TOPICS == {s.topic for s in TABLES.values() if s.record_decoder is not None}


def _parts(root, names: list[str]) -> dict[str, list[dict]]:
    """Every table's rows in the parts under ``root``, read in name order (as a reader lists them)."""
    out = {}
    for name in names:
        d = root / name
        out[name] = ds.dataset(str(d), format="parquet").to_table().to_pylist() if d.is_dir() else []
    return out


@pytest.mark.spark
@pytest.mark.parametrize("processes", [1, 3])
def test_the_local_decode_is_spark_decode_jobs_row_for_row(spark, tmp_path, processes):
    tasks = _tasks(CAPTURES)
    names = list(TABLES)
    by_spark = decode_envelope(spark, tasks, names, small=True).toArrow()
    local = LocalDecode(tasks, names, str(tmp_path), processes=processes).result()
    # the counts and problems, in task order; the rows are in the parts, not in payloads
    assert local.num_rows == by_spark.num_rows > 0
    summary = envelope.SUMMARY_COLUMNS
    assert local.select(summary).to_pylist() == by_spark.select(summary).to_pylist()
    assert local.column("payload").null_count == local.num_rows
    expected = {n: t.to_pylist() for n, t in envelope.tables_of(by_spark, names).items()}
    assert _parts(tmp_path, names) == expected  # every table, row for row, in the same order
    if processes > 1:  # several runs, each its own part, named in task order
        assert len(list((tmp_path / "batches").glob("part-*.parquet"))) > 1


@pytest.mark.spark
def test_ingest_decodes_a_small_local_input_without_a_spark_job(spark, tmp_path):
    sc = spark.sparkContext
    sc.setJobGroup("local-decode-test", "ingest")
    try:
        res = ingest(spark, CAPTURES, str(tmp_path / "t"))
    finally:
        sc.setJobGroup(None, None)
    assert res.table_rows["batches"] > 0
    assert list(sc.statusTracker().getJobIdsForGroup("local-decode-test")) == []
    got = ds.dataset(str(tmp_path / "t" / "batches"), format="parquet").to_table()
    assert got.num_rows == res.table_rows["batches"]


@pytest.mark.spark
def test_a_decode_started_before_spark_gives_the_tables_ingest_would(spark, tmp_path):
    plan = make_plan(CAPTURES)
    early = start_local_decode(plan, str(tmp_path / "a"))
    assert early is not None and early.root.startswith(str(tmp_path))
    a = ingest(spark, CAPTURES, str(tmp_path / "a"), plan=plan, decoded=early)
    b = ingest(spark, CAPTURES, str(tmp_path / "b"), plan=plan, local_decode=False)  # Spark's decode
    assert a.table_rows == b.table_rows and sorted(map(repr, a.files)) == sorted(map(repr, b.files))
    for name in TABLES:
        x = ds.dataset(str(tmp_path / "a" / name), format="parquet").to_table()
        y = ds.dataset(str(tmp_path / "b" / name), format="parquet").to_table()
        assert x.to_pylist() == y.to_pylist(), name


@pytest.mark.spark
def test_no_local_decode_for_a_remote_input_nor_for_other_tasks(spark, tmp_path):
    plan = make_plan(CAPTURES)
    remote = make_plan(CAPTURES)
    remote.tasks[0] = {**remote.tasks[0], "path": "hdfs://nn:8020/kafka/" + remote.tasks[0]["path"].lstrip("/")}
    assert start_local_decode(remote, str(tmp_path / "r")) is None  # read where Spark's executors run
    assert not list(tmp_path.iterdir())  # and no staging directory made for it
    other = start_local_decode(plan, str(tmp_path / "t"), tables=["batches"])
    with pytest.raises(ValueError, match="other tables"):
        ingest(spark, CAPTURES, str(tmp_path / "t"), plan=plan, decoded=other)
    assert not list(tmp_path.iterdir())  # neither the tables nor the discarded decode's staging


def test_ingest_of_local_files_needs_no_spark_session(tmp_path):
    """``ingest`` with no session (what `txn-audit ingest` does for local files under an embedded
    local master): the local decode writes every table, and the run is swapped in as with Spark."""
    res = ingest(None, CAPTURES, str(tmp_path / "t"))
    assert res.table_rows["batches"] > 0 and res.table_rows["files"] == len(res.files)
    for name in TABLES:  # every table there, the empty ones with their schema
        t = ds.dataset(str(tmp_path / "t" / name), format="parquet").to_table()
        assert t.num_rows == res.table_rows[name] and t.schema.equals(TABLES[name].schema), name
    assert [p.name for p in tmp_path.iterdir()] == ["t"]  # no staging left beside it


def test_a_discarded_decode_leaves_nothing(tmp_path):
    plan = make_plan(CAPTURES)
    d = start_local_decode(plan, str(tmp_path / "t"))
    d.result()
    assert any(tmp_path.iterdir())  # the parts, in the staging directory
    d.discard()  # the caller will not ingest it (Spark did not start)
    assert not list(tmp_path.iterdir())


def test_a_process_with_other_threads_is_not_forked():
    """A fork copies only the calling thread: the child inherits the other threads' objects half-way
    and finalizes them at its first garbage collection (a forked decode segfaulted so in a test session
    running a librdkafka client). With another thread alive, the decode processes come from a fork
    server, and decode the same as ever."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(f"""
        import tempfile
        import threading
        from auditor.ingest import local_decode
        from auditor.ingest.local_decode import LocalDecode
        from auditor.ingest.plan import RECORD_TOPIC_COST, RECORD_TOPICS, decode_cost, make_plan, task_bytes
        from auditor.ingest.tables import TABLES
        tasks = [t for t in make_plan([{CAPTURES[0]!r}]).tasks if any(TABLES[n].accepts(t) for n in TABLES)]
        alone = local_decode._context().get_start_method()
        first = LocalDecode(tasks, list(TABLES), tempfile.mkdtemp(), processes=2).result()
        stop = threading.Event()
        t = threading.Thread(target=stop.wait)
        t.start()
        try:
            busy = local_decode._context().get_start_method()
            second = LocalDecode(tasks, list(TABLES), tempfile.mkdtemp(), processes=2).result()
        finally:
            stop.set()
            t.join()
        print(alone, busy, first.num_rows, first.equals(second))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    alone, busy, rows, same = out.stdout.split()
    assert (alone, busy) == ("fork", "forkserver")
    assert int(rows) > 0 and same == "True"
