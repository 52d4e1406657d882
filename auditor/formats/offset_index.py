"""Offset index (``.index``) and time index (``.timeindex``) files of a segment.

Both are sparse lookup tables the broker keeps next to each ``.log`` (facts
§7). They hold no transaction data, but they must agree with the log: an
offset-index entry that does not point at the batch holding its offset makes
fetches (and so READ_COMMITTED reads) start at the wrong place. The audit
therefore decodes them and re-runs the checks of ``kafka-dump-log.sh``.

* ``.index``: 8-byte entries ``relative_offset int32, position int32``;
  the offset is the last offset of the batch starting at ``position``.
* ``.timeindex``: 12-byte entries ``timestamp int64, relative_offset int32``;
  the max timestamp so far and the offset that carried it.

The active segment's files are preallocated (10 MiB of zeros by default), so
reading stops -- like DumpLogSegments -- at the first entry after entry 0 whose
relative offset is 0. Files are read in chunks; rows are yielded one by one.

Where the zeros appear: the active segment of a running or crashed broker; since
Kafka 4.4.0 also the metadata log's (``__cluster_metadata-0``) active segment after a
*clean* stop -- 4.4.0 moved trimming out of ``AbstractIndex.close()`` into
``LogSegment.onBecomeInactiveSegment()``, which ``LogManager.shutdown`` reaches
through ``UnifiedLog.prepareActiveSegmentForClose()`` for partition logs only, so
the raft metadata log keeps its 10 MiB files. Kafka's own index classes do not
stop at the zeros: ``AbstractIndex`` maps an existing file with ``entries =
length / entrySize`` (4.3.1 and 4.4.0), so the tail reads as phantom entries
(offset = base offset, position / timestamp 0), ``isFull()`` is true and
``TimeIndex.sanityCheck()`` throws ``CorruptIndexException`` (last timestamp 0 below
the first). Loading does not run those checks (``LogSegment.sanityCheck`` only checks
that the offset index exists); recovery rebuilds the indexes from the log. The
only reader that interprets the zeros is ``DumpLogSegments.dumpIndex`` /
``dumpTimeIndex``, which stop at the first entry after entry 0 whose offset is the
base offset: the rule followed here, so a preallocated tail gives no phantom rows,
only a ``zero-tail`` note (status ``ok`` in the ``files`` inventory; ``dump`` exits 0).
"""

from __future__ import annotations

import bisect
import struct
from typing import Any, BinaryIO, Iterable, Iterator

import pyarrow as pa

from auditor.errors import TruncatedError
from auditor.formats.batch import LogProblem, is_zero_range

OFFSET_ENTRY_SIZE = 8
TIME_ENTRY_SIZE = 12
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_CHUNK_ENTRIES = 8192

