"""Ingestion end to end on real Spark: bad inputs are reported per file with
path and byte position, the rest is decoded, inputs are never modified, and an
interrupted run never leaves half-written tables."""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from builders import data_batch, marker
from auditor.ingest.spark_job import MANIFEST, ingest

pytestmark = pytest.mark.spark

UUID = "0123456789abcdef0123456789abcdef"


def _seg(*parts: bytes) -> bytes:
    return b"".join(parts)


@pytest.fixture(scope="module")
def bad_logdir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("broker3")
    (root / "meta.properties").write_text("#\nversion=1\nnode.id=3\ncluster.id=test-cluster-abc\ndirectory.id=J8nH2kKQT0GZ3pD1x7s9Ww\n")
    (root / "README.txt").write_text("not kafka")

    def part(name: str, files: dict[str, bytes]) -> Path:
        d = root / name
        d.mkdir()
        for fn, data in files.items():
            (d / fn).write_bytes(data)
        return d

    txn = data_batch(0, 3, producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
    part("payments-0", {"00000000000000000000.log": _seg(txn, marker(3, 7, 0, commit=True, coordinator_epoch=4))})
    two = _seg(data_batch(0, 2), data_batch(2, 2))
    part("payments-1", {"00000000000000000000.log": two[:-5]})  # truncated tail
    part("payments-2", {"00000000000000000000.log": _seg(data_batch(0, 2), bytes(4096))})  # preallocated zeros
    flipped = bytearray(data_batch(0, 2))
    flipped[-3] ^= 0xFF
    part("payments-3", {"00000000000000000000.log": _seg(bytes(flipped), data_batch(2, 1))})
    absurd = bytearray(data_batch(1, 1))
    struct.pack_into(">i", absurd, 8, 0x7FFFFFF0)
    part("payments-4", {"00000000000000000000.log": _seg(data_batch(0, 1), bytes(absurd))})
    magic = bytearray(data_batch(1, 1))
    magic[16] = 7
    part("payments-5", {"00000000000000000000.log": _seg(data_batch(0, 1), bytes(magic))})
    part("payments-6", {"00000000000000000000.log": b"\x89PNG\r\n\x1a\n" + bytes(range(200))})
    (root / "payments-7").mkdir()
    part(f"payments-8.{UUID}-delete", {"00000000000000000000.log": data_batch(0, 1)})
    part("payments-9", {"00000000000000000005.log.deleted": data_batch(5, 1)})
    d = root / "payments-10"
    d.mkdir()
    os.symlink(root / "does-not-exist", d / "00000000000000000000.log")
    return root


def _digest(root: Path) -> dict[str, tuple[str, int]]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            out[str(p)] = (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
    return out


@pytest.fixture(scope="module")
def ingested(spark, bad_logdir, tmp_path_factory):
    before = _digest(bad_logdir)
    out = tmp_path_factory.mktemp("tables") / "t"
    result = ingest(spark, [str(bad_logdir)], str(out), tables=["batches"])
    assert _digest(bad_logdir) == before, "ingestion modified its input"
    files = {Path(f["path"]).relative_to(bad_logdir).as_posix(): f for f in result.files}
    return result, files, out


def test_each_bad_file_has_status_and_position(ingested):
    _, files, _ = ingested
    seg = "00000000000000000000.log"
    assert files[f"payments-0/{seg}"]["status"] == "ok"
    assert files[f"payments-0/{seg}"]["rows"] == 2
    one = len(data_batch(0, 2))
    f = files[f"payments-1/{seg}"]
    assert (f["status"], f["error_position"], f["rows"]) == ("truncated", one, 1)
    f = files[f"payments-2/{seg}"]
    assert (f["status"], f["error_position"], f["rows"]) == ("zero-tail", one, 1)
    f = files[f"payments-3/{seg}"]
    assert f["status"] == "bad-crc" and f["error_position"] == 17 and f["rows"] == 2  # decoding went on
    first = len(data_batch(0, 1))
    f = files[f"payments-4/{seg}"]
    assert (f["status"], f["error_position"], f["rows"]) == ("bad-length", first + 8, 1)
    f = files[f"payments-5/{seg}"]
    assert (f["status"], f["error_position"], f["rows"]) == ("unknown-magic", first + 16, 1)
    f = files[f"payments-6/{seg}"]
    assert f["status"] == "foreign" and "does not look like a Kafka segment" in f["error_message"]
    assert files["payments-7"]["status"] == "empty"
    f = files[f"payments-8.{UUID}-delete/{seg}"]
    assert (f["status"], f["dir_status"], f["topic"], f["partition"]) == ("ok", "delete", "payments", 8)
    f = files["payments-9/00000000000000000005.log.deleted"]
    assert (f["status"], f["file_status"], f["base_offset"]) == ("ok", "deleted", 5)
    assert files[f"payments-10/{seg}"]["status"] == "unreadable"
    assert files["README.txt"]["status"] == "skipped"
    assert files["meta.properties"]["broker_id"] == 3


def test_good_rows_survive_bad_neighbours(ingested):
    result, _, out = ingested
    t = ds.dataset(str(out / "batches")).to_table().to_pylist()
    # 2 (payments-0) + 1 + 1 + 2 + 1 + 1 + 0 + 1 (-delete dir) + 1 (.deleted)
    assert len(t) == 10 == result.table_rows["batches"]
    assert {r["broker_id"] for r in t} == {3}
    assert {r["cluster_id"] for r in t} == {"test-cluster-abc"}
    m = [r for r in t if r["is_control"]]
    assert [(m[0]["control_type"], m[0]["coordinator_epoch"], m[0]["base_offset"], m[0]["producer_id"])] == [("COMMIT", 4, 3, 7)]
    bad = [r for r in t if not r["crc_valid"]]
    assert [(r["topic"], r["partition"], r["base_offset"]) for r in bad] == [("payments", 3, 0)]


def test_interrupted_run_leaves_previous_tables(spark, bad_logdir, ingested, tmp_path):
    out = tmp_path / "t"
    first = ingest(spark, [str(bad_logdir)], str(out), tables=["batches"])
    manifest = (out / MANIFEST).read_text()

    def boom(name, i, n):
        if i == 1:
            raise KeyboardInterrupt("killed mid-run")

    with pytest.raises(KeyboardInterrupt):
        ingest(spark, [str(bad_logdir)], str(out), tables=["batches", "batches"], progress=boom)
    assert (out / MANIFEST).read_text() == manifest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]  # no staging left behind
    assert ds.dataset(str(out / "batches")).count_rows() == first.table_rows["batches"]


def test_kill_between_renames_is_repaired(spark, bad_logdir, tmp_path):
    out = tmp_path / "t"
    first = ingest(spark, [str(bad_logdir)], str(out), tables=["batches"])
    # what a SIGKILL between the two renames of the swap leaves behind
    os.rename(out, tmp_path / ".t.old-20990101T000000-deadbeef")
    (tmp_path / ".t.tmp-20990101T000000-deadbeef").mkdir()
    second = ingest(spark, [str(bad_logdir)], str(out), tables=["batches"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]
    assert ds.dataset(str(out / "batches")).count_rows() == first.table_rows["batches"] == second.table_rows["batches"]


def test_large_input_path_writes_the_same_tables(spark, bad_logdir, tmp_path, monkeypatch):
    """An input over ``small_input_bytes`` is decoded once, persisted, and each table
    written by Spark (or, if small, by the driver) instead of collected: same rows, same
    inventory, same problems as the small-input path, on good and bad files alike."""
    from conftest import SAMPLE_LOGS

    inputs = [str(bad_logdir), str(SAMPLE_LOGS / "hanging-late-write")]
    small = ingest(spark, inputs, str(tmp_path / "small"), local_decode=False)  # Spark's one job, written by the driver
    local = ingest(spark, inputs, str(tmp_path / "local"))  # local processes write the parts
    large = ingest(spark, inputs, str(tmp_path / "large"), small_input_bytes=0, local_decode=False)  # small tables by the driver
    monkeypatch.setattr("auditor.ingest.spark_job.DRIVER_TABLE_ROWS", 0)
    spark_written = ingest(spark, inputs, str(tmp_path / "spark"), small_input_bytes=0, local_decode=False)  # every table by Spark
    for other, res in (("local", local), ("large", large), ("spark", spark_written)):
        assert small.table_rows == res.table_rows and small.table_rows["batches"] > 0
        assert sorted(map(repr, small.files)) == sorted(map(repr, res.files))
        for name in small.table_rows:
            a = ds.dataset(str(tmp_path / "small" / name), format="parquet").to_table()
            b = ds.dataset(str(tmp_path / other / name), format="parquet").to_table()
            assert a.schema.names == b.schema.names, (other, name)
            assert sorted(map(repr, a.to_pylist())) == sorted(map(repr, b.to_pylist())), (other, name)
