"""Decoding of log segments for ingestion: batch headers, control records and
records of the internal topics, with per-batch error isolation.

One undecodable record of ``__transaction_state`` must not hide the thousands
of good ones after it, so record-level errors become non-fatal problems and the
next batch is read; only lost framing stops a file.
"""

from __future__ import annotations

from typing import BinaryIO, Iterator

import pyarrow as pa

from auditor.errors import DecodeError
from auditor.formats.batch import BatchHeader, LogProblem, iter_segment, read_payload
from auditor.formats.batch_columnar import COLUMNS as HEADER_COLUMNS
from auditor.formats.records import Record, decode_control, iter_records
from auditor.ingest.problems import Problem

# Decoded header fields (shared with the columnar decoder) + control record columns of the batches table.
BATCH_COLUMNS: list[pa.Field] = [
    pa.field("segment_base_offset", pa.int64()),
    pa.field("source", pa.string()),  # segment | kraft-snapshot
    *HEADER_COLUMNS,
    pa.field("control_type", pa.string()),
    pa.field("coordinator_epoch", pa.int32()),
]

# Context of a record of an internal topic, added before the decoder's columns.
RECORD_CONTEXT_COLUMNS: list[pa.Field] = [
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.int64()),
    pa.field("batch_position", pa.int64()),
    pa.field("batch_producer_id", pa.int64()),
    pa.field("batch_producer_epoch", pa.int16()),
    pa.field("batch_is_transactional", pa.bool_()),
]


def problem_of(p: LogProblem) -> Problem:
    # a zero-filled tail is what a preallocated active segment looks like: reported, not fatal data loss
    return Problem(p.kind, p.position, p.message, fatal=p.kind not in ("zero-tail",))


def iter_batches(
    f: BinaryIO, file_size: int, start: int = 0, end: int | None = None, *, with_control: bool = True
) -> Iterator[tuple[BatchHeader, dict] | Problem]:
    """Batch headers (+ decoded control record of control batches) or problems."""
    for e in iter_segment(f, start=start, end=end, file_size=file_size):
        if isinstance(e, LogProblem):
            yield problem_of(e)
            return
        extra = {"control_type": None, "coordinator_epoch": None}
        if not e.crc_valid:
            yield Problem("bad-crc", e.position + 17, f"batch at offset {e.base_offset}: stored CRC {e.crc} does not match its bytes", fatal=False)
        if e.magic < 2 and e.record_count < 0:
            yield legacy_problem(f, e)
        if with_control and e.is_control and e.magic == 2 and e.record_count > 0:
            try:
                first = next(iter_records(e, read_payload(f, e)))
                c = decode_control(first.key, first.value)
                extra = {"control_type": c.control_type, "coordinator_epoch": c.coordinator_epoch}
            except DecodeError as exc:
                yield Problem(exc.kind, exc.position if exc.position >= 0 else e.position,
                              f"control batch at offset {e.base_offset}: {exc.message}", fatal=False)
            except StopIteration:
                pass
        yield e, extra


def _header_batches(f: BinaryIO, file_size: int, start: int, end: int | None, windowed: bool) -> Iterator:
    from auditor.formats import batch_columnar as bc

    if not windowed:
        yield from bc.iter_header_batches(f, start=start, end=end, file_size=file_size)
        return
    for item in bc.iter_header_windows(f, start=start, end=end, file_size=file_size):
        yield bc.arrow_batch(item) if isinstance(item, dict) else item


