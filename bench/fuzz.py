"""Longer fuzzing run: mutated real Kafka files through every table decoder.

    .venv/bin/python bench/fuzz.py [--seconds 60] [--per-target 0] [--memory-mib 1024] [--save DIR]

Seeds are the files of ``sample_logs/`` and, when it is there, the external corpus ``../shared/real_logs/``
(``$TXN_AUDIT_REAL_LOGS``, as for the tests) of
every kind the planner decodes, at most 64 KiB each; a *target* is one kind (a data segment, a
``__transaction_state`` segment, a producer snapshot, a checkpoint, ...), and ``dump-native:*``
the segments again through ``dump``'s compiled path (auditor/dump/_dumpv2.c), whose output and
problems must equal the per-object path's. Each input is a seed
with 1-3 mutations (a byte replaced, a cut, a cut plus zeros, a 4-byte field set to a huge or
negative length, bytes appended), written to a scratch directory under the seed's partition
directory name and decoded by what a Spark executor runs: ``envelope.decode_task_all`` (every
table that accepts the file; the streaming or the columnar segment path at random); for half the
inputs also as the local ingest decodes it (through ``local_decode.PartWriter``), whose Parquet
parts and counts must equal the envelope's payloads and counts.

A clean outcome is rows and problem rows. Anything else is a failure: an ``internal-error``
problem (an exception other than the decoders' own ``DecodeError``, caught by the task), an
exception escaping the task, an input running longer than ``--timeout`` seconds, or a
``MemoryError`` under the address-space limit the run sets (``--memory-mib``). Failing inputs are
kept in ``--save`` (default ``build/fuzz-failures``) to become regression inputs in ``tests/``.

Prints per target: inputs, inputs per second, problem rows seen (how often the mutation was
caught), failures; and the peak RSS of the process.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import signal
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# Arrow on the system allocator, set before pyarrow is first imported: jemalloc reserves address space in
# big steps, which the run's address-space limit would turn into MemoryErrors unrelated to the input
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
LENGTHS = (2**31 - 1, -1, -(2**31), 2**24, 70_000_000)


class Hang(Exception):
    pass


def seeds(max_bytes: int = 64 << 10) -> dict[str, list[tuple[str, bytes]]]:
    """target -> [(path relative to its log dir, bytes)]."""
    from auditor.ingest.plan import make_plan

    roots = [ROOT / "sample_logs"]
    # the external corpus when it is there (optional; the same setting as tests/conftest.py)
    real = os.environ.get("TXN_AUDIT_REAL_LOGS")
    shared = Path(real) if real else Path(os.environ.get("TXN_AUDIT_SHARED", ROOT.parent / "shared")) / "real_logs"
    if shared.is_dir():
        roots.append(shared)
    out: dict[str, list[tuple[str, bytes]]] = {}
    seen: set[bytes] = set()
    for root in roots:
        for t in make_plan([str(root)]).tasks:
            if not 0 < t["size"] <= max_bytes:
                continue
            kind = t["kind"]
            target = kind if kind != "segment" else f"segment:{t['topic'] if (t['topic'] or '').startswith('__') else 'data'}"
            data = Path(t["path"]).read_bytes()
            if data in seen:
                continue
            seen.add(data)
            p = Path(t["path"])
            rel = f"{p.parent.name}/{p.name}" if t["topic"] is not None else p.name
            out.setdefault(target, []).append((rel, data))
    return out


def mutate(buf: bytearray, rng: random.Random) -> bytearray:
    op = rng.choice(("flip", "cut", "zeros", "length", "append"))
    if op == "flip" and buf:
        buf[rng.randrange(len(buf))] = rng.randrange(256)
    elif op == "cut":
        del buf[rng.randint(0, len(buf)):]
    elif op == "zeros":
        at = rng.randint(0, len(buf))
        buf[at:] = bytes(rng.randint(0, 300))
    elif op == "length" and len(buf) >= 4:
        struct.pack_into(">i", buf, rng.randint(0, len(buf) - 4), rng.choice(LENGTHS))
    else:
        buf += rng.randbytes(rng.randint(1, 64))
    return buf


def run_one(path: Path, rng: random.Random, timeout: float) -> tuple[int, str | None]:
    """(problem rows, failure or None) for one input file."""
    from auditor.ingest import envelope
    from auditor.ingest.plan import make_plan

    def alarm(*_):
        raise Hang(f"no result within {timeout} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        problems = 0
        for task in make_plan([str(path)]).tasks:
            task["active"] = rng.random() < 0.5
            batches = list(envelope.decode_task_all(task))
            for rb in batches:
                kinds = rb.column(rb.schema.get_field_index("problem_kind")).to_pylist()
                msgs = rb.column(rb.schema.get_field_index("problem_message")).to_pylist()
                for k, m in zip(kinds, msgs):
                    if k == "internal-error":
                        return problems, f"internal-error: {m}"
                    problems += k is not None
            if rng.random() < 0.5:  # the local ingest's path: the same decode through its Parquet sink
                differs = local_differs(task, batches, path.parent / "parts")
                if differs:
                    return problems, differs
        return problems, None
    except Hang as exc:
        return 0, f"hang: {exc}"
    except MemoryError:
        return 0, "MemoryError"
    except Exception as exc:  # noqa: BLE001 - escaping the task is the failure being hunted
        return 0, f"{type(exc).__name__}: {exc}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def local_differs(task: dict, batches: list, scratch: Path) -> str | None:
    """What the local ingest writes for ``task`` (``envelope.decode_task_all`` through a
    ``local_decode.PartWriter`` sink) against what Spark's path writes (the envelope's payloads,
    ``batches``): the rows of every table and the counts and problems. None when the same."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    from auditor.ingest import envelope
    from auditor.ingest.local_decode import PartWriter
    from auditor.ingest.tables import TABLES

    shutil.rmtree(scratch, ignore_errors=True)
    ref = pa.Table.from_batches(batches, schema=envelope.ENVELOPE_SCHEMA)
    writer = PartWriter(str(scratch), "part-00000.parquet")
    try:
        got = pa.Table.from_batches(list(envelope.decode_task_all(task, sink=writer)), schema=envelope.ENVELOPE_SCHEMA)
    finally:
        writer.close()
    summary = envelope.SUMMARY_COLUMNS
    if got.select(summary).to_pylist() != ref.select(summary).to_pylist():
        return "local ingest: counts or problems differ from the envelope's"
    for name, t in envelope.tables_of(ref, list(TABLES)).items():
        d = scratch / name
        written = ds.dataset(str(d), format="parquet").to_table().to_pylist() if d.is_dir() else []
        if written != t.to_pylist():
            return f"local ingest: table {name} differs from the envelope's payloads"
    return None


