"""The ZooKeeper-era producer-id block: znode ``/latest_producer_id_block``.

Before KRaft, producer ids were handed out in blocks of 1000 recorded in one
znode (docs/on-disk-format.md §5.3): ``{"version":1,"broker":<int>,"block_start":"<long>",
"block_end":"<long>"}``, both ends inclusive, numbers written as strings. The
znode only holds the *latest* grant, so an operator who exported it lets the
auditor check that every producer id seen on disk lies below ``block_end + 1``
(a larger one means ids were reissued after a ZooKeeper reset, a classic cause
of two producers sharing one id).

Accepted input: the JSON alone (numbers or strings, any whitespace), or the
raw output of ``zookeeper-shell.sh <zk> get /latest_producer_id_block`` where
the JSON is one line among connection chatter and stat lines. Error positions
are byte offsets into ``data``.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from auditor.errors import DecodeError

COLUMNS: list[pa.Field] = [
    pa.field("version", pa.int32()),
    pa.field("broker_id", pa.int32()),
    pa.field("block_start", pa.int64()),
    pa.field("block_end", pa.int64()),
]

MAX_INPUT_BYTES = 64 * 1024  # a znode export is tiny; anything larger is not one
_MAX_CANDIDATES = 1000
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_FIELDS = ("version", "broker", "block_start", "block_end")


def decode_zk_pid_block(data: bytes) -> dict[str, Any]:
    """Parse an exported ``/latest_producer_id_block`` znode into one row of :data:`COLUMNS`."""
    if len(data) > MAX_INPUT_BYTES:
        raise DecodeError(f"{len(data)} bytes is far too large for a producer-id block znode", MAX_INPUT_BYTES, "bad-length")
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"not UTF-8 text: {exc.reason}", exc.start, "corrupt") from None

    def byte_pos(char_index: int) -> int:
        return len(text[:char_index].encode("utf-8"))

    decoder = json.JSONDecoder()
    first_error: tuple[int, str] | None = None
    i = text.find("{")
    tried = 0
    while i >= 0 and tried < _MAX_CANDIDATES:
        tried += 1
        try:
            obj, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            if first_error is None:
                first_error = (exc.pos, f"bad JSON: {exc.msg}")
            i = text.find("{", i + 1)
            continue
        except RecursionError:
            raise DecodeError("JSON nested too deeply", byte_pos(i), "corrupt") from None
        except ValueError as exc:  # e.g. an integer literal beyond Python's digit limit
            raise DecodeError(f"bad JSON: {exc}", byte_pos(i), "corrupt") from None
        if isinstance(obj, dict) and any(k in obj for k in _FIELDS):
            return _row(obj, byte_pos(i))
        i = text.find("{", end)
    if first_error is not None:
        pos, msg = first_error
        raise DecodeError(msg, byte_pos(pos), "corrupt")
    raise DecodeError("no producer-id block JSON object found", 0, "corrupt")


def _int_field(obj: dict[str, Any], name: str, pos: int, lo: int, hi: int) -> int:
    if name not in obj:
        raise DecodeError(f"producer-id block JSON lacks field {name!r}", pos, "corrupt")
    v = obj[name]
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise DecodeError(f"field {name!r} is {type(v).__name__}, not an integer", pos, "corrupt")
    if isinstance(v, str):
        s = v.strip()
        body = s[1:] if s[:1] in "+-" else s
        if not body or not body.isascii() or not body.isdigit() or len(body) > 20:
            raise DecodeError(f"field {name!r} = {v!r} is not a decimal integer", pos, "corrupt")
        v = int(s)
    if not lo <= v <= hi:
        raise DecodeError(f"field {name!r} = {v} is out of range", pos, "corrupt")
    return v


def _row(obj: dict[str, Any], pos: int) -> dict[str, Any]:
    version = _int_field(obj, "version", pos, _INT32_MIN, _INT32_MAX)
    if version != 1:
        raise DecodeError(f"producer-id block znode version {version} is not known", pos, "unknown-version")
    broker = _int_field(obj, "broker", pos, _INT32_MIN, _INT32_MAX)
    start = _int_field(obj, "block_start", pos, _INT64_MIN, _INT64_MAX)
    end = _int_field(obj, "block_end", pos, _INT64_MIN, _INT64_MAX)
    if start < 0:
        raise DecodeError(f"block_start {start} is negative", pos, "corrupt")
    if end < start:
        raise DecodeError(f"block_end {end} is below block_start {start}", pos, "corrupt")
    return {"version": version, "broker_id": broker, "block_start": start, "block_end": end}
