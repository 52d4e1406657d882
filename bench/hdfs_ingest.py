"""Benchmark: ingest throughput from HDFS against local disk, on the same files.

    .venv/bin/python bench/hdfs_ingest.py [--partitions 16] [--segments 6] [--batches 3000] [--repeat 2]

Generates one broker log dir (bench/batch.py's generator: topic ``events``, P partitions of S
segments of N batches, 8 records of 200 bytes each, transactional and idempotent producers), starts
the single-host HDFS of the tests (scripts/hdfs/harness.py: a NameNode and a DataNode on 127.0.0.1)
and copies the log dir into it. Then, alternating local and HDFS, ``repeat`` times each:

* ``decode``: every task of the plan decoded for every table in this one process, no Spark
  (``envelope.decode_task_all``): discovery + planning + the decoders' reads, the I/O path alone;
* ``ingest``: the Spark ingest job (``local[2]``, the one the ``ingest`` and ``scan`` commands run)
  into Parquet tables: discovery, planning, decode on the executors, writing.

Prints seconds (best of ``repeat``), MB/s of input bytes and the ratio HDFS / local. Local files are
in the page cache (read once before); the DataNode's block files are too, so the HDFS figures are
the cost of the protocol (NameNode RPCs per file, DataNode streaming over loopback, Python copies),
not of disks.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def decode_all(inp: str) -> tuple[float, int]:
    from auditor.ingest import envelope
    from auditor.ingest.plan import make_plan

    t0 = time.perf_counter()
    plan = make_plan([inp])
    rows = 0
    for task in plan.tasks:
        for rb in envelope.decode_task_all(task):
            rows += sum(rb.column("rows").to_pylist())
    return time.perf_counter() - t0, rows


def ingest_once(spark, inp: str, out: Path) -> tuple[float, dict]:
    from auditor.ingest.spark_job import ingest

    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    res = ingest(spark, [inp], str(out))
    assert not res.bad_files, res.bad_files[:3]
    return time.perf_counter() - t0, res.stage_seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--segments", type=int, default=6)
    ap.add_argument("--batches", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()

    from hdfs_native import Client

    from batch import generate
    from scripts.hdfs.harness import MiniHdfs, mirror
    from auditor.spark.session import get_spark

    tmp = Path(tempfile.mkdtemp(prefix="bench-hdfs-"))
    try:
        log, held = generate(tmp / "logs", args.partitions, args.segments + 2, args.batches)
        for path, data in held:  # bench/batch.py holds two segments back per partition: all of them here
            path.write_bytes(data)
        files = [p for p in log.rglob("*") if p.is_file()]
        size = sum(p.stat().st_size for p in files)
        for p in files:
            p.read_bytes()  # in the page cache, as the DataNode's copies will be
        print(f"{len(files)} files, {size / 1e6:.1f} MB, {args.partitions} partitions x {args.segments + 2} segments")
        with MiniHdfs(tmp / "hdfs") as hdfs:
            t0 = time.perf_counter()
            mirror(Client(hdfs.url), log, "/bench/broker-1")
            print(f"copied into HDFS in {time.perf_counter() - t0:.1f} s")
            inputs = {"local": str(log), "hdfs": hdfs.url + "/bench/broker-1"}
            decode = {k: [] for k in inputs}
            for _ in range(args.repeat):
                for k, inp in inputs.items():
                    decode[k].append(decode_all(inp))
            assert decode["local"][0][1] == decode["hdfs"][0][1], "different row counts"
            spark = get_spark("local[2]", {"spark.sql.shuffle.partitions": "2"}, delta=False)
            ingest_once(spark, inputs["local"], tmp / "warm")  # JVM and Python workers warm
            ingest = {k: [] for k in inputs}
            for _ in range(args.repeat):
                for k, inp in inputs.items():
                    ingest[k].append(ingest_once(spark, inp, tmp / f"out-{k}"))
            spark.stop()
        print(f"\n{'what':8} {'input':6} {'seconds':>8} {'MB/s':>8} {'HDFS/local':>10}  stages (best run)")
        for name, runs in (("decode", decode), ("ingest", ingest)):
            best = {k: min(r[0] for r in v) for k, v in runs.items()}
            for k in inputs:
                stages = "" if name == "decode" else str(min(runs[k])[1])
                ratio = f"{best[k] / best['local']:.2f}x" if k == "hdfs" else ""
                print(f"{name:8} {k:6} {best[k]:8.2f} {size / 1e6 / best[k]:8.1f} {ratio:>10}  {stages}")
        print(f"rows decoded: {decode['local'][0][1]:,}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