def run_native(path: Path, timeout: float) -> tuple[int, str | None]:
    """(problem rows, failure or None) for one segment through ``dump``'s compiled path
    (auditor/dump/_dumpv2.c, then the Python path from where it stopped): a failure is output or
    problems that differ from the per-object path's, an exception, a hang; a crash of the
    extension ends the run (the input is kept first, see main)."""
    import json

    from auditor.dump import _run as dump_run
    from auditor.ingest.plan import make_plan

    def alarm(*_):
        raise Hang(f"no result within {timeout} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        problems = 0
        for task in make_plan([str(path)], split_bytes=1 << 62).tasks:
            if task["kind"] != "segment":
                continue
            for records in (False, True):  # --records: the extension's record walk too
                lines, want = [], []
                for o in dump_run._objects(task, records):
                    if o["type"] == "problem":
                        want.append(o)
                    else:
                        lines.append((json.dumps(o, default=dump_run._json_default) + "\n").encode())
                got = []
                with open(path.with_suffix(".out"), "wb") as out:
                    for o in dump_run._fast_items(task, records, out):
                        if o["type"] == "problem":
                            got.append(o)
                        else:
                            out.write((json.dumps(o, default=dump_run._json_default) + "\n").encode())
                if got != want:
                    return problems, f"problems differ (records={records}): {got[:2]} != {want[:2]}"
                if path.with_suffix(".out").read_bytes() != b"".join(lines):
                    return problems, f"lines differ (records={records})"
                problems += len(got)
        return problems, None
    except Hang as exc:
        return 0, f"hang: {exc}"
    except Exception as exc:  # noqa: BLE001
        return 0, f"{type(exc).__name__}: {exc}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0, help="time per target (ignored with --per-target)")
    ap.add_argument("--per-target", type=int, default=0, help="inputs per target instead of a time budget")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds one input may take")
    ap.add_argument("--memory-mib", type=int, default=1024, help="address-space limit of this process")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--save", type=Path, default=ROOT / "build" / "fuzz-failures")
    a = ap.parse_args()

    corpus = seeds()
    from auditor.dump import _native as dump_native

    if dump_native.available():  # dump's compiled path on the same segments: equal to the Python path
        for target in [t for t in corpus if t.startswith("segment:")]:
            corpus["dump-native:" + target.split(":", 1)[1]] = corpus[target]
    # the local ingest's check reads and writes Parquet: imported before the address space is limited
    import pyarrow.dataset  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    limit = a.memory_mib << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    rng = random.Random(a.seed)
    print(f"{sum(len(v) for v in corpus.values())} seed files, {len(corpus)} targets; per input: "
          f"{a.timeout:g} s, address space {a.memory_mib} MiB")
    print(f"{'target':34} {'seeds':>5} {'inputs':>8} {'inputs/s':>9} {'problem rows':>12} {'failures':>8}")
    total = failures = 0
    with tempfile.TemporaryDirectory(prefix="txn-fuzz-") as tmp:
        for target in sorted(corpus):
            files = corpus[target]
            n = problems = bad = 0
            t0 = time.monotonic()
            while (n < a.per_target) if a.per_target else (time.monotonic() - t0 < a.seconds):
                rel, data = rng.choice(files)
                buf = bytearray(data)
                for _ in range(rng.randint(1, 3)):
                    buf = mutate(buf, rng)
                path = Path(tmp) / "broker-1" / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(buf)
                if target.startswith("dump-native:"):
                    keep = a.save / f"{target.replace(':', '_')}-{n}-{path.name}"
                    a.save.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(path, keep)  # kept before the run: a crash of the extension ends the process
                    p, failure = run_native(path, a.timeout)
                    if not failure:
                        keep.unlink()
                else:
                    p, failure = run_one(path, rng, a.timeout)
                n += 1
                problems += p
                if failure:
                    bad += 1
                    a.save.mkdir(parents=True, exist_ok=True)
                    keep = a.save / f"{target.replace(':', '_')}-{n}-{path.name}"
                    shutil.copyfile(path, keep)
                    print(f"  FAILURE {target}: {failure[:200]} (input kept as {keep})")
                path.unlink()
            secs = time.monotonic() - t0
            print(f"{target:34} {len(files):5d} {n:8d} {n / secs:9.0f} {problems:12d} {bad:8d}")
            total += n
            failures += bad
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"total: {total} inputs, {failures} failures (exceptions, hangs, memory), peak RSS {peak:.0f} MiB")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
