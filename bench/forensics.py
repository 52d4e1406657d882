"""Benchmark: `txn-audit timeline` and `txn-audit coordinator` on sample captures, before and after.

    .venv/bin/python bench/forensics.py [--repeat 5] [--master local[2]] [--scenario hanging-late-write ...]
                                        [--baseline-src DIR]

Ingests each sample capture (``sample_logs/NAME``) once into a temporary tables directory, then
times whole `txn-audit` processes (interpreter start, imports, JVM start when there is one: what an
operator waits for), the median of ``--repeat`` runs each:

* ``timeline`` before: the previous version in ``--baseline-src`` when given (Spark, its only path),
  else ``--engine spark``;
* ``timeline`` after: the default ``--engine auto``, which takes the pyarrow path on these tables;
* ``coordinator``: it already read its three small tables with pyarrow; "before" is the version in
  ``--baseline-src`` (a checkout of the previous commit, e.g. ``git archive HEAD | tar -x -C DIR``)
  when given, else the same command as "after".

Both timeline engines' JSONL output is compared on each case (they must be identical).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TXN_AUDIT = ROOT / ".venv" / "bin" / "txn-audit"
PYTHON = ROOT / ".venv" / "bin" / "python"
# run the CLI from the tree in BASELINE_SRC: the editable install's import hook would find this tree first
BOOT = ("import os, sys; sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in type(f).__module__]; "
        "sys.path.insert(0, os.environ['BASELINE_SRC']); from auditor.cli.main import main; sys.argv[0] = 'txn-audit'; main()")

# scenario -> (topic, partition, transactional id)
CASES = {
    "hanging-late-write": ("transfers", 0, "transfers-txn"),
    "clean": ("orders", 0, "orders-txn-a"),
    "cluster-rf3": ("orders", 1, "rf3-txn-java"),
}


def _run(cmd: list[str], env: dict | None = None) -> tuple[float, str]:
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stderr[-2000:]}")
    return dt, res.stdout


def _median(cmd: list[str], repeat: int, env: dict | None = None) -> tuple[float, str]:
    times, out = [], ""
    for _ in range(repeat):
        dt, out = _run(cmd, env)
        times.append(dt)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--scenario", action="append", choices=sorted(CASES), help="default: all of them")
    ap.add_argument("--baseline-src", type=Path, default=None,
                    help="source tree of the previous version (its auditor/ package) for coordinator's 'before'")
    args = ap.parse_args()
    scenarios = args.scenario or list(CASES)
    base_env = None
    if args.baseline_src is not None:
        base_env = dict(os.environ, BASELINE_SRC=str(args.baseline_src.resolve()))
        probe = BOOT.replace("from auditor.cli.main import main; sys.argv[0] = 'txn-audit'; main()",
                             "import auditor; print(auditor.__file__)")
        where = subprocess.run([str(PYTHON), "-c", probe], env=base_env, capture_output=True, text=True).stdout.strip()
        if not where.startswith(str(args.baseline_src.resolve())):
            raise SystemExit(f"--baseline-src: auditor is imported from {where}, not from the baseline tree")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-forensics-") as tmp:
        for name in scenarios:
            topic, part, tid = CASES[name]
            tables = Path(tmp) / name
            _run([str(TXN_AUDIT), "ingest", str(ROOT / "sample_logs" / name), "--out", str(tables),
                  "--master", args.master])
            tl = [str(TXN_AUDIT), "timeline", str(tables), "--topic", topic, "--partition", str(part), "--format", "jsonl"]
            spark = tl + ["--engine", "spark", "--master", args.master]
            if base_env is None:
                before, out_spark = _median(spark, args.repeat)
            else:  # the previous version's timeline (Spark, its only path); one run of this one's Spark engine
                before, _ = _median([str(PYTHON), "-c", BOOT, *tl[1:], "--master", args.master], args.repeat, base_env)
                _, out_spark = _run(spark)
            after, out_auto = _median(tl, args.repeat)
            if out_spark != out_auto:
                raise SystemExit(f"{name}: the engines disagree")
            rows.append((name, f"timeline {topic}-{part}", before, after, out_auto.count("\n")))
            co = ["coordinator", str(tables), tid, "--format", "jsonl"]
            after_c, out_c = _median([str(TXN_AUDIT), *co], args.repeat)
            before_c = after_c
            if base_env is not None:
                before_c, _ = _median([str(PYTHON), "-c", BOOT, *co], args.repeat,
                                      base_env)
            rows.append((name, f"coordinator {tid}", before_c, after_c, out_c.count("\n")))
    before_is = "the --baseline-src version" if base_env is not None else "--engine spark"
    print(f"median of {args.repeat} runs, whole process wall time; timeline before = {before_is} "
          f"({args.master}), after = default (auto: pyarrow)")
    print(f"{'scenario':<20} {'command':<30} {'before s':>9} {'after s':>8} {'speed-up':>8} {'lines':>6}")
    for name, what, b, a, n in rows:
        print(f"{name:<20} {what:<30} {b:>9.2f} {a:>8.2f} {b / a:>7.1f}x {n:>6}")


if __name__ == "__main__":
    main()
