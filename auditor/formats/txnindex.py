"""Transaction index files (``<base offset>.txnindex``), one per log segment.

The broker appends one 34-byte entry per *aborted* transaction that had data
on the partition, at the moment the ABORT marker is written (facts §7,
AbortedTxn.java / TransactionIndex.java). READ_COMMITTED fetches use it to
skip aborted data, so a missing or wrong entry means consumers see aborted
records -- which is why the audit reads it next to the log.

====  ====  ============================================================
off   size  field
====  ====  ============================================================
0     2     version int16 = 0 (the broker only looks at byte 0; > 0 fails)
2     8     producer_id int64
10    8     first_offset int64 (first data offset of the aborted txn)
18    8     last_offset int64 (offset of the ABORT marker)
26    8     last_stable_offset int64 (LSO when the marker was appended)
====  ====  ============================================================

The file is not preallocated; a trailing partial entry (a crash mid-write)
is ignored by the broker and reported here as a final note.
"""

from __future__ import annotations

import struct
from typing import BinaryIO, Iterator

import pyarrow as pa

from auditor.errors import DecodeError, TruncatedError
from auditor.formats.batch import LogProblem

ENTRY_SIZE = 34
CURRENT_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
assert _ENTRY.size == ENTRY_SIZE
_CHUNK_ENTRIES = 2048  # 68 KiB per read

COLUMNS: list[pa.Field] = [
    pa.field("entry_index", pa.int32()),
    pa.field("version", pa.int16()),
    pa.field("producer_id", pa.int64()),
    pa.field("first_offset", pa.int64()),
    pa.field("last_offset", pa.int64()),
    pa.field("last_stable_offset", pa.int64()),
    pa.field("in_order", pa.bool_()),
]


def iter_txn_index(f: BinaryIO, file_size: int) -> Iterator[dict | LogProblem]:
    """Yield one row (see :data:`COLUMNS`) per aborted-transaction entry.

    ``in_order`` is False when an entry's ``last_offset`` is not strictly
    greater than the previous entry's (the broker refuses such appends, so it
    marks a damaged or hand-edited file) -- flagged, not raised, so the rest
    of the file is still audited.

    After the rows, a :class:`~auditor.formats.batch.LogProblem` with kind
    ``truncated`` is yielded if the file ends in a partial entry (ignored by
    the broker). An entry whose first byte, read as a signed byte, is > 0
    raises ``DecodeError(kind="unknown-version")`` at that entry, exactly where
    the broker's reader throws.
    """
    whole = max(file_size, 0) // ENTRY_SIZE
    index = 0
    prev_last: int | None = None
    while index < whole:
        n = min(_CHUNK_ENTRIES, whole - index)
        pos = index * ENTRY_SIZE
        f.seek(pos)  # the caller may use f between two rows
        chunk = f.read(n * ENTRY_SIZE)
        if len(chunk) < n * ENTRY_SIZE:
            raise TruncatedError("transaction index ended before its stated size", pos + len(chunk))
        for i, (version, pid, first, last, lso) in enumerate(_ENTRY.iter_unpack(chunk)):
            version_byte = chunk[i * ENTRY_SIZE]
            if version_byte < 128 and version_byte > CURRENT_VERSION:
                raise DecodeError(
                    f"aborted transaction entry {index} has version {version_byte} (only 0 exists)",
                    index * ENTRY_SIZE,
                    "unknown-version",
                )
            yield {
                "entry_index": index,
                "version": version,
                "producer_id": pid,
                "first_offset": first,
                "last_offset": last,
                "last_stable_offset": lso,
                "in_order": prev_last is None or last > prev_last,
            }
            prev_last = last
            index += 1
    rest = max(file_size, 0) - whole * ENTRY_SIZE
    if rest:
        yield LogProblem(
            "truncated",
            whole * ENTRY_SIZE,
            f"{rest} trailing bytes do not make a whole {ENTRY_SIZE}-byte entry (ignored, as the broker does)",
        )
