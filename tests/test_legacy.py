"""Legacy (magic 0/1) entries read as Kafka reads them (auditor.formats.legacy), on every path:
the per-object header decoder, the columnar one, the batches table, ``dump`` (JSON, --records).

Ground truth: what kafka-python's LegacyRecordBatchBuilder was given (and the offset arithmetic
of Kafka's ``AbstractLegacyRecordBatch.DeepRecordsIterator``: a magic-1 wrapper holds relative
inner offsets and the absolute offset of its last inner message, a magic-0 wrapper absolute ones),
messages assembled by hand in tests/builders.py for what kafka-python cannot write, and, for
sample_logs/legacy-message-formats (a real 3.5.2 broker in ZooKeeper mode), the offsets its Java
producer was given for each produce request (expected.json). Kafka's own reading of the same
files is tests/test_dump_parity.py.
"""

from __future__ import annotations

import gzip
import io
import json
import struct

import kafka.codec
import kafka.record.legacy_records
import pytest

from auditor.dump import _run as dump_run
from auditor.formats.batch import BatchHeader, LogProblem, iter_segment, read_payload
from auditor.formats.batch_columnar import iter_header_batches
from auditor.formats.codecs import _xxh32
from auditor.formats.records import iter_records
from auditor.ingest.plan import make_plan
from auditor.ingest.tables import TABLES, iter_rows
from builders import CODECS, kp_batch, kp_legacy, legacy_message
from conftest import SAMPLE_LOGS

CAPTURE = SAMPLE_LOGS / "legacy-message-formats"
TS = 1_700_000_000_000


@pytest.fixture(autouse=True)
def _lz4_for_magic_0(monkeypatch):
    """kafka-python writes magic-0 lz4 through xxhash (not installed): a frame whose header
    checksum is wrong instead. Kafka does not check that checksum for magic 0 (old writers hashed
    the magic number too, KAFKA-3160), nor do we; the real broker's broken checksum is in CAPTURE."""
    def old_kafka(data: bytes) -> bytes:
        frame = bytearray(kafka.codec.lz4_encode(data))
        frame[6] ^= 0x5A
        return bytes(frame)

    monkeypatch.setattr(kafka.record.legacy_records, "lz4_encode_old_kafka", old_kafka)


def messages(n: int, first: int) -> list[tuple[int, int, bytes | None, bytes | None]]:
    return [(first + i, TS + i * 3, None if i % 3 == 0 else b"key-%d" % i, None if i % 4 == 3 else b"v" * (i + 1))
            for i in range(n)]


def decode(seg: bytes) -> tuple[list[BatchHeader], list]:
    """Per-object headers and their records; the columnar decoder must give the same rows."""
    f = io.BytesIO(seg)
    headers = [h for h in iter_segment(f, file_size=len(seg)) if not isinstance(h, LogProblem)]
    columnar = [row for b in iter_header_batches(io.BytesIO(seg)) for row in b.to_pylist()]
    assert columnar == [h.as_row() for h in headers]
    return headers, [list(iter_records(h, read_payload(f, h))) if h.record_count >= 0 else None for h in headers]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4"])
@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("n", [1, 5, 25])
def test_wrapper_offsets_counts_and_records(magic: int, codec: str, n: int) -> None:
    first = 1_000  # absolute offset of the first inner message
    last = first + n - 1
    # magic 1: inner offsets 0..n-1 relative, the wrapper carries the last absolute one;
    # magic 0: inner offsets absolute, the wrapper's is the last of them
    given = messages(n, 0 if magic == 1 else first)
    seg = kp_legacy(magic, CODECS[codec], given, offset=last) + kp_batch([(0, TS, None, b"after", [])], base_offset=last + 1)
    (h, v2), (recs, _) = decode(seg)
    assert (h.magic, h.compression, h.base_offset, h.last_offset, h.record_count) == (magic, codec, first, last, n)
    assert h.last_offset_delta == 0 and h.crc_valid
    want_ts = [-1 if magic == 0 else ts for _, ts, _, _ in given]
    assert (h.base_timestamp, h.max_timestamp) == (want_ts[0], -1 if magic == 0 else 0)  # kafka-python's wrapper: 0
    assert [(r.offset, r.timestamp, r.key, r.value, r.sequence, r.headers) for r in recs] == [
        (first + i, want_ts[i], k, v, -1, []) for i, (_, _, k, v) in enumerate(given)]
    assert v2.base_offset == last + 1  # framing goes on after the wrapper


