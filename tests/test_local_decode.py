"""A small local input decoded by processes of the driver's own (auditor/ingest/local_decode.py):
the same envelope, in the same order, as Spark's decode job of the same tasks, and only where it
applies (local files, at most ingest_job.SMALL_INPUT_BYTES)."""

from __future__ import annotations

import pyarrow.dataset as ds
import pytest

from auditor.ingest.spark_job import decode_envelope, ingest, start_local_decode
from auditor.ingest.local_decode import LocalDecode, runs
from auditor.ingest.plan import make_plan
from auditor.ingest.tables import TABLES
from conftest import SAMPLE_LOGS

CAPTURES = [str(SAMPLE_LOGS / "hanging-late-write"), str(SAMPLE_LOGS / "legacy-message-formats")]


def _tasks(inputs: list[str]) -> list[dict]:
    return [t for t in make_plan(inputs).tasks if any(TABLES[n].accepts(t) for n in TABLES)]


def _size(t: dict) -> int:
    return t["size"] if t["range_end"] < 0 else t["range_end"] - t["range_start"]


@pytest.mark.parametrize("n", [1, 2, 3, 7, 1000])
def test_runs_are_contiguous_non_empty_and_share_the_bytes(n):
    tasks = _tasks(CAPTURES)
    parts = runs(tasks, n)
    assert [t for p in parts for t in p] == tasks  # in order, nothing lost or repeated
    assert all(parts) and len(parts) <= min(n, len(tasks))
    if n == 2:  # the first run stops once it holds half the bytes: the second is never the larger by more than a task
        a, b = (sum(_size(t) for t in p) for p in parts)
        assert b <= a + max(_size(t) for t in tasks)


@pytest.mark.spark
@pytest.mark.parametrize("processes", [1, 3])
def test_the_local_envelope_is_spark_decode_jobs_row_for_row(spark, processes):
    tasks = _tasks(CAPTURES)
    names = list(TABLES)
    by_spark = decode_envelope(spark, tasks, names, small=True).toArrow()
    local = LocalDecode(tasks, names, processes=processes).result()
    assert local.num_rows == by_spark.num_rows > 0
    assert local.schema.names == by_spark.schema.names
    assert local.to_pylist() == by_spark.to_pylist()  # payloads (Arrow IPC of the table rows) included


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
    early = start_local_decode(plan)
    assert early is not None
    a = ingest(spark, CAPTURES, str(tmp_path / "a"), plan=plan, decoded=early)
    b = ingest(spark, CAPTURES, str(tmp_path / "b"), plan=plan)
    assert a.table_rows == b.table_rows and sorted(map(repr, a.files)) == sorted(map(repr, b.files))
    for name in TABLES:
        x = ds.dataset(str(tmp_path / "a" / name), format="parquet").to_table()
        y = ds.dataset(str(tmp_path / "b" / name), format="parquet").to_table()
        assert x.to_pylist() == y.to_pylist(), name


@pytest.mark.spark
def test_no_local_decode_for_a_large_or_remote_input_nor_for_other_tasks(spark, tmp_path):
    plan = make_plan(CAPTURES)
    assert start_local_decode(plan, small_input_bytes=0) is None  # over the bound: Spark's decode
    remote = make_plan(CAPTURES)
    remote.tasks[0] = {**remote.tasks[0], "path": "hdfs://nn:8020/kafka/" + remote.tasks[0]["path"].lstrip("/")}
    assert start_local_decode(remote) is None  # read where Spark's executors run
    other = start_local_decode(plan, tables=["batches"])
    with pytest.raises(ValueError, match="other tables or tasks"):
        ingest(spark, CAPTURES, str(tmp_path / "t"), plan=plan, decoded=other)
    assert not (tmp_path / "t").exists()


def test_a_process_with_other_threads_is_not_forked():
    """A fork copies only the calling thread: the child inherits the other threads' objects half-way
    and finalizes them at its first garbage collection (a forked decode segfaulted so in a test session
    running a librdkafka client). With another thread alive, the decode processes come from a fork
    server, and decode the same as ever."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(f"""
        import threading
        from auditor.ingest import local_decode
        from auditor.ingest.local_decode import LocalDecode
        from auditor.ingest.plan import make_plan
        from auditor.ingest.tables import TABLES
        tasks = [t for t in make_plan([{CAPTURES[0]!r}]).tasks if any(TABLES[n].accepts(t) for n in TABLES)]
        alone = local_decode._context().get_start_method()
        first = LocalDecode(tasks, list(TABLES), processes=2).result()
        stop = threading.Event()
        t = threading.Thread(target=stop.wait)
        t.start()
        try:
            busy = local_decode._context().get_start_method()
            second = LocalDecode(tasks, list(TABLES), processes=2).result()
        finally:
            stop.set()
            t.join()
        print(alone, busy, first.num_rows, first.equals(second))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    alone, busy, rows, same = out.stdout.split()
    assert (alone, busy) == ("fork", "forkserver")
    assert int(rows) > 0 and same == "True"
