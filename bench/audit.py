"""Benchmark: every rule over generated tables of N batches across 1,000 partitions.

    .venv/bin/python bench/audit.py --batches 10000000 [--partitions 1000] [--dir build/bench-audit]

Generates a ``batches`` table with Spark (10 producers per partition; half of
them transactional, committing every 5 batches; one open transaction and one
sequence gap every 100 partitions), writes the other tables empty with their
real schemas, then runs the full audit on ``local[2]`` and prints: generation
time, wall time per rule and in total, batches per second, findings, and the
peak RSS of the driver process and of the JVM (sampled every 0.5 s).

A DuckDB reference of the core checks (open transactions, LSO pins,
sequence breaks: :data:`DUCKDB_CHECKS`) runs on the same Parquet before and
after the audit (``--duckdb-threads``, 0 to leave it out); the bench prints
both times, the ratio, the load average, and whether the two find the same
(topic, partition, producer id) keys for each check (exit status 1 if not).
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


# -- the DuckDB reference: the same core checks on the same Parquet ------------------------
REPLICA_SQL = "cluster_id, broker_id, log_dir, topic, partition"
DUCKDB_CHECKS = {
    # the batches every check reads: what the audit's producer-state model reads (v2 batches of the
    # segments with a producer id), markers being COMMIT/ABORT control batches
    "_pb": f"""
        CREATE OR REPLACE TEMP VIEW pb AS
        SELECT {REPLICA_SQL}, producer_id, producer_epoch, base_offset, last_offset, base_sequence, last_sequence,
               is_transactional, NOT is_control AS is_data,
               is_control AND coalesce(control_type IN ('COMMIT', 'ABORT'), false) AS is_marker
        FROM read_parquet('{{batches}}/*.parquet')
        WHERE magic = 2 AND source = 'segment' AND producer_id >= 0""",
    # open transactions (hanging candidates): a producer's transactional data batches with no marker after
    # them; a running count of markers groups each producer's batches into transactions
    "_open": f"""
        CREATE OR REPLACE TEMP TABLE open_txn AS
        SELECT {REPLICA_SQL}, producer_id, min(base_offset) AS first_offset
        FROM (SELECT *, sum(is_marker::int) OVER (PARTITION BY {REPLICA_SQL}, producer_id ORDER BY base_offset
                                                 ROWS UNBOUNDED PRECEDING) AS markers_upto,
                     sum(is_marker::int) OVER (PARTITION BY {REPLICA_SQL}, producer_id) AS markers
              FROM pb WHERE is_transactional AND (is_data OR is_marker))
        WHERE is_data AND markers_upto = markers
        GROUP BY ALL""",
    "open transactions": "SELECT topic, partition, producer_id FROM open_txn",
    # LSO pins: per replica, the earliest open transaction when it starts below the log end (the high
    # watermark without a replication checkpoint)
    "LSO pins": f"""
        SELECT o.topic, o.partition, arg_min(o.producer_id, o.first_offset)
        FROM open_txn o JOIN (SELECT {REPLICA_SQL}, max(last_offset) + 1 AS log_end FROM pb GROUP BY ALL) e
             USING ({REPLICA_SQL})
        GROUP BY o.cluster_id, o.broker_id, o.log_dir, o.topic, o.partition
        HAVING min(o.first_offset) < any_value(e.log_end)""",
    # sequence breaks (ProducerAppendInfo.checkSequence): each data batch against the producer's previous
    # one (gap, regression, epoch regression, a new epoch not at 0, duplicates within the 5-batch window)
    "sequence breaks": f"""
        SELECT topic, partition, producer_id FROM (
          SELECT *, lag(producer_epoch) OVER w AS pe, lag(last_sequence) OVER w AS pls,
                 list_contains([lag(struct_pack(e := producer_epoch, b := base_sequence, l := last_sequence), 2) OVER w,
                                lag(struct_pack(e := producer_epoch, b := base_sequence, l := last_sequence), 3) OVER w,
                                lag(struct_pack(e := producer_epoch, b := base_sequence, l := last_sequence), 4) OVER w,
                                lag(struct_pack(e := producer_epoch, b := base_sequence, l := last_sequence), 5) OVER w],
                               struct_pack(e := producer_epoch, b := base_sequence, l := last_sequence)) AS dup
          FROM pb WHERE is_data AND base_sequence >= 0 AND topic != '__consumer_offsets'
          WINDOW w AS (PARTITION BY {REPLICA_SQL}, producer_id ORDER BY base_offset))
        WHERE pe IS NOT NULL AND (producer_epoch < pe OR (producer_epoch != pe AND base_sequence != 0)
              OR (producer_epoch = pe AND base_sequence != CASE WHEN pls = 2147483647 THEN 0 ELSE pls + 1 END)
              OR coalesce(dup, false))""",
}
# The same checks in Spark SQL (``--spark-reference``): what Spark itself takes for DuckDB's queries on the
# same Parquet, the floor of any audit built on it. Spark has no ``GROUP BY ALL``, ``arg_min``,
# ``struct_pack`` or ``list_contains``: the spelling differs, the queries do not.
_SPARK_SPELLING = (("GROUP BY ALL", "GROUP BY {group}"), ("arg_min(", "min_by("), ("is_marker::int", "cast(is_marker AS int)"),
                   ("read_parquet('{batches}/*.parquet')", "parquet.`{batches}`"), ("list_contains([", "array_contains(array("),
                   ("OVER w],", "OVER w),"), ("CREATE OR REPLACE TEMP TABLE open_txn AS", "CACHE TABLE open_txn AS"))


def spark_checks() -> dict[str, str]:
    """:data:`DUCKDB_CHECKS` in Spark's SQL dialect."""
    import re

    out = {}
    for name, sql in DUCKDB_CHECKS.items():
        for a, b in _SPARK_SPELLING:
            sql = sql.replace(a, b)
        sql = re.sub(r"struct_pack\(e := producer_epoch, b := base_sequence, l := last_sequence\)",
                     "struct(producer_epoch AS e, base_sequence AS b, last_sequence AS l)", sql)
        group = f"{REPLICA_SQL}, producer_id" if name == "_open" else REPLICA_SQL
        out[name] = sql.replace("{group}", group)
    return out


