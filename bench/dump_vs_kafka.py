"""``txn-audit dump`` against Kafka's own ``DumpLogSegments`` (4.3.1 jars), side by side.

Whole processes, start-up included, run alternately (Kafka, ours, Kafka, ours,
...) on the same page-cache-warm file, ``--repeat`` times each; stdout goes to
a new file in the bench directory (the previous run's output deleted and
synced to disk first, untimed, so that no run pays for the write-back of the
one before it) -- both tools pay for writing their output. For each run: wall time, CPU time (user + sys of the
process and its threads, from ``wait4``) and peak RSS. Prints the medians and
the ratios Kafka / ours (above 1: ours is faster).

Cases (segments from ``bench/decode.py``'s generators, named as Kafka's tool
wants them, ``<topic>-0/00000000000000000000.log``):

* ``small-100k``: 100,000 one-record batches; headers (``--files``);
* ``small-2M``: 2,000,000 one-record batches; headers (skipped with ``--quick``);
* ``mixed-2M``: 2,000,000 one-record batches of random lengths (``--with-mixed``);
* ``large``: ~16 KiB batches, ``--large-mib`` MiB (1024; 64 with ``--quick``); headers;
* ``records-100k``: the 100k file with ``--records`` against ``--deep-iteration``;
* ``records-lz4``, ``records-zstd``, ``records-snappy``, ``records-gzip``:
  ``--records-mib`` MiB (1024; 64 with ``--quick``) of batches of 100 records each as a producer
  compresses them (``decode.compressed_batch``: JSON values of ~150-250 bytes, one header each),
  ``--records`` against ``--deep-iteration``;
* ``many-headers``, ``many-records``, ``many-data-records``: every ``.log`` of ``sample_logs/`` and
  ``../shared/real_logs/`` (``$TXN_AUDIT_SHARED``) in one process, headers and records. Only
  files named as Kafka names segments (``<20-digit offset>.log``): ``DumpLogSegments`` parses the
  offset out of the name, and a tiered-storage copy named ``<offset>-<uuid>.log`` ends its whole
  run with a ``NumberFormatException``. Kafka gets the list through a JVM argument file (one
  ``--files`` value of >128 KiB is more than Linux passes as one argument).

What each side prints with records: Kafka's ``--deep-iteration`` prints per record its offset,
timestamp, key and value sizes, sequence and header keys (``| offset: ... keySize: ...
headerKeys: [...]``), ours the same fields as JSON; neither prints payloads (Kafka's
``--print-data-log``, which ours has no equivalent of, is not asked for). For the internal
topics ours also decodes the records (``__consumer_offsets``, ``__transaction_state``,
``__cluster_metadata``: what Kafka's ``--offsets-decoder`` / ``--transaction-log-decoder`` /
``--cluster-metadata-decoder`` print), which ``--deep-iteration`` alone does not: the
``many-records`` case charges ours for that; ``many-data-records`` is the same files without the
internal topics.

After each of ours, ``dd`` writes as many bytes as ours wrote (from ``/dev/zero``, 1 MiB blocks,
same delete-and-sync protocol), printed beside the case: what the kernel charged at that moment
for putting that much output into the page cache. It is a witness, not a floor: on this VM it
swings by 10x from one minute to the next (0.3 to 3.8 s for 1.28 GB), so a slow run can be told
from a slow tool.

Ours is the newest segment of its partition, so it is read with plain reads,
as a live broker's active segment is; ``--inactive`` adds a second segment
after it, so the dumped one is memory-mapped. Kafka's jars come from
``build/kafka/4.3.1/libs`` (``scripts/kafka/fetch.sh 4.3.1`` fetches them).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import decode  # noqa: E402  (the segment generators)

KAFKA_VERSION = "4.3.1"
# topics whose records `dump --records` decodes (auditor/dump/_run.py: _INTERNAL)
INTERNAL_TOPICS = ("__transaction_state", "__consumer_offsets", "__cluster_metadata", "__share_group_state",
                   "__remote_log_metadata")
MAIN = "org.apache.kafka.tools.DumpLogSegments"


def kafka_libs() -> Path:
    libs = ROOT / "build" / "kafka" / KAFKA_VERSION / "libs"
    if not libs.is_dir():
        out = subprocess.run(["bash", str(ROOT / "scripts" / "kafka" / "fetch.sh"), KAFKA_VERSION],
                             check=True, capture_output=True, text=True)
        libs = Path(out.stdout.strip().splitlines()[-1])
    return libs


def kafka_cmd(java: list[str], flags: list[str], files: list[Path], directory: Path) -> list[str]:
    """Kafka's command: its options and file list in a JVM argument file (``java @file``)."""
    argfile = directory / f"kafka-args-{len(files)}-{'-'.join(f.strip('-') for f in flags) or 'headers'}"
    argfile.write_text("\n".join([*java[1:], *flags, "--files", ",".join(str(f) for f in files)]) + "\n")
    return [java[0], f"@{argfile}"]


