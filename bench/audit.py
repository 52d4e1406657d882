"""Benchmark: every rule over generated tables of N batches across 1,000 partitions.

    .venv/bin/python bench/audit.py --batches 10000000 [--partitions 1000] [--dir build/bench-audit]

Generates a ``batches`` table with Spark (10 producers per partition; half of
them transactional, committing every 5 batches; one open transaction and one
sequence gap every 100 partitions), writes the other tables empty with their
real schemas, then runs the full audit on ``local[2]`` and prints: generation
time, wall time per rule and in total, batches per second, findings, and the
peak RSS of the driver process and of the JVM (sampled every 0.5 s).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def generate(spark, n: int, parts: int, out: Path) -> float:
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    from auditor.ingest.inventory import FILES_SCHEMA
    from auditor.ingest.tables import TABLES

    t0 = time.monotonic()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    i = F.col("id")
    p = (i % parts).cast("int")
    k = (i / parts).cast("long")  # position in the partition = base offset
    slot = (k % 10).cast("long")
    j = (k / 10).cast("long")  # the producer's own batch index
    txn = slot < 5
    last_j = F.lit((n // parts - 1) // 10)
    is_marker = txn & (j % 5 == 4)
    # anomalies: every 100th partition leaves its last transaction open (marker dropped) and
    # gets one sequence gap in producer slot 9
    open_txn = (p % 100 == 0) & txn & (j >= last_j - 4)
    gap = (p % 100 == 1) & (slot == 9) & (j >= 3)
    seq = F.when(gap, j + 7).otherwise(j - F.when(txn, (j / 5).cast("long")).otherwise(0)).cast("int")
    is_control = is_marker & ~open_txn
    ts = F.lit(1_700_000_000_000) + k * 1000
    df = spark.range(n).select(
        F.lit("bench").alias("cluster_id"), F.lit(1).alias("broker_id"), F.lit("/data").alias("log_dir"),
        F.concat(F.lit("topic-"), (p / 10).cast("int").cast("string")).alias("topic"), (p % 10).alias("partition"),
        F.lit("/data/x.log").alias("file"), F.lit(0).cast("long").alias("segment_base_offset"),
        F.lit("segment").alias("source"), (k * 100).alias("position"), F.lit(100).alias("size"),
        k.alias("base_offset"), k.alias("last_offset"), F.lit(0).alias("last_offset_delta"),
        F.lit(0).alias("partition_leader_epoch"), F.lit(2).cast("byte").alias("magic"), F.lit(0).cast("long").alias("crc"),
        F.lit(True).alias("crc_valid"), F.when(is_control, 0x30).when(txn, 0x10).otherwise(0).cast("short").alias("attributes"),
        F.lit("none").alias("compression"), F.lit("CreateTime").alias("timestamp_type"), txn.alias("is_transactional"),
        is_control.alias("is_control"), F.lit(False).alias("has_delete_horizon"), ts.alias("base_timestamp"),
        ts.alias("max_timestamp"), F.lit(None).cast("long").alias("delete_horizon_ms"),
        (p.cast("long") * 10 + slot).alias("producer_id"), F.lit(0).cast("short").alias("producer_epoch"),
        F.when(is_control, -1).otherwise(seq).alias("base_sequence"), F.when(is_control, -1).otherwise(seq).alias("last_sequence"),
        F.lit(1).alias("record_count"), F.when(is_control, "COMMIT").alias("control_type"),
        F.when(is_control, 0).alias("coordinator_epoch"),
    ).where(~(is_marker & open_txn))
    schema = TABLES["batches"].schema
    from pyspark.sql.pandas.types import from_arrow_schema

    sschema = from_arrow_schema(schema)
    df = df.select(*[F.col(f.name).cast(f.dataType) for f in sschema.fields])
    df.write.parquet(str(out / "batches"))
    counts = {"batches": spark.read.parquet(str(out / "batches")).count()}
    for name, spec in TABLES.items():
        if name == "batches":
            continue
        (out / name).mkdir()
        pq.write_table(spec.schema.empty_table(), out / name / "part-00000.parquet")
        counts[name] = 0
    (out / "files").mkdir()
    pq.write_table(FILES_SCHEMA.empty_table(), out / "files" / "part-00000.parquet")
    (out / "_ingest.json").write_text(json.dumps({"tables": counts}))
    return time.monotonic() - t0


class RssSampler(threading.Thread):
    """Peak RSS (MiB) of this process's children (the JVM) while running."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak_jvm = 0
        self.stop = False

    def run(self) -> None:
        while not self.stop:
            try:
                out = subprocess.run(["ps", "-o", "rss=", "--ppid", str(os.getpid())], capture_output=True, text=True).stdout
                self.peak_jvm = max(self.peak_jvm, sum(int(x) for x in out.split() if x.isdigit()) // 1024)
            except OSError:
                pass
            time.sleep(0.5)


def children_cpu_seconds() -> float:
    """User+system CPU time of this process's live children (the Spark JVM in local mode):
    a figure that, unlike wall time, does not move much when other work shares the cores."""
    pids = subprocess.run(["pgrep", "-P", str(os.getpid())], capture_output=True, text=True).stdout.split()
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=10_000_000)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--dir", default=str(ROOT / "build" / "bench-audit"))
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--driver-memory", default="4g")
    ap.add_argument("--reuse", action="store_true", help="reuse tables generated by an earlier run")
    ap.add_argument("--generate-only", action="store_true", help="write the tables and stop (audit later with --reuse)")
    args = ap.parse_args()

    from auditor.engine.audit import audit
    from auditor.engine.session import get_spark

    sampler = RssSampler()
    sampler.start()
    spark = get_spark(args.master, {"spark.driver.memory": args.driver_memory,
                                    "spark.sql.shuffle.partitions": "8"})
    out = Path(args.dir)
    gen = 0.0 if args.reuse and (out / "_ingest.json").exists() else generate(spark, args.batches, args.partitions, out)
    n = json.loads((out / "_ingest.json").read_text())["tables"]["batches"]
    if args.generate_only:
        print(f"generated {n:,} batches in {gen:.1f} s")
        return
    c0 = children_cpu_seconds()
    marks: list[tuple[str, float]] = []
    t0 = time.monotonic()
    res = audit(spark, str(out), progress=lambda rule, i, n: marks.append((rule, children_cpu_seconds())))
    total = time.monotonic() - t0
    cpu = children_cpu_seconds() - c0
    marks.append(("", c0 + cpu))
    rule_cpu = {rule: marks[i + 1][1] - t for i, (rule, t) in enumerate(marks[:-1])}
    sampler.stop = True
    py_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(f"batches: {n:,} across {args.partitions} partitions ({args.master})")
    print(f"generate tables: {gen:.1f} s")
    print(f"  {'rule':32s} {'wall':>8s}   {'JVM CPU':>8s}")
    for rule, s in res.rule_seconds.items():
        print(f"  {rule:32s} {s:8.1f} s {rule_cpu.get(rule, 0.0):8.1f} s")
    print(f"audit total: {total:.1f} s  ({n / total:,.0f} batches/s); JVM CPU {cpu:.1f} s")
    from collections import Counter

    print("findings:", dict(Counter((f["rule"], f["severity"]) for f in res.findings)))
    print(f"peak RSS: python driver {py_peak} MiB, JVM (driver+executors, local mode) {sampler.peak_jvm} MiB")


if __name__ == "__main__":
    main()
