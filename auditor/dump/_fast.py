"""The fast path of ``txn-audit dump`` for segments and KRaft snapshots.

Batch lines come from the columnar header decoder
(:func:`auditor.formats.batch_columnar.iter_header_windows`: positioned reads into a
reused window, numpy, the CRC-32C vectorised) and are formatted vectorised
(:mod:`auditor.dump._columns`), a chunk of at most 65,536 batches at a
time, so memory stays bounded whatever the file size. Only control batches
(their marker is decoded), legacy entries (a compressed wrapper is inflated to
count its records) and problems cost Python work per batch.

Record lines (``--records``) stream per chunk of batches. The records of plain
batches (v2, uncompressed, no record headers) are walked vectorised
(:func:`_walk_records`: step ``k`` parses the ``k``-th record of every batch at
once); every other batch, and any batch the walk cannot vouch for, is decoded by
:func:`auditor.formats.records.iter_records` (the decoder every other path uses),
its fields collected into columns. Both are written vectorised.

Both write exactly the bytes the per-object path
(:func:`auditor.dump._run._objects` + ``json.dumps``) writes: tested on
every file of ``sample_logs/`` (tests/test_dump_columnar.py).
"""

from __future__ import annotations

import os
from typing import BinaryIO, Iterator

import numpy as np

from auditor.dump import _columns as jc
from auditor.dump._lines import (
    CODEC_TOKENS as _CODEC_TOKENS, KEYS as _KEYS, RKEYS as _RKEYS, TS_TOKENS as _TS_TOKENS, TYPE as _TYPE,
    iter_record_objects, place, record_end, record_objects, tail as _line_tail)
from auditor.dump._literals import token
from auditor.dump._overlap import read_ahead
from auditor.errors import DecodeError
from auditor.formats.batch import INT32_MAX, V2_HEADER, BatchHeader, LogProblem, increment_sequence
from auditor.formats.batch_columnar import (
    COLUMN_NAMES, MAX_WINDOW, TS_TYPE_NAMES, WINDOW, iter_header_windows, read_at,
    use_helper_thread)
from auditor.ingest.storage import open_regular

_INT_COLUMNS = {
    "position", "size", "base_offset", "last_offset", "last_offset_delta", "partition_leader_epoch", "magic",
    "crc", "attributes", "base_timestamp", "max_timestamp", "producer_id", "producer_epoch", "base_sequence",
    "last_sequence", "record_count",
}
_BOOL_COLUMNS = {"crc_valid", "is_transactional", "is_control", "has_delete_horizon"}


def _problem(task: dict, kind: str, position: int, message: str) -> dict:
    return {"type": "problem", "file": task["path"], "table": "batches", "kind": kind, "position": position,
            "message": message}


class _Header:
    """What :func:`auditor.formats.records.iter_records`, ``read_payload`` and
    ``segments.legacy_problem`` read of a batch header, for one row of the columns."""

    __slots__ = ("position", "size", "base_offset", "last_offset", "magic", "attributes", "record_count",
                 "timestamp_type", "base_timestamp", "max_timestamp", "base_sequence", "is_control")

    def __init__(self, cols: dict, i: int) -> None:
        self.position = int(cols["position"][i])
        self.size = int(cols["size"][i])
        self.base_offset = int(cols["base_offset"][i])
        self.last_offset = int(cols["last_offset"][i])
        self.magic = int(cols["magic"][i])
        self.attributes = int(cols["attributes"][i])
        self.record_count = int(cols["record_count"][i])
        self.timestamp_type = TS_TYPE_NAMES[int(cols["ts_type"][i])]
        self.base_timestamp = int(cols["base_timestamp"][i])
        self.max_timestamp = int(cols["max_timestamp"][i])
        self.base_sequence = int(cols["base_sequence"][i])
        self.is_control = bool(cols["is_control"][i])

    codec = BatchHeader.codec
    payload_position = BatchHeader.payload_position


