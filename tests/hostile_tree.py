"""The hostile log dir (tests/test_hostile_catalogue.py): good partitions copied from ``sample_logs/`` next to
one partition directory (or file) per kind of broken or hostile input, and what the ``files``
table must say about each (status, byte position, a word of the message).

Bytes come from :mod:`builders` (kafka-python's batch builder and hand-assembled Kafka encodings),
never from the project's decoders. The expected positions are computed from how each file was
built, not taken from a run.
"""

from __future__ import annotations

import os
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

from builders import data_batch, kp_batch, marker, sparse_segment, txn_log_key_v0, txn_log_value_v0
from conftest import SAMPLE_LOGS

# the good log dirs (two clusters, both with findings) and where they go in a tree
GOOD = {"broker-1": SAMPLE_LOGS / "hanging-late-write" / "broker-1",
        "broker-2": SAMPLE_LOGS / "hanging-unadded-partition" / "broker-1"}
HOSTILE_CLUSTER = "aG9zdGlsZS1jbHVzdGVyMQ"  # base64url of 16 bytes: a valid cluster id
EMPTY_SEGMENTS = 20_000
INFLATE_LIMIT = 64 * 1024 * 1024  # auditor.formats.codecs.DEFAULT_INFLATE_LIMIT
TS = 1_700_000_000_000  # older than every good scenario's data: the as-of time stays the good data's


@dataclass(frozen=True)
class Expect:
    """One row of the ``files`` table: ``path`` relative to the tree root, its ``status``, the
    ``position`` of the first problem (None: the whole file), a word of its message or note and,
    where it is known, how many rows its decode gave (what was decoded around the problem)."""

    path: str
    status: str
    position: int | None
    text: str
    rows: int | None = None


def _patch(batch: bytes, at: int, fmt: str, value: int) -> bytes:
    b = bytearray(batch)
    struct.pack_into(fmt, b, at, value)
    return bytes(b)


def _three() -> tuple[bytes, bytes, bytes]:
    """Three plain (non-transactional, non-idempotent) batches: no rule has anything to say."""
    return (data_batch(0, 2, timestamp=TS), data_batch(2, 2, timestamp=TS + 10),
            data_batch(4, 2, timestamp=TS + 20))


TEXT = b"This is not a Kafka segment: a README someone saved under a segment's name.\n" * 4


def segment_cases() -> dict[str, tuple[bytes, str, int, str, int]]:
    """Segment bytes per kind: (bytes, status, position of the first problem, message word, batches decoded)."""
    b1, b2, b3 = _three()
    p2, p3 = len(b1), len(b1) + len(b2)
    good = b1 + b2 + b3
    flipped = bytearray(b2)
    flipped[-1] ^= 0xFF  # a record byte: under the CRC, framing intact
    return {
        "truncated": (good[:-7], "truncated", p3, "cut off", 2),
        "zero-tail": (good + bytes(4096), "zero-tail", len(good), "zero", 3),
        "bad-crc": (b1 + bytes(flipped) + b3, "bad-crc", p2 + 17, "CRC", 3),
        "absurd-length": (b1 + _patch(b2, 8, ">i", 2**31 - 1) + b3, "bad-length", p2 + 8, "absurd", 1),
        "negative-length": (b1 + _patch(b2, 8, ">i", -5) + b3, "bad-length", p2 + 8, "minimum", 1),
        "unknown-magic": (b1 + _patch(b2, 16, ">b", 7) + b3, "unknown-magic", p2 + 16, "magic", 1),
        "text-as-segment": (TEXT, "foreign", 8, "does not look like a Kafka segment", 0),
    }


SEGMENT_KINDS = list(segment_cases())
# kinds that are not a segment's bytes (files, links, directories, other file types)
OTHER_KINDS = [
    "broken-symlink", "symlink-loop", "dev-zero", "fifo", "segment-is-directory", "empty-segments", "sparse-2gib",
    "corrupt-meta-properties", "fifo-meta-properties", "corrupt-checkpoints", "corrupt-producer-snapshot", "corrupt-kraft-snapshot",
    "corrupt-txn-state-values", "out-of-range-names", "compression-bomb-under-limit", "compression-bomb-over-limit",
    "corrupt-side-files", "missing-input",
]
KINDS = SEGMENT_KINDS + OTHER_KINDS

