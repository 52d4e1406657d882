"""Records inside a v2 batch or a legacy entry, and control records (transaction markers, KRaft).

Record iteration is what the internal topics need: ``__transaction_state``,
``__consumer_offsets`` and ``__cluster_metadata`` keep their state in record
keys and values. Data-topic payloads are never decoded by the audit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from auditor.errors import DecodeError
from auditor.formats import legacy
from auditor.formats.batch import BatchHeader, increment_sequence
from auditor.formats.binary import Reader
from auditor.formats.codecs import DEFAULT_INFLATE_LIMIT, decompress

CONTROL_TYPES = {
    0: "ABORT",
    1: "COMMIT",
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
    5: "KRAFT_VERSION",
    6: "KRAFT_VOTERS",
}


@dataclass(slots=True)
class Record:
    offset: int
    offset_delta: int
    timestamp: int
    sequence: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


@dataclass(slots=True)
class ControlRecord:
    control_type: str  # ABORT, COMMIT, ... or UNKNOWN(<id>)
    control_type_id: int
    coordinator_epoch: int | None  # only for ABORT/COMMIT markers


def iter_records(
    header: BatchHeader, payload: bytes, *, limit: int = DEFAULT_INFLATE_LIMIT
) -> Iterator[Record]:
    """Yield the records of a v2 batch, or of a legacy entry (``payload`` is then the message
    after its framing: the entry itself, or a compressed wrapper's inner messages; no sequence,
    no headers). Errors carry absolute file positions when the position lies in the
    uncompressed payload, else the payload start (for a legacy wrapper: its value's start)."""
    base = header.payload_position
    if header.magic in (0, 1):
        yield from _legacy_records(header, payload, limit)
        return
    if header.magic != 2:
        raise DecodeError(f"record iteration is not defined for magic {header.magic}", header.position + 16,
                          "unknown-magic")
    try:
        data = decompress(header.codec, payload, limit=limit, magic=header.magic)
    except DecodeError as exc:
        raise exc.at(base) from None
    compressed = header.codec != 0
    r = Reader(data)
    count = header.record_count
    if count < 0:
        raise DecodeError(f"negative record count {count}", header.position + 57, "corrupt")
    for _ in range(count):
        try:
            rec = _record(r, header)
        except DecodeError as exc:
            # inside a compressed stream a byte position has no place in the file:
            # point at the payload start instead
            raise (DecodeError(exc.message, base, exc.kind) if compressed else exc.at(base)) from None
        yield rec
    if r.remaining():
        where = base if compressed else base + r.pos
        raise DecodeError(f"{r.remaining()} bytes left after {count} records", where, "corrupt")


def _legacy_records(header: BatchHeader, payload: bytes, limit: int) -> Iterator[Record]:
    try:
        for offset, ts, key, value in legacy.iter_entry(header.last_offset, payload, limit=limit):
            yield Record(offset, offset - header.base_offset, ts, -1, None if key is None else bytes(key),
                         None if value is None else bytes(value), [])
    except DecodeError as exc:
        raise exc.at(header.payload_position) from None


def _record(r: Reader, header: BatchHeader) -> Record:
    length = r.varint()
    start = r.pos
    if length < 0 or length > r.remaining():
        raise DecodeError(f"record length {length} is invalid", start, "bad-length")
    r.int8()  # attributes, unused
    ts_delta = r.varlong()
    off_delta = r.varint()
    klen = r.varint()
    key = None if klen < 0 else r.take(klen, "record key")
    vlen = r.varint()
    value = None if vlen < 0 else r.take(vlen, "record value")
    nh = r.varint()
    if nh < 0:
        raise DecodeError(f"negative header count {nh}", r.pos, "corrupt")
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(nh):
        hk = r.varint()
        if hk < 0:
            raise DecodeError("null header key", r.pos, "corrupt")
        hkey = r.take(hk, "header key").decode("utf-8", "replace")
        hv = r.varint()
        headers.append((hkey, None if hv < 0 else r.take(hv, "header value")))
    if r.pos - start != length:
        raise DecodeError(f"record body is {r.pos - start} bytes, length says {length}", start, "corrupt")
    if header.timestamp_type == "LogAppendTime":
        ts = header.max_timestamp
    else:
        ts = header.base_timestamp + ts_delta
    seq = increment_sequence(header.base_sequence, off_delta) if header.base_sequence >= 0 else -1
    return Record(header.base_offset + off_delta, off_delta, ts, seq, key, value, headers)


def decode_control(key: bytes | None, value: bytes | None) -> ControlRecord:
    """Decode a control record's key (version, type) and, for markers, its value."""
    if key is None or len(key) < 4:
        raise DecodeError("control record key shorter than 4 bytes", 0, "corrupt")
    r = Reader(key)
    version = r.int16()
    if version < 0:
        raise DecodeError(f"negative control key version {version}", 0, "corrupt")
    type_id = r.int16()
    name = CONTROL_TYPES.get(type_id, f"UNKNOWN({type_id})")
    epoch = None
    if type_id in (0, 1):
        if value is None or len(value) < 6:
            raise DecodeError("transaction marker value shorter than 6 bytes", 0, "corrupt")
        vr = Reader(value)
        vversion = vr.int16()
        if vversion < 0:
            raise DecodeError(f"negative marker value version {vversion}", 0, "corrupt")
        epoch = vr.int32()
    return ControlRecord(name, type_id, epoch)
