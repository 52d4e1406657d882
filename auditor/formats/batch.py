"""Streaming decoder for log segments: v2 record-batch headers and legacy entries.

A segment is read entry by entry: 12 bytes of framing (offset, size), the magic
byte at entry offset 16, then either a 61-byte v2 header or a v0/v1 message.
Payloads are never held whole: the CRC-32C is computed over the batch in
chunks, so a 1 GiB segment costs one chunk of memory, not 1 GiB. The one
exception is a compressed legacy wrapper, whose first offset and record count
only its inner messages tell (:func:`legacy_fields`): its payload is read and
inflated, within ``MAX_PAYLOAD_BYTES`` and the codecs' inflate limit.

Framing is lost after a corrupt length or unknown magic, so decoding stops
there and a :class:`LogProblem` with the byte position is yielded last. A bad
CRC does not break framing: the batch is yielded with ``crc_valid=False`` and
decoding goes on, exactly as Kafka's own dump tool does.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, fields
from typing import BinaryIO, Callable, Iterator

from auditor.formats.binary import wrap64
from auditor.formats.crc import crc32c

from auditor.errors import DecodeError, TruncatedError
from auditor.formats import legacy
from auditor.formats.codecs import codec_name

LOG_OVERHEAD = 12
V2_HEADER = 61
MIN_ENTRY_SIZE = 14  # Kafka's minimum "size" field (a v0 message header)
# larger length fields are corrupt (bad-length), never read, even in a file that long (a sparse or
# zero-filled one): far beyond any broker's practical message.max.bytes
ABSURD_BATCH_BYTES = 128 * 1024 * 1024
_CHUNK = 1 << 20
# the most bytes of one batch's payload read into memory to decode its records: as much as
# a compressed payload may inflate to (codecs.DEFAULT_INFLATE_LIMIT); brokers default to 1 MiB
MAX_PAYLOAD_BYTES = 64 * 1024 * 1024

NO_PRODUCER_ID = -1
INT32_MAX = 2**31 - 1

_V2 = struct.Struct(">qiibIhiqqqhii")  # base..records_count (61 bytes)
_LEGACY = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes


def increment_sequence(seq: int, inc: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence: wraps past Integer.MAX_VALUE to 0."""
    if seq < 0:
        return -1
    if seq > INT32_MAX - inc:
        return inc - (INT32_MAX - seq) - 1
    return seq + inc


# The header columns of a batch, as the columnar decoder (auditor/formats/batch_columnar.py, which
# builds its Arrow schema from them) and `dump`'s lines (auditor/dump/_lines.py) have them: same
# names and order as BatchHeader.as_row(); types as in the batches table
# (auditor.ingest.segments.BATCH_COLUMNS) except ``attributes``: the header field is an unsigned
# 16-bit value there (0..65535) that int16 cannot hold when a corrupt header sets bit 15, so it is
# int32 here. Kept here, with no numpy, so that `dump`'s compiled path needs none.
COLUMN_TYPES: list[tuple[str, str]] = [
    ("position", "int64"),
    ("size", "int32"),
    ("base_offset", "int64"),
    ("last_offset", "int64"),
    ("last_offset_delta", "int32"),
    ("partition_leader_epoch", "int32"),
    ("magic", "int8"),
    ("crc", "int64"),
    ("crc_valid", "bool_"),
    ("attributes", "int32"),
    ("compression", "string"),
    ("timestamp_type", "string"),
    ("is_transactional", "bool_"),
    ("is_control", "bool_"),
    ("has_delete_horizon", "bool_"),
    ("base_timestamp", "int64"),
    ("max_timestamp", "int64"),
    ("delete_horizon_ms", "int64"),
    ("producer_id", "int64"),
    ("producer_epoch", "int16"),
    ("base_sequence", "int32"),
    ("last_sequence", "int32"),
    ("record_count", "int32"),
]
COLUMN_NAMES: list[str] = [name for name, _ in COLUMN_TYPES]
# compression names by codec id (attributes & 7), as codec_name() spells them
CODEC_NAMES: list[str] = [codec_name(i) for i in range(8)]
# timestamp_type by index: 0 CreateTime, 1 LogAppendTime, 2 NoTimestampType (magic 0)
TS_TYPE_NAMES: list[str] = ["CreateTime", "LogAppendTime", "NoTimestampType"]


