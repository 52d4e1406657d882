"""Property tests: random and mutated bytes through the segment, record, control and codec
decoders only ever produce LogProblem rows or DecodeError, never another exception, and always
finish.

Seeds are valid segments written by kafka-python (v2 in every codec it can write, legacy v0/v1),
plus a hand-assembled transaction marker. Mutations: one byte replaced, a cut, a cut plus zeros.
Example counts are bounded so the whole file stays well under a minute.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import signal
import struct
import zlib

import cramjam
import crc32c
import lz4.frame
import zstandard
from hypothesis import HealthCheck, given, settings, strategies as st
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from auditor.errors import DecodeError
from auditor.formats.batch import BatchHeader, LogProblem, iter_segment, read_payload
from auditor.formats.binary import Reader
from auditor.formats.codecs import decompress
from auditor.formats.message import Field, Schema, decode as decode_message
from auditor.formats.records import decode_control, iter_records
from builders import kp_batch, marker

LIMIT = 1 << 20  # small inflate limit: random input must not allocate much either
# FUZZ_EXAMPLES=20000 for a longer hunt; the default keeps the file at a few seconds
FUZZ = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "400")), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@contextlib.contextmanager
def must_finish(seconds: int = 10):
    """Fail (instead of hanging the suite) if one example runs too long."""

    def boom(*_):
        raise AssertionError(f"decoder did not finish within {seconds} s")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# --------------------------------------------------------------------------- seeds
def _kp(codec: int, n: int, *, pid: int = -1, epoch: int = -1, seq: int = -1, txn: bool = False, base: int = 0) -> bytes:
    records = [
        (i, 1_000 + i, None if i % 3 == 0 else b"key-%d" % i, b"value %d " % i * 4,
         [("h", b"x"), ("n", None)] if i % 2 else [])
        for i in range(n)
    ]
    return kp_batch(records, codec=codec, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                    transactional=txn, base_offset=base)


def _marker(base: int, commit: bool) -> bytes:
    return marker(base, 1000, 0, commit=commit, coordinator_epoch=3, timestamp=5)


def _legacy(magic: int, codec: int) -> bytes:
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for i in range(3):
        b.append(i, timestamp=7, key=b"k", value=b"legacy value " * 3)
    return bytes(b.build())


SEEDS = [
    _kp(0, 3) + _kp(1, 8, base=3) + _marker(11, True),
    _kp(3, 10, pid=7, epoch=0, seq=0, txn=True) + _marker(10, False) + _kp(4, 6, base=11),
    _kp(4, 5, pid=9, epoch=1, seq=2**31 - 3) + _kp(0, 1, base=5),
    _legacy(0, 0) + _legacy(1, 1) + _kp(0, 2, base=4),
    _legacy(0, 2) + _legacy(1, 3) + _legacy(0, 1),  # wrappers: snappy, lz4, gzip
]


def run_segment(buf: bytes, start: int = 0) -> list:
    """Everything the ingest path does with a segment; only DecodeError may escape a record."""
    f = io.BytesIO(buf)
    items = []
    with must_finish():
        for item in iter_segment(f, start=start, file_size=len(buf)):
            items.append(item)
            if isinstance(item, LogProblem) or item.record_count < 0 and item.magic < 2:
                continue  # (a legacy wrapper whose records cannot be read: reported by the batch pass)
            try:
                for rec in iter_records(item, read_payload(f, item), limit=LIMIT):
                    if item.is_control:
                        try:
                            decode_control(rec.key, rec.value)
                        except DecodeError:
                            pass
            except DecodeError as exc:
                assert exc.kind in {"truncated", "bad-crc", "bad-length", "unknown-magic", "unknown-version",
                                    "inflate-limit", "corrupt"}
                assert exc.position >= 0
    # framing invariants: entries in order and inside the file, a problem only at the end
    pos = start
    for i, item in enumerate(items):
        if isinstance(item, LogProblem):
            assert i == len(items) - 1
            assert start <= item.position <= len(buf)
            assert item.kind in {"truncated", "zero-tail", "bad-length", "unknown-magic", "corrupt"}
        else:
            assert isinstance(item, BatchHeader)
            assert item.position == pos and item.size >= 26 and pos + item.size <= len(buf)
            pos += item.size
    return items


def test_seeds_are_clean() -> None:
    for seg in SEEDS:
        items = run_segment(seg)
        assert items and all(isinstance(i, BatchHeader) and i.crc_valid for i in items)


# --------------------------------------------------------------------------- segments
@FUZZ
@given(st.binary(max_size=600))
def test_random_bytes(buf: bytes) -> None:
    run_segment(buf)


@FUZZ
@given(st.sampled_from(range(len(SEEDS))), st.data())
def test_single_byte_mutation(seed: int, data) -> None:
    buf = bytearray(SEEDS[seed])
    i = data.draw(st.integers(0, len(buf) - 1))
    buf[i] = data.draw(st.integers(0, 255))
    run_segment(bytes(buf))


@FUZZ
@given(st.sampled_from(range(len(SEEDS))), st.data())
def test_truncation_and_zero_padding(seed: int, data) -> None:
    buf = SEEDS[seed]
    cut = data.draw(st.integers(0, len(buf)))
    pad = data.draw(st.sampled_from([0, 0, 5, 17, 200]))
    items = run_segment(buf[:cut] + bytes(pad))
    whole = run_segment(buf)
    # every entry that lies fully before the cut is still decoded, identically
    kept = [h for h in whole if h.position + h.size <= cut]
    assert items[: len(kept)] == kept


@FUZZ
@given(st.sampled_from(range(len(SEEDS))), st.data())
def test_start_anywhere(seed: int, data) -> None:
    """A Spark task may be handed any start position; a wrong one must fail cleanly."""
    buf = SEEDS[seed]
    run_segment(buf, start=data.draw(st.integers(0, len(buf))))


@FUZZ
@given(st.sampled_from(range(len(SEEDS))), st.data())
def test_mutated_payload_with_fixed_crc(seed: int, data) -> None:
    """Mutate a record byte and fix the CRC (CRC-32C of a v2 batch, CRC-32 of a legacy message),
    so the records (a legacy wrapper's inner messages) are parsed, not just flagged."""
    buf = bytearray(SEEDS[seed])
    h = data.draw(st.sampled_from(run_segment(bytes(buf))))
    end = h.position + h.size
    if h.magic == 2:
        i = data.draw(st.integers(h.position + 57, end - 1))  # record count and payload
        buf[i] = data.draw(st.integers(0, 255))
        struct.pack_into(">I", buf, h.position + 17, crc32c.crc32c(bytes(buf[h.position + 21: end])))
    else:
        i = data.draw(st.integers(h.position + 17, end - 1))  # attributes, timestamp, key, value
        buf[i] = data.draw(st.integers(0, 255))
        struct.pack_into(">I", buf, h.position + 12, zlib.crc32(bytes(buf[h.position + 16: end])))
    run_segment(bytes(buf))


# --------------------------------------------------------------------------- control records
@FUZZ
@given(st.one_of(st.none(), st.binary(max_size=12)), st.one_of(st.none(), st.binary(max_size=12)))
def test_decode_control_random(key, value) -> None:
    try:
        ctl = decode_control(key, value)
    except DecodeError:
        return
    assert ctl.control_type_id == struct.unpack_from(">h", key, 2)[0]
    if ctl.control_type_id in (0, 1):
        assert ctl.coordinator_epoch == struct.unpack_from(">i", value, 2)[0]
    else:
        assert ctl.coordinator_epoch is None


# --------------------------------------------------------------------------- codecs
def _xerial(data: bytes) -> bytes:
    out = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for i in range(0, len(data), 100):
        c = bytes(cramjam.snappy.compress_raw(data[i: i + 100]))
        out += struct.pack(">i", len(c)) + c
    return out


_TEXT = b"abcabcabc some text to compress " * 20
COMPRESSED = [
    (1, gzip.compress(_TEXT, mtime=0)),
    (2, bytes(cramjam.snappy.compress_raw(_TEXT))),
    (2, _xerial(_TEXT)),
    (3, lz4.frame.compress(_TEXT, block_linked=False)),
    (4, zstandard.ZstdCompressor().compress(_TEXT)),
]


@FUZZ
@given(st.integers(0, 7), st.binary(max_size=300), st.integers(0, 2))
def test_decompress_random(codec: int, data: bytes, magic: int) -> None:
    with must_finish():
        try:
            out = decompress(codec, data, limit=LIMIT, magic=magic)
        except DecodeError:
            return
    assert len(out) <= LIMIT


@FUZZ
@given(st.sampled_from(range(len(COMPRESSED))), st.data())
def test_decompress_mutated(which: int, data) -> None:
    codec, good = COMPRESSED[which]
    assert decompress(codec, good) == _TEXT
    buf = bytearray(good)
    op = data.draw(st.sampled_from(["flip", "cut", "append"]))
    if op == "flip":
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    elif op == "cut":
        del buf[data.draw(st.integers(0, len(buf) - 1)):]
    else:
        buf += data.draw(st.binary(min_size=1, max_size=20))
    with must_finish():
        try:
            decompress(codec, bytes(buf), limit=LIMIT, magic=data.draw(st.integers(0, 2)))
        except DecodeError:
            pass


# --------------------------------------------------------------------------- reader primitives
@FUZZ
@given(st.binary(max_size=40), st.lists(st.sampled_from(
    ["int8", "uint8", "int16", "int32", "int64", "uvarint", "varint", "varlong", "uuid",
     "string", "cstring", "bytes", "cbytes", "array", "carray", "boolean", "float64"]), max_size=12))
def test_reader_only_raises_decode_error(buf: bytes, ops: list[str]) -> None:
    r = Reader(buf)
    calls = {
        "string": lambda: r.string(False), "cstring": lambda: r.string(True),
        "bytes": lambda: r.bytes_field(False), "cbytes": lambda: r.bytes_field(True),
        "array": lambda: r.array_len(False), "carray": lambda: r.array_len(True),
    }
    try:
        for op in ops:
            before = r.pos
            calls[op]() if op in calls else getattr(r, op)()
            assert before <= r.pos <= len(buf)
    except DecodeError as exc:
        assert 0 <= exc.position <= len(buf)


# --------------------------------------------------------------------------- generated-message interpreter
_PARTS = Field("TransactionPartitions", "[]struct", nullable_versions="0+", fields=(
    Field("Topic", "string"), Field("PartitionIds", "[]int32"),
))
_SCHEMA = Schema(
    "FuzzValue",
    (
        Field("ProducerId", "int64"),
        Field("PreviousProducerId", "int64", versions="1+", tag=0, tagged_versions="1+", default=-1),
        Field("ProducerEpoch", "int16"),
        Field("Flag", "bool"),
        Field("Id", "uuid", versions="1+"),
        Field("Blob", "bytes", versions="1+", nullable_versions="1+"),
        _PARTS,
        Field("Start", "int64"),
    ),
    valid_versions="0-1",
    flexible_versions="1+",
)


@FUZZ
@given(st.integers(-1, 3), st.binary(max_size=120))
def test_message_interpreter_random(version: int, buf: bytes) -> None:
    with must_finish():
        try:
            decode_message(_SCHEMA, Reader(buf), version)
        except DecodeError as exc:
            assert exc.position >= 0


# --------------------------------------------------------------------------- every table decoder, real seeds
# One real file of each kind ingestion decodes, from sample_logs/: mutated (a byte replaced, a
# cut, a cut plus zeros, a 4-byte length-like field set to a huge or negative value, bytes
# appended) and run through what a Spark executor runs (``decode_task`` of every table that
# accepts the file, on the streaming and the columnar segment path). Decoders report bad input
# as problem rows; ``internal-error`` (any other exception, caught by decode_task) fails.
def _real_seeds() -> dict[str, tuple[str, bytes]]:
    from conftest import SAMPLE_LOGS
    from auditor.ingest.plan import make_plan

    seeds: dict[str, tuple[str, bytes]] = {}
    for t in make_plan([str(SAMPLE_LOGS / "hanging-late-write"), str(SAMPLE_LOGS / "consumer-offsets-hanging")]).tasks:
        label = t["kind"] if t["kind"] != "segment" else f"segment:{t['topic'] if t['topic'].startswith('__') else 'data'}"
        if label in seeds or not 0 < t["size"] <= 64 << 10:
            continue
        parent = os.path.basename(os.path.dirname(t["path"]))
        rel = os.path.join(parent, os.path.basename(t["path"])) if t["topic"] is not None else os.path.basename(t["path"])
        with open(t["path"], "rb") as f:
            seeds[label] = (rel, f.read())
    return seeds


REAL_SEEDS = _real_seeds()


def test_real_seeds_cover_every_decoder() -> None:
    assert {"segment:data", "segment:__transaction_state", "segment:__consumer_offsets", "segment:__cluster_metadata",
            "kraft-snapshot", "producer-snapshot", "txn-index", "offset-index", "time-index", "leader-epoch-checkpoint",
            "partition-metadata", "quorum-state", "meta-properties", "replication-offset-checkpoint"} <= set(REAL_SEEDS)


def _write_mutated(d: str, rel: str, seed: bytes, data) -> str:
    """``seed`` mutated 1-3 times (:func:`_mutate`), written at ``d/broker-1/rel``; its path."""
    buf = bytearray(seed)
    for _ in range(data.draw(st.integers(1, 3))):
        buf = _mutate(buf, data)
    path = os.path.join(d, "broker-1", rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(buf)
    return path


def _mutate(buf: bytearray, data) -> bytearray:
    op = data.draw(st.sampled_from(["flip", "cut", "zeros", "length", "append"]))
    if op == "flip" and buf:
        buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
    elif op == "cut":
        del buf[data.draw(st.integers(0, len(buf))):]
    elif op == "zeros":
        cut = data.draw(st.integers(0, len(buf)))
        buf[cut:] = bytes(data.draw(st.integers(0, 300)))
    elif op == "length" and len(buf) >= 4:
        i = data.draw(st.integers(0, len(buf) - 4))
        struct.pack_into(">i", buf, i, data.draw(st.sampled_from([2**31 - 1, -1, -2**31, 2**24, 70_000_000])))
    else:
        buf += data.draw(st.binary(min_size=1, max_size=64))
    return buf


@FUZZ
@given(st.sampled_from(sorted(REAL_SEEDS)), st.data())
def test_table_decoders_on_mutated_real_files(label: str, data) -> None:
    import tempfile

    from auditor.ingest.plan import make_plan
    from auditor.ingest.tables import TABLES, iter_rows

    rel, seed = REAL_SEEDS[label]
    with tempfile.TemporaryDirectory(prefix="fuzz-") as d:
        path = _write_mutated(d, rel, seed, data)
        tasks = make_plan([path]).tasks
        assert tasks or os.path.getsize(path) == 0, label
        for task in tasks:
            task["active"] = data.draw(st.booleans())  # streaming or columnar segment path
            for spec in TABLES.values():
                if not spec.accepts(task):
                    continue
                with must_finish():
                    rows = list(iter_rows(spec, task))
                bad = [r for r in rows if r.get("_problem_kind") == "internal-error"]
                assert not bad, (label, spec.name, bad[0]["_problem_message"])
                for r in rows:
                    if r.get("_problem_kind"):
                        assert r["_problem_position"] is None or r["_problem_position"] >= -1


# --------------------------------------------------------------------------- dump's compiled path
# ``dump``'s C extension (auditor/dump/_dumpv2.c) frames batches and checks CRCs itself. On the same
# mutations of real segments (every codec of the ``clean`` capture, markers, the internal topics,
# message formats 0 and 1), what ``dump`` writes through it, and the problems the Python path
# reports from where it stopped, must equal the per-object path's: a difference, a crash of the
# process (a read past a buffer) or a hang fails.
def _real_segments() -> list[tuple[str, bytes]]:
    from conftest import SAMPLE_LOGS
    from auditor.ingest.plan import make_plan

    roots = [SAMPLE_LOGS / s for s in ("clean", "hanging-late-write", "legacy-message-formats", "compacted-hanging")]
    out: dict[tuple, tuple[str, bytes]] = {}
    for t in make_plan([str(r) for r in roots]).tasks:
        if t["kind"] != "segment" or not 0 < t["size"] <= 64 << 10:
            continue
        key = (t["topic"], os.path.basename(os.path.dirname(os.path.dirname(t["path"]))))  # one per topic and capture
        if key not in out:
            with open(t["path"], "rb") as f:
                out[key] = (os.path.join(os.path.basename(os.path.dirname(t["path"])), os.path.basename(t["path"])),
                            f.read())
    return [out[k] for k in sorted(out)]


REAL_SEGMENTS = _real_segments()


def test_real_segments_for_the_extension_cover_codecs_and_formats() -> None:
    assert len(REAL_SEGMENTS) >= 10
    assert {b[16] for _, b in REAL_SEGMENTS if len(b) > 16} >= {0, 1, 2}  # the first entry's magic


@FUZZ
@given(st.sampled_from(range(len(REAL_SEGMENTS))), st.data())
def test_dump_extension_on_mutated_real_segments(which: int, data) -> None:
    import tempfile

    from test_dump_columnar import _reference

    from auditor.dump import _native as dump_native, _run as dump_run
    from auditor.ingest.plan import make_plan

    assert dump_native.available()
    rel, seed = REAL_SEGMENTS[which]
    with tempfile.TemporaryDirectory(prefix="fuzz-native-") as d:
        path = _write_mutated(d, rel, seed, data)
        for task in make_plan([path], split_bytes=1 << 62).tasks:
            if task["kind"] != "segment":
                continue
            for records in (False, True):  # --records: the extension's record walk too
                want = _reference(task, records)
                problems = []
                with must_finish(), open(os.path.join(d, "out"), "wb") as out:
                    for o in dump_run._fast_items(task, records, out):
                        if o["type"] == "problem":
                            problems.append(o)
                        else:  # an internal topic's rows, written as dump writes them
                            out.write((json.dumps(o, default=dump_run._json_default) + "\n").encode())
                with open(os.path.join(d, "out"), "rb") as f:
                    got = f.read()
                assert problems == want[1], (rel, records)
                assert got == want[0], (rel, records)