def _payload(f: BinaryIO, h: _Header) -> bytes:
    from auditor.formats.batch import read_payload

    return read_payload(f, h)  # type: ignore[arg-type]


# plain reads (the active segment): bytes read per window, and the biggest window an entry may ask for
_WINDOW = WINDOW
_MAX_WINDOW = MAX_WINDOW


def _range(task: dict) -> tuple[int, int | None]:
    start = task.get("range_start") or 0
    end = task.get("range_end")
    return start, (end if end is not None and end >= 0 else None)


def _columns(task: dict, f: BinaryIO, verify_crc: bool = True) -> Iterator:
    """Chunks of header columns, then the final LogProblem if any. Every segment is read with
    plain reads, window by window (:func:`auditor.formats.batch_columnar.iter_header_windows`:
    where a window cannot decide it yields ``("tail", pos)``, the rest is for the per-object
    decoder, which decides exactly), never memory-mapped: a running broker may truncate any
    segment (its active one, or an older one when a follower truncates to its leader's epoch
    end), and touching a truncated mapping is SIGBUS."""
    start, end = _range(task)
    yield from iter_header_windows(f, start=start, end=end, file_size=task["size"], verify_crc=verify_crc,
                                   window=_WINDOW, max_window=_MAX_WINDOW)


def _tail_batches(task: dict, f: BinaryIO, pos: int, out: BinaryIO) -> Iterator[dict]:
    """The per-object path from ``pos`` on (lines written, problems yielded)."""
    import json

    from auditor.ingest import segments
    from auditor.ingest.problems import Problem

    _, end = _range(task)
    source = "kraft-snapshot" if task["kind"] == "kraft-snapshot" else "segment"
    for item in segments.iter_batches(f, task["size"], pos, end):
        if isinstance(item, Problem):
            yield _problem(task, item.kind, item.position, item.message)
            continue
        h, extra = item
        obj = {"type": "batch", **segments.batch_row(h, extra, task.get("base_offset"), source), **place(task)}
        out.write((json.dumps(obj) + "\n").encode())


# Chunks of fewer rows (a read window of big batches: 512 of 16 KiB in 8 MiB) are
# formatted together, up to this many rows: formatting costs ~0.3 ms a chunk whatever its size.
_FORMAT_ROWS = 8192


def write_batches(task: dict, out: BinaryIO) -> Iterator[dict]:
    """Write the batch lines of a segment / KRaft snapshot to ``out``; yield
    the problems (as ``dump`` objects) where the per-object path reports them."""
    try:
        f = open_regular(task["path"])
    except OSError as exc:
        yield _problem(task, "unreadable", 0, f"cannot open: {exc.strerror or exc}")
        return
    tail = _line_tail(task)
    pending: list[dict] = []  # chunks decoded, not yet written
    rows = 0
    use_helper_thread()  # big window reads in two halves (dump decodes one file at a time)
    with f:
        # the next chunks are read and decoded on a thread while these are formatted (_overlap.py)
        ahead = read_ahead(_columns(task, f))
        try:
            for item in ahead:
                if isinstance(item, dict):
                    pending.append(item)
                    rows += len(item["position"])
                    if rows < _FORMAT_ROWS:
                        continue
                chunks, pending, rows = pending, [], 0
                if chunks:
                    yield from _write_chunks(chunks, f, task, out, tail)
                if isinstance(item, tuple):
                    ahead.close()  # the per-object decoder reads the rest: no other reader of f meanwhile
                    yield from _tail_batches(task, f, item[1], out)
                    return
                if isinstance(item, LogProblem):
                    yield _problem(task, item.kind, item.position, item.message)
                    return
            chunks, pending = pending, []
            if chunks:
                yield from _write_chunks(chunks, f, task, out, tail)
        except Exception as exc:  # a decoder bug must not kill the whole dump
            failure = exc
            if pending:  # reading failed: what was decoded before is written first, as it was read
                try:
                    yield from _write_chunks(pending, f, task, out, tail)
                except Exception as first:
                    failure = first
            yield _error(task, failure)
        finally:
            ahead.close()


