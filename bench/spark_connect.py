"""Experiment: the audit under a local Spark Connect session against the classic session.

    .venv/bin/python bench/spark_connect.py [--captures hanging-late-write,all] [--repeat 2] [--deps DIR]

Why: classic PySpark analyses every intermediate DataFrame on the driver (a small audit spends
most of its rules phase in Catalyst analysis); a Spark Connect client builds unresolved plans
and sends them, so it might be cheaper on small inputs. The decision rule (issue "Scan at the
decoder's speed"): adopt Connect only if one capture and all of ``sample_logs/`` both audit at
least 30 % faster, with the same findings.

Each capture's tables are ingested once (the local ingest, no Spark). Then, alternating classic
and Connect, each run a fresh process: the session's start (a local Connect server is started by
PySpark in a JVM of its own) and ``auditor.engine.runner.audit`` of the tables; the findings
(rule, topic, partition, producer id, first offset) must be the same. The Py4J-specific pieces of
``auditor/perf/`` need a classic session, so both kinds run with ``TXN_AUDIT_DISABLE=all``.

The Connect client's packages (grpcio, grpcio-status, googleapis-common-protos, pandas) are not
the project's dependencies: they are installed into ``--deps`` (``pip install --target``) on
first use and put on the child's ``PYTHONPATH`` only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONNECT_PACKAGES = ("grpcio", "grpcio-status", "googleapis-common-protos", "pandas")


def child(kind: str, tables: str) -> dict:
    """One run in this fresh process: session start and audit, timed; the findings' keys."""
    t0 = time.monotonic()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.config("spark.sql.shuffle.partitions", "2")
    spark = (builder.remote("local[2]") if kind == "connect" else builder.master("local[2]")).getOrCreate()
    t_session = time.monotonic() - t0
    from auditor.engine.runner import audit
    from auditor.report.spark.data import ReportData

    t1 = time.monotonic()
    res = audit(spark, tables, report=ReportData())
    t_audit = time.monotonic() - t1
    keys = sorted({(f["rule"], f.get("topic"), f.get("partition"), f.get("producer_id"), f.get("first_offset"))
                   for f in res.findings}, key=repr)
    return {"session": t_session, "audit": t_audit, "findings": [list(k) for k in keys]}


def ensure_deps(deps: Path) -> None:
    if (deps / "grpc").is_dir() and (deps / "pandas").is_dir():
        return
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(deps), *CONNECT_PACKAGES],
                   check=True)
    for p in deps.glob("numpy*"):  # keep the project's numpy (pandas works with it)
        subprocess.run(["rm", "-rf", str(p)], check=True)


def run(kind: str, tables: Path, deps: Path) -> dict:
    env = {**os.environ, "TXN_AUDIT_DISABLE": "all", "PYTHONPATH": f"{deps}:{ROOT}"}
    out = subprocess.run([sys.executable, __file__, "--child", kind, str(tables)], env=env, capture_output=True,
                         text=True, timeout=3600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--captures", default="hanging-late-write,all", help="capture names of sample_logs/, or all")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--deps", type=Path, default=Path(tempfile.gettempdir()) / "txn-audit-connect-deps")
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(*a.child)))
        return
    ensure_deps(a.deps)
    from auditor.ingest.spark_job import ingest

    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    print("| input | kind | session s | audit s (each run) | findings |")
    print("|---|---|---:|---|---:|")
    with tempfile.TemporaryDirectory(prefix="bench-connect-") as tmp:
        for name in a.captures.split(","):
            dirs = sorted(str(p) for p in (ROOT / "sample_logs").iterdir() if p.is_dir()) if name == "all" \
                else [str(ROOT / "sample_logs" / name)]
            tables = Path(tmp) / name
            ingest(None, dirs, str(tables))
            runs: dict[str, list[dict]] = {"classic": [], "connect": []}
            for _ in range(a.repeat):
                for kind in runs:
                    runs[kind].append(run(kind, tables, a.deps))
            same = runs["classic"][0]["findings"] == runs["connect"][0]["findings"]
            for kind, rs in runs.items():
                audits = ", ".join(f"{r['audit']:.1f}" for r in rs)
                print(f"| {name} | {kind} | {min(r['session'] for r in rs):.1f} | {audits} | "
                      f"{len(rs[0]['findings'])}{'' if same else ' (differ)'} |")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
