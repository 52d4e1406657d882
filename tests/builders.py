"""Independent encoders for tests: kafka-python's record-batch builders for data
batches and legacy entries, and hand-assembled transaction markers (kafka-python cannot write
control batches), plus the primitive Kafka encodings (varints, int16/compact
strings, int32 arrays) and ``__transaction_state`` records that tests and
scripts/make_sample_logs.py assemble by hand. Nothing here uses the project's
decoders (no import from ``auditor``), so tests built on it check the decoders
against an independent writer."""

from __future__ import annotations

import struct
import zlib
from typing import Iterable

import crc32c
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


# ---------------------------------------------------------------- primitives
def uvarint(n: int) -> bytes:
    """Unsigned varint (7 bits a byte, low group first, high bit = more): the
    lengths, counts and tags of flexible message versions."""
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def zigzag_varint(n: int) -> bytes:
    """Signed varint as v2 records use it: zig-zag ``(n << 1) ^ (n >> 63)``, then
    :func:`uvarint` (so -1 is ``01``, 1 is ``02``)."""
    return uvarint((n << 1) ^ (n >> 63))


def s16(s: str | None) -> bytes:
    """Non-flexible STRING / NULLABLE_STRING: int16 length + UTF-8, null = length -1."""
    if s is None:
        return struct.pack(">h", -1)
    raw = s.encode("utf-8")
    return struct.pack(">h", len(raw)) + raw


def cstr(s: str | None) -> bytes:
    """Flexible (compact) string: uvarint(length + 1) + UTF-8, null = ``00``."""
    if s is None:
        return uvarint(0)
    raw = s.encode("utf-8")
    return uvarint(len(raw) + 1) + raw


def i32s(xs: Iterable[int]) -> bytes:
    """The elements of an int32 array, without its count."""
    return b"".join(struct.pack(">i", x) for x in xs)


def arr_i32(xs: list[int]) -> bytes:
    """Non-flexible ARRAY of INT32: int32 count + elements."""
    return struct.pack(">i", len(xs)) + i32s(xs)


def carr_i32(xs: list[int]) -> bytes:
    """Flexible (compact) ARRAY of INT32: uvarint(count + 1) + elements."""
    return uvarint(len(xs) + 1) + i32s(xs)


# ---------------------------------------------------------------- __transaction_state
def txn_log_key_v0(transactional_id: str) -> bytes:
    """TransactionLogKey v0 behind its int16 version prefix (docs/on-disk-format.md §4)."""
    return struct.pack(">h", 0) + s16(transactional_id)


def txn_log_value_v0(
    producer_id: int,
    producer_epoch: int,
    timeout_ms: int,
    state_id: int,
    partitions: Iterable[tuple[str, list[int]]] | None,
    last_update_ms: int,
    start_ms: int,
) -> bytes:
    """TransactionLogValue v0 behind its int16 version prefix (non-flexible).

    ``partitions`` are (topic, partition ids) pairs; None encodes a null array
    (int32 -1), which is what the coordinator writes for state Empty.
    """
    out = struct.pack(">hqhib", 0, producer_id, producer_epoch, timeout_ms, state_id)
    if partitions is None:
        out += struct.pack(">i", -1)
    else:
        partitions = list(partitions)
        out += struct.pack(">i", len(partitions))
        for topic, ids in partitions:
            out += s16(topic) + arr_i32(ids)
    return out + struct.pack(">qq", last_update_ms, start_ms)


# ---------------------------------------------------------------- batches
def kp_batch(
    records: list[tuple[int, int, bytes | None, bytes | None, list]],
    *,
    codec: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    base_offset: int = 0,
    leader_epoch: int = 0,
    batch_size: int = 1 << 26,
) -> bytes:
    """A v2 batch written by kafka-python from (offset delta, timestamp, key,
    value, headers) tuples; base offset and leader epoch patched in like a
    leader does (neither is under the CRC). ``batch_size`` bounds the records'
    uncompressed size."""
    b = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=transactional, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence, batch_size=batch_size,
    )
    for delta, ts, key, value, headers in records:
        assert b.append(delta, timestamp=ts, key=key, value=value, headers=headers) is not None
    buf = bytearray(b.build())
    struct.pack_into(">q", buf, 0, base_offset)
    struct.pack_into(">i", buf, 12, leader_epoch)
    return bytes(buf)