def spark_reference(spark, tables: Path) -> tuple[dict[str, set], float, float]:
    """:func:`spark_checks` run in ``spark``: the keys each finds, wall seconds, driver JVM CPU seconds."""
    spark.sql("UNCACHE TABLE IF EXISTS open_txn")
    c0, t0 = children_cpu_seconds(), time.monotonic()
    found: dict[str, set] = {}
    for name, sql in spark_checks().items():
        rows = spark.sql(sql.replace("{batches}", str(tables / "batches"))).collect()
        if not name.startswith("_"):
            found[name] = {tuple(r) for r in rows}
    wall, cpu = time.monotonic() - t0, children_cpu_seconds() - c0
    spark.sql("UNCACHE TABLE IF EXISTS open_txn")
    return found, wall, cpu


# the audit's rules for the same checks (their findings' (topic, partition, producer id) keys)
OUR_CHECKS = {"open transactions": "hanging-transaction", "LSO pins": "stuck-lso",
              "sequence breaks": "out-of-order-sequence"}


def duckdb_reference(tables: Path, threads: int) -> tuple[dict[str, set], float, float]:
    """Run :data:`DUCKDB_CHECKS` in DuckDB (``threads`` threads, in this process): the keys each check
    finds, the wall seconds and the CPU seconds (this process's user + system)."""
    import duckdb

    con = duckdb.connect(config={"threads": threads})
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    found: dict[str, set] = {}
    for name, sql in DUCKDB_CHECKS.items():
        sql = sql.replace("{batches}", str(tables / "batches"))
        if name.startswith("_"):
            con.execute(sql)
        else:
            found[name] = {tuple(r) for r in con.execute(sql).fetchall()}
    wall = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    con.close()
    return found, wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def our_keys(findings: list[dict]) -> dict[str, set]:
    """The (topic, partition, producer id) of our findings of each reference check's rule."""
    return {check: {(f["topic"], f["partition"], f["producer_id"]) for f in findings if f["rule"] == rule}
            for check, rule in OUR_CHECKS.items()}