def many_files() -> list[Path]:
    """Every ``.log`` of sample_logs/ and the shared real captures that Kafka's tool takes."""
    import re

    roots = [ROOT / "sample_logs", Path(os.environ.get("TXN_AUDIT_SHARED", ROOT.parent / "shared")) / "real_logs"]
    return sorted(p for r in roots if r.is_dir() for p in r.rglob("*.log")
                  if re.fullmatch(r"\d{20}\.log", p.name) and p.is_file())


def run(cmd: list[str], out_path: Path, ok: tuple[int, ...] = (0,)) -> dict:
    """One whole process: wall, CPU (user + sys) and peak RSS from wait4. ``ok``: the exit
    statuses that are not a failure (``dump`` exits 1 when it reports a damaged file)."""
    # peak RSS through GNU time (a child forked from this Python process would count its RSS too)
    rss_file = out_path.with_suffix(".rss")
    cmd = ["/usr/bin/time", "-f", "%M", "-o", str(rss_file), *cmd]
    # each run writes a new file, with the previous run's output gone and on disk first: the
    # kernel's write-back (and ext4's discard) of one run must not run during the next
    out_path.unlink(missing_ok=True)
    os.sync()
    with open(out_path, "wb") as out:
        t = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    p.stderr.close()  # type: ignore[union-attr]
    code = os.waitstatus_to_exitcode(status)
    if code not in ok:
        raise SystemExit(f"{cmd[:4]}... exited {code}: {err[-1500:]}")
    return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "sys": ru.ru_stime, "rss_mib": int(rss_file.read_text().split()[-1]) / 1024,
            "out_bytes": out_path.stat().st_size}


def _cpus(runs: list[dict]) -> str:
    return " ".join(f"{r['cpu']:.2f}" for r in runs)


def _walls(runs: list[dict]) -> str:
    return " ".join(f"{r['wall']:.2f}" for r in runs)