def test_uncompressed_legacy_entries_are_one_record_each() -> None:
    seg = kp_legacy(0, 0, messages(2, 7)) + kp_legacy(1, 0, messages(3, 9))
    headers, recs = decode(seg)
    assert [(h.base_offset, h.last_offset, h.record_count) for h in headers] == [(o, o, 1) for o in range(7, 12)]
    assert [(r.offset, r.timestamp) for rs in recs for r in rs] == [(7, -1), (8, -1), (9, TS), (10, TS + 3), (11, TS + 6)]


def test_wrapper_offset_zero_keeps_inner_offsets() -> None:
    """AbstractLegacyRecordBatch: 'The outer offset may be 0 if this is produce data from certain
    versions of librdkafka': the relative offsets are then taken as they are."""
    (h,), (recs,) = decode(kp_legacy(1, CODECS["gzip"], messages(3, 4), offset=0))
    assert (h.base_offset, h.last_offset, h.record_count) == (4, 0, 3)
    assert [r.offset for r in recs] == [4, 5, 6]


def test_log_append_time_wrapper_stamps_its_inner_messages() -> None:
    inner = kp_legacy(1, 0, messages(3, 0))  # three v1 messages, offsets 0-2, their own CreateTime
    wrapper = legacy_message(52, 1, CODECS["gzip"] | 0x08, gzip.compress(inner, mtime=0), timestamp=TS + 999)
    (h,), (recs,) = decode(wrapper)
    assert (h.timestamp_type, h.base_offset, h.record_count, h.base_timestamp, h.max_timestamp) == (
        "LogAppendTime", 50, 3, TS + 999, TS + 999)
    assert [(r.offset, r.timestamp) for r in recs] == [(50, TS + 999), (51, TS + 999), (52, TS + 999)]


def test_inner_set_ends_where_the_stream_cuts_a_message_off() -> None:
    """DataLogInputStream.nextBatch returns null (end of set, no error) for a message the
    decompressed stream cuts off, framing or body."""
    inner = kp_legacy(1, 0, messages(2, 0))
    for tail in (inner[:5], kp_legacy(1, 0, messages(1, 2))[:-1]):
        (h,), (recs,) = decode(legacy_message(1, 1, CODECS["gzip"], gzip.compress(inner + tail, mtime=0)))
        assert (h.base_offset, h.record_count, [r.offset for r in recs]) == (0, 2, [0, 1])


def gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


INNER = kp_legacy(1, 0, messages(2, 0))
BAD_WRAPPERS = {
    # relative inner offsets 5 and 6, wrapper offset 3
    "wrapper offset below the last inner offset": (legacy_message(3, 1, 1, gz(kp_legacy(1, 0, messages(2, 5)))),
                                                   "corrupt", "below its last inner offset"),
    "no inner messages": (legacy_message(3, 1, 1, gz(b"")), "corrupt", "no inner messages"),
    "null value": (legacy_message(3, 1, 1, None), "corrupt", "null value"),
    "zstd wrapper": (legacy_message(3, 1, 4, b"\x28\xb5\x2f\xfd"), "corrupt", "zstd"),
    "compressed inner message": (legacy_message(3, 1, 1, gz(legacy_message(0, 1, 1, gz(INNER)))), "corrupt",
                                 "compressed itself"),
    "inner size below 14": (legacy_message(3, 1, 1, gz(struct.pack(">qi", 0, 13) + bytes(13))), "bad-length",
                            "below the minimum"),
    "not gzip": (legacy_message(3, 0, 1, b"not gzip at all"), "corrupt", "gzip"),
}


