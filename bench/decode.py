"""Benchmark of headers-only segment decoding (page cache warm, one core).

Generates two segments (kafka-python's batch builder makes one batch, which is
written over and over with its base offset patched; the base offset is outside
the CRC, so every copy stays valid):

* ``small``: N batches of one record each (default 2,000,000, ~160 MB), all
  of one length (the decoder takes such runs vectorised);
* ``mixed``: N batches of one record each whose values are 0..63 bytes in
  random order (the decoder's scalar walk: its worst case);
* ``large``: batches of ~16 KiB (default ~1 GiB in total);

then times, each in a fresh child process so its peak RSS is its own:

* ``read``: plain sequential read of the file in 1 MiB chunks (the ceiling);
* ``iter_segment``: auditor.formats.batch.iter_segment, with and without CRC;
* ``columnar``: auditor.formats.batch_columnar.iter_header_batches, with and
  without CRC.

and prints MB/s, batches/s, peak RSS and the tracemalloc peak of the Python
heap during a columnar decode of the biggest file. Run ``--help`` for options.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODES = ["read", "iter_segment", "iter_segment+crc", "columnar", "columnar+crc"]


# --- generation ----------------------------------------------------------------
def _one_batch(records: int, value_size: int) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=True, producer_id=4242, producer_epoch=3,
        base_sequence=0, batch_size=1 << 26,
    )
    value = bytes(range(256)) * (value_size // 256 + 1)
    for i in range(records):
        b.append(i, timestamp=1_700_000_000_000 + i, key=b"key-%d" % i, value=value[:value_size], headers=[])
    return bytes(b.build())


CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}  # Kafka's codec ids (kafka-python's too)


def compressed_batch(codec: int, records: int = 100, seed: int = 29) -> bytes:
    """A v2 batch of ``records`` records as a producer writes them (kafka-python's builder, the
    codec's own framing: xerial snappy, an LZ4 frame, ...): keys ``order-<n>``, JSON values of
    ~150-250 bytes with varying fields (a realistic compression ratio, ~3-5x), and one
    ``trace-id`` header per record."""
    import random

    from kafka.record.default_records import DefaultRecordBatchBuilder

    rng = random.Random(seed)
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=4242,
                                  producer_epoch=0, base_sequence=0, batch_size=1 << 26)
    statuses = ["PAID", "SHIPPED", "PENDING", "CANCELLED", "REFUNDED"]
    for i in range(records):
        value = (f'{{"order_id": {rng.randrange(10**9)}, "customer": "c-{rng.randrange(10**6):06d}", '
                 f'"amount": {rng.randrange(100000) / 100:.2f}, "currency": "EUR", "status": "{rng.choice(statuses)}", '
                 f'"items": [' + ", ".join(f'{{"sku": "SKU-{rng.randrange(10**5)}", "qty": {rng.randrange(1, 9)}}}'
                                           for _ in range(rng.randrange(1, 4))) + "]}")
        trace = bytes(rng.randrange(256) for _ in range(16))
        b.append(i, timestamp=1_700_000_000_000 + i * 3, key=b"order-%d" % rng.randrange(10**6), value=value.encode(),
                 headers=[("trace-id", trace)])
    return bytes(b.build())


def write_segment(path: Path, batch: bytes, count: int) -> None:
    """``count`` copies of ``batch`` with base offsets 0, n, 2n, ... (n records each)."""
    import struct

    import numpy as np

    n_records = struct.unpack_from(">i", batch, 57)[0]
    per_chunk = max(1, (32 << 20) // len(batch))
    template = np.frombuffer(batch * per_chunk, dtype=np.uint8).copy()
    offsets = np.ndarray(shape=(per_chunk,), dtype=">i8", buffer=template, strides=(len(batch),))
    step = np.arange(per_chunk, dtype=np.int64) * n_records
    with open(path, "wb") as f:
        done = 0
        while done < count:
            k = min(per_chunk, count - done)
            offsets[:] = step + done * n_records
            f.write(memoryview(template)[: k * len(batch)])
            done += k


def write_mixed_segment(path: Path, templates: list[bytes], count: int, seed: int = 7) -> int:
    """``count`` 1-record batches picked at random from ``templates`` (different
    lengths), offsets 0, 1, 2, ...; returns the file size."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lengths = np.array([len(t) for t in templates], dtype=np.int64)
    total = 0
    with open(path, "wb") as f:
        done = 0
        while done < count:
            k = min(200_000, count - done)
            pick = rng.integers(0, len(templates), size=k)
            chunk = np.frombuffer(b"".join([templates[i] for i in pick.tolist()]), dtype=np.uint8).copy()
            starts = np.concatenate(([0], np.cumsum(lengths[pick])[:-1]))
            offsets = (np.arange(k, dtype=np.int64) + done).astype(">i8").view(np.uint8).reshape(k, 8)
            chunk[starts[:, None] + np.arange(8)] = offsets
            f.write(chunk.tobytes())
            total += len(chunk)
            done += k
    return total


@contextmanager
def work_dir(given: Path | None, prefix: str) -> Iterator[Path]:
    """``given`` (created if missing, kept), or a temporary directory removed afterwards."""
    if given is not None:
        given.mkdir(parents=True, exist_ok=True)
        yield given
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        yield Path(tmp)


def generate(directory: Path, small_batches: int, large_bytes: int) -> dict[str, tuple[Path, int]]:
    out = {}
    small = _one_batch(1, 8)
    p = directory / "small-00000000000000000000.log"
    if not p.exists() or p.stat().st_size != len(small) * small_batches:
        write_segment(p, small, small_batches)
    out["small"] = (p, small_batches)
    # same count of 1-record batches, values of 0..63 bytes in random order: no two
    # neighbours need share a length, which is the worst case for the run guessing
    p = directory / "mixed-00000000000000000000.log"
    marker = directory / "mixed.count"
    if not p.exists() or not marker.exists() or marker.read_text() != str(small_batches):
        write_mixed_segment(p, [_one_batch(1, v) for v in range(64)], small_batches)
        marker.write_text(str(small_batches))
    out["mixed"] = (p, small_batches)
    large = _one_batch(16, 1000)  # 16 records of 1000-byte values: ~16.3 KiB
    n = max(1, large_bytes // len(large))
    p = directory / "large-00000000000000000000.log"
    if not p.exists() or p.stat().st_size != len(large) * n:
        write_segment(p, large, n)
    out["large"] = (p, n)
    return out


# --- one measurement (child process) ------------------------------------------------
def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _current_rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0  # pragma: no cover


def run_one(mode: str, path: str, repeat: int, trace: bool) -> dict:
    from auditor.formats.batch import LogProblem, iter_segment
    from auditor.formats.batch_columnar import iter_header_batches
    import pyarrow.compute as pc

    size = os.path.getsize(path)
    base_rss = _current_rss_mib()

    def once() -> int:
        if mode == "read":
            buf = bytearray(1 << 20)
            with open(path, "rb", buffering=0) as f:
                while f.readinto(buf):
                    pass
            return -1
        crc = mode.endswith("+crc")
        n = 0
        if mode.startswith("iter_segment"):
            with open(path, "rb") as f:
                for e in iter_segment(f, file_size=size, verify_crc=crc):
                    if isinstance(e, LogProblem):
                        raise SystemExit(f"unexpected problem {e}")
                    n += 1
            return n
        for b in iter_header_batches(path, verify_crc=crc):
            if isinstance(b, LogProblem):
                raise SystemExit(f"unexpected problem {b}")
            if crc and not pc.all(b.column("crc_valid")).as_py():
                raise SystemExit("CRC mismatch in a generated batch")
            n += b.num_rows
        return n

    once_warm = None
    best = best_cpu = float("inf")
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        once_warm = once()
        best = min(best, time.perf_counter() - t)
        best_cpu = min(best_cpu, time.process_time() - c)
    result = {"mode": mode, "seconds": best, "cpu_seconds": best_cpu, "bytes": size, "batches": once_warm,
              "base_rss_mib": base_rss, "peak_rss_mib": _rss_mib()}
    if trace:
        import tracemalloc

        tracemalloc.start()
        once()
        result["tracemalloc_peak_mib"] = tracemalloc.get_traced_memory()[1] / (1 << 20)
        tracemalloc.stop()
    return result


def child(mode: str, path: Path, repeat: int, trace: bool = False) -> dict:
    cmd = [sys.executable, __file__, "--child", mode, str(path), "--repeat", str(repeat)]
    if trace:
        cmd.append("--trace")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def warm(path: Path) -> None:
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(1 << 20)
        while f.readinto(buf):
            pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, help="where to write the segments (kept); default: a temp dir, removed")
    ap.add_argument("--quick", action="store_true", help="small files (200,000 batches, ~64 MiB) for a fast check")
    ap.add_argument("--small-batches", type=int, default=None, help="1-record batches in the small file (2,000,000)")
    ap.add_argument("--large-mib", type=int, default=None, help="MiB of ~16 KiB batches in the large file (1024)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure, best is kept (iter_segment: 1)")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of " + ",".join(MODES))
    ap.add_argument("--child", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(run_one(a.child[0], a.child[1], a.repeat, a.trace)))
        return 0

    small_batches = a.small_batches or (200_000 if a.quick else 2_000_000)
    large_bytes = (a.large_mib or (64 if a.quick else 1024)) << 20
    modes = [m for m in a.modes.split(",") if m]
    with work_dir(a.dir, "txn-audit-bench-") as directory:
        t = time.perf_counter()
        files = generate(directory, small_batches, large_bytes)
        print(f"segments in {directory} (generated in {time.perf_counter() - t:.1f} s); cpu cores: {os.cpu_count()}; "
              f"load average before: {os.getloadavg()[0]:.2f}")
        rows = []
        for name, (path, count) in files.items():
            warm(path)
            size = path.stat().st_size
            print(f"  {name}: {count:,} batches of {size // count:,} bytes, {size / 1e6:,.1f} MB")
            for mode in modes:
                r = child(mode, path, 1 if mode.startswith("iter_segment") else a.repeat)
                if r["batches"] not in (-1, count):
                    raise SystemExit(f"{mode} on {name}: {r['batches']} batches, expected {count}")
                rows.append((name, r, count))
        traces = []
        if "columnar+crc" in modes:  # the Python heap while decoding each file (biggest: "large")
            for name, (path, _count) in files.items():
                traces.append((name, child("columnar+crc", path, 1, trace=True)))

        print()
        print(f"{'file':6} {'mode':17} {'seconds':>8} {'MB/s':>9} {'batches/s':>12} {'cpu s':>7} "
              f"{'MB/cpu-s':>9} {'batches/cpu-s':>14} {'peak RSS MiB':>13} {'after imports':>14}")
        for name, r, count in rows:
            s, c = r["seconds"], max(r["cpu_seconds"], 1e-9)
            per_s = "-" if r["mode"] == "read" else f"{count / s:,.0f}"
            per_c = "-" if r["mode"] == "read" else f"{count / c:,.0f}"
            print(f"{name:6} {r['mode']:17} {s:8.3f} {r['bytes'] / s / 1e6:9.1f} {per_s:>12} {c:7.3f} "
                  f"{r['bytes'] / c / 1e6:9.1f} {per_c:>14} {r['peak_rss_mib']:13.1f} {r['base_rss_mib']:14.1f}")
        for name, tr in traces:
            print(f"tracemalloc peak of the Python heap, columnar+crc on {name} "
                  f"({tr['bytes'] / (1 << 20):,.0f} MiB): {tr['tracemalloc_peak_mib']:.1f} MiB")
        print(f"single-threaded decoders: figures are per core; load average after: {os.getloadavg()[0]:.2f} "
              "(above ~1 other processes shared the cores: figures are low)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
