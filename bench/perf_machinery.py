"""Benchmark: what each piece of the performance machinery (:mod:`auditor.perf`) buys today.

    .venv/bin/python bench/perf_machinery.py [--rounds 3] [--capture hanging-late-write]
                                             [--pieces jvmcache,py4jcache,...] [--workloads scan,audit]

Two workloads, each a whole fresh ``txn-audit`` process (a cold JVM, as a user gets it):

* ``scan``: ``txn-audit scan sample_logs/CAPTURE --format json -q`` with an empty tables home
  (decode and audit);
* ``audit``: ``txn-audit audit TABLES --format json -q`` of that capture's tables, ingested once
  before the first run.

Each is run with every piece on (``on``), with one piece off (``TXN_AUDIT_DISABLE=piece``) for
each piece, and with all of them off (``all``). Runs alternate: every round runs each
configuration once, in an order rotated from round to round, so a change of the machine's
load falls on every configuration alike. Reported per workload and configuration: the medians
of wall seconds and of CPU seconds (the ``txn-audit`` process, its driver JVM and every other
descendant: this process is their subreaper and waits for each), and the median difference
to ``on`` (positive: the piece saves that much). The machine is shared: CPU seconds are the
figure to read; the load average is printed before and after.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scan import _reap, _subreaper  # bench/scan.py: the same accounting of the JVM's CPU

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_logs"
sys.path.insert(0, str(ROOT))
from auditor.perf import DISABLE_ENV, PIECES  # noqa: E402

# the pieces a scan or an audit goes through (freed_memory and dump_split are dump's: bench/dump_vs_kafka.py)
DEFAULT_PIECES = tuple(p for p in PIECES if p not in ("freed_memory", "dump_split"))
CLI = [sys.executable, "-c", "from auditor.cli.main import main; main()"]


def run(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of ``cmd`` and all its descendants."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    wall = time.monotonic() - t0
    _reap()  # its driver JVM, before the next run's CPU is counted
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd[3:])} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def env_for(config: str, tables_home: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != DISABLE_ENV}
    env["TXN_AUDIT_TABLES_HOME"] = tables_home
    if config != "on":
        env[DISABLE_ENV] = config
    return env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--capture", default="hanging-late-write")
    ap.add_argument("--pieces", default=",".join(DEFAULT_PIECES))
    ap.add_argument("--workloads", default="scan,audit")
    ap.add_argument("--no-all", action="store_true", help="leave out the run with every piece off")
    ap.add_argument("--warm", type=int, default=0, metavar="N",
                    help="instead: N rounds of audits in one warm session, the pieces switched per audit")
    ap.add_argument("--tables", help=argparse.SUPPRESS)  # --warm's child: the tables to audit
    a = ap.parse_args()
    if a.tables:
        warm_child(a.tables, a.warm, [p for p in a.pieces.split(",") if p])
        return
    if a.warm:
        warm(a)
        return
    pieces = [p for p in a.pieces.split(",") if p]
    unknown = set(pieces) - set(PIECES)
    if unknown:
        raise SystemExit(f"unknown pieces: {sorted(unknown)} (known: {', '.join(PIECES)})")
    configs = ["on", *pieces, *([] if a.no_all else ["all"])]
    capture = str(SAMPLES / a.capture)
    if not _subreaper():
        print("(no PR_SET_CHILD_SUBREAPER here: the CPU seconds miss the driver JVM's)")
    work = Path(tempfile.mkdtemp(prefix="bench-perf-"))
    try:
        tables = work / "tables"
        cmds = {
            "scan": CLI + ["scan", capture, "--format", "json", "-q"],
            "audit": CLI + ["audit", str(tables), "--format", "json", "-q"],
        }
        workloads = [w for w in a.workloads.split(",") if w]
        if "audit" in workloads:
            run(CLI + ["ingest", capture, "--out", str(tables)], env_for("on", str(work / "home")))
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (2 cores); "
              f"{a.rounds} rounds, capture {a.capture}")
        got: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for r in range(a.rounds):
            order = configs[r % len(configs):] + configs[: r % len(configs)]
            for w in workloads:
                for c in order:
                    home = work / f"home-{r}-{w}-{c}"  # a scan with no tables kept from an earlier one
                    got.setdefault((w, c), []).append(run(cmds[w], env_for(c, str(home))))
                    shutil.rmtree(home, ignore_errors=True)
            print(f"\nround {r + 1} of {a.rounds} done, load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            report(got, workloads, configs, a.capture, r + 1)  # so far: a cut-short run still says something
    finally:
        shutil.rmtree(work, ignore_errors=True)


WARM_PIECES = ("cached_leaf", "call_site")  # read at each audit


def warm(a) -> None:
    """``--warm``: the capture ingested, then audited ``--warm`` rounds in one child process."""
    pieces = [p for p in a.pieces.split(",") if p in WARM_PIECES] or list(WARM_PIECES)
    work = Path(tempfile.mkdtemp(prefix="bench-perf-"))
    try:
        tables = work / "tables"
        run(CLI + ["ingest", str(SAMPLES / a.capture), "--out", str(tables)], env_for("on", str(work / "home")))
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (2 cores); warm session, "
              f"{a.warm} rounds, capture {a.capture}", flush=True)
        out = subprocess.run([sys.executable, __file__, "--tables", str(tables), "--warm", str(a.warm),
                              "--pieces", ",".join(pieces)], cwd=ROOT, env=env_for("on", str(work / "home")))
        if out.returncode:
            raise SystemExit(out.returncode)
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def warm_child(tables: str, rounds: int, pieces: list[str]) -> None:
    """Audits of ``tables`` in this process's one session: per round, one with every piece on and
    one with each piece off (order rotated), each timed in wall seconds and CPU seconds of this
    process and its driver JVM (/proc). The first two audits warm the JVM up and are not counted."""
    from auditor.engine.runner import audit
    from auditor.report.spark.data import ReportData
    from auditor.spark.session import get_spark

    spark = get_spark(small_input=True, delta=False)
    jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())

    def cpu() -> float:
        fields = Path(f"/proc/{jvm_pid}/stat").read_text().rsplit(")", 1)[1].split()
        own = resource.getrusage(resource.RUSAGE_SELF)
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") + own.ru_utime + own.ru_stime

    def one(config: str) -> tuple[float, float]:
        if config == "on":
            os.environ.pop(DISABLE_ENV, None)
        else:
            os.environ[DISABLE_ENV] = config
        c0, t0 = cpu(), time.monotonic()
        audit(spark, tables, report=ReportData())
        return time.monotonic() - t0, cpu() - c0

    one("on"), one("on")
    configs = ["on", *pieces]
    got: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for r in range(rounds):
        for c in configs[r % len(configs):] + configs[: r % len(configs)]:
            got.setdefault(("audit (warm session)", c), []).append(one(c))
    report(got, ["audit (warm session)"], configs, Path(tables).name, rounds)


def report(got: dict, workloads: list[str], configs: list[str], capture: str, rounds: int) -> None:
    """Medians per workload and configuration, and the median per-round saving of each piece."""
    for w in workloads:
        on = got[(w, "on")]
        print(f"{w} ({capture}): medians of {rounds} run(s); saved = median over rounds of (off - on)")
        print(f"  {'configuration':<22} {'wall s':>7} {'CPU s':>7} {'saved wall':>11} {'saved CPU':>10}"
              f"   runs (wall/CPU)")
        for c in configs:
            xs = got[(w, c)]
            wall = statistics.median(x[0] for x in xs)
            cpu = statistics.median(x[1] for x in xs)
            runs = ", ".join(f"{x[0]:.1f}/{x[1]:.1f}" for x in xs)
            if c == "on":
                print(f"  {'every piece on':<22} {wall:7.2f} {cpu:7.2f} {'':>11} {'':>10}   {runs}")
                continue
            dw = statistics.median(x[0] - o[0] for x, o in zip(xs, on))
            dc = statistics.median(x[1] - o[1] for x, o in zip(xs, on))
            print(f"  {c + ' off':<22} {wall:7.2f} {cpu:7.2f} {dw:+11.2f} {dc:+10.2f}   {runs}", flush=True)


if __name__ == "__main__":
    main()
