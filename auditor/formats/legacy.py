"""Legacy (magic 0/1) entries of a segment, read the way Kafka's clients read them.

Before the v2 record batch (Kafka 0.11) a segment held *messages* (``LegacyRecord``): the
12-byte framing (offset int64, size int32), then crc int32, magic int8, attributes int8, a
timestamp int64 (magic 1 only), key and value (int32 length, -1 for null, then the bytes). A
message whose attributes name a codec is a *wrapper*: its value is a compressed message set,
inner messages with their own framing. Kafka reads one entry as one batch
(``AbstractLegacyRecordBatch``) and its inner messages as the batch's records
(``DeepRecordsIterator``); the rules, unchanged from 0.11 to 4.x, followed here:

* inner offsets: a magic-1 wrapper holds *relative* inner offsets and the absolute offset of
  its last inner message, so an inner message's offset is wrapper offset - last inner offset +
  its own (a wrapper offset of 0, written by some librdkafka versions, leaves them as they are;
  a wrapper offset below the last inner offset is invalid; Java long arithmetic). A magic-0
  wrapper's inner offsets are absolute.
* the batch's first offset (``baseOffset()``) is its first inner message's offset, its last
  offset the wrapper's own; an uncompressed entry is one record at the entry's offset.
* an inner message's timestamp: -1 for magic 0, the wrapper's when the wrapper is magic 1 with
  LogAppendTime, else its own.
* the inner set ends with the decompressed stream: a message cut off by its end ends the set
  (``DataLogInputStream.nextBatch`` returns null there), a size field below 14 is corrupt; an
  empty set, a compressed inner message, a wrapper with a null value and a zstd wrapper are
  invalid.
* codecs of that era: gzip, snappy (xerial framing or one raw block) and lz4 (Kafka's frame,
  whose header checksum magic-0 writers computed wrongly: not checked for magic 0), all in
  :mod:`auditor.formats.codecs`, with its inflate limit.

Decoding errors are :class:`DecodeError` with positions relative to the message (the bytes
after the framing); inside the compressed value they point at the value's first byte.
"""

from __future__ import annotations

import struct
from typing import Iterator

from auditor.errors import DecodeError
from auditor.formats.binary import wrap64
from auditor.formats.codecs import DEFAULT_INFLATE_LIMIT, decompress

FRAMING = 12
MIN_MESSAGE = 14  # LegacyRecord.RECORD_OVERHEAD_V0: crc, magic, attributes, key and value lengths
_FRAME = struct.Struct(">qi")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_ZSTD = 4
_LOG_APPEND_TIME = 0x08

LegacyRecord = tuple[int, int, "memoryview | None", "memoryview | None"]  # offset, timestamp, key, value


def _message(buf: memoryview, start: int, end: int) -> tuple[int, int, int, memoryview | None, memoryview | None, int]:
    """(magic, attributes, stored timestamp, key, value, value position) of the message ``buf[start:end]``."""
    if end - start < MIN_MESSAGE:
        raise DecodeError(f"legacy message of {end - start} bytes is shorter than {MIN_MESSAGE}", start, "bad-length")
    magic = buf[start + 4] - (256 if buf[start + 4] > 127 else 0)
    attrs = buf[start + 5]
    if magic == 0:
        ts, at = -1, start + 6
    else:  # LegacyRecord reads every magic but 0 with the v1 layout
        if end - start < MIN_MESSAGE + 8:
            raise DecodeError(f"magic {magic} message of {end - start} bytes has no room for its timestamp", start,
                              "bad-length")
        ts, at = _I64.unpack_from(buf, start + 6)[0], start + 14
    key, at = _sized(buf, at, end, "key")
    value, _ = _sized(buf, at, end, "value")
    return magic, attrs, ts, key, value, at


def _sized(buf: memoryview, at: int, end: int, what: str) -> tuple[memoryview | None, int]:
    """A length-prefixed field (``Utils.sizeDelimited``: a negative length is null)."""
    if at + 4 > end:
        raise DecodeError(f"legacy message {what} length cut off", at, "truncated")
    (n,) = _I32.unpack_from(buf, at)
    if n < 0:
        return None, at + 4
    if at + 4 + n > end:
        raise DecodeError(f"legacy message {what} of {n} bytes runs past the message", at, "truncated")
    return buf[at + 4:at + 4 + n], at + 4 + n