def _error(task: dict, exc: Exception) -> dict:
    if isinstance(exc, OSError):
        return _problem(task, "io-error", -1, f"read failed: {exc.strerror or exc}")
    if isinstance(exc, DecodeError):
        return _problem(task, exc.kind, exc.position, exc.message)
    return _problem(task, "internal-error", -1, f"{type(exc).__name__}: {exc}")


def _write_chunks(chunks: list[dict], f: BinaryIO, task: dict, out: BinaryIO, tail: bytes) -> Iterator[dict]:
    """Yield the problems of these chunks' batches, then write their lines."""
    cols = chunks[0] if len(chunks) == 1 else {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}
    problems: list[dict] = []
    parts = _batch_parts(cols, f, task, problems)
    yield from problems
    jc.write(out, len(cols["position"]), [*parts, tail])


def _batch_parts(cols: dict, f: BinaryIO, task: dict, problems: list[dict]) -> list[jc.Part]:
    n = len(cols["position"])
    bad = np.flatnonzero(~cols["crc_valid"])
    ctl = np.flatnonzero(cols["is_control"] & (cols["magic"] == 2) & (cols["record_count"] > 0))
    lost = np.flatnonzero((cols["magic"] < 2) & (cols["record_count"] < 0))  # legacy wrappers, records unreadable
    ctype: list = [None] * n if len(ctl) else []
    cepoch = np.zeros(n, np.int64) if len(ctl) else None
    cnull = np.ones(n, bool) if len(ctl) else None
    if len(bad) or len(ctl) or len(lost):
        from auditor.formats.records import decode_control, iter_records
        from auditor.ingest.segments import legacy_problem

        for i in sorted(set(bad.tolist()) | set(ctl.tolist()) | set(lost.tolist())):
            if not cols["crc_valid"][i]:
                problems.append(_problem(task, "bad-crc", int(cols["position"][i]) + 17,
                                         f"batch at offset {int(cols['base_offset'][i])}: stored CRC "
                                         f"{int(cols['crc'][i])} does not match its bytes"))
            if cols["magic"][i] < 2 and cols["record_count"][i] < 0:
                p = legacy_problem(f, _Header(cols, i))  # type: ignore[arg-type]
                problems.append(_problem(task, p.kind, p.position, p.message))
            if cepoch is None or not (cols["is_control"][i] and cols["magic"][i] == 2 and cols["record_count"][i] > 0):
                continue
            h = _Header(cols, i)
            try:
                first = next(iter_records(h, _payload(f, h)))  # type: ignore[arg-type]
                c = decode_control(first.key, first.value)
                ctype[i] = c.control_type
                if c.coordinator_epoch is not None:
                    cepoch[i], cnull[i] = c.coordinator_epoch, False  # type: ignore[index]
            except DecodeError as exc:
                problems.append(_problem(task, exc.kind, exc.position if exc.position >= 0 else h.position,
                                         f"control batch at offset {h.base_offset}: {exc.message}"))
            except StopIteration:
                pass
    parts: list[jc.Part] = [_KEYS["type"], _TYPE]
    done: dict[str, jc.Part] = {}
    for name in COLUMN_NAMES:
        parts.append(_KEYS[name])
        if name in _INT_COLUMNS:
            v = cols[name]
            # max_timestamp == base_timestamp, last_offset == base_offset in 1-record batches: format once
            twin = {"max_timestamp": "base_timestamp", "last_offset": "base_offset"}.get(name)
            if twin is not None and np.array_equal(v, cols[twin]):
                part = done[twin]
            else:
                part = jc.int_part(v)
            done[name] = part
        elif name in _BOOL_COLUMNS:
            part = jc.bool_part(cols[name])
        elif name == "compression":
            part = jc.choice_part(cols["codec"], _CODEC_TOKENS)
        elif name == "timestamp_type":
            part = jc.choice_part(cols["ts_type"], _TS_TOKENS)
        elif name == "delete_horizon_ms":
            part = jc.int_part(cols["base_timestamp"], null=~cols["has_delete_horizon"])
        else:  # pragma: no cover - a column added to the decoder without a format here
            raise KeyError(name)
        parts.append(part)
    parts += [_KEYS["control_type"], jc.object_part(ctype) if ctype else b"null",
              _KEYS["coordinator_epoch"], jc.int_part(cepoch, null=cnull) if cepoch is not None else b"null"]
    return parts