@dataclass(slots=True)
class BatchHeader:
    """One entry of a segment. A legacy (magic 0/1) entry reads as Kafka reads it
    (:func:`legacy_fields`): ``last_offset`` is the entry's offset, ``base_offset``,
    ``record_count`` and ``base_timestamp`` those of its first record (a compressed
    wrapper's inner messages), ``max_timestamp`` the entry's own; producer fields stay -1
    and ``last_offset_delta`` 0 (none is stored)."""

    position: int
    size: int  # whole entry, framing included
    base_offset: int
    last_offset: int
    last_offset_delta: int
    partition_leader_epoch: int
    magic: int
    crc: int
    crc_valid: bool
    attributes: int
    compression: str
    timestamp_type: str
    is_transactional: bool
    is_control: bool
    has_delete_horizon: bool
    base_timestamp: int
    max_timestamp: int
    delete_horizon_ms: int | None
    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    record_count: int

    @property
    def codec(self) -> int:
        return self.attributes & 0x07

    @property
    def payload_position(self) -> int:
        return self.position + (V2_HEADER if self.magic >= 2 else LOG_OVERHEAD)

    def as_row(self) -> dict:
        """The header as a table row. Its fields are scalars: a shallow dict, not ``asdict``'s deep
        copy (which took two thirds of a segment's decode on the per-batch path)."""
        return {name: getattr(self, name) for name in _HEADER_FIELDS}


_HEADER_FIELDS = tuple(f.name for f in fields(BatchHeader))


@dataclass(slots=True)
class LogProblem:
    """Why decoding of a segment stopped early (or what its tail looked like)."""

    kind: str  # truncated | zero-tail | bad-length | unknown-magic | corrupt | io-error
    position: int
    message: str


def is_zero_range(f: BinaryIO, start: int, end: int) -> bool:
    """True if bytes ``start``..``end`` of ``f`` are all zero (EOF before ``end`` counts as zero).

    Brokers preallocate the active segment's files (``.log`` with
    log.preallocate, ``.index``/``.timeindex`` always) and fill them with
    zeros, so a zero tail is unused space, not corruption. Reads in 1 MiB
    chunks so a 10 MiB preallocated index never sits in memory at once.
    """
    f.seek(start)
    left = end - start
    while left > 0:
        chunk = f.read(min(left, _CHUNK))
        if not chunk:
            return True
        if chunk.count(0) != len(chunk):
            return False
        left -= len(chunk)
    return True


def _crc32c_range(f: BinaryIO, start: int, length: int, first: bytes) -> tuple[int, int]:
    """CRC-32C over ``first`` + the next ``length`` bytes at ``start``; returns (crc, bytes read)."""
    value = crc32c(first)
    f.seek(start)
    left = length
    read = 0
    while left > 0:
        chunk = f.read(min(left, _CHUNK))
        if not chunk:
            break
        value = crc32c(chunk, value=value)
        left -= len(chunk)
        read += len(chunk)
    return value, read