def _inner_frames(data: bytes) -> Iterator[tuple[int, int, int]]:
    """(stored offset, start, end) of each inner message, as ``DataLogInputStream`` reads them."""
    pos, n = 0, len(data)
    while n - pos >= FRAMING:
        offset, size = _FRAME.unpack_from(data, pos)
        if size < MIN_MESSAGE:
            raise DecodeError(f"inner message size {size} is below the minimum {MIN_MESSAGE}", pos + 8, "bad-length")
        if size > n - pos - FRAMING:
            return  # cut off by the end of the stream: Kafka's reader ends the set there
        yield offset, pos + FRAMING, pos + FRAMING + size
        pos += FRAMING + size


def iter_entry(offset: int, message: bytes | memoryview, *, limit: int = DEFAULT_INFLATE_LIMIT) -> Iterator[LegacyRecord]:
    """(offset, timestamp, key, value) of every record of the legacy entry at ``offset`` whose
    ``message`` (the bytes after its framing) is given: the entry itself when uncompressed, else
    its inner messages. Keys and values are views into ``message`` or the decompressed set."""
    buf = memoryview(message)
    magic, attrs, ts, key, value, value_at = _message(buf, 0, len(buf))
    codec = attrs & 0x07
    if codec == 0:
        yield offset, ts, key, value
        return
    if codec == _ZSTD:
        raise DecodeError(f"zstd is not a codec of magic {magic} messages", 5, "corrupt")
    if value is None:
        raise DecodeError("compressed legacy wrapper with a null value", value_at, "corrupt")
    try:
        data = decompress(codec, bytes(value), limit=limit, magic=magic)
    except DecodeError as exc:
        raise DecodeError(exc.message, value_at + 4, exc.kind) from None
    last = None
    for last, _, _ in _error_at(_inner_frames(data), value_at + 4):
        pass
    if last is None:
        raise DecodeError("compressed legacy wrapper with no inner messages", value_at + 4, "corrupt")
    base = 0
    if magic == 1 and offset != 0:
        if offset < last:
            raise DecodeError(f"wrapper offset {offset} is below its last inner offset {last}", 0, "corrupt")
        base = wrap64(offset - last)
    own_time = not (magic == 1 and attrs & _LOG_APPEND_TIME)
    inner = memoryview(data)
    for rel, start, end in _error_at(_inner_frames(data), value_at + 4):
        try:
            imagic, iattrs, its, ikey, ivalue, _ = _message(inner, start, end)
        except DecodeError as exc:
            raise DecodeError(f"inner message at offset {rel}: {exc.message}", value_at + 4, exc.kind) from None
        if iattrs & 0x07:
            raise DecodeError(f"inner message at offset {rel} is compressed itself", value_at + 4, "corrupt")
        stamp = -1 if imagic == 0 else (its if own_time or imagic != 1 else ts)
        yield (wrap64(base + rel) if magic == 1 else rel), stamp, ikey, ivalue


def _error_at(frames: Iterator[tuple[int, int, int]], position: int) -> Iterator[tuple[int, int, int]]:
    """The frames, with an error inside the decompressed set placed at the compressed value's start."""
    try:
        yield from frames
    except DecodeError as exc:
        raise DecodeError(exc.message, position, exc.kind) from None


def summary(offset: int, message: bytes | memoryview, *, limit: int = DEFAULT_INFLATE_LIMIT) -> tuple[int, int, int]:
    """(first offset, record count, first record's timestamp) of a legacy entry: what Kafka's
    ``baseOffset()`` gives and how many records its iteration yields."""
    first, count = None, 0
    for rec in iter_entry(offset, message, limit=limit):
        if first is None:
            first = rec
        count += 1
    assert first is not None  # iter_entry yields a record or raises
    return first[0], count, first[1]