def write_records(task: dict, out: BinaryIO, flush_every: int = 16384) -> None:
    """Write the record lines of a segment / KRaft snapshot to ``out``: those of its data batches
    (what ``segments.iter_data_records`` yields: records of the v2 non-control batches and of
    legacy entries, a batch whose records fail to decode contributes the records before the
    failure) and, in their place, its control batches' markers
    (:func:`auditor.dump._lines.control_objects`). Problems are the batch pass's to report."""
    try:
        f = open_regular(task["path"])
    except OSError:
        return
    acc = _RecordColumns(record_end(task))
    where = place(task)
    with f:
        try:
            for item in _columns(task, f, verify_crc=False):
                if isinstance(item, tuple):
                    for obj in iter_record_objects(f, task["size"], item[1], where):
                        _add_object(acc, out, obj)
                        if acc.n >= flush_every:
                            acc.write(out)
                    break
                if isinstance(item, LogProblem):
                    break
                _chunk_records(f, item, acc, out, where, flush_every)
        except (OSError, DecodeError):
            pass
    acc.write(out)


def control_records(task: dict) -> Iterator[dict]:
    """The objects of the control batches' records of a segment / KRaft snapshot (an internal
    topic's: its data records are its tables' rows), as
    :func:`auditor.dump._lines.iter_record_objects` gives them with ``controls_only``: the
    headers are read vectorised, only the control batches decoded."""
    try:
        f = open_regular(task["path"])
    except OSError:
        return
    where = place(task)
    with f:
        try:
            for item in _columns(task, f, verify_crc=False):
                if isinstance(item, tuple):
                    yield from iter_record_objects(f, task["size"], item[1], where, controls_only=True)
                    return
                if isinstance(item, LogProblem):
                    return
                for i in np.flatnonzero(item["is_control"]).tolist():
                    yield from record_objects(_Header(item, i), f, where)
        except (OSError, DecodeError):
            return


def _add_object(acc: "_RecordColumns", out: BinaryIO, obj: dict) -> None:
    """A record object (:func:`auditor.dump._lines.record_objects`) into ``acc``; a marker's line
    straight to ``out``, after the records before it."""
    if obj["type"] == "record":
        acc.append(obj["offset"], obj["timestamp"], obj["sequence"], obj["key_size"], obj["value_size"],
                   token(obj["header_keys"]), obj["batch_base_offset"])
        return
    import json

    acc.write(out)
    out.write((json.dumps(obj) + "\n").encode())