@pytest.mark.parametrize("name", list(BAD_WRAPPERS))
def test_unreadable_wrapper_is_a_problem_not_the_end(tmp_path, name: str) -> None:
    """A wrapper whose records cannot be read keeps its own offset with record_count -1, every
    path reports one non-fatal problem at it, and the entries after it are read on."""
    bad, kind, words = BAD_WRAPPERS[name]
    first = kp_legacy(1, 0, messages(1, 0), offset=0)
    seg = first + bad + kp_batch([(0, TS, None, b"x", [])], base_offset=7)
    headers, recs = decode(seg)
    assert [(h.base_offset, h.last_offset, h.record_count) for h in headers] == [(0, 0, 1), (3, 3, -1), (7, 7, 1)]
    assert recs[1] is None
    d = tmp_path / "t-0"
    d.mkdir()
    (d / "00000000000000000000.log").write_bytes(seg)
    (task,) = make_plan([str(d)], split_bytes=1 << 62).tasks
    for active in (True, False):  # the streaming and the columnar table paths
        rows = list(iter_rows(TABLES["batches"], {**task, "active": active}))
        problems = [r for r in rows if r.get("_problem_kind")]
        assert [p["_problem_kind"] for p in problems] == [kind]
        assert len(first) <= problems[0]["_problem_position"] < len(first) + len(bad)
        assert words in problems[0]["_problem_message"] and "legacy wrapper at offset 3" in problems[0]["_problem_message"]
        assert [r["record_count"] for r in rows if not r.get("_problem_kind")] == [1, -1, 1]
    reference = [o for o in dump_run._objects(task, True)]
    fast_out = io.BytesIO()
    fast = [o for o in dump_run._fast_items(task, True, fast_out)]
    assert [o for o in reference if o["type"] == "problem"] == fast == [
        {"type": "problem", "file": task["path"], "table": "batches", "kind": kind,
         "position": problems[0]["_problem_position"], "message": problems[0]["_problem_message"]}]
    records = [o for o in reference if o["type"] == "record"]
    assert [r["offset"] for r in records] == [0, 7]  # the unreadable wrapper contributes none


# --------------------------------------------------------------------------- the real capture
def _capture_tasks() -> list[dict]:
    tasks = [t for t in make_plan([str(CAPTURE)], split_bytes=1 << 62).tasks if t["kind"] == "segment"]
    assert len(tasks) == 9
    return tasks


def test_capture_entries_are_the_produce_requests() -> None:
    """Each produce request of the capture is one v2 batch that the broker converted to one wrapper
    (compressed) or to one message per record: first/last offsets and counts from the producer."""
    steps = json.loads((CAPTURE / "expected.json").read_text())["steps"]["topics"]
    seen = set()
    for task in _capture_tasks():
        want = steps[f"{task['topic']}-{task['partition']}"]
        rows = [r for r in iter_rows(TABLES["batches"], task) if not r.get("_problem_kind")]
        assert {r["magic"] for r in rows} == {want["magic"]}
        requests = want["produce_requests"]
        if want["producer_compression"] == "none":
            expected = [(o, o, 1) for offsets in requests for o in offsets]
        else:
            expected = [(offsets[0], offsets[-1], len(offsets)) for offsets in requests]
            assert {r["compression"] for r in rows} == {want["producer_compression"]}
        assert [(r["base_offset"], r["last_offset"], r["record_count"]) for r in rows] == expected, task["path"]
        if want["timestamp_type"] == "LogAppendTime":
            assert all(r["base_timestamp"] == r["max_timestamp"] > 0 for r in rows)
        seen.add((want["magic"], want["producer_compression"]))
    assert seen == {(m, c) for m in (0, 1) for c in ("none", "gzip", "snappy", "lz4")}


def test_capture_dump_records_are_the_inner_messages() -> None:
    """``dump --records`` (the fast path, as the command runs it) writes every record produced."""
    steps = json.loads((CAPTURE / "expected.json").read_text())["steps"]["topics"]
    for task in _capture_tasks():
        out = io.BytesIO()
        assert list(dump_run._fast_items(task, True, out)) == []
        lines = [json.loads(x) for x in out.getvalue().splitlines()]
        records = [o for o in lines if o["type"] == "record"]
        produced = steps[f"{task['topic']}-{task['partition']}"]["produce_requests"]
        assert [r["offset"] for r in records] == [o for offsets in produced for o in offsets]
        assert all(r["sequence"] == -1 and r["header_keys"] == [] for r in records)


def test_capture_lz4_format_0_has_the_broken_header_checksum() -> None:
    """The 3.5.2 broker wrote format-0 lz4 wrappers with KafkaLZ4BlockOutputStream's old header
    checksum (over the magic number too): the case the lz4 codec must not check for magic 0."""
    (task,) = [t for t in _capture_tasks() if t["topic"] == "format0-lz4"]
    data = open(task["path"], "rb").read()
    headers = [h for h in iter_segment(io.BytesIO(data), file_size=len(data)) if not isinstance(h, LogProblem)]
    assert headers and all(h.compression == "lz4" and h.record_count > 0 for h in headers)
    for h in headers:
        msg = data[h.payload_position:h.position + h.size]
        frame = msg[4 + 2 + 4 + 4:]  # crc, magic, attributes, key -1 (magic 0: no timestamp), value length
        assert frame[:4] == b"\x04\x22\x4d\x18"
        assert frame[6] == (_xxh32(frame[0:6]) >> 8) & 0xFF != (_xxh32(frame[4:6]) >> 8) & 0xFF