def iter_segment(
    f: BinaryIO,
    *,
    start: int = 0,
    end: int | None = None,
    file_size: int,
    verify_crc: bool = True,
) -> Iterator[BatchHeader | LogProblem]:
    """Yield the entries of a segment whose start position lies in [start, end).

    ``f`` must be seekable and opened read-only. ``end`` bounds where entries may
    *start* (an entry straddling ``end`` is still read whole), which lets a
    Spark task own a byte range of a large segment. ``file_size`` is what the
    file held when it was sized: bytes appended since are not read, and a file
    that shrank since ends in a ``truncated`` problem where its bytes end.
    """
    stop = file_size if end is None else min(end, file_size)
    pos = start
    while pos < stop:
        left = file_size - pos
        f.seek(pos)
        head = f.read(min(V2_HEADER, left))
        if len(head) < min(V2_HEADER, left):  # the file shrank since it was sized: judge what it holds now
            if not head:
                return  # it ends at this entry boundary now
            left = len(head)
        if len(head) < 17:
            if head.count(0) == len(head):
                yield LogProblem("zero-tail", pos, f"{len(head)} zero bytes after the last entry")
            else:
                yield LogProblem("truncated", pos, f"{len(head)} trailing bytes, too few for an entry header")
            return
        offset, size = struct.unpack_from(">qi", head, 0)
        magic = head[16] if head[16] < 128 else head[16] - 256
        if size < MIN_ENTRY_SIZE:
            if offset == 0 and size == 0 and is_zero_range(f, pos, file_size):
                yield LogProblem("zero-tail", pos, f"zero-filled (preallocated) tail of {left} bytes")
            else:
                yield LogProblem("bad-length", pos + 8, f"entry size field {size} is below the minimum {MIN_ENTRY_SIZE}")
            return
        entry = LOG_OVERHEAD + size
        if size > ABSURD_BATCH_BYTES:  # judged before a byte of it is read, even when the file is that long
            yield LogProblem("bad-length", pos + 8, f"entry size field {size} is absurd (over {ABSURD_BATCH_BYTES} bytes; "
                                                    f"{left} bytes left in file)")
            return
        if entry > left:
            yield LogProblem("truncated", pos, f"entry of {entry} bytes is cut off: only {left} bytes left")
            return
        if magic in (0, 1):
            item = _legacy(f, pos, head, entry, verify_crc)
        elif magic == 2:
            if entry < V2_HEADER:
                yield LogProblem("bad-length", pos + 8, f"v2 batch length {size} is shorter than the 61-byte header")
                return
            item = _v2(f, pos, head, entry, verify_crc)
        else:
            yield LogProblem("unknown-magic", pos + 16, f"unknown magic byte {magic}")
            return
        yield item
        if isinstance(item, LogProblem):
            return
        pos += entry


def _cut(pos: int, entry: int, held: int) -> LogProblem:
    """An entry whose bytes ended early while its CRC was computed (the file shrank since it was sized)."""
    return LogProblem("truncated", pos, f"entry of {entry} bytes is cut off: only {held} bytes left")


def _v2(f: BinaryIO, pos: int, head: bytes, entry: int, verify_crc: bool) -> BatchHeader | LogProblem:
    (base, _len, ple, magic, crc, attrs, lod, base_ts, max_ts, pid, epoch, base_seq, count) = _V2.unpack_from(head, 0)
    if verify_crc:
        computed, read = _crc32c_range(f, pos + V2_HEADER, entry - V2_HEADER, head[21:V2_HEADER])
        if read < entry - V2_HEADER:
            return _cut(pos, entry, V2_HEADER + read)
        valid = computed == crc
    else:
        valid = True
    attrs &= 0xFFFF
    has_dh = bool(attrs & 0x40)
    return BatchHeader(
        position=pos,
        size=entry,
        base_offset=base,
        last_offset=wrap64(base + lod),
        last_offset_delta=lod,
        partition_leader_epoch=ple,
        magic=magic,
        crc=crc,
        crc_valid=valid,
        attributes=attrs,
        compression=codec_name(attrs & 0x07),
        timestamp_type="LogAppendTime" if attrs & 0x08 else "CreateTime",
        is_transactional=bool(attrs & 0x10),
        is_control=bool(attrs & 0x20),
        has_delete_horizon=has_dh,
        base_timestamp=base_ts,
        max_timestamp=max_ts,
        delete_horizon_ms=base_ts if has_dh else None,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=base_seq,
        last_sequence=increment_sequence(base_seq, lod) if base_seq >= 0 else -1,
        record_count=count,
    )