def _chunk_records(f: BinaryIO, item: dict, acc: "_RecordColumns", out: BinaryIO, where: dict,
                   flush_every: int) -> None:
    """The record lines of one chunk of header columns (:func:`write_records`)."""
    from auditor.formats.records import iter_records

    # legacy wrappers whose records cannot be read contribute none (segments.iter_data_records)
    rows = np.flatnonzero((item["magic"] == 2) | (item["record_count"] >= 0))
    if not len(rows):
        return
    walked = _walk_records(f, item, rows)  # the plain v2 batches' records, vectorised
    fields = {k: item[k][rows].tolist() for k in (
        "position", "size", "base_offset", "magic", "attributes", "record_count", "ts_type",
        "base_timestamp", "max_timestamp", "base_sequence", "is_control")}
    fd = f.fileno()
    j = 0
    while j < len(rows):
        if walked is not None and walked.ok[j]:
            k = j  # a run of walked batches: their records written as one block
            while k < len(rows) and walked.ok[k]:
                k += 1
            acc.write(out)
            walked.write(out, j, k, acc.end)
            j = k
            continue
        i = int(rows[j])
        base_offset = fields["base_offset"][j]
        n = fields["record_count"][j]
        if fields["is_control"][j]:  # its markers: few (one a transaction), each a line of its own
            for obj in record_objects(_Header(item, i), f, where):
                _add_object(acc, out, obj)
            j += 1
            continue
        if fields["magic"][j] == 2 and fields["attributes"][j] & 0x07 == 0 and 0 <= n and fields["size"][j] <= _LEAN_MAX:
            pos = fields["position"][j] + V2_HEADER
            data = os.pread(fd, fields["size"][j] - V2_HEADER, pos)
            log_append = fields["ts_type"][j] == 1
            if len(data) == fields["size"][j] - V2_HEADER and _lean_records(data, n, base_offset, fields["max_timestamp"][j] if log_append else None,
                                                                              fields["base_timestamp"][j], fields["base_sequence"][j], acc):
                if acc.n >= flush_every:
                    acc.write(out)
                j += 1
                continue
        h = _Header(item, i)
        try:
            for rec in iter_records(h, _payload(f, h)):  # type: ignore[arg-type]
                acc.add(rec, h.base_offset)
        except DecodeError:
            pass
        if acc.n >= flush_every:
            acc.write(out)
        j += 1


_LEAN_MAX = 1 << 20  # uncompressed batches up to this size take _lean_records


def _lean_records(data: bytes, count: int, base_offset: int, log_append_ts: int | None, base_ts: int,
                  base_seq: int, acc: "_RecordColumns") -> bool:
    """The records of an uncompressed batch without headers, parsed inline
    (what ``iter_records`` computes); False, with nothing added, for anything
    else (record headers, a malformed record), which ``iter_records`` then
    decodes exactly."""
    end = len(data)
    pos = 0
    got: list[tuple[int, int, int, int, int]] = []
    try:
        for _ in range(count):
            vals = []
            for maxb in (5, 0, 10, 5, 5, 0, 5, 0, 5):  # length, attrs, ts delta, offset delta, key, -, value, -, headers
                if maxb == 0:  # attributes byte / key / value bytes
                    if len(vals) == 1:
                        pos += 1
                    else:
                        size = vals[-1]
                        if size > 0:
                            pos += size
                    if pos > end:
                        return False
                    vals.append(0)
                    continue
                b = data[pos]
                pos += 1
                if b < 0x80:
                    u = b
                else:
                    u, shift, k = b & 0x7F, 7, 1
                    while True:
                        if k >= maxb:
                            return False
                        b = data[pos]
                        pos += 1
                        k += 1
                        u |= (b & 0x7F) << shift
                        if not b & 0x80:
                            break
                        shift += 7
                u &= 0xFFFFFFFF if maxb == 5 else 0xFFFFFFFFFFFFFFFF
                vals.append((u >> 1) ^ -(u & 1))
                if len(vals) == 1:
                    start = pos
                    if vals[0] < 0 or vals[0] > end - pos:
                        return False
            length, _, ts_delta, off_delta, klen, _, vlen, _, nh = vals
            if nh != 0 or pos - start != length:
                return False
            got.append((off_delta, ts_delta, klen, vlen, 0))
        if pos != end:
            return False
    except IndexError:
        return False
    for off_delta, ts_delta, klen, vlen, _ in got:
        acc.append(base_offset + off_delta, log_append_ts if log_append_ts is not None else base_ts + ts_delta,
                   increment_sequence(base_seq, off_delta),
                   klen if klen >= 0 else -1, vlen if vlen >= 0 else -1, b"[]", base_offset)
    return True


# the record walk below gives up on batches still unfinished when fewer than this many are left
# walking together (each step costs a few numpy calls whatever the number of batches)
_WALK_MIN_ACTIVE = 16
_WALK_GROUP_BYTES = 8 << 20  # plain batches are read and walked about this many bytes at a time


