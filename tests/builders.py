"""Independent encoders for tests: kafka-python's record-batch builder for data
batches, and hand-assembled transaction markers (kafka-python cannot write
control batches). Nothing here uses the project's decoders."""

from __future__ import annotations

import struct

import crc32c
from kafka.record.default_records import DefaultRecordBatchBuilder

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


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
    b = DefaultRecordBatchBuilder(
        magic=2, compression_type=CODECS[codec], is_transactional=transactional,
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
        batch_size=1 << 24,
    )
    for i in range(n):
        b.append(i, timestamp=timestamp + i, key=b"k%d" % i, value=value, headers=[])
    raw = bytearray(b.build())
    # base offset and partition leader epoch are outside the CRC
    struct.pack_into(">q", raw, 0, base_offset)
    struct.pack_into(">i", raw, 12, leader_epoch)
    return bytes(raw)


def marker(
    offset: int, producer_id: int, producer_epoch: int, *, commit: bool, coordinator_epoch: int = 0,
    timestamp: int = 1_700_000_001_000, leader_epoch: int = 0,
) -> bytes:
    """A COMMIT/ABORT control batch as MemoryRecords.writeEndTransactionalMarker builds it."""
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, coordinator_epoch)
    body = bytes([0]) + _zz(0) + _zz(0) + _zz(len(key)) + key + _zz(len(value)) + value + _zz(0)
    record = _zz(len(body)) + body
    after_crc = struct.pack(">hiqqqhii", 0x30, 0, timestamp, timestamp, producer_id, producer_epoch, -1, 1) + record
    crc = crc32c.crc32c(after_crc)
    length = 4 + 1 + 4 + len(after_crc)  # leader epoch + magic + crc + rest
    return struct.pack(">qiibI", offset, length, leader_epoch, 2, crc) + after_crc


def _zz(v: int) -> bytes:
    u = (v << 1) ^ (v >> 63)
    out = bytearray()
    while True:
        b = u & 0x7F
        u >>= 7
        if u:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)
