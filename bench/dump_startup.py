"""Start-up of ``txn-audit dump`` on one small segment, with and without click.

Why: ``txn-audit dump`` is run as one process per file and compared with Kafka's
``DumpLogSegments``, so its start-up was made short, and once ``cli/main.py`` parsed a plain
``dump [--records] FILE...`` by hand to skip click's import. This measures what each way costs
as whole processes: ``txn-audit dump FILE`` (the entry point as installed) against
``txn-audit dump --format jsonl FILE`` (the same output, always parsed by click), run
alternately ``--repeat`` times each, output to /dev/null. Per run: CPU seconds (user + sys of the
child, from ``wait4``) and wall seconds; prints the medians, the load average before and after.

    .venv/bin/python bench/dump_startup.py [--repeat 30] [--file SEGMENT]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "sample_logs" / "clean" / "broker-1" / "orders-0" / "00000000000000000000.log"


def _one(argv: list[str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one process running ``argv``, stdout to /dev/null."""
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: output thrown away, errors kept
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, 1)
        os.execv(argv[0], argv)
    _, status, ru = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv} exited with {os.waitstatus_to_exitcode(status)}")
    return ru.ru_utime + ru.ru_stime, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--file", type=Path, default=DEFAULT)
    ap.add_argument("--records", action="store_true", help="add --records to both")
    a = ap.parse_args()
    exe = str(Path(sys.executable).parent / "txn-audit")
    extra = ["--records"] if a.records else []
    cases = {
        "plain argv (no option but --records)": [exe, "dump", *extra, str(a.file)],
        "through click (--format jsonl)": [exe, "dump", "--format", "jsonl", *extra, str(a.file)],
    }
    print(f"file: {a.file} ({a.file.stat().st_size} bytes); load before: {os.getloadavg()}")
    for argv in cases.values():  # warm the page cache and the .pyc files
        _one(argv)
    got: dict[str, list[tuple[float, float]]] = {k: [] for k in cases}
    for _ in range(a.repeat):
        for name, argv in cases.items():
            got[name].append(_one(argv))
    for name, runs in got.items():
        cpu = statistics.median(r[0] for r in runs)
        wall = statistics.median(r[1] for r in runs)
        print(f"{name:40s} CPU {cpu * 1000:6.1f} ms  wall {wall * 1000:6.1f} ms  (median of {len(runs)})")
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
