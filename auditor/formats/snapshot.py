"""Producer-state snapshot files (``<offset>.snapshot`` in a partition directory).

The broker writes one of these on every segment roll and on clean shutdown;
on restart it loads the newest one and replays the log from its offset. So a
snapshot is the broker's own view of every producer on the partition at that
offset: epoch, last sequence, last coordinator epoch and -- what matters for
hanging transactions -- the first offset of a still-open transaction.

Layout (facts §6, ``ProducerSnapshot.json`` version 1, unchanged since 0.11):

====  ======  =========================================
off   size    field
====  ======  =========================================
0     2       version int16 (only 1 exists)
2     4       crc uint32, CRC-32C of bytes [6, EOF)
6     4       entry count int32
10    46*n    entries (see ``_ENTRY``)
====  ======  =========================================

Entries are streamed from the file in chunks, so a snapshot with a million
producers costs one chunk of memory.
"""

from __future__ import annotations

import re
import struct
from typing import BinaryIO, Iterator

from auditor.formats.binary import wrap64
from auditor.formats.crc import crc32c
import pyarrow as pa

from auditor.errors import DecodeError, TruncatedError

SNAPSHOT_VERSION = 1
HEADER_SIZE = 10
ENTRY_SIZE = 46
CRC_POSITION = 2
COUNT_POSITION = 6
INT32_MAX = 2**31 - 1
_CHUNK_ENTRIES = 4096  # 184 KiB per read

# ProducerId, Epoch, LastSequence, LastOffset, OffsetDelta, Timestamp,
# CoordinatorEpoch, CurrentTxnFirstOffset
_ENTRY = struct.Struct(">qhiqiqiq")
assert _ENTRY.size == ENTRY_SIZE
_HEADER = struct.Struct(">hIi")

_NAME = re.compile(r"([0-9]{1,20})\.snapshot(\.deleted)?\Z")

COLUMNS: list[pa.Field] = [
    pa.field("snapshot_offset", pa.int64()),
    pa.field("entry_index", pa.int32()),
    pa.field("producer_id", pa.int64()),
    pa.field("producer_epoch", pa.int16()),
    pa.field("last_sequence", pa.int32()),
    pa.field("first_sequence", pa.int32()),
    pa.field("last_offset", pa.int64()),
    pa.field("offset_delta", pa.int32()),
    pa.field("first_offset", pa.int64()),
    pa.field("last_timestamp", pa.int64()),
    pa.field("coordinator_epoch", pa.int32()),
    pa.field("current_txn_first_offset", pa.int64()),
    pa.field("crc_valid", pa.bool_()),
    # tiered storage (KIP-405): the remote segment whose upload carried this snapshot (null for a
    # local .snapshot). Its file name holds the segment's start offset, not the snapshot's: the
    # snapshot offset is the segment's end offset + 1 (RemoteLogManager.RLMCopyTask.copyLogSegment,
    # Kafka 4.3.1, uploads ProducerStateManager.fetchSnapshot(nextSegmentBaseOffset) and records
    # endOffset = nextSegmentBaseOffset - 1), which only __remote_log_metadata gives
    # (auditor.model.remote.snapshot_offsets); snapshot_offset stays null in the table
    pa.field("remote_segment_id", pa.string()),
]


def parse_snapshot_offset(name: str) -> int:
    """Offset encoded in a snapshot file name (``00000000000000011685.snapshot``).

    The offset is the *next* offset after the last record the snapshot covers
    (a segment base offset, or the log end at clean shutdown). A trailing
    ``.deleted`` (snapshot scheduled for deletion) is accepted; anything else is
    not a producer snapshot and raises ``DecodeError(kind="foreign")``.
    """
    base = name.rsplit("/", 1)[-1]
    m = _NAME.match(base)
    if m is None:
        raise DecodeError(f"{base!r} is not a producer snapshot file name", -1, "foreign")
    value = int(m.group(1))
    if value > 2**63 - 1:
        raise DecodeError(f"{base!r}: offset does not fit in an int64", -1, "foreign")
    return value


def decrement_sequence(seq: int, dec: int) -> int:
    """Kafka's DefaultRecordBatch.decrementSequence (wraps below 0 to Integer.MAX_VALUE).

    Computed with Java int32 overflow so garbage deltas give what the broker
    would compute, not an out-of-range Python int.
    """
    if seq < dec:
        value = INT32_MAX - (dec - seq) + 1
    else:
        value = seq - dec
    return ((value + 2**31) % 2**32) - 2**31


def _crc_from(f: BinaryIO, start: int, end: int) -> int:
    value = 0
    f.seek(start)
    left = end - start
    while left > 0:
        chunk = f.read(min(left, 1 << 20))
        if not chunk:
            raise TruncatedError(f"file ended {left} bytes early while computing the CRC", end - left)
        value = crc32c(chunk, value=value)
        left -= len(chunk)
    return value


