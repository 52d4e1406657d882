"""JSON lines from numpy columns, formatted vectorised: the bytes ``json.dumps``
writes for each row's dict, without building a dict (or a Python int) per row.

Why this exists: ``txn-audit dump`` writes ~600 bytes of JSON per batch, and a
segment can hold millions of batches; ``json.dumps`` of one dict per row costs
tens of microseconds, and even ``%d`` formatting costs ~200 ns per value.

How: a line is a fixed sequence of parts -- literal text (keys, separators,
and every value that is the same in all rows of the chunk) and value columns.
Each value column is turned into an ``(n, w)`` block of ASCII bytes, right
aligned, with NUL bytes in front of the shorter values: integers through a
table of 4-digit groups, booleans / short strings / nulls through a small table
of tokens. The blocks and the literals are laid side by side into one
``(n, W)`` byte matrix (one broadcast copy of the literal row, one strided
copy per block), and the NUL padding is removed in one pass
(``bytearray.replace``). NUL never occurs in the output of ``json.dumps``
(control characters are escaped), so no real byte is lost.

The output is byte for byte what ``json.dumps(obj) + "\\n"`` gives with the
default separators and ``ensure_ascii`` (tests/test_dump_columnar.py).
"""

from __future__ import annotations

from typing import BinaryIO, Sequence, Union

import numpy as np

from auditor.dump._literals import token

# A part of a line: literal bytes, or an (n, w) uint8 block (NUL-padded on the left).
Part = Union[bytes, np.ndarray]

_P10 = np.array([10**i for i in range(20)], dtype=np.uint64)
_DIGITS4: np.ndarray | None = None  # (10000,) uint32: the 4 ASCII digits of i, as they lie in memory


def _digits4() -> np.ndarray:
    global _DIGITS4
    if _DIGITS4 is None:
        i = np.arange(10000)
        t = np.stack([i // 1000, i // 100 % 10, i // 10 % 10, i % 10], axis=1).astype(np.uint8) + ord("0")
        _DIGITS4 = np.ascontiguousarray(t).view(np.uint32).reshape(-1)
    return _DIGITS4


def int_part(v: np.ndarray, null: np.ndarray | None = None) -> Part:
    """Integers as JSON numbers (``null`` where ``null`` is True)."""
    n = len(v)
    if null is not None and null.any():
        if null.all():
            return b"null"
        v = np.where(null, 0, v)
        body = int_part(v)
        if isinstance(body, bytes):
            body = np.frombuffer(body, np.uint8)[None, :].repeat(n, axis=0)
        w = max(body.shape[1], 4)
        out = np.zeros((n, w), np.uint8)
        out[:, w - body.shape[1]:] = body
        out[null] = 0
        out[null, w - 4:] = np.frombuffer(b"null", np.uint8)
        return out
    if n == 0:
        return b""
    first = v[0]
    if (v == first).all():
        return str(int(first)).encode()
    v = v.astype(np.int64, copy=False)
    neg = v < 0
    any_neg = bool(neg.any())
    if any_neg:  # |v| as uint64, INT64_MIN included
        mag = np.where(neg, (~v).astype(np.uint64) + np.uint64(1), v.astype(np.uint64))
    else:
        mag = v.astype(np.uint64)
    nd = np.searchsorted(_P10, mag, side="right")
    np.maximum(nd, 1, out=nd)
    w = int(nd.max())
    groups = (w + 3) // 4
    blk = np.empty((n, groups), np.uint32)
    d4 = _digits4()
    x = mag
    ten4 = np.uint64(10000)
    for g in range(groups - 1, -1, -1):
        q, r = np.divmod(x, ten4)
        blk[:, g] = d4[r.astype(np.intp)]
        x = q
    digits = blk.view(np.uint8).reshape(n, groups * 4)[:, groups * 4 - w:]
    width = w + 1 if any_neg else w
    out = np.empty((n, width), np.uint8)
    out[:, width - w:] = digits
    if any_neg:
        out[:, 0] = 0
    lead = (width - nd).astype(np.intp)  # bytes in front of the digits (sign included)
    short = lead > 0
    if short.any():
        out[np.arange(width) < lead[:, None]] = 0
        if any_neg:
            out[np.flatnonzero(neg), lead[neg] - 1] = ord("-")
    return out


def choice_part(codes: np.ndarray, tokens: Sequence[bytes]) -> Part:
    """Row i is ``tokens[codes[i]]`` (JSON text, e.g. from :func:`token`)."""
    n = len(codes)
    if n == 0:
        return b""
    first = int(codes[0])
    if (codes == first).all():
        return tokens[first]
    w = max(len(t) for t in tokens)
    table = np.zeros((len(tokens), w), np.uint8)
    for i, t in enumerate(tokens):
        if t:
            table[i, w - len(t):] = np.frombuffer(t, np.uint8)
    return table[codes.astype(np.intp, copy=False)]


def bool_part(v: np.ndarray) -> Part:
    return choice_part(v.astype(np.int8, copy=False), (b"false", b"true"))


def object_part(values: Sequence[object]) -> Part:
    """Any JSON values (a column of Python objects: few distinct ones, e.g. a
    control type or None)."""
    seen: dict[bytes, int] = {}
    codes = np.empty(len(values), np.int32)
    for i, val in enumerate(values):
        codes[i] = seen.setdefault(token(val), len(seen))
    return choice_part(codes, list(seen))


def render(n: int, parts: Sequence[Part]) -> bytes | bytearray:
    """The ``n`` lines made of ``parts`` (literals and ``(n, w)`` blocks), concatenated."""
    if n == 0:
        return b""
    merged: list[Part] = []
    for p in parts:
        if isinstance(p, bytes) and merged and isinstance(merged[-1], bytes):
            merged[-1] += p
        elif not (isinstance(p, bytes) and not p):
            merged.append(p)
    widths = [len(p) if isinstance(p, bytes) else p.shape[1] for p in merged]
    total = sum(widths)
    row = np.zeros(total, np.uint8)
    a = 0
    for p, w in zip(merged, widths):
        if isinstance(p, bytes):
            row[a:a + w] = np.frombuffer(p, np.uint8)
        a += w
    buf = bytearray(n * total)
    m = np.frombuffer(buf, np.uint8).reshape(n, total)
    m[:] = row
    del m
    padded = False
    a = 0
    for p, w in zip(merged, widths):
        if not isinstance(p, bytes):
            # one w-byte item per row (a void dtype): a copy per row, not a loop over w bytes per row
            field = np.ndarray((n,), dtype=f"V{w}", buffer=buf, offset=a, strides=(total,))
            field[...] = np.ascontiguousarray(p).view(f"V{w}").reshape(n)
            del field
            padded = padded or not p[:, 0].all()
        a += w
    return buf.replace(b"\0", b"") if padded else buf


def write(out: BinaryIO, n: int, parts: Sequence[Part], rows_per_block: int = 8192) -> None:
    """:func:`render` in blocks of rows (bounded memory); ``parts`` are sliced per block."""
    for a in range(0, n, rows_per_block):
        b = min(n, a + rows_per_block)
        out.write(render(b - a, [p if isinstance(p, bytes) else p[a:b] for p in parts]))