def place(directory: Path, name: str, src: Path, inactive: bool) -> Path:
    d = directory / f"{name}-0"
    d.mkdir(exist_ok=True)
    seg = d / "00000000000000000000.log"
    if seg.exists() and not os.path.samefile(seg, src) and seg.stat().st_size != src.stat().st_size:
        seg.unlink()  # a file of an earlier run with other sizes (--quick, --records-mib) in the same --dir
    if not seg.exists():
        os.link(src, seg) if src.stat().st_dev == directory.stat().st_dev else shutil.copyfile(src, seg)
    nxt = d / "00000000099999999999.log"
    if inactive and not nxt.exists():
        nxt.write_bytes(b"")
    elif not inactive and nxt.exists():
        nxt.unlink()
    return seg


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, help="where to keep the segments (default: a temp dir, removed)")
    ap.add_argument("--quick", action="store_true", help="no 2M case, a 64 MiB large file")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each tool per case (alternating)")
    ap.add_argument("--large-mib", type=int, default=None)
    ap.add_argument("--with-mixed", action="store_true", help="also 2M one-record batches of random lengths")
    ap.add_argument("--inactive", action="store_true", help="dump a non-newest (memory-mapped) segment")
    ap.add_argument("--cases", default=None, help="comma-separated subset of the case names")
    ap.add_argument("--records-mib", type=int, default=None, help="MiB of each compressed --records file (1024)")
    a = ap.parse_args(argv)

    with decode.work_dir(a.dir, "txn-audit-dumpbench-") as directory:
        libs = kafka_libs()
        java = ["java", "-Xmx512m", "-cp", f"{libs}/*", MAIN]
        ours = [sys.executable, "-m", "auditor.cli.main", "dump"]
        # byte-compiled as an installed wheel is (pip compiles on install): with
        # PYTHONDONTWRITEBYTECODE set, every run would otherwise compile the package anew
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "auditor")], check=True,
                       stdout=subprocess.DEVNULL)
        gen = directory / "gen"
        gen.mkdir(exist_ok=True)
        large_mib = a.large_mib or (64 if a.quick else 1024)
        t = time.perf_counter()
        files = decode.generate(gen, 2_000_000 if not a.quick else 200_000, large_mib << 20)
        s100k = gen / "s100k.log"
        if not s100k.exists():
            decode.write_segment(s100k, decode._one_batch(1, 8), 100_000)
        cases = [("small-100k", s100k, [], [], 100_000)]
        if not a.quick:
            cases.append(("small-2M", files["small"][0], [], [], files["small"][1]))
        if a.with_mixed:
            cases.append(("mixed-2M", files["mixed"][0], [], [], files["mixed"][1]))
        cases.append(("large", files["large"][0], [], [], files["large"][1]))
        cases.append(("records-100k", s100k, ["--deep-iteration"], ["--records"], 100_000))
        keep = set(a.cases.split(",")) if a.cases else None
        records_bytes = (a.records_mib or (64 if a.quick else 1024)) << 20
        for codec, cid in decode.CODECS.items():
            name = f"records-{codec}"
            if keep is not None and name not in keep:
                continue
            batch = decode.compressed_batch(cid)
            n = max(1, records_bytes // len(batch))
            path = gen / f"{codec}-{n}.log"
            if not path.exists():
                decode.write_segment(path, batch, n)
            cases.append((name, path, ["--deep-iteration"], ["--records"], n))
        many = many_files()
        if many:
            cases.append(("many-headers", many, [], [], None))
            cases.append(("many-records", many, ["--deep-iteration"], ["--records"], None))
            # the same without the internal topics, whose records ours decodes and --deep-iteration does not
            data = [p for p in many if p.parent.name.rsplit("-", 1)[0] not in INTERNAL_TOPICS]
            cases.append(("many-data-records", data, ["--deep-iteration"], ["--records"], None))
        if keep is not None:
            cases = [c for c in cases if c[0] in keep]
        print(f"segments generated in {time.perf_counter() - t:.1f} s in {directory}; cpu cores: {os.cpu_count()}; "
              f"load average before: {os.getloadavg()[0]:.2f}; {a.repeat} runs of each, alternating")
        out_file = directory / "stdout.txt"
        rows = []
        for name, src, kflags, oflags, batches in cases:
            segs = src if isinstance(src, list) else [place(directory, name, src, a.inactive)]
            for seg in segs:
                decode.warm(seg)
            runs: dict[str, list[dict]] = {"kafka": [], "ours": [], "dd": []}
            for _ in range(a.repeat):
                runs["kafka"].append(run(kafka_cmd(java, kflags, segs, directory), out_file))
                # sample_logs/ holds damaged captures on purpose: dump says so and exits 1
                runs["ours"].append(run([*ours, *oflags, *map(str, segs)], out_file, ok=(0, 1) if len(segs) > 1 else (0,)))
                # the floor under ours: the kernel writing as many bytes, in 1 MiB blocks, nothing computed
                mib = -(-runs["ours"][-1]["out_bytes"] // (1 << 20))
                runs["dd"].append(run(["dd", "if=/dev/zero", "bs=1M", f"count={mib}", "status=none"], out_file))
            med = {tool: {k: statistics.median(r[k] for r in rs) for k in ("wall", "cpu", "sys", "rss_mib", "out_bytes")}
                   for tool, rs in runs.items()}
            rows.append((name, sum(s.stat().st_size for s in segs), batches if batches is not None else f"{len(segs)} files",
                         med))
            k, o = med["kafka"], med["ours"]
            print(f"  {name} (load average {os.getloadavg()[0]:.2f}): kafka {k['cpu']:.2f} cpu-s ({k['sys']:.2f} sys) / {k['wall']:.2f} s, ours {o['cpu']:.2f} "
                  f"cpu-s ({o['sys']:.2f} sys) / {o['wall']:.2f} s; every run's cpu-s: kafka "
                  f"{_cpus(runs['kafka'])}, ours {_cpus(runs['ours'])}; dd writing ours' {o['out_bytes'] / 1e6:.0f} MB: "
                  f"{med['dd']['wall']:.2f} s (runs: {_walls(runs['dd'])})",
                  flush=True)
        out_file.unlink(missing_ok=True)

        print()
        print(f"{'case':14} {'MB':>7} {'batches':>10} | {'kafka cpu':>9} {'wall':>6} {'RSS MiB':>7} | "
              f"{'ours cpu':>8} {'wall':>6} {'RSS MiB':>7} | {'cpu ratio':>9} {'wall ratio':>10}")
        for name, size, batches, med in rows:
            k, o = med["kafka"], med["ours"]
            count = f"{batches:10,}" if isinstance(batches, int) else f"{batches:>10}"
            print(f"{name:14} {size / 1e6:7.1f} {count} | {k['cpu']:9.2f} {k['wall']:6.2f} {k['rss_mib']:7.0f} | "
                  f"{o['cpu']:8.2f} {o['wall']:6.2f} {o['rss_mib']:7.0f} | {k['cpu'] / o['cpu']:8.1f}x "
                  f"{k['wall'] / o['wall']:9.1f}x")
        print(f"medians of {a.repeat}; ratio = Kafka / ours (goals: >= 5x headers, >= 2x --records; "
              f">= 3x --records of compressed batches and of many small files, headers too); "
              f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
