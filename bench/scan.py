"""Benchmark: `txn-audit scan` on small inputs, where a person waits.

    .venv/bin/python bench/scan.py [--repeat 2] [--cases one,all] [--capture hanging-late-write] [--baseline DIR]

Two cases: one small capture of ``sample_logs/`` (default ``hanging-late-write``) and every
directory of ``sample_logs/`` in one scan. Each run is a fresh process (a cold JVM, as a user
gets it). Two kinds of run, alternated:

* **phases**: a child process runs the scan's steps itself, as ``scan`` does, and prints the time
  and the number of Spark jobs of each: ``inputs`` (discovery and the decode plan, before Spark:
  their size chooses the session's settings), ``session`` (the SparkSession, JVM start-up
  included), ``decode`` and ``write`` (ingestion: one Spark job decodes every table; a small
  input's tables are written by the driver), ``plan`` (the report summary's and the rules' queries
  built, each collected by a worker thread while the next is built: one job each), ``run`` (waiting
  for the last of them), ``report`` (the plot series: one job) and ``render`` (the JSON report).
  ``process`` is the child's wall time from the first step.
* **cli**: the whole ``txn-audit scan DIRS --format json -q`` process, timed from outside; with
  ``--baseline DIR`` (another version checked out there) that version's scan too, alternately.

The figures of each kind are the best of ``--repeat`` runs; the job counts come from Spark's
status tracker (job groups per phase).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_logs"
PHASES = ("inputs", "session", "decode", "write", "plan", "run", "report", "render")


def child(dirs: list[str]) -> dict:
    """One scan, phase by phase, in this (fresh) process."""
    t_start = time.monotonic()
    import io
    import tempfile

    from auditor.ingest.plan import make_plan
    from auditor.ingest.spark_job import ingest, small_plan, start_local_decode
    from auditor.spark.session import embedded_local, get_spark

    plan = make_plan(dirs)  # as `scan` does: the input's size chooses the session's settings
    t_inputs = time.monotonic() - t_start
    jobs: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="bench-scan-") as tmp:
        # as `scan` does: a local input decoded by processes of its own while the JVM starts
        local = embedded_local() and not os.environ.get("BENCH_SPARK_DECODE")
        decoded = start_local_decode(plan, f"{tmp}/tables") if local else None
        spark = get_spark(small_input=small_plan(plan), delta=False)  # as `scan` starts it: Parquet tables only
        sc = spark.sparkContext
        t_session = time.monotonic() - t_start - t_inputs
        from auditor.engine.runner import audit
        from auditor.report.spark.data import ReportData

        sc.setJobGroup("ingest", "ingest")
        res_in = ingest(spark, dirs, f"{tmp}/tables", plan=plan, decoded=decoded, local_decode=local)
        def progress(stage: str, i: int, n: int) -> None:
            if stage == "report data":  # the plots' job
                sc.setJobGroup("report", "report")

        sc.setJobGroup("audit", "audit")
        res = audit(spark, f"{tmp}/tables", report=ReportData(), progress=progress)
        t0 = time.monotonic()
        from auditor.report import from_audit
        from auditor.report.render_json import render_json

        report = from_audit(res, None, None, source=None)
        buf = io.StringIO()
        buf.write(render_json(report))
        t_render = time.monotonic() - t0
    jvm_cpu = _cpu_of(int(sc._jvm.java.lang.ProcessHandle.current().pid()))
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # the local decode's processes
    st = sc.statusTracker()
    for g in ("ingest", "audit", "report"):
        jobs[g] = len(st.getJobIdsForGroup(g))
    ph = res.phase_seconds
    return {
        "inputs": t_inputs, "session": t_session, "decode": res_in.stage_seconds.get("decode", 0.0),
        "write": res_in.stage_seconds.get("write", 0.0), "plan": ph.get("plan", ph.get("rules", 0.0)),
        "run": ph.get("run", 0.0), "report": ph.get("report", 0.0), "render": t_render,
        "process": time.monotonic() - t_start, "jobs": jobs, "findings": len(res.findings),
        "batches": res_in.table_rows.get("batches", 0), "files": len(res_in.files),
        "cpu_jvm": jvm_cpu, "cpu_python": own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime,
    }


def _cpu_of(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux ``PR_SET_CHILD_SUBREAPER``):
    the driver JVM and Spark's Python workers outlive the ``txn-audit`` process that started them
    by a moment, and only a process that waits for them gets their CPU time in its
    ``RUSAGE_CHILDREN``."""
    try:
        import ctypes

        return ctypes.CDLL(None).prctl(36, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _reap() -> None:
    """Wait for every descendant left (see :func:`_subreaper`)."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def run_child(dirs: list[str]) -> dict:
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, __file__, "--child", *dirs], capture_output=True, text=True, cwd=ROOT)
    wall = time.monotonic() - t0
    _reap()  # its driver JVM, before the next run's CPU is counted
    if out.returncode != 0:
        raise SystemExit(f"child failed:\n{out.stderr[-3000:]}")
    data = json.loads(out.stdout.strip().splitlines()[-1])
    data["wall"] = wall
    return data


def checkout_env(code: Path, env: dict) -> dict:
    """``env`` running another checkout's package (``PYTHONPATH``), with that checkout's rule
    catalog linked as ``auditor/rules`` in it: the editable install maps ``auditor.rules`` to
    this checkout's ``rules/`` (setup.py's package_dir), so without the link a baseline ran its
    own engine with *this* version's rules (found 2026-11-26: a rule calling a context property
    the baseline lacked failed there)."""
    link = code / "auditor" / "rules"
    if not link.exists():
        link.symlink_to(Path("..") / "rules")
    return {**env, "PYTHONPATH": str(code)}


def run_cli(dirs: list[str], code: Path | None = None) -> tuple[float, float]:
    """Wall time and CPU seconds (the process, its driver JVM and every other descendant) of a
    whole first ``txn-audit scan`` of ``dirs`` (no tables kept from an earlier scan: a fresh
    ``TXN_AUDIT_TABLES_HOME``); ``code``: another checkout's package."""
    import resource
    import shutil
    import tempfile

    env = dict(os.environ)
    if code is not None:
        env = checkout_env(code, env)
    home = tempfile.mkdtemp(prefix="bench-scan-tables-")
    env["TXN_AUDIT_TABLES_HOME"] = home
    cmd = [sys.executable, "-c", "from auditor.cli.main import main; main()", "scan", *dirs, "--format", "json", "-q"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=code or ROOT, env=env)
        wall = time.monotonic() - t0
        _reap()
    finally:
        shutil.rmtree(home, ignore_errors=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode not in (0, 1):
        raise SystemExit(f"txn-audit scan failed ({out.returncode}):\n{out.stderr[-3000:]}")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return wall, cpu


def _runs(xs: list[tuple[float, float]]) -> str:
    walls = sorted(w for w, _ in xs)
    return (f"{walls[0]:.2f} s best, {walls[len(walls) // 2]:.2f} median of {len(xs)} "
            f"(wall s / CPU s: {', '.join(f'{w:.2f}/{c:.1f}' for w, c in xs)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--cases", default="one,all")
    ap.add_argument("--capture", default="hanging-late-write")
    ap.add_argument("--no-phases", action="store_true", help="time the whole CLI processes only")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="a checkout of another version (git worktree add DIR COMMIT): its `scan` is timed alternately")
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child)))
        return
    reaping = _subreaper()
    cases = {"one": [str(SAMPLES / a.capture)], "all": sorted(str(p) for p in SAMPLES.iterdir() if p.is_dir())}
    print(f"load average before: {os.getloadavg()[0]:.2f} (2 cores: read ratios more than absolute times when busy)")
    if not reaping:
        print("(no PR_SET_CHILD_SUBREAPER here: the CPU seconds miss the driver JVM's)")
    for name in a.cases.split(","):
        dirs = cases[name]
        best: dict | None = None
        cli: list[tuple[float, float]] = []
        base: list[tuple[float, float]] = []
        for _ in range(a.repeat):
            if not a.no_phases:
                d = run_child(dirs)
                if best is None or d["process"] < best["process"]:
                    best = d
            cli.append(run_cli(dirs))
            if a.baseline:
                base.append(run_cli(dirs, a.baseline.resolve()))
        label = a.capture if name == "one" else f"all {len(dirs)} sample_logs dirs"
        if best is not None:
            print(f"\n{label}: {best['files']} files, {best['batches']} batches, {best['findings']} findings")
            print("  " + "  ".join(f"{p:>7}" for p in PHASES) + "  process   CPU s (JVM + Python)")
            print("  " + "  ".join(f"{best[p]:7.2f}" for p in PHASES) + f"  {best['process']:7.2f}   "
                  f"{best['cpu_jvm']:.1f} + {best['cpu_python']:.1f}")
            j = best["jobs"]
            print(f"  Spark jobs: ingest {j['ingest']}, rules {j['audit']}, report {j['report']}; "
                  f"total {sum(j.values())}")
        else:
            print(f"\n{label}:")
        print(f"  txn-audit scan (whole CLI process, first scan of the input): {_runs(cli)}")
        if base:
            print(f"  baseline {a.baseline}: {_runs(base)}")
            mw = sorted(w for w, _ in cli)[len(cli) // 2] / sorted(w for w, _ in base)[len(base) // 2]
            mc = sorted(c for _, c in cli)[len(cli) // 2] / sorted(c for _, c in base)[len(base) // 2]
            print(f"  this version / baseline, medians: wall {mw:.2f}, CPU {mc:.2f}")
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