def _increment_sequences(seq: np.ndarray, inc: np.ndarray) -> np.ndarray:
    """:func:`auditor.formats.batch.increment_sequence` over arrays (int64: no overflow)."""
    return np.where(seq < 0, -1, np.where(seq > INT32_MAX - inc, inc - (INT32_MAX - seq) - 1, seq + inc))


_WALK_COLUMNS = ("offset", "timestamp", "sequence", "key_size", "value_size", "batch")


class _Walked:
    """The records of a chunk's plain batches (``ok[j]``: row ``j`` of the chunk's data
    batches was walked), as columns in batch order, then record order."""

    def __init__(self, ok: np.ndarray, first: np.ndarray, cols: dict[str, np.ndarray]) -> None:
        self.ok = ok.tolist()
        self.first = first  # first[j]: index in cols of row j's first record (first[-1]: the total)
        self.cols = cols

    def write(self, out: BinaryIO, j: int, k: int, end: bytes) -> None:
        """Write the records of rows ``j`` to ``k`` (all walked), each line ending with ``end``."""
        a, b = int(self.first[j]), int(self.first[k])
        if b > a:
            c = self.cols
            _write_record_block(out, b - a, c["offset"][a:b], c["timestamp"][a:b], c["sequence"][a:b],
                                c["key_size"][a:b], c["value_size"][a:b], b"[]", c["batch"][a:b], end)