def report_reference(duck, findings, total: float, cpu: float, load) -> None:
    """Print the DuckDB reference's runs, our audit against the faster one, and whether the two find the
    same (topic, partition, producer id) keys for every check; exits 1 when they do not."""
    found = duck[0][0]
    ours = our_keys(findings)
    best = min(duck, key=lambda d: d[1])
    runs = ", ".join(f"{w:.2f} s wall / {c:.2f} CPU-s" for _, w, c in duck)
    print(f"DuckDB {__import__('duckdb').__version__} reference (open transactions, LSO pins, sequence breaks; "
          f"before and after ours): {runs}")
    print(f"ours / DuckDB: wall {total / best[1]:.1f}x, CPU {cpu / best[2]:.1f}x "
          f"(load average at the start of ours: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f})")
    agree = True
    for check in DUCKDB_CHECKS:
        if check.startswith("_"):
            continue
        same = found[check] == ours[check] and all(d[0][check] == found[check] for d in duck)
        agree &= same
        print(f"  {check:18s} DuckDB {len(found[check]):6d}  ours ({OUR_CHECKS[check]}) {len(ours[check]):6d}  "
              f"keys {'agree' if same else 'DIFFER'}")
        if not same:
            print(f"    only DuckDB: {sorted(found[check] - ours[check])[:5]}  only ours: {sorted(ours[check] - found[check])[:5]}")
    if not agree:
        sys.exit(1)


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
    ap.add_argument("--shuffle-partitions", type=int, default=0,
                    help="spark.sql.shuffle.partitions (default: the CLI's, one per core)")
    ap.add_argument("--duckdb-threads", type=int, default=2, help="threads of the DuckDB reference (0: leave it out)")
    ap.add_argument("--spark-reference", action="store_true",
                    help="after the audit, the DuckDB reference's queries in Spark SQL, in the same (warm) session")
    args = ap.parse_args()

    from auditor.cli.audit_cmd import _c1_tables
    from auditor.engine.runner import audit
    from auditor.spark.session import get_spark

    sampler = RssSampler()
    sampler.start()
    out = Path(args.dir)
    reuse = args.reuse and (out / "_ingest.json").exists()
    # the session `txn-audit audit` starts for these tables (its compiler chosen from their manifest);
    # tables generated in this run are audited by the generating session (C2)
    conf = {"spark.driver.memory": args.driver_memory}
    if args.shuffle_partitions:
        conf["spark.sql.shuffle.partitions"] = str(args.shuffle_partitions)
    spark = get_spark(args.master, conf, delta=False, small_input=reuse and _c1_tables(str(out)))
    jvm = " ".join(o for o in spark.sparkContext.getConf().get("spark.driver.extraJavaOptions", "").split()
                   if o.startswith("-XX:") and not o.startswith("-XX:SharedArchiveFile")) or "-"
    gen = 0.0 if reuse else generate(spark, args.batches, args.partitions, out)
    n = json.loads((out / "_ingest.json").read_text())["tables"]["batches"]
    if args.generate_only:
        print(f"generated {n:,} batches in {gen:.1f} s")
        return
    duck = []  # the reference runs before and after ours, so both see the same machine
    if args.duckdb_threads:
        duck.append(duckdb_reference(out, args.duckdb_threads))
    load = os.getloadavg()
    c0 = children_cpu_seconds()
    t0 = time.monotonic()
    res = audit(spark, str(out))
    total = time.monotonic() - t0
    cpu = children_cpu_seconds() - c0
    sampler.stop = True
    py_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(f"batches: {n:,} across {args.partitions} partitions ({args.master}; driver JVM options: {jvm})")
    print(f"generate tables: {gen:.1f} s")
    print(f"  {'rule (its job; two run at a time)':40s} {'wall':>8s}")
    for rule, s in res.rule_seconds.items():
        print(f"  {rule:40s} {s:8.1f} s")
    print(f"audit total: {total:.1f} s  ({n / total:,.0f} batches/s); JVM CPU {cpu:.1f} s")
    from collections import Counter

    print("findings:", dict(Counter((f["rule"], f["severity"]) for f in res.findings)))
    if duck:
        duck.append(duckdb_reference(out, args.duckdb_threads))
        report_reference(duck, res.findings, total, cpu, load)
    if args.spark_reference:
        found, wall, jcpu = spark_reference(spark, out)
        line = f"Spark {spark.version} on the reference's queries (same session, after ours): {wall:.2f} s wall / {jcpu:.2f} JVM CPU-s"
        if duck:
            best = min(duck, key=lambda d: d[1])
            same = all(found[c] == duck[0][0][c] for c in found)
            line += f"; / DuckDB {wall / best[1]:.1f}x; keys {'agree' if same else 'DIFFER'} with DuckDB's"
        print(line)
    print(f"peak RSS: python driver {py_peak} MiB, JVM (driver+executors, local mode) {sampler.peak_jvm} MiB")


if __name__ == "__main__":
    main()
