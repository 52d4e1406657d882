"""Benchmark: a second `txn-audit scan` of unchanged inputs, as an operator runs it during an incident.

    .venv/bin/python bench/rescan.py [--repeat 2] [--inputs sample_logs/hanging-late-write ...]

Each round starts from an empty tables cache (``TXN_AUDIT_TABLES_HOME`` in a temporary directory)
and runs, each as a fresh ``txn-audit scan INPUTS --format json -q`` process timed from outside:

* ``first``: decodes the inputs, keeps the tables and the findings;
* ``same``: the same command again (tables and findings reused: no Spark);
* ``other-rule``: ``--rule stuck-lso`` (a subset of the rules that ran: the kept findings, filtered);
* ``other-filter``: ``--severity critical --topic '*'`` (a report filter: the kept findings);
* ``other-as-of``: ``--as-of`` an instant not used before (the verdicts and ages change: they are
  decided again from what the first audit collected, kept beside the tables: no Spark);
* ``other-timeout``: ``--max-timeout-ms 60000`` (likewise).

The figures are the best of ``--repeat`` rounds, with each case's ratio to ``first``; every case
must report the findings the first scan reported under the same options (checked, not timed).
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
EXE = str(Path(sys.executable).with_name("txn-audit"))
CASES = {
    "first": [],
    "same": [],
    "other-rule": ["--rule", "stuck-lso"],
    "other-filter": ["--severity", "critical", "--topic", "*"],
    "other-as-of": ["--as-of", "2026-11-28T00:00:00Z"],
    "other-timeout": ["--max-timeout-ms", "60000"],
}


def _scan(inputs: list[str], extra: list[str], env: dict) -> tuple[float, dict]:
    t0 = time.monotonic()
    proc = subprocess.run([EXE, "scan", *inputs, "--format", "json", "-q", *extra], capture_output=True, text=True,
                          env=env, cwd=ROOT)
    took = time.monotonic() - t0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"scan {extra} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return took, json.loads(proc.stdout)


def one_round(inputs: list[str]) -> dict[str, float]:
    """Every case once, in order, from an empty cache."""
    with tempfile.TemporaryDirectory(prefix="bench-rescan-") as home:
        env = {**os.environ, "TXN_AUDIT_TABLES_HOME": home}
        times: dict[str, float] = {}
        reports: dict[str, dict] = {}
        for name, extra in CASES.items():
            times[name], reports[name] = _scan(inputs, extra, env)
        first = reports["first"]["findings"]
        assert reports["same"]["findings"] == first, "the reused findings differ"
        assert reports["other-rule"]["findings"] == [f for f in first if f["rule"] == "stuck-lso"]
        assert reports["other-filter"]["findings"] == [f for f in first if f["severity"] == "critical"]
        return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--inputs", nargs="+", default=[str(ROOT / "sample_logs" / "hanging-late-write")])
    args = ap.parse_args()
    best: dict[str, float] = {}
    for _ in range(args.repeat):
        for name, t in one_round(args.inputs).items():
            best[name] = min(best.get(name, t), t)
    print(f"inputs: {' '.join(args.inputs)}; best of {args.repeat} round(s), wall s")
    print(f"{'case':<14} {'s':>7} {'x first':>8}")
    for name, t in best.items():
        print(f"{name:<14} {t:7.2f} {best['first'] / t:8.1f}")


if __name__ == "__main__":
    main()