def _varints(buf: np.ndarray, p: np.ndarray, end: np.ndarray, maxb: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Zigzag varints (``maxb`` 5: int32, 10: int64) at positions ``p`` of ``buf``
    (zero-padded by 10 bytes), each to end before ``end``: (values, positions
    after them, ok). Not ok: no last byte within ``maxb`` bytes, or past ``end``."""
    cells = buf[np.minimum(p, len(buf) - 10)[:, None] + np.arange(maxb)]
    last = cells < 0x80
    nbytes = last.argmax(axis=1) + 1
    ok = last.any(axis=1) & (p + nbytes <= end)
    keep = np.arange(maxb) < nbytes[:, None]
    u = ((cells & 0x7F).astype(np.uint64) << (np.arange(maxb, dtype=np.uint64) * np.uint64(7)))
    u = np.where(keep, u, np.uint64(0)).sum(axis=1, dtype=np.uint64)
    if maxb == 5:
        u &= np.uint64(0xFFFFFFFF)
    values = (u >> np.uint64(1)).astype(np.int64) ^ -(u & np.uint64(1)).astype(np.int64)
    return values, p + nbytes, ok


def _add(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """a + b in int64, and where that overflowed (Python ints would not: those batches go the exact way)."""
    with np.errstate(over="ignore"):
        s = a + b
    return s, ((a ^ s) & (b ^ s)) < 0


def _walk_records(f: BinaryIO, item: dict, rows: np.ndarray) -> "_Walked | None":
    """The records of the chunk's plain batches (v2, uncompressed, records without
    headers: what :func:`_lean_records` parses), walked vectorised: step ``k``
    parses the ``k``-th record of every batch that has one, so a chunk of many
    small batches costs a few numpy calls per record *position*, not per record.
    A batch anything is odd about (a header, a length that does not add up, a
    value past int64) is left for :func:`_lean_records` / ``iter_records`` to
    decide exactly, as are batches still unfinished when fewer than
    ``_WALK_MIN_ACTIVE`` are left walking. The batches are read a group of about
    ``_WALK_GROUP_BYTES`` at a time (bounded memory whatever the chunk spans).
    None: nothing here to walk."""
    magic, attrs, count, size = (item[k][rows] for k in ("magic", "attributes", "record_count", "size"))
    plain = (magic == 2) & (attrs & 0x07 == 0) & (count >= 0) & (size <= _LEAN_MAX) & (size >= V2_HEADER) \
        & ~item["is_control"][rows]
    idx = np.flatnonzero(plain)
    if len(idx) < _WALK_MIN_ACTIVE:
        return None
    pos = item["position"][rows][idx].astype(np.int64)
    group = (pos - pos[0]) // _WALK_GROUP_BYTES
    cuts = np.flatnonzero(np.diff(group)) + 1
    ok = np.zeros(len(idx), bool)
    found: list[dict[str, np.ndarray]] = []
    for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), len(idx)]):
        got = _walk_group(f, item, rows[idx[a:b]])
        if got is not None:
            ok[a:b], cols = got
            found.append(cols)
    found = [g for g in found if g] or [{c: np.zeros(0, np.int64) for c in _WALK_COLUMNS}]
    if not ok.any():
        return None
    walked = np.zeros(len(rows), bool)
    walked[idx[ok]] = True
    per_row = np.zeros(len(rows), np.int64)
    per_row[idx[ok]] = count[idx[ok]]
    first = np.concatenate([[0], np.cumsum(per_row)])
    return _Walked(walked, first, {c: np.concatenate([g[c] for g in found]) for c in _WALK_COLUMNS})


def _walk_group(f: BinaryIO, item: dict, rows: np.ndarray) -> "tuple[np.ndarray, dict[str, np.ndarray]] | None":
    """:func:`_walk_records` for plain batches ``rows`` (chunk rows, in file order) read
    in one go: which were walked, and their records' columns in batch then record
    order; None if fewer than ``_WALK_MIN_ACTIVE`` or they span too many bytes (a big
    other batch between them)."""
    if len(rows) < _WALK_MIN_ACTIVE:
        return None
    count, size = (item[k][rows].astype(np.int64) for k in ("record_count", "size"))
    pos = item["position"][rows].astype(np.int64)
    lo = int(pos[0])
    n = int(pos[-1] + size[-1]) - lo
    if n > 2 * _WALK_GROUP_BYTES:
        return None
    buf = np.zeros(n + 10, np.uint8)  # zero-padded: a varint's 10-byte gather never leaves it
    if read_at(f, memoryview(buf)[:n], lo) != n:
        return None
    cur = pos - lo + V2_HEADER
    end = pos - lo + size
    left = count
    ok = np.ones(len(rows), bool)
    parts: list[tuple[np.ndarray, ...]] = []
    k = 0
    while True:
        act = np.flatnonzero(ok & (left > k))
        if not len(act):
            break
        if len(act) < _WALK_MIN_ACTIVE:
            ok[act] = False
            break
        p, e = cur[act], end[act]
        length, p, good = _varints(buf, p, e, 5)
        start = p
        good &= (length >= 0) & (length <= e - p)
        p = p + 1  # attributes
        good &= p <= e
        ts_delta, p, g = _varints(buf, p, e, 10)
        good &= g
        off_delta, p, g = _varints(buf, p, e, 5)
        good &= g
        key_len, p, g = _varints(buf, p, e, 5)
        p = p + np.maximum(key_len, 0)
        good &= g & (p <= e)
        value_len, p, g = _varints(buf, p, e, 5)
        p = p + np.maximum(value_len, 0)
        good &= g & (p <= e)
        headers, p, g = _varints(buf, p, e, 5)
        good &= g & (headers == 0) & (p - start == length)
        ok[act[~good]] = False
        cur[act] = p
        parts.append((act, ts_delta, off_delta, key_len, value_len))
        k += 1
    ok &= cur == end  # a batch's records fill it exactly, or it is not plain
    if not ok.any() or not parts:  # nothing walked, or only batches without records
        return ok, {}
    rec_batch = np.concatenate([a for a, *_ in parts])
    order = np.argsort(rec_batch, kind="stable")  # steps are in record order: batch, then record
    rec_batch = rec_batch[order]
    ts_delta, off_delta, key_len, value_len = (np.concatenate([q[i] for q in parts])[order] for i in range(1, 5))
    sel = (item[c][rows] for c in ("base_offset", "ts_type", "base_timestamp", "max_timestamp", "base_sequence"))
    base_offset, ts_type, base_ts, max_ts, base_seq = (v.astype(np.int64)[rec_batch] for v in sel)
    offset, over = _add(base_offset, off_delta)
    created, over2 = _add(base_ts, ts_delta)
    timestamp = np.where(ts_type == 1, max_ts, created)
    bad = over | (over2 & (ts_type != 1))
    if bad.any():
        ok[np.unique(rec_batch[bad])] = False
    sequence = _increment_sequences(base_seq, off_delta)
    keep = ok[rec_batch]
    return ok, {"offset": offset[keep], "timestamp": timestamp[keep], "sequence": sequence[keep],
                "key_size": np.where(key_len >= 0, key_len, -1)[keep],
                "value_size": np.where(value_len >= 0, value_len, -1)[keep], "batch": base_offset[keep]}


def _ints(values) -> jc.Part:
    try:
        return jc.int_part(np.asarray(values, dtype=np.int64))
    except OverflowError:  # a corrupt delta took a value past int64: Python ints, one token each
        return jc.object_part(values)


def _write_record_block(out: BinaryIO, n: int, offset, timestamp, sequence, key_size, value_size,
                        header_keys: jc.Part, batch, end: bytes) -> None:
    """``n`` record lines from their columns (numpy arrays or lists of ints), each ending with
    ``end`` (:func:`auditor.dump._lines.record_end`: the file's place, then ``}``)."""
    jc.write(out, n, [
        _RKEYS["type"], b'"record"', _RKEYS["offset"], _ints(offset), _RKEYS["timestamp"], _ints(timestamp),
        _RKEYS["sequence"], _ints(sequence), _RKEYS["key_size"], _ints(key_size),
        _RKEYS["value_size"], _ints(value_size), _RKEYS["header_keys"], header_keys,
        _RKEYS["batch_base_offset"], _ints(batch), end,
    ])


class _RecordColumns:
    """Record fields collected as lists, written as one vectorised block, each line ending with
    ``end`` (:func:`auditor.dump._lines.record_end`)."""

    def __init__(self, end: bytes) -> None:
        self.end = end
        self.clear()

    def clear(self) -> None:
        self.n = 0
        self.offset: list[int] = []
        self.timestamp: list[int] = []
        self.sequence: list[int] = []
        self.key_size: list[int] = []
        self.value_size: list[int] = []
        self.header_keys: list[object] = []
        self.batch: list[int] = []

    def add(self, rec, base_offset: int) -> None:
        self.n += 1
        self.offset.append(rec.offset)
        self.timestamp.append(rec.timestamp)
        self.sequence.append(rec.sequence)
        self.key_size.append(-1 if rec.key is None else len(rec.key))
        self.value_size.append(-1 if rec.value is None else len(rec.value))
        self.header_keys.append(b"[]" if not rec.headers else token([k for k, _ in rec.headers]))
        self.batch.append(base_offset)

    def append(self, offset: int, timestamp: int, sequence: int, key_size: int, value_size: int,
               header_keys: bytes, base_offset: int) -> None:
        self.n += 1
        self.offset.append(offset)
        self.timestamp.append(timestamp)
        self.sequence.append(sequence)
        self.key_size.append(key_size)
        self.value_size.append(value_size)
        self.header_keys.append(header_keys)
        self.batch.append(base_offset)

    def write(self, out: BinaryIO) -> None:
        if not self.n:
            return
        keys = self.header_keys
        if all(k == b"[]" for k in keys):
            hk: jc.Part = b"[]"
        else:
            seen: dict[object, int] = {}
            codes = np.fromiter((seen.setdefault(k, len(seen)) for k in keys), np.int32, count=len(keys))
            hk = jc.choice_part(codes, list(seen))  # type: ignore[arg-type]
        _write_record_block(out, self.n, self.offset, self.timestamp, self.sequence, self.key_size,
                            self.value_size, hk, self.batch, self.end)
        self.clear()
