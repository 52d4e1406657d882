"""Benchmark: the scheduled batch job, three runs, each a fresh `txn-audit batch` process.

    .venv/bin/python bench/batch.py [--partitions 50] [--segments 6] [--batches 600] [--master local[2]]
                                    [--baseline DIR] [--repeat N]

Generates one broker log dir (topic ``events``, P partitions, S segments of N batches each: per
partition a transactional producer committing every 4 batches and an idempotent one, 8 records of
200 bytes per batch; partition 0 ends with an open transaction), with only the first S-2 segments
of each partition in place. Then:

1. ``txn-audit batch`` on it (empty warehouse: every table built);
2. the same again (nothing changed);
3. the last two segments of every partition appended (new files; the previously active segment is
   unchanged), and the job again.

Prints, per run: wall time of the process (JVM start included), its CPU seconds (the process, its
driver JVM and the JVM's Python workers: on a shared machine the figure to compare), the load
average, the job's own seconds and stage times (start: the ledger read and the run's first commit,
where a fresh JVM pays Delta's start-up), files decoded, rows written. Segments come from
kafka-python's record-batch builder and the hand-assembled markers of tests/builders.py
(independent of the decoders).

``--baseline DIR``: another checkout (``git worktree add DIR COMMIT``; its compiled extension built
with ``setup.py build_ext --inplace``) runs the same three runs on a warehouse of its own, each of
its runs right after the same run of this checkout, so both see the same load; ``--repeat N``
does the whole sequence N times.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

T0 = 1_700_000_000_000


def _partition_segments(p: int, segments: int, batches: int) -> list[tuple[int, bytes]]:
    """(base offset, bytes) of each segment of partition ``p``."""
    from builders import kp_batch, marker

    value = bytes(range(200))
    txn_pid, idem_pid = 10_000 + p, 20_000 + p
    out: list[tuple[int, bytes]] = []
    offset = txn_seq = idem_seq = 0
    k = 0  # batch counter over the partition
    for s in range(segments):
        base = offset
        buf = bytearray()
        for _ in range(batches):
            ts = T0 + k * 1000
            if k % 2 == 0:
                in_txn = (k // 2) % 5  # 4 data batches then a marker
                if in_txn == 4:
                    buf += marker(offset, txn_pid, 0, commit=True, timestamp=ts)
                    offset += 1
                else:
                    buf += kp_batch([(i, ts, b"k%d" % i, value, []) for i in range(8)], producer_id=txn_pid,
                                    producer_epoch=0, base_sequence=txn_seq, transactional=True, base_offset=offset)
                    txn_seq += 8
                    offset += 8
            else:
                buf += kp_batch([(i, ts, b"k%d" % i, value, []) for i in range(8)], producer_id=idem_pid,
                                producer_epoch=0, base_sequence=idem_seq, base_offset=offset)
                idem_seq += 8
                offset += 8
            k += 1
        out.append((base, bytes(buf)))
    if p == 0:  # one transaction left open at the end of the log
        base, data = out[-1]
        ts = T0 + k * 1000
        data += kp_batch([(i, ts, b"k%d" % i, value, []) for i in range(8)], producer_id=txn_pid, producer_epoch=0,
                         base_sequence=txn_seq, transactional=True, base_offset=offset)
        out[-1] = (base, data)
    return out


def generate(root: Path, partitions: int, segments: int, batches: int) -> tuple[Path, list[tuple[Path, bytes]]]:
    """Write the log dir with all but the last two segments; return the held-back ones."""
    log = root / "broker-1"
    log.mkdir(parents=True)
    (log / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=bench-batch\n")
    held: list[tuple[Path, bytes]] = []
    for p in range(partitions):
        d = log / f"events-{p}"
        d.mkdir()
        for i, (base, data) in enumerate(_partition_segments(p, segments, batches)):
            path = d / f"{base:020d}.log"
            if i < segments - 2:
                path.write_bytes(data)
            else:
                held.append((path, data))
    return log, held


def run(log: Path, wh: Path, master: str, code: Path | None = None) -> tuple[float, float, dict]:
    """Wall seconds, CPU seconds (with every descendant: see ``scan._subreaper``) and the summary of
    one ``txn-audit batch`` process; ``code``: another checkout's package runs instead."""
    import resource

    from scan import _reap, checkout_env

    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    if code is not None:
        env = checkout_env(code, env)
        env.setdefault("TXN_AUDIT_DELTA_JARS", str(ROOT / "build" / "delta" / "jars"))
    cmd = [sys.executable, "-c", "from auditor.cli.main import main; main()", "batch", "--input", str(log),
           "--warehouse", str(wh), "--master", master, "-q"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=code or ROOT)
    wall = time.monotonic() - t0
    _reap()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"txn-audit batch failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return wall, cpu, json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=50)
    ap.add_argument("--segments", type=int, default=6)
    ap.add_argument("--batches", type=int, default=600, help="batches per segment")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one, removed)")
    ap.add_argument("--baseline", type=Path, default=None, help="another checkout, run alternately (see above)")
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    from scan import _subreaper

    if not _subreaper():
        print("(no PR_SET_CHILD_SUBREAPER here: the CPU seconds miss the driver JVM's)")
    work = Path(a.dir) if a.dir else Path(tempfile.mkdtemp(prefix="bench-batch-"))
    if work.exists():
        shutil.rmtree(work)
    try:
        t = time.monotonic()
        log, held = generate(work / "logs", a.partitions, a.segments, a.batches)
        size = sum(p.stat().st_size for p in log.rglob("*.log"))
        print(f"generated {a.partitions} partitions x {a.segments - 2} segments, {size / 1e6:.1f} MB "
              f"in {time.monotonic() - t:.1f} s; held back {len(held)} segments "
              f"({sum(len(d) for _, d in held) / 1e6:.1f} MB)", flush=True)
        codes = [("this", None)] + ([("baseline", a.baseline.resolve())] if a.baseline else [])
        rows = []
        for rep in range(a.repeat):
            for path, _ in held:  # every repetition starts from the first S-2 segments
                path.unlink(missing_ok=True)
            for label in ("1 first run", "2 same input", "3 after appending"):
                if label.startswith("3"):
                    for path, data in held:
                        path.write_bytes(data)
                for name, code in codes:
                    load = os.getloadavg()[0]
                    wall, cpu, s = run(log, work / f"warehouse-{name}-{rep}", a.master, code)
                    rows.append((name, label, wall, cpu, load, s))
                    print(f"{name} run {label}: wall {wall:.1f} s, CPU {cpu:.1f} s, load {load:.2f}, job "
                          f"{s['seconds']:.1f} s, files decoded {s['files_decoded']}/{s['files_seen']}, rows written "
                          f"{s['rows_written']} (batches {s['table_rows_written'].get('batches', 0)}), findings open "
                          f"{s['findings']['open']}, stages {s['stage_seconds']}", flush=True)
        print()
        print("| code | run | wall s | CPU s | load | job s | files decoded | rows written | of which batches | start s "
              "| fingerprint s | decode s | audit s | merge s | rules run |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for name, label, wall, cpu, load, s in rows:
            st = s["stage_seconds"]
            start = st.get("start", 0) + st.get("begin", 0)
            print(f"| {name} | {label} | {wall:.1f} | {cpu:.1f} | {load:.2f} | {s['seconds']:.1f} | "
                  f"{s['files_decoded']}/{s['files_seen']} | {s['rows_written']} | "
                  f"{s['table_rows_written'].get('batches', 0)} | {start:.1f} | "
                  f"{st.get('plan', 0) + st.get('fingerprint', 0):.1f} | {st.get('decode', 0) + st.get('files', 0):.1f} | "
                  f"{st.get('audit', 0):.1f} | {st.get('merge', 0):.1f} | {'yes' if s.get('audited') else 'no (reused)'} |")
    finally:
        if not a.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
