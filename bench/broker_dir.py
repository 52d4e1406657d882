"""Broker-sized benchmark: one generated log dir per size, every tool on the same files.

    .venv/bin/python bench/broker_dir.py --sizes 1 --repeat 1 --out /tmp/broker-bench
    .venv/bin/python bench/broker_dir.py --sizes 1,4,16 --repeat 3 --out /tmp/broker-bench

Why: the other benches time one decoder on one synthetic file; a maintainer asked whether cost per
GiB stays flat on something shaped like a broker's data dir (many partitions, rolled and active
segments with their indexes, checkpoints, mixed codecs, transactions, one anomaly), with the
tools a user compares us to (``cat``, Kafka's ``DumpLogSegments``) run on the same bytes.

Generation (:func:`generate`, deterministic for (size, seed), streamed: one batch in memory at a
time, 1 MiB write buffers):

* ``meta.properties`` (cluster id, node 1), ``recovery-point-offset-checkpoint`` and
  ``replication-offset-checkpoint`` (log end offsets: a clean shutdown),
  ``log-start-offset-checkpoint`` (empty: the broker lists only partitions whose log start is
  above their first segment's base, as scripts/make_sample_logs.py writes it);
* topics ``payments`` (6 partitions) and ``events`` (6), each partition with its own
  ``segment.bytes`` (8 MiB ... 1 GiB), rolled as ``LogSegment`` rolls (before the append that
  would exceed it); ``.index`` / ``.timeindex`` entries as ``LogSegment.append`` writes them (one
  per 4096 bytes, ``index.interval.bytes``), rolled segments' indexes trimmed, the active one's
  preallocated to 10 MiB of zeros (sparse; ``segment.index.bytes``, which the broker always does:
  the ``.log`` itself is not preallocated, as no generator of the repo does it);
  ``.txnindex`` entries for every ABORT marker that closes data (with the LSO); ``partition.metadata``,
  ``leader-epoch-checkpoint``;
* ``__transaction_state-N`` (of 50) for the transactional ids: Ongoing at each AddPartitions,
  PrepareCommit/PrepareAbort, CompleteCommit/CompleteAbort (tests/builders.py's
  TransactionLogKey/Value v0 in kafka-python batches);
* data batches of 1-16 KiB, ~20 % lz4, ~10 % zstd, the rest uncompressed; transactional
  producers (80 % commit, 20 % abort, 1-3 partitions a transaction) and idempotent ones; and
  exactly one hanging transaction: a transactional producer whose Ongoing transaction on
  ``events-3`` gets no marker, started ~10 % into the data (well over ``transaction.max.timeout.ms``
  before the newest timestamp, the reference time of ``scan``).

Batches: a pool of templates built by kafka-python (``decode.compressed_batch``: JSON values, one
header per record) is reused with the fields a broker and producer set patched in (base offset,
leader epoch, timestamps, producer id/epoch/sequence, the transactional bit) and the CRC-32C
recomputed; markers and coordinator records come from tests/builders.py. No encoder of our own.

Measurement (:func:`measure`): each size's tools run alternately in each round -- ``cat`` of every
``.log`` to /dev/null, ``txn-audit dump DIR --format jsonl`` (batch headers) to /dev/null,
``DumpLogSegments --deep-iteration`` over every ``.log`` (Kafka 4.3.1, the runner of
bench/dump_vs_kafka.py: JVM argument file, ``-Xmx512m``) to /dev/null, ``txn-audit ingest DIR
--out T`` and ``txn-audit scan DIR --format json -q --no-keep-tables`` -- each a whole process.
Wall time, CPU seconds (every descendant: this process is their subreaper and reaps them), s/GiB
and the peak RSS of the process tree: every 0.2 s a thread reads ``/proc/*/stat`` to find this
process's descendants and sums their ``VmRSS`` (so a JVM and its Python workers count together;
a peak shorter than 0.2 s can be missed). The scan's exit status must be 1 and its JSON must hold
exactly one ``hanging-transaction`` finding, on the hanging producer: otherwise the run fails.
Page cache: every round reads the same files, so all tools see the same (warm, at 1-4 GiB) cache.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import crc32c

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT / "bench", ROOT / "tests", ROOT):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import decode  # noqa: E402  (compressed_batch: the batch templates)
from builders import kp_batch, marker, txn_log_key_v0, txn_log_value_v0  # noqa: E402

GIB = 1 << 30
MIB = 1 << 20
T0 = 1_700_000_000_000
SPAN_MS = 3 * 3600 * 1000  # the data's time span whatever its size: the hanging txn is ~2.7 h old
INDEX_INTERVAL = 4096  # index.interval.bytes
INDEX_PREALLOC = 10 * MIB  # segment.index.bytes
ROLL_SIZES = [8 * MIB, 16 * MIB, 32 * MIB, 64 * MIB, 128 * MIB, 256 * MIB, 512 * MIB, GIB]
TOPICS = [("payments", 6), ("events", 6)]
TXN_STATE_PARTITIONS = 50
TXN_TIMEOUT_MS = 60_000
STATES = {"Ongoing": 1, "PrepareCommit": 2, "PrepareAbort": 3, "CompleteCommit": 4, "CompleteAbort": 5}
CODEC_WEIGHTS = [(0, 70), (3, 20), (4, 10)]  # none, lz4, zstd
HANGING = {"transactional_id": "bench-txn-hanging", "producer_id": 3000, "partition": ("events", 3)}
_HDR = struct.Struct(">qiibIhiqqqhii")  # the v2 batch header, 61 bytes


# --------------------------------------------------------------------------- batches
def templates(seed: int) -> dict[int, list[bytes]]:
    """Per codec, kafka-python batches whose on-disk sizes spread over 1-16 KiB (the record
    counts are chosen from each codec's bytes per record, measured on a probe batch)."""
    rng = random.Random(seed)
    pool: dict[int, list[bytes]] = {}
    for codec, _ in CODEC_WEIGHTS:
        per_record = len(decode.compressed_batch(codec, records=64, seed=seed)) / 64
        pool[codec] = []
        for i in range(16):
            target = 1024 + (15 * 1024) * i / 15 * rng.uniform(0.9, 1.0)
            n = max(1, int(target / per_record))
            pool[codec].append(decode.compressed_batch(codec, records=n, seed=seed * 100 + codec * 16 + i))
    return pool


def patch(template: bytes, *, offset: int, ts: int, pid: int, epoch: int, seq: int, txn: bool) -> bytearray:
    """A copy of ``template`` with what the producer and the leader set (base offset, timestamps
    shifted to ``ts``, producer id/epoch/base sequence, the transactional bit) and its CRC."""
    b = bytearray(template)
    (_, _, _, _, _, attrs, _, first, mx, _, _, _, _) = _HDR.unpack_from(b)
    attrs = (attrs | 0x10) if txn else (attrs & ~0x10)
    struct.pack_into(">q", b, 0, offset)
    struct.pack_into(">i", b, 12, 0)  # partition leader epoch
    struct.pack_into(">h", b, 21, attrs)
    struct.pack_into(">qqqhi", b, 27, ts, ts + (mx - first), pid, epoch, seq)
    struct.pack_into(">I", b, 17, crc32c.crc32c(memoryview(b)[21:]))
    return b


# --------------------------------------------------------------------------- one partition's files
@dataclass
class Partition:
    """One partition's log as a broker writes it: the active segment's files open for append."""

    topic: str
    index: int
    roll_bytes: int
    root: Path
    next_offset: int = 0
    open_txns: dict[int, int] = field(default_factory=dict)  # producer id -> first offset
    seqs: dict[int, int] = field(default_factory=dict)  # producer id -> next sequence
    base: int = -1
    pos: int = 0
    since_index: int = 0
    max_ts: tuple[int, int] = (-1, -1)  # (timestamp, shallow offset) so far in the segment
    last_time_entry: int = -1
    files: dict[str, BinaryIO] = field(default_factory=dict)

    @property
    def dir(self) -> Path:
        return self.root / f"{self.topic}-{self.index}"

    def _open_segment(self) -> None:
        self.base, self.pos, self.since_index = self.next_offset, 0, 0
        self.max_ts, self.last_time_entry = (-1, -1), -1
        stem = self.dir / f"{self.base:020d}"
        self.files = {s: open(f"{stem}.{s}", "wb", buffering=MIB) for s in ("log", "index", "timeindex")}

    def _close_segment(self, active: bool) -> None:
        """Rolled: the final time-index entry (``onBecomeInactiveSegment``), files trimmed.
        Active: the indexes preallocated to ``segment.index.bytes`` (zeros, sparse)."""
        if not active:
            self._time_entry()
        for suffix, f in self.files.items():
            if active and suffix != "log":  # rounded down to whole entries, as AbstractIndex does
                entry = 8 if suffix == "index" else 12
                f.truncate(INDEX_PREALLOC // entry * entry)
            f.close()

    def _time_entry(self) -> None:
        """``TimeIndex.maybeAppend``: only a timestamp above the last entry's is written."""
        ts, off = self.max_ts
        if ts > self.last_time_entry:
            self.files["timeindex"].write(struct.pack(">qi", ts, off - self.base))
            self.last_time_entry = ts

    def append(self, batch: bytes | bytearray, last_offset: int, max_ts: int) -> None:
        """``LogSegment.append`` of one batch: roll first if it would not fit, then the index
        entries (per batch, Kafka 3.7+), then the bytes."""
        if self.base < 0:
            self.dir.mkdir(parents=True, exist_ok=True)
            self._open_segment()
        elif self.pos + len(batch) > self.roll_bytes:
            self._close_segment(active=False)
            self._open_segment()
        if max_ts > self.max_ts[0]:
            self.max_ts = (max_ts, last_offset)
        if self.since_index > INDEX_INTERVAL:
            self.files["index"].write(struct.pack(">ii", last_offset - self.base, self.pos))
            self._time_entry()
            self.since_index = 0
        self.files["log"].write(batch)
        self.pos += len(batch)
        self.since_index += len(batch)
        self.next_offset = last_offset + 1

    def abort_entry(self, pid: int, first: int, marker_offset: int) -> None:
        """The ``.txnindex`` entry of an ABORT marker just appended (LSO: the first offset of the
        oldest transaction still open on the partition, else the offset after the marker)."""
        lso = min(self.open_txns.values(), default=marker_offset + 1)
        with open(self.dir / f"{self.base:020d}.txnindex", "ab") as f:
            f.write(struct.pack(">hqqqq", 0, pid, first, marker_offset, lso))

    def finish(self) -> None:
        """The active segment closed (indexes preallocated); the leader epoch cache."""
        if self.base >= 0:
            self._close_segment(active=True)
            (self.dir / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")


# --------------------------------------------------------------------------- the scenario
@dataclass
class Producer:
    """A producer session: transactional (with a transactional id) or idempotent."""

    pid: int
    epoch: int
    txn_id: str | None = None
    in_txn: list[Partition] = field(default_factory=list)  # partitions of its open transaction
    txn_start: int = -1
    left: int = 0  # data batches still to write in the open transaction
    width: int = 1  # partitions the open transaction spreads over


class Broker:
    """Writes one broker's log dir event by event: a producer picked at random takes one step."""

    def __init__(self, log_dir: Path, size_bytes: int, seed: int) -> None:
        from auditor.formats.txnlog import partition_for

        self.rng = random.Random(seed)
        self.dir, self.size = log_dir, size_bytes
        self.pool = templates(seed)
        self.parts = [Partition(t, i, self.rng.choice(ROLL_SIZES), log_dir) for t, n in TOPICS for i in range(n)]
        self.weights = [self.rng.uniform(0.5, 1.5) for _ in self.parts]  # uneven partitions, as in life
        self.txn_producers = [Producer(1000 + i, i % 3, f"bench-txn-{i}") for i in range(6)]
        self.idem_producers = [Producer(2000 + i, i % 2) for i in range(6)]
        self.hanging = Producer(HANGING["producer_id"], 0, HANGING["transactional_id"])
        self.coord: dict[int, Partition] = {}
        self.coord_of = {p.txn_id: partition_for(p.txn_id, TXN_STATE_PARTITIONS)
                         for p in [*self.txn_producers, self.hanging]}
        self.clock = T0
        # ~8 KiB an event on average; at most 300 ms a step, so that a transaction (up to 12 batches
        # among 12 producers' steps) stays well within its 60 s timeout below 1 GiB too
        self.step_ms = min(300, max(1, SPAN_MS * 8 * 1024 // max(size_bytes, 1)))
        self.written = 0
        self.hanging_row: dict | None = None
        self.counts = {"data_batches": 0, "markers": {"COMMIT": 0, "ABORT": 0}, "coordinator_records": 0,
                       "codecs": {"none": 0, "lz4": 0, "zstd": 0}}

    def data(self, prod: Producer, part: Partition, txn: bool) -> tuple[int, int]:
        """One data batch of ``prod`` on ``part``; returns (first offset, record count)."""
        codec = self.rng.choices([c for c, _ in CODEC_WEIGHTS], [w for _, w in CODEC_WEIGHTS])[0]
        tpl = self.rng.choice(self.pool[codec])
        (_, _, _, _, _, _, last_delta, first, mx, _, _, _, count) = _HDR.unpack_from(tpl)
        seq = part.seqs.get(prod.pid, 0)
        off = part.next_offset
        b = patch(tpl, offset=off, ts=self.clock, pid=prod.pid, epoch=prod.epoch, seq=seq, txn=txn)
        part.append(b, off + last_delta, self.clock + (mx - first))
        part.seqs[prod.pid] = seq + count
        self.written += len(b)
        self.counts["data_batches"] += 1
        self.counts["codecs"][{0: "none", 3: "lz4", 4: "zstd"}[codec]] += 1
        return off, count

    def coordinator(self, prod: Producer, state: str, parts: list[Partition] | None) -> None:
        """The coordinator's TransactionLogValue v0 for ``prod`` in its ``__transaction_state``
        partition (a one-record, non-transactional kafka-python batch)."""
        n = self.coord_of[prod.txn_id]
        cp = self.coord.get(n) or self.coord.setdefault(n, Partition("__transaction_state", n, 100 * MIB, self.dir))
        listed: dict[str, list[int]] = {}
        for p in parts or []:
            listed.setdefault(p.topic, []).append(p.index)
        value = txn_log_value_v0(prod.pid, prod.epoch, TXN_TIMEOUT_MS, STATES[state],
                                 sorted((t, sorted(i)) for t, i in listed.items()), self.clock, prod.txn_start)
        b = kp_batch([(0, self.clock, txn_log_key_v0(prod.txn_id), value, [])], base_offset=cp.next_offset)
        cp.append(b, cp.next_offset, self.clock)
        self.written += len(b)
        self.counts["coordinator_records"] += 1

    def txn_step(self, prod: Producer) -> None:
        """Begin, write one batch of, or end the producer's transaction."""
        if prod.left == 0 and not prod.in_txn:
            prod.left, prod.txn_start = self.rng.randint(2, 12), self.clock
            prod.width = self.rng.randint(1, 3)
            return
        if prod.left > 0:
            if len(prod.in_txn) < prod.width:
                part = self.rng.choices(self.parts, self.weights)[0]
                if part not in prod.in_txn:
                    prod.in_txn.append(part)
                    self.coordinator(prod, "Ongoing", prod.in_txn)  # AddPartitionsToTxn
            else:
                part = self.rng.choice(prod.in_txn)
            off, _ = self.data(prod, part, txn=True)
            part.open_txns.setdefault(prod.pid, off)
            prod.left -= 1
            return
        commit = self.rng.random() < 0.8
        self.coordinator(prod, "PrepareCommit" if commit else "PrepareAbort", prod.in_txn)
        for part in prod.in_txn:
            self.end_marker(prod, part, commit)
        self.coordinator(prod, "CompleteCommit" if commit else "CompleteAbort", None)
        prod.in_txn, prod.txn_start = [], -1

    def end_marker(self, prod: Producer, part: Partition, commit: bool) -> None:
        """The coordinator's marker on ``part`` (tests/builders.py), with its ``.txnindex`` entry
        if it aborts data; the partition's LSO moves past the transaction."""
        b = marker(part.next_offset, prod.pid, prod.epoch, commit=commit, timestamp=self.clock)
        off = part.next_offset
        part.append(b, off, self.clock)
        first = part.open_txns.pop(prod.pid, None)
        if not commit and first is not None:
            part.abort_entry(prod.pid, first, off)
        self.written += len(b)
        self.counts["markers"]["COMMIT" if commit else "ABORT"] += 1

    def start_hanging(self) -> None:
        """The one hanging transaction: added to ``events-3`` (Ongoing), three batches, then the
        producer is gone and no marker ever comes."""
        topic, index = HANGING["partition"]
        part = next(p for p in self.parts if (p.topic, p.index) == (topic, index))
        self.hanging.txn_start = self.clock
        self.coordinator(self.hanging, "Ongoing", [part])
        first = None
        for _ in range(3):
            off, _ = self.data(self.hanging, part, txn=True)
            first = off if first is None else first
            self.clock += self.step_ms
        part.open_txns[self.hanging.pid] = first  # type: ignore[assignment]
        self.hanging_row = {**HANGING, "partition": f"{topic}-{index}", "first_offset": first,
                            "start_ms": self.hanging.txn_start}

    def run(self) -> None:
        """Steps until ``size`` bytes are written; the hanging transaction at 10 %; the other
        transactions closed at the end (only the one anomaly is left open)."""
        producers = [*self.txn_producers, *self.idem_producers]
        while self.written < self.size:
            if self.hanging_row is None and self.written >= self.size // 10:
                self.start_hanging()
            prod = self.rng.choice(producers)
            if prod.txn_id is not None:
                self.txn_step(prod)
            else:
                self.data(prod, self.rng.choices(self.parts, self.weights)[0], txn=False)
            self.clock += self.step_ms
        for prod in self.txn_producers:  # every other transaction ends before the dir is copied
            while prod.in_txn or prod.left:
                self.txn_step(prod)
                self.clock += self.step_ms

    def finish(self) -> dict:
        """Close every active segment; the broker-level files; the ground truth (returned)."""
        from scripts.make_sample_logs import kafka_uuid

        logs = sorted([*self.parts, *self.coord.values()], key=lambda p: (p.topic, p.index))
        topic_ids = {t: kafka_uuid(self.rng) for t in {p.topic for p in logs}}
        for p in logs:
            p.finish()
            (p.dir / "partition.metadata").write_text(f"version: 0\ntopic_id: {topic_ids[p.topic]}\n")
        cluster = kafka_uuid(self.rng)
        (self.dir / "meta.properties").write_text(
            f"#\n#Written by bench/broker_dir.py\ncluster.id={cluster}\ndirectory.id={kafka_uuid(self.rng)}\n"
            "node.id=1\nversion=1\n")

        def checkpoint(rows: list[tuple[str, int, int]]) -> str:
            return "0\n%d\n" % len(rows) + "".join(f"{t} {i} {o}\n" for t, i, o in rows)

        ends = [(p.topic, p.index, p.next_offset) for p in logs]
        (self.dir / "replication-offset-checkpoint").write_text(checkpoint(ends))
        (self.dir / "recovery-point-offset-checkpoint").write_text(checkpoint(ends))
        (self.dir / "log-start-offset-checkpoint").write_text(checkpoint([]))
        return {"cluster_id": cluster, "hanging": self.hanging_row, "step_ms": self.step_ms,
                "newest_ms": self.clock, **self.counts,
                "partitions": {f"{p.topic}-{p.index}": {"segment_bytes": p.roll_bytes, "end_offset": p.next_offset,
                                                        "segments": len(list(p.dir.glob("*.log")))} for p in logs}}


def generate(out_dir: Path, size_bytes: int, seed: int) -> Path:
    """Write the log dir ``out_dir/broker-1`` (``size_bytes`` of ``.log`` at least, exceeded by
    one event's batches) and ``out_dir/generated.json`` (the ground truth, written last: its
    presence says the dir is complete). Returns the log dir."""
    log_dir = out_dir / "broker-1"
    if log_dir.exists():
        shutil.rmtree(log_dir)
    log_dir.mkdir(parents=True)
    broker = Broker(log_dir, size_bytes, seed)
    broker.run()
    truth = broker.finish()
    truth.update(size_bytes=size_bytes, seed=seed,
                 log_bytes=sum(p.stat().st_size for p in log_dir.rglob("*.log")))
    (out_dir / "generated.json").write_text(json.dumps(truth, indent=1) + "\n")
    return log_dir


# --------------------------------------------------------------------------- measurement
def _descendants_rss_kib(root: int) -> int:
    """Sum of ``VmRSS`` over every descendant of ``root`` (``/proc/*/stat`` for the parent links)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    total, todo = 0, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/status") as f:
                total += next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), 0)
        except OSError:
            continue
    return total


class PeakSampler(threading.Thread):
    """Every 0.2 s, the RSS of this process's whole tree of descendants (it is their subreaper,
    so the orphaned JVM and Python workers stay in it); keeps the peak."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak_kib = 0
        self.stop = threading.Event()

    def run(self) -> None:
        me = os.getpid()
        while not self.stop.is_set():
            self.peak_kib = max(self.peak_kib, _descendants_rss_kib(me))
            self.stop.wait(0.2)


def run_tool(cmd: list[str], stdout: Path | int, env: dict[str, str], ok: tuple[int, ...]) -> dict:
    """One whole process (and its descendants): wall seconds, CPU seconds of all of them, peak
    RSS of the tree, exit status; stdout to ``stdout`` (a path: kept for the caller to read)."""
    import resource

    from scan import _reap

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    sampler = PeakSampler()
    sampler.start()
    out = open(stdout, "wb") if isinstance(stdout, Path) else stdout
    t0 = time.monotonic()
    try:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, env=env, cwd=ROOT)
        _, err = p.communicate()
        wall = time.monotonic() - t0
        _reap()  # stragglers (the driver JVM) before their CPU is counted
    finally:
        sampler.stop.set()
        sampler.join()
        if isinstance(stdout, Path):
            out.close()  # type: ignore[union-attr]
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode not in ok:
        raise SystemExit(f"{' '.join(cmd[:6])}... exited {p.returncode}:\n{err.decode(errors='replace')[-3000:]}")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"wall": wall, "cpu": cpu, "rss_mib": sampler.peak_kib / 1024, "rc": p.returncode}


def tool_commands(log_dir: Path, work: Path) -> dict[str, tuple[list[str], tuple[int, ...]]]:
    """The five commands on ``log_dir`` and the exit statuses that are a success."""
    from dump_vs_kafka import MAIN, kafka_cmd, kafka_libs

    logs = sorted(log_dir.rglob("*.log"))
    cli = str(ROOT / ".venv" / "bin" / "txn-audit")
    java = ["java", "-Xmx512m", "-cp", f"{kafka_libs()}/*", MAIN]
    return {
        "cat": (["cat", *map(str, logs)], (0,)),
        "dump": ([cli, "dump", str(log_dir), "--format", "jsonl"], (0,)),
        "kafka-dump": (kafka_cmd(java, ["--deep-iteration"], logs, work), (0,)),
        "ingest": ([cli, "ingest", str(log_dir), "--out", str(work / "tables"), "-q"], (0,)),
        "scan": ([cli, "scan", str(log_dir), "--format", "json", "-q", "--no-keep-tables"], (1,)),
    }


def check_scan(report_path: Path, truth: dict) -> str:
    """The scan must see its own anomaly: exactly one ``hanging-transaction`` finding, on the
    hanging producer and partition. Returns a one-line summary of the findings."""
    report = json.loads(report_path.read_text())
    findings = report.get("findings", [])
    by_rule: dict[str, int] = {}
    for f in findings:
        by_rule[f.get("rule", "?")] = by_rule.get(f.get("rule", "?"), 0) + 1
    hanging = [f for f in findings if f.get("rule") == "hanging-transaction"]
    h = truth["hanging"]
    text = json.dumps(hanging)
    if len(hanging) != 1 or str(h["producer_id"]) not in text or h["partition"].rsplit("-", 1)[0] not in text:
        raise SystemExit(f"scan did not report the one hanging transaction {h}: findings by rule {by_rule}; "
                         f"hanging-transaction findings: {text[:2000]}")
    return f"findings by rule {by_rule}; the hanging one: {text[:300]}"


def prepare(out: Path, gib: float, seed: int) -> tuple[Path, dict]:
    """The generated dir of this size and seed, generated only if absent (or incomplete: no
    ``generated.json``), then read once so that the first tool does not pay for the disk."""
    d = out / f"{gib:g}GiB-seed{seed}"
    if not (d / "generated.json").exists():
        t = time.monotonic()
        generate(d, int(gib * GIB), seed)
        print(f"generated {d} in {time.monotonic() - t:.0f} s", flush=True)
    truth = json.loads((d / "generated.json").read_text())
    for f in sorted((d / "broker-1").rglob("*.log")):
        decode.warm(f)
    return d, truth


def measure(d: Path, truth: dict, repeat: int, tools: list[str]) -> dict[str, list[dict]]:
    """``repeat`` rounds of every tool on ``d``'s log dir, one after the other (the order rotated
    each round); each scan's report checked (:func:`check_scan`)."""
    log_dir, work = d / "broker-1", d / "work"
    work.mkdir(exist_ok=True)
    cmds = tool_commands(log_dir, work)
    runs: dict[str, list[dict]] = {t: [] for t in tools}
    for r in range(repeat):
        order = tools[r % len(tools):] + tools[:r % len(tools)]
        for tool in order:
            cmd, ok = cmds[tool]
            shutil.rmtree(work / "tables", ignore_errors=True)
            home = Path(tempfile.mkdtemp(prefix="tables-home-", dir=work))
            env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "TXN_AUDIT_TABLES_HOME": str(home)}
            load = os.getloadavg()[0]
            stdout: Path | int = work / "scan.json" if tool == "scan" else subprocess.DEVNULL
            res = run_tool(cmd, stdout, env, ok)
            shutil.rmtree(home, ignore_errors=True)
            res["load"] = load
            note = check_scan(work / "scan.json", truth) if tool == "scan" else ""
            runs[tool].append(res)
            print(f"  round {r + 1} {tool:10} wall {res['wall']:7.1f} s  cpu {res['cpu']:7.1f} s  peak RSS "
                  f"{res['rss_mib']:6.0f} MiB  exit {res['rc']}  load before {load:.2f}  {note}", flush=True)
    shutil.rmtree(work / "tables", ignore_errors=True)
    return runs


def table(rows: list[tuple[float, float, str, list[dict]]]) -> None:
    """Medians per size and tool, per GiB of ``.log``; peak RSS: the highest of the runs."""
    print("\n| size | .log GiB | tool | wall s | s/GiB | CPU s | CPU s/GiB | peak RSS MiB (tree) | load at start |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for gib, log_gib, tool, rs in rows:
        loads = ", ".join(f"{r['load']:.1f}" for r in rs)
        wall, cpu = statistics.median(r["wall"] for r in rs), statistics.median(r["cpu"] for r in rs)
        print(f"| {gib:g} GiB | {log_gib:.3f} | {tool} | {wall:.1f} | {wall / log_gib:.1f} | {cpu:.1f} | "
              f"{cpu / log_gib:.1f} | {max(r['rss_mib'] for r in rs):.0f} | "
              f"{loads} |")


def describe(truth: dict) -> str:
    """What the dir holds, from its ground truth: printed so that a figure names its input."""
    parts = truth["partitions"]
    data = {k: v for k, v in parts.items() if not k.startswith("__")}
    segs = sum(v["segments"] for v in data.values())
    return (f"{len(data)} data partitions, {segs} segments ({segs - len(data)} rolled), "
            f"{len(parts) - len(data)} __transaction_state partitions; {truth['data_batches']:,} data batches "
            f"{truth['codecs']}, markers {truth['markers']}, {truth['coordinator_records']:,} coordinator "
            f"records; hanging: {truth['hanging']['partition']} offset {truth['hanging']['first_offset']}")


def main(argv: list[str] | None = None) -> int:
    """Every size through the same path (:func:`prepare`, :func:`measure`), then one table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,4,16",
                    help="GiB of .log per generated dir, comma-separated (fractions for a smoke test: 0.0625)")
    ap.add_argument("--repeat", type=int, default=1, help="rounds of every tool per size")
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "txn-audit-broker-bench",
                    help="where the generated dirs stay between runs (regenerated only if absent)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tools", default="cat,dump,kafka-dump,ingest,scan", help="a subset, in this order")
    a = ap.parse_args(argv)
    from scan import _subreaper

    if not _subreaper():
        raise SystemExit("no PR_SET_CHILD_SUBREAPER: the JVMs would leave the measured process tree")
    tools = [t for t in a.tools.split(",") if t]
    print(f"cpu cores: {os.cpu_count()}; load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    rows = []
    for gib in (float(s) for s in a.sizes.split(",") if s):
        d, truth = prepare(a.out, gib, a.seed)
        log_gib = truth["log_bytes"] / GIB
        print(f"{d}: {describe(truth)}", flush=True)
        for tool, rs in measure(d, truth, a.repeat, tools).items():
            rows.append((gib, log_gib, tool, rs))
    table(rows)
    print(f"\nmedians of {a.repeat} round(s); load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