COLUMNS: list[pa.Field] = [
    pa.field("index_kind", pa.string()),
    pa.field("entry_index", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("position", pa.int32()),
    pa.field("timestamp", pa.int64()),
]


def _iter_entries(
    f: BinaryIO, file_size: int, entry: struct.Struct, kind: str
) -> Iterator[tuple[int, tuple] | LogProblem]:
    """Yield (entry_index, unpacked fields) up to the zero stop, then notes."""
    size = entry.size
    file_size = max(file_size, 0)
    whole = file_size // size
    rel_at = 0 if kind == "offset" else 1  # where the relative offset sits in the tuple
    index = 0
    stop: int | None = None
    if whole and is_zero_range(f, 0, size) and is_zero_range(f, 0, file_size):
        # nothing but preallocation (an empty or crashed active segment): the
        # broker's own recovery finds no entries here, so neither do we
        # (DumpLogSegments would print entry 0 as "offset: <base> position: 0")
        stop = 0
    while index < whole and stop is None:
        n = min(_CHUNK_ENTRIES, whole - index)
        pos = index * size
        f.seek(pos)
        chunk = f.read(n * size)
        if len(chunk) < n * size:
            raise TruncatedError(f"{kind} index ended before its stated size", pos + len(chunk))
        for fields in entry.iter_unpack(chunk):
            if index > 0 and fields[rel_at] == 0:
                stop = index
                break
            yield index, fields
            index += 1
    if stop is not None:
        start = stop * size
        if is_zero_range(f, start, file_size):
            yield LogProblem(
                "zero-tail",
                start,
                f"{file_size - start} unused zero bytes ({(file_size - start) // size} entries) after "
                f"{stop} {kind}-index entries: preallocated space of an active or crashed segment "
                f"(or of the metadata log after a Kafka 4.4 clean stop)",
            )
        else:
            yield LogProblem(
                "corrupt",
                start,
                f"{kind}-index entry {stop} has relative offset 0, so reading stops there as "
                f"DumpLogSegments does, but the {file_size - start} bytes from there on are not all zero",
            )
    rest = file_size - whole * size
    if rest:
        yield LogProblem(
            "bad-length",
            whole * size,
            f"{kind} index length {file_size} is not a multiple of {size}: {rest} trailing bytes",
        )


def iter_offset_index(f: BinaryIO, file_size: int, base_offset: int) -> Iterator[dict | LogProblem]:
    """Yield ``index_entries`` rows (``index_kind="offset"``) of a ``.index`` file.

    ``base_offset`` is the segment's base offset (from the file name); rows
    carry absolute offsets. After the rows come zero or more
    :class:`~auditor.formats.batch.LogProblem` notes: ``zero-tail`` (unused
    preallocated bytes from ``position`` to EOF), ``corrupt`` (reading stopped
    at a zero relative offset but non-zero bytes follow) and ``bad-length``
    (file length not a multiple of 8; ``position`` = first leftover byte).
    """
    for item in _iter_entries(f, file_size, _OFFSET_ENTRY, "offset"):
        if isinstance(item, LogProblem):
            yield item
            continue
        i, (rel, position) = item
        yield {
            "index_kind": "offset",
            "entry_index": i,
            "offset": base_offset + rel,
            "position": position,
            "timestamp": None,
        }


def iter_time_index(f: BinaryIO, file_size: int, base_offset: int) -> Iterator[dict | LogProblem]:
    """Yield ``index_entries`` rows (``index_kind="time"``) of a ``.timeindex`` file.

    Same stop rule and notes as :func:`iter_offset_index` (entry size 12).
    """
    for item in _iter_entries(f, file_size, _TIME_ENTRY, "time"):
        if isinstance(item, LogProblem):
            yield item
            continue
        i, (timestamp, rel) = item
        yield {
            "index_kind": "time",
            "entry_index": i,
            "offset": base_offset + rel,
            "position": None,
            "timestamp": timestamp,
        }


def _get(obj: Any, name: str) -> Any:
    return obj[name] if isinstance(obj, dict) else getattr(obj, name)


def _batch_items(batches: Iterable[Any]) -> Iterator[Any]:
    """Batch headers (dicts or BatchHeader objects), skipping LogProblem notes."""
    for b in batches:
        if isinstance(b, LogProblem):
            continue
        yield b


def _index_rows(rows: Iterable[Any], kind: str) -> Iterator[dict]:
    for r in rows:
        if isinstance(r, dict) and r.get("index_kind") == kind:
            yield r


def check_offset_index(index_rows: Iterable[Any], batches: Iterable[Any]) -> list[dict]:
    """DumpLogSegments' offset-index verification.

    For every offset-index entry, the batch that starts at ``position`` in the
    ``.log`` must have ``last_offset`` equal to the entry's offset. ``batches``
    are the segment's batch headers from :func:`auditor.formats.batch.iter_segment`
    (``BatchHeader`` objects or their ``as_row()`` dicts; notes are skipped);
    ``index_rows`` may contain notes and time rows, which are ignored.

    Returns one dict per mismatch: ``entry_index``, ``position``,
    ``index_offset`` and ``log_offset`` (None when no batch starts at that
    position, e.g. it points past the end or into the middle of a batch).
    """
    by_position = {_get(b, "position"): _get(b, "last_offset") for b in _batch_items(batches)}
    out: list[dict] = []
    for r in _index_rows(index_rows, "offset"):
        log_offset = by_position.get(r["position"])
        if log_offset != r["offset"]:
            out.append(
                {
                    "entry_index": r["entry_index"],
                    "position": r["position"],
                    "index_offset": r["offset"],
                    "log_offset": log_offset,
                }
            )
    return out


def check_time_index(index_rows: Iterable[Any], batches: Iterable[Any]) -> list[dict]:
    """DumpLogSegments' time-index verification.

    For each time-index entry, the first batch whose ``last_offset`` >= the
    entry offset must have exactly that last offset (else
    ``offset-not-found``); its max timestamp must equal the entry timestamp
    (``timestamp-mismatch``; the batch header's ``max_timestamp`` stands in
    for the tool's maximum over the records); and timestamps must strictly
    increase (``out-of-order``). Returns dicts with ``problem``,
    ``entry_index``, ``index_offset``, ``index_timestamp``, ``log_offset`` and
    ``log_timestamp`` (the batch's, or the previous entry's timestamp for
    ``out-of-order``).
    """
    items = sorted(
        ((_get(b, "last_offset"), _get(b, "max_timestamp")) for b in _batch_items(batches)),
        key=lambda t: t[0],
    )
    last_offsets = [o for o, _ in items]
    out: list[dict] = []
    prev_ts = -1  # RecordBatch.NO_TIMESTAMP

    def problem(kind: str, r: dict, log_offset: int | None, log_ts: int | None) -> dict:
        return {
            "problem": kind,
            "entry_index": r["entry_index"],
            "index_offset": r["offset"],
            "index_timestamp": r["timestamp"],
            "log_offset": log_offset,
            "log_timestamp": log_ts,
        }

    for r in _index_rows(index_rows, "time"):
        k = bisect.bisect_left(last_offsets, r["offset"])
        if k == len(items):
            out.append(problem("offset-not-found", r, None, None))
        elif items[k][0] != r["offset"]:
            out.append(problem("offset-not-found", r, items[k][0], None))
        else:
            if items[k][1] != r["timestamp"]:
                out.append(problem("timestamp-mismatch", r, items[k][0], items[k][1]))
            if prev_ts >= r["timestamp"]:
                out.append(problem("out-of-order", r, None, prev_ts))
        prev_ts = r["timestamp"]
    return out