def read_snapshot_header(f: BinaryIO, file_size: int) -> dict:
    """Read and check the 10-byte header and the CRC of a producer snapshot.

    Returns ``{"version", "crc", "computed_crc", "crc_valid", "entry_count"}``.
    A CRC mismatch is *reported* (``crc_valid=False``) rather than raised, so a
    caller can record the corruption and still look at the entries; everything
    that makes the entries unreadable raises :class:`DecodeError`:

    * fewer than 10 bytes -> ``truncated`` at the cut field;
    * version != 1 -> ``unknown-version`` at 0 (the broker calls it corrupt);
    * negative count, or bytes after the last entry -> ``bad-length`` at 6;
    * count needing more bytes than the file has -> ``truncated`` at 6.
    """
    f.seek(0)
    head = f.read(min(HEADER_SIZE, max(file_size, 0)))
    if len(head) < 2:
        raise TruncatedError(f"snapshot of {len(head)} bytes has no version field", 0)
    (version,) = struct.unpack_from(">h", head, 0)
    if version != SNAPSHOT_VERSION:
        raise DecodeError(f"unknown producer snapshot version {version} (only 1 exists)", 0, "unknown-version")
    if len(head) < HEADER_SIZE:
        where = CRC_POSITION if len(head) < COUNT_POSITION else COUNT_POSITION
        raise TruncatedError(f"snapshot of {len(head)} bytes ends inside the 10-byte header", where)
    _, crc, count = _HEADER.unpack_from(head, 0)
    if count < 0:
        raise DecodeError(f"negative producer entry count {count}", COUNT_POSITION, "bad-length")
    expected = HEADER_SIZE + ENTRY_SIZE * count
    if expected > file_size:
        raise TruncatedError(
            f"entry count {count} needs {expected} bytes but the file has {file_size}", COUNT_POSITION
        )
    if expected < file_size:
        raise DecodeError(
            f"entry count {count} accounts for {expected} bytes but the file has {file_size}"
            f" ({file_size - expected} unexplained trailing bytes)",
            COUNT_POSITION,
            "bad-length",
        )
    computed = _crc_from(f, COUNT_POSITION, file_size)
    return {
        "version": version,
        "crc": crc,
        "computed_crc": computed,
        "crc_valid": computed == crc,
        "entry_count": count,
    }


def iter_snapshot(
    f: BinaryIO,
    file_size: int,
    *,
    snapshot_offset: int | None = None,
    raise_on_bad_crc: bool = True,
) -> Iterator[dict]:
    """Yield one row (see :data:`COLUMNS`) per producer entry of a snapshot.

    ``f`` is a seekable binary file opened read-only; ``snapshot_offset`` is
    usually ``parse_snapshot_offset(path.name)`` and only fills the column.

    With ``raise_on_bad_crc`` (the default, like the broker) a CRC mismatch
    raises ``DecodeError(kind="bad-crc", position=2)`` before any row; with
    False the rows are still produced and carry ``crc_valid=False`` so an
    audit can show what the damaged file claimed.
    """
    header = read_snapshot_header(f, file_size)
    crc_valid = header["crc_valid"]
    if not crc_valid and raise_on_bad_crc:
        raise DecodeError(
            f"producer snapshot CRC mismatch: stored {header['crc']}, computed {header['computed_crc']}",
            CRC_POSITION,
            "bad-crc",
        )
    count = header["entry_count"]
    index = 0
    while index < count:
        n = min(_CHUNK_ENTRIES, count - index)
        pos = HEADER_SIZE + ENTRY_SIZE * index
        f.seek(pos)
        chunk = f.read(ENTRY_SIZE * n)
        if len(chunk) < ENTRY_SIZE * n:
            # The file shrank between the header check and now.
            raise TruncatedError("snapshot ended inside the producer entries", pos + len(chunk))
        for (pid, epoch, last_seq, last_off, delta, ts, coord_epoch, txn_first) in _ENTRY.iter_unpack(chunk):
            yield {
                "snapshot_offset": snapshot_offset,
                "entry_index": index,
                "producer_id": pid,
                "producer_epoch": epoch,
                "last_sequence": last_seq,
                "first_sequence": decrement_sequence(last_seq, delta) if last_seq >= 0 else -1,
                "last_offset": last_off,
                "offset_delta": delta,
                "first_offset": wrap64(last_off - delta) if last_off >= 0 else -1,
                "last_timestamp": ts,
                "coordinator_epoch": coord_epoch,
                "current_txn_first_offset": None if txn_first == -1 else txn_first,
                "crc_valid": crc_valid,
                "remote_segment_id": None,  # set by ingestion for a remote segment's snapshot
            }
            index += 1