SEG0 = "00000000000000000000.log"


def build_good(root: Path) -> dict[str, str]:
    """Copies of the good log dirs under ``root``; returns log dir name -> cluster id."""
    clusters = {}
    for name, src in GOOD.items():
        shutil.copytree(src, root / name, symlinks=True)
        props = dict(line.split("=", 1) for line in (src / "meta.properties").read_text().splitlines()
                     if "=" in line and not line.startswith("#"))
        clusters[name] = props["cluster.id"]
    assert len(set(clusters.values())) == len(clusters)
    return clusters


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _txn_record_batch(offset: int, txn_id: str | None, value: bytes | None, **kw) -> bytes:
    key = txn_log_key_v0(txn_id) if txn_id is not None else None
    return kp_batch([(0, TS + offset, key, value, kw.pop("headers", []))], base_offset=offset, **kw)


def _complete(producer_id: int) -> bytes:
    return txn_log_value_v0(producer_id, 0, 60_000, 4, [], TS, TS)  # CompleteCommit, no partitions


def _bomb(offset: int, total: int) -> tuple[bytes, int]:
    """One zstd batch of __transaction_state whose records inflate to about ``total`` bytes (a few
    hundred KiB on disk): valid keys and values, each record padded with a 1 MiB header (headers
    are not decoded). Returns the batch and its number of records."""
    pad = bytes(1 << 20)
    n = max(1, total // (len(pad) + 64))
    recs = [(i, TS + i, txn_log_key_v0(f"bomb-{i}"), _complete(1000 + i), [("pad", pad)]) for i in range(n)]
    return kp_batch(recs, codec=4, base_offset=offset, batch_size=total + (4 << 20)), n


def _snapshot(entries: list[bytes], count: int | None = None, crc: int | None = None) -> bytes:
    import crc32c

    body = struct.pack(">i", len(entries) if count is None else count) + b"".join(entries)
    return struct.pack(">hI", 1, crc32c.crc32c(body) if crc is None else crc) + body


_ENTRY = struct.Struct(">qhiqiqiq")  # a producer snapshot entry (46 bytes)


def build_hostile(root: Path) -> dict[str, list[Expect]]:
    """The whole tree: the good log dirs plus every hostile kind; returns kind -> expected rows."""
    exp: dict[str, list[Expect]] = {}
    b1, b2, b3 = _three()
    good_seg = b1 + b2 + b3
    broker = root / "broker-1"  # hostile partitions next to the good ones, in a good log dir

    # -- segment bytes: once as the active segment (plain reads), once as an older one (memory-mapped)
    for kind, (data, status, pos, text, rows) in segment_cases().items():
        write(broker / f"h-{kind}-0" / SEG0, data)
        write(broker / f"h-{kind}-1" / SEG0, data)
        write(broker / f"h-{kind}-1" / "00000000000000001000.log", b"")
        exp[kind] = [Expect(f"broker-1/h-{kind}-{p}/{SEG0}", status, pos, text, rows) for p in (0, 1)]

    # -- links, other file types, directories
    d = broker / "h-broken-link-0"
    d.mkdir()
    (d / SEG0).symlink_to("gone/00000000000000000000.log")
    exp["broken-symlink"] = [Expect(f"broker-1/h-broken-link-0/{SEG0}", "unreadable", None, "broken symbolic link")]

    d = broker / "h-loop-0"
    write(d / SEG0, good_seg)
    (d / "up").symlink_to("..")
    (d / "00000000000000000006.log").symlink_to("00000000000000000006.log")  # a link to itself
    (broker / "loop").symlink_to(".")
    exp["symlink-loop"] = [
        Expect("broker-1/loop", "skipped", None, "not followed"),
        Expect("broker-1/h-loop-0/up", "skipped", None, "not followed"),
        Expect("broker-1/h-loop-0/00000000000000000006.log", "unreadable", None, "symbolic link loop"),
        Expect(f"broker-1/h-loop-0/{SEG0}", "ok", None, "", 3),
    ]

    d = broker / "h-devzero-0"
    d.mkdir()
    (d / SEG0).symlink_to("/dev/zero")
    exp["dev-zero"] = [Expect(f"broker-1/h-devzero-0/{SEG0}", "unreadable", None, "a character device")]

    d = broker / "h-fifo-0"
    d.mkdir()
    os.mkfifo(d / SEG0)
    exp["fifo"] = [Expect(f"broker-1/h-fifo-0/{SEG0}", "unreadable", None, "a FIFO")]

    d = broker / "h-segdir-0"
    write(d / SEG0 / "inside.log", good_seg)
    write(d / "00000000000000000006.log", good_seg)
    exp["segment-is-directory"] = [Expect(f"broker-1/h-segdir-0/{SEG0}", "unreadable", None, "a directory"),
                                   Expect("broker-1/h-segdir-0/00000000000000000006.log", "ok", None, "", 3)]

    d = broker / "h-empty-0"
    d.mkdir()
    for i in range(EMPTY_SEGMENTS):
        (d / f"{i:020d}.log").touch()
    exp["empty-segments"] = [Expect(f"broker-1/h-empty-0/{i:020d}.log", "empty", None, "", 0)
                             for i in (0, EMPTY_SEGMENTS // 2, EMPTY_SEGMENTS - 1)]

    # the 2 GiB sparse segment: one transactional control batch claiming 2^31-1 bytes
    sparse_segment(broker / "h-sparse-0" / SEG0, 0x30, 2**31)
    exp["sparse-2gib"] = [Expect(f"broker-1/h-sparse-0/{SEG0}", "foreign", 8, "absurd", 0)]

    # -- a log dir whose meta.properties is corrupt, holding one plain partition
    meta = b"#\nversion=1\nnode.id=abc\ncluster.id=" + HOSTILE_CLUSTER.encode() + b"\n"
    write(root / "broker-8" / "meta.properties", meta)
    write(root / "broker-8" / "plain-0" / SEG0, good_seg)
    exp["corrupt-meta-properties"] = [Expect("broker-8/meta.properties", "foreign", meta.index(b"node.id"), "node.id"),
                                      Expect(f"broker-8/plain-0/{SEG0}", "ok", None, "", 3)]

    # -- a log dir whose meta.properties is a FIFO (opening it to read would wait for a writer forever)
    write(root / "broker-6" / "plain-0" / SEG0, good_seg)
    os.mkfifo(root / "broker-6" / "meta.properties")
    exp["fifo-meta-properties"] = [Expect("broker-6/meta.properties", "unreadable", None, "a FIFO"),
                                   Expect(f"broker-6/plain-0/{SEG0}", "ok", None, "", 3)]

    # -- a log dir of another (hostile) cluster: cluster-wide files whose content the rules read
    hb = root / "broker-7"
    write(hb / "meta.properties", f"version=1\nnode.id=7\ncluster.id={HOSTILE_CLUSTER}\n".encode())
    rep = b"0\n2\nh-x 0 12\nh-y zz 7\n"
    rec = b"0\n99999999999\n"
    cln = b"7\n0\n"
    write(hb / "replication-offset-checkpoint", rep)
    write(hb / "recovery-point-offset-checkpoint", rec)
    write(hb / "log-start-offset-checkpoint", b"\x00\xff\xfe\x80 binary\n")
    write(hb / "cleaner-offset-checkpoint", cln)
    exp["corrupt-checkpoints"] = [
        Expect("broker-7/replication-offset-checkpoint", "foreign", rep.index(b"h-y"), "line 4"),
        Expect("broker-7/recovery-point-offset-checkpoint", "foreign", 2, "99999999999"),
        Expect("broker-7/log-start-offset-checkpoint", "foreign", 1, "utf-8"),
        Expect("broker-7/cleaner-offset-checkpoint", "foreign", 0, "version 7"),
    ]

    e1 = _ENTRY.pack(5, 0, 1, 1, 1, TS, -1, -1)
    snaps = hb / "h-snap-0"
    write(snaps / "00000000000000000005.snapshot", _snapshot([e1, e1[:20]], count=2))
    write(snaps / "00000000000000000009.snapshot", _snapshot([e1], crc=12345))
    exp["corrupt-producer-snapshot"] = [
        Expect("broker-7/h-snap-0/00000000000000000005.snapshot", "foreign", 6, "entry count"),
        Expect("broker-7/h-snap-0/00000000000000000009.snapshot", "bad-crc", 2, "CRC"),
    ]
    lec = b"0\n1\n5\n"
    pmd = b"version: 0\ntopic_id: not-a-uuid\n"
    write(snaps / "leader-epoch-checkpoint", lec)
    write(snaps / "partition.metadata", pmd)
    write(snaps / "00000000000000000000.txnindex", struct.pack(">hqqqq", 0, 5, 0, 3, 0) + b"abc")
    write(snaps / "00000000000000000000.index", struct.pack(">ii", 1, 0) + b"junk!")
    exp["corrupt-side-files"] = [
        Expect("broker-7/h-snap-0/leader-epoch-checkpoint", "foreign", 4, "line 3"),
        Expect("broker-7/h-snap-0/partition.metadata", "foreign", pmd.index(b"topic_id"), "uuid"),
        Expect("broker-7/h-snap-0/00000000000000000000.txnindex", "truncated", 34, ""),
        Expect("broker-7/h-snap-0/00000000000000000000.index", "bad-length", 8, "multiple of 8"),
    ]

    ctl = marker(0, 3, 0, commit=True, timestamp=TS)
    kraft = ctl + b2[: len(b2) - 9]
    write(hb / "__cluster_metadata-0" / "00000000000000000003-0000000001.checkpoint", kraft)
    write(hb / "bootstrap.checkpoint", TEXT)
    exp["corrupt-kraft-snapshot"] = [
        Expect("broker-7/__cluster_metadata-0/00000000000000000003-0000000001.checkpoint", "truncated", len(ctl), "cut off"),
        Expect("broker-7/bootstrap.checkpoint", "foreign", 8, "does not look like"),
    ]

    value = _complete(7)
    recs = [
        _txn_record_batch(0, "t-ok", value),
        _txn_record_batch(1, "t-cut", value[:9]),
        _txn_record_batch(2, "t-version", struct.pack(">h", 99) + value[2:]),
        _txn_record_batch(3, "t-count", value[:23] + struct.pack(">i", 2**31 - 1) + value[27:]),
        _txn_record_batch(4, None, value),
        _txn_record_batch(5, "t-ok-2", _complete(8)),
    ]
    pos = [sum(len(r) for r in recs[:i]) for i in range(len(recs))]
    write(hb / "__transaction_state-0" / SEG0, b"".join(recs))
    # valid batches whose record values do not decode: bad-record (recovery never cuts there)
    exp["corrupt-txn-state-values"] = [Expect(f"broker-7/__transaction_state-0/{SEG0}", "bad-record", pos[1], "t-cut")]

    # numbers in names that Kafka could not have written (a partition beyond int32, an offset
    # beyond int64): listed, never read, the run goes on
    write(hb / "x-2147483648" / SEG0, b1)
    write(hb / "h-names-0" / "99999999999999999999.log", b1)
    write(hb / "h-names-0" / SEG0, b1)
    exp["out-of-range-names"] = [
        Expect("broker-7/x-2147483648", "out-of-range", None, "2147483648"),
        Expect("broker-7/h-names-0/99999999999999999999.log", "out-of-range", None, "99999999999999999999"),
    ]

    lead = _txn_record_batch(0, "t-lead", _complete(9))
    bomb, n = _bomb(1, INFLATE_LIMIT - (1 << 20))
    write(hb / "__transaction_state-1" / SEG0, lead + bomb)
    # decoded whole: 2 batches, 1 + n coordinator records
    exp["compression-bomb-under-limit"] = [Expect(f"broker-7/__transaction_state-1/{SEG0}", "ok", None, "", 3 + n)]
    write(hb / "__transaction_state-2" / SEG0, lead + _bomb(1, INFLATE_LIMIT + (1 << 20))[0])
    exp["compression-bomb-over-limit"] = [
        Expect(f"broker-7/__transaction_state-2/{SEG0}", "inflate-limit", len(lead) + 61, "limit")]

    exp["missing-input"] = [Expect("no-such-dir", "unreadable", None, "does not exist")]
    assert set(exp) == set(KINDS), set(exp) ^ set(KINDS)
    return exp
