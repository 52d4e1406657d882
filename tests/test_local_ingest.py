"""The local ingest (processes of the driver's own decode local files and write the tables' parts,
auditor/ingest/local_decode.py) against Spark's decode job, table for table and row for row:
on every capture of sample_logs/, on the external corpus, on a generated broker log dir with
rolled and active segments, and on mutated segments (the decoders' problems included)."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from auditor.ingest import envelope
from auditor.ingest.local_decode import PartWriter
from auditor.ingest.plan import DEFAULT_SPLIT_BYTES, make_plan
from auditor.ingest.spark_job import ingest
from auditor.ingest.tables import TABLES
from conftest import REAL_LOGS, SAMPLE_LOGS

CAPTURES = sorted(str(p) for p in SAMPLE_LOGS.iterdir() if p.is_dir())


def _table(root: Path, name: str) -> list[str]:
    return sorted(map(repr, ds.dataset(str(root / name), format="parquet").to_table().to_pylist()))


def _same_tables(spark, inputs: list[str], tmp: Path, split_bytes: int = DEFAULT_SPLIT_BYTES) -> dict[str, int]:
    """Ingest ``inputs`` both ways; assert every table and the inventory equal; the row counts."""
    by_spark = ingest(spark, inputs, str(tmp / "spark"), split_bytes=split_bytes, local_decode=False)
    local = ingest(None, inputs, str(tmp / "local"), split_bytes=split_bytes)  # no session: what `txn-audit ingest` does
    assert local.table_rows == by_spark.table_rows
    assert sorted(map(repr, local.files)) == sorted(map(repr, by_spark.files))
    for name in [*TABLES, "files"]:
        a, b = (ds.dataset(str(tmp / w / name), format="parquet").to_table() for w in ("spark", "local"))
        assert a.schema.equals(b.schema), name
        assert _table(tmp / "spark", name) == _table(tmp / "local", name), name
    return local.table_rows


@pytest.mark.spark
def test_every_capture_gives_spark_decodes_tables(spark, tmp_path):
    rows = _same_tables(spark, CAPTURES, tmp_path)
    # more than one process, so several parts per table (the input is over BYTES_PER_PROCESS)
    assert rows["batches"] > 1000 and rows["transaction_log"] > 0
    assert len(list((tmp_path / "local" / "batches").glob("part-*.parquet"))) > 1


@pytest.mark.spark
@pytest.mark.real_logs
def test_the_external_corpus_gives_spark_decodes_tables(spark, tmp_path):
    inputs = sorted(str(p) for p in REAL_LOGS.iterdir() if p.is_dir())
    rows = _same_tables(spark, inputs, tmp_path)
    assert rows["batches"] > 0


@pytest.mark.spark
def test_a_generated_broker_log_dir_gives_spark_decodes_tables(spark, tmp_path):
    """bench/broker_dir.py's generator at 24 MiB: rolled and active segments with their indexes
    (preallocated ones too), mixed codecs, __transaction_state, checkpoints, one hanging transaction;
    its big segments split into byte ranges (a 2 MiB split), __transaction_state's finer."""
    from bench.broker_dir import generate

    log_dir = generate(tmp_path / "gen", 24 << 20, seed=7)
    plan = make_plan([str(log_dir)], 2 << 20)
    assert any(t["range_start"] > 0 for t in plan.tasks)
    rows = _same_tables(spark, [str(log_dir)], tmp_path, split_bytes=2 << 20)
    assert rows["batches"] > 2_000


# -- mutated segments: the sink the local decode writes through holds what the envelope carries --------

_SEEDS = sorted(p for p in SAMPLE_LOGS.rglob("*.log") if 0 < p.stat().st_size <= 256 << 10)


def _envelope(task: dict, sink=None) -> pa.Table:
    return pa.Table.from_batches(list(envelope.decode_task_all(task, sink=sink)), schema=envelope.ENVELOPE_SCHEMA)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), which=st.integers(0, len(_SEEDS) - 1))
def test_mutated_segments_decode_the_same_through_the_part_writer(tmp_path, seed, which):
    """What Spark's path writes is the envelope's payloads; what the local path writes is its sink's
    parts: for a segment with a byte replaced, cut, or cut and zero-filled, both hold the same rows,
    and the envelope's counts and problems (the inventory) are the same either way."""
    rng = random.Random(seed)
    src = _SEEDS[which]
    data = bytearray(src.read_bytes())
    mutation = rng.choice(["flip", "cut", "zeros"])
    at = rng.randrange(len(data))
    if mutation == "flip":
        data[at] ^= 1 << rng.randrange(8)
    elif mutation == "cut":
        del data[at:]
    else:
        data[at:] = bytes(len(data) - at)
    work = tmp_path / f"case-{seed}"
    shutil.rmtree(work, ignore_errors=True)
    seg = work / src.parent.name / src.name
    seg.parent.mkdir(parents=True)
    seg.write_bytes(bytes(data))
    for task in make_plan([str(work)]).tasks:
        parts = work / "parts"
        shutil.rmtree(parts, ignore_errors=True)
        ref = _envelope(task)
        writer = PartWriter(str(parts), "part-00000.parquet")
        try:
            got = _envelope(task, writer)
        finally:
            writer.close()
        summary = envelope.SUMMARY_COLUMNS
        assert got.select(summary).to_pylist() == ref.select(summary).to_pylist(), (src, mutation, at)
        for name, t in envelope.tables_of(ref, list(TABLES)).items():
            d = parts / name
            written = ds.dataset(str(d), format="parquet").to_table().to_pylist() if d.is_dir() else []
            assert written == t.to_pylist(), (src, mutation, at, name)