def kp_legacy(magic: int, codec: int, msgs: list[tuple[int, int, bytes | None, bytes | None]], *,
              offset: int | None = None) -> bytes:
    """A legacy entry written by kafka-python from (offset, timestamp, key, value) tuples: one
    message per tuple, or with ``codec`` one wrapper holding them as inner messages (kafka-python
    writes the wrapper with offset 0 and timestamp 0: ``offset`` patches the wrapper's in, as the
    broker assigns it; the offset is not under the CRC)."""
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 26)
    for off, ts, k, v in msgs:
        assert b.append(off, timestamp=ts, key=k, value=v) is not None
    buf = bytearray(b.build())
    if offset is not None:
        struct.pack_into(">q", buf, 0, offset)
    return bytes(buf)


def legacy_message(offset: int, magic: int, attributes: int, value: bytes | None, *, key: bytes | None = None,
                   timestamp: int = 0) -> bytes:
    """One legacy message assembled by hand (framing, CRC-32 from magic on): what kafka-python
    refuses to write (a zstd or LogAppendTime wrapper, a wrapper around any bytes)."""
    body = struct.pack(">bb", magic, attributes) + (struct.pack(">q", timestamp) if magic else b"")
    for field in (key, value):
        body += struct.pack(">i", -1) if field is None else struct.pack(">i", len(field)) + field
    body = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(body)) + body


def data_batch(
    base_offset: int,
    n: int = 1,
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    codec: str = "none",
    timestamp: int = 1_700_000_000_000,
    leader_epoch: int = 0,
    value: bytes = b"value",
) -> bytes:
    """n records (keys k0, k1, ..., 1 ms apart) in one kafka-python batch."""
    return kp_batch(
        [(i, timestamp + i, b"k%d" % i, value, []) for i in range(n)],
        codec=CODECS[codec], producer_id=producer_id, producer_epoch=producer_epoch,
        base_sequence=base_sequence, transactional=transactional, base_offset=base_offset,
        leader_epoch=leader_epoch,
    )


def marker(
    offset: int, producer_id: int, producer_epoch: int, *, commit: bool, coordinator_epoch: int = 0,
    timestamp: int = 1_700_000_001_000, leader_epoch: int = 0,
) -> bytes:
    """A COMMIT/ABORT control batch as MemoryRecords.writeEndTransactionalMarker builds it."""
    zz = zigzag_varint
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, coordinator_epoch)
    body = bytes([0]) + zz(0) + zz(0) + zz(len(key)) + key + zz(len(value)) + value + zz(0)
    record = zz(len(body)) + body
    after_crc = struct.pack(">hiqqqhii", 0x30, 0, timestamp, timestamp, producer_id, producer_epoch, -1, 1) + record
    crc = crc32c.crc32c(after_crc)
    length = 4 + 1 + 4 + len(after_crc)  # leader epoch + magic + crc + rest
    return struct.pack(">qiibI", offset, length, leader_epoch, 2, crc) + after_crc


_V2_HEADER = struct.Struct(">qiibIhiqqqhii")


def sparse_segment(path, attributes: int, size: int, length: int = 2**31 - 1) -> None:
    """A segment of ``size`` bytes (sparse: no disk blocks behind it) holding one v2 batch
    header at position 0 whose length field claims ``length`` bytes (default 2^31-1), the
    rest zeros: what a decoder must judge before reading."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(_V2_HEADER.pack(0, length, 0, 2, 0, attributes, 0, 0, 0, 7, 0, -1, 1))
        f.truncate(size)