def iter_batches_columnar(
    f: BinaryIO, file_size: int, start: int, end: int | None, segment_base: int | None, source: str,
    *, windowed: bool = False,
) -> Iterator["pa.RecordBatch | Problem | dict"]:
    """The batches table's rows as Arrow record batches (the fast path for
    segments no broker writes to any more), with the same problems and
    control-record columns as :func:`iter_batches`. The file is memory-mapped,
    or with ``windowed`` read in windows of bounded size (a file of a remote
    store); where a window cannot decide, the rest comes from :func:`iter_batches`
    as row dicts."""
    for item in _header_batches(f, file_size, start, end, windowed):
        if isinstance(item, tuple):  # ("tail", pos): the per-object decoder decides the rest exactly
            for rest in iter_batches(f, file_size, item[1], end):
                yield rest if isinstance(rest, Problem) else batch_row(*rest, segment_base, source)
            return
        if isinstance(item, LogProblem):
            yield problem_of(item)
            return
        n = item.num_rows
        ctype: list = [None] * n
        cepoch: list = [None] * n
        bad = item.column("crc_valid").to_pylist()
        ctl = item.column("is_control").to_pylist()
        # legacy wrappers whose records cannot be read (a plain list: pyarrow.compute costs ~30 ms to import)
        lost = [c < 0 for c in item.column("record_count").to_pylist()]
        rows = None
        for i in range(n):
            if not bad[i] or ctl[i] or lost[i]:
                if rows is None:
                    rows = item.to_pylist()
                h = BatchHeader(**rows[i])
                if not bad[i]:
                    yield Problem("bad-crc", h.position + 17, f"batch at offset {h.base_offset}: stored CRC {h.crc} does not match its bytes", fatal=False)
                if h.magic < 2 and h.record_count < 0:
                    yield legacy_problem(f, h)
                if ctl[i] and h.magic == 2 and h.record_count > 0:
                    try:
                        first = next(iter_records(h, read_payload(f, h)))
                        c = decode_control(first.key, first.value)
                        ctype[i], cepoch[i] = c.control_type, c.coordinator_epoch
                    except DecodeError as exc:
                        yield Problem(exc.kind, exc.position if exc.position >= 0 else h.position,
                                      f"control batch at offset {h.base_offset}: {exc.message}", fatal=False)
                    except StopIteration:
                        pass
        yield item.append_column("control_type", pa.array(ctype, pa.string())).append_column(
            "coordinator_epoch", pa.array(cepoch, pa.int32())).append_column(
            "segment_base_offset", pa.array([segment_base] * n, pa.int64())).append_column(
            "source", pa.array([source] * n, pa.string()))


def legacy_problem(f: BinaryIO, h: BatchHeader) -> Problem:
    """Why a legacy wrapper's records cannot be read (its ``record_count`` is -1): a non-fatal
    problem, as in Kafka, whose log loading reads wrappers, not their inner messages."""
    try:
        for _ in iter_records(h, read_payload(f, h)):
            pass
    except DecodeError as exc:
        return Problem(exc.kind, exc.position if exc.position >= 0 else h.position,
                       f"legacy wrapper at offset {h.last_offset}: {exc.message}", fatal=False)
    return Problem("corrupt", h.position, f"legacy wrapper at offset {h.last_offset}: records changed while read",
                   fatal=False)


def batch_row(h: BatchHeader, extra: dict, segment_base: int | None, source: str) -> dict:
    row = h.as_row()
    row.update(extra)
    row["segment_base_offset"] = segment_base
    row["source"] = source
    return row


def iter_data_records(
    f: BinaryIO, file_size: int, start: int = 0, end: int | None = None
) -> Iterator[tuple[BatchHeader, Record] | Problem]:
    """Records of the non-control batches and legacy entries (what internal-topic decoders read)."""
    for item in iter_batches(f, file_size, start, end, with_control=False):
        if isinstance(item, Problem):
            yield item
            continue
        h, _ = item
        if h.is_control or (h.magic < 2 and h.record_count < 0):  # a legacy wrapper whose records cannot be read: reported above
            continue
        try:
            for rec in iter_records(h, read_payload(f, h)):
                yield h, rec
        except DecodeError as exc:
            yield Problem(exc.kind, exc.position if exc.position >= 0 else h.position,
                          f"batch at offset {h.base_offset}: {exc.message}", fatal=False)


def record_context(h: BatchHeader, rec: Record) -> dict:
    return {
        "offset": rec.offset,
        "timestamp": rec.timestamp,
        "batch_position": h.position,
        "batch_producer_id": h.producer_id,
        "batch_producer_epoch": h.producer_epoch,
        "batch_is_transactional": h.is_transactional,
    }