def _legacy(f: BinaryIO, pos: int, head: bytes, entry: int, verify_crc: bool) -> BatchHeader | LogProblem:
    offset, size, crc, magic, attrs = _LEGACY.unpack_from(head, 0)
    ts = -1
    if magic == 1 and len(head) >= 26:
        (ts,) = struct.unpack_from(">q", head, 18)
    valid = True
    if verify_crc:
        f.seek(pos + 16)
        left = entry - 16
        value = 0
        while left > 0:
            chunk = f.read(min(left, _CHUNK))
            if not chunk:
                return _cut(pos, entry, entry - left)
            value = zlib.crc32(chunk, value)
            left -= len(chunk)
        valid = value == crc
    attrs &= 0xFF
    ts_type = "NoTimestampType" if magic == 0 else ("LogAppendTime" if attrs & 0x08 else "CreateTime")
    base, count, base_ts = legacy_fields(offset, attrs, ts, entry - LOG_OVERHEAD,
                                         lambda: _read_at(f, pos + LOG_OVERHEAD, entry - LOG_OVERHEAD))
    return BatchHeader(
        position=pos,
        size=entry,
        base_offset=base,
        last_offset=offset,
        last_offset_delta=0,
        partition_leader_epoch=-1,
        magic=magic,
        crc=crc,
        crc_valid=valid,
        attributes=attrs,
        compression=codec_name(attrs & 0x07),
        timestamp_type=ts_type,
        is_transactional=False,
        is_control=False,
        has_delete_horizon=False,
        base_timestamp=base_ts,
        max_timestamp=ts,
        delete_horizon_ms=None,
        producer_id=NO_PRODUCER_ID,
        producer_epoch=-1,
        base_sequence=-1,
        last_sequence=-1,
        record_count=count,
    )


def _read_at(f: BinaryIO, pos: int, n: int) -> bytes:
    f.seek(pos)
    return f.read(n)


def legacy_fields(offset: int, attrs: int, timestamp: int, n: int, read: Callable[[], bytes]) -> tuple[int, int, int]:
    """(base_offset, record_count, base_timestamp) of the legacy entry at ``offset`` as Kafka
    reads it (:mod:`auditor.formats.legacy`): an uncompressed entry is one record; a compressed
    wrapper's first offset, count and first timestamp are its inner messages'. ``read()``
    gives the ``n`` bytes after the framing, called for a wrapper of at most
    ``MAX_PAYLOAD_BYTES`` only. A wrapper whose inner messages cannot be read keeps its own
    offset and timestamp with record_count -1 (``segments.legacy_problem`` says why)."""
    if not attrs & 0x07:
        return offset, 1, timestamp
    if n > MAX_PAYLOAD_BYTES:
        return offset, -1, timestamp
    try:
        return legacy.summary(offset, read())
    except DecodeError:
        return offset, -1, timestamp


def read_payload(f: BinaryIO, header: BatchHeader, *, limit: int = MAX_PAYLOAD_BYTES) -> bytes:
    """The (possibly compressed) bytes after the header of one v2 batch (of a legacy
    entry: the message after the framing).

    The length comes from the batch's own length field, which a corrupt or
    hostile segment sets to anything up to 2 GiB: a payload larger than
    ``limit`` is refused (``bad-length`` at the length field) before anything
    is read, and one the file does not hold is ``truncated``, so decoding
    records never allocates more than ``limit`` bytes for a payload.
    """
    n = header.size - (header.payload_position - header.position)
    if n < 0:  # f.read(-1) would read the whole file
        raise DecodeError(f"batch size {header.size} leaves no room for its header", header.position + 8, "bad-length")
    if n > limit:
        raise DecodeError(
            f"batch length {header.size - LOG_OVERHEAD} gives a {n}-byte payload, over the {limit}-byte limit "
            "for decoding records", header.position + 8, "bad-length")
    f.seek(header.payload_position)
    data = f.read(n)
    if len(data) < n:
        raise TruncatedError(f"batch payload of {n} bytes is cut off after {len(data)} bytes",
                             header.payload_position + len(data))
    return data
