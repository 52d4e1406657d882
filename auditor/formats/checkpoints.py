"""Text side files of a partition directory and of a log-dir root (facts §7).

* ``leader-epoch-checkpoint`` (per partition): which leader epoch started at
  which offset -- needed to tell which leader wrote a batch.
* ``replication-offset-checkpoint`` (high watermarks: the LSO can never pass
  them), ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``
  and ``cleaner-offset-checkpoint`` (per log dir, one line per partition).
* ``meta.properties`` (which broker / node and cluster the log dir belongs to),
  ``partition.metadata`` (topic id), ``quorum-state`` (KRaft voter state, JSON)
  and ``.kafka_cleanshutdown`` (JSON since 3.7, empty before).

All are small, so the functions take the file's bytes. Lines are split the way
Java's BufferedReader does (``\\n``, ``\\r\\n`` or ``\\r``; a final terminator
adds no empty line), because files copied through Windows checkouts end in CRLF
and the broker still reads them. Numbers are parsed like Integer.parseInt /
Long.parseLong (optional sign, ASCII digits, range-checked). Problems raise
:class:`DecodeError` with the byte position of the offending line.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Iterator

from auditor.errors import DecodeError

CHECKPOINT_VERSION = 0
PARTITION_METADATA_VERSION = 0
META_PROPERTIES_VERSIONS = (0, 1)

# file name -> checkpoint_kind value
CHECKPOINT_FILES: dict[str, str] = {
    "replication-offset-checkpoint": "replication-offset",
    "recovery-point-offset-checkpoint": "recovery-point-offset",
    "log-start-offset-checkpoint": "log-start-offset",
    "cleaner-offset-checkpoint": "cleaner-offset",
}

# The decoders' column lists (pyarrow) are built on first access: ``txn-audit
# dump`` reads meta.properties through this module without needing pyarrow.
_COLUMN_LISTS: dict[str, list] = {}


def __getattr__(name: str) -> object:
    if not name.endswith("_COLUMNS"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if not _COLUMN_LISTS:
        import pyarrow as pa

        CHECKPOINT_COLUMNS = [
            pa.field("checkpoint_kind", pa.string()),
            pa.field("topic", pa.string()),
            pa.field("partition", pa.int32()),
            pa.field("offset", pa.int64()),
            pa.field("line", pa.int32()),
        ]

        LEADER_EPOCH_COLUMNS = [
            pa.field("leader_epoch", pa.int32()),
            pa.field("start_offset", pa.int64()),
        ]

        META_PROPERTIES_COLUMNS = [
            pa.field("version", pa.int32()),
            pa.field("broker_id", pa.int32()),
            pa.field("node_id", pa.int32()),
            pa.field("cluster_id", pa.string()),
            pa.field("directory_id", pa.string()),
            pa.field("properties", pa.string()),
        ]

        PARTITION_METADATA_COLUMNS = [
            pa.field("version", pa.int32()),
            pa.field("topic_id", pa.string()),
        ]

        QUORUM_STATE_COLUMNS = [
            pa.field("leader_id", pa.int32()),
            pa.field("leader_epoch", pa.int32()),
            pa.field("voted_id", pa.int32()),
            pa.field("json", pa.string()),
        ]

        CLEAN_SHUTDOWN_COLUMNS = [
            pa.field("version", pa.int32()),
            pa.field("broker_epoch", pa.int64()),
            pa.field("json", pa.string()),
        ]
        _COLUMN_LISTS.update({k: v for k, v in locals().items() if k.endswith("_COLUMNS")})
    if name in _COLUMN_LISTS:
        return _COLUMN_LISTS[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_INT = re.compile(r"[+-]?[0-9]+\Z")
_JAVA_WS = re.compile(r"[ \t\n\x0b\f\r]+")
_UUID = re.compile(r"[A-Za-z0-9_-]{22}\Z")
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)


# -- helpers -----------------------------------------------------------------

_LINE = re.compile(rb"[^\r\n]*")


def _lines(data: bytes, encoding: str = "utf-8") -> Iterator[tuple[int, int, str]]:
    """(1-based line number, byte position of the line, text) per line."""
    pos = 0
    n = len(data)
    number = 0
    while pos < n:
        m = _LINE.match(data, pos)
        end = m.end() if m else pos
        number += 1
        try:
            text = data[pos:end].decode(encoding)
        except UnicodeDecodeError as exc:
            raise DecodeError(f"line {number} is not valid {encoding}", pos + exc.start, "corrupt") from None
        yield number, pos, text
        if data[end : end + 2] == b"\r\n":
            pos = end + 2
        else:
            pos = end + 1


def _java_int(text: str, bounds: tuple[int, int], what: str, position: int) -> int:
    """Integer.parseInt / Long.parseLong: no spaces, no underscores, in range."""
    if not _INT.match(text):
        raise DecodeError(f"{what} {text[:40]!r} is not a number", position, "corrupt")
    value = int(text)
    if not bounds[0] <= value <= bounds[1]:
        raise DecodeError(f"{what} {text[:40]!r} is out of range", position, "corrupt")
    return value


def _java_split(line: str) -> list[str]:
    """Pattern("\\s+").split: leading empty token kept, trailing ones dropped."""
    parts = _JAVA_WS.split(line)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def _checkpoint_body(data: bytes, what: str) -> Iterator[tuple[int, int, str]]:
    """Check the version and count lines of a checkpoint, yield its entry lines.

    Mirrors CheckpointFile's reader: an empty file or a file with only the
    version line holds no entries; the count must equal the number of lines.
    """
    lines = _lines(data)
    first = next(lines, None)
    if first is None:
        return
    _, pos, text = first
    version = _java_int(text, _INT32, f"{what} version", pos)
    if version != CHECKPOINT_VERSION:
        raise DecodeError(f"{what} has version {version}, expected {CHECKPOINT_VERSION}", pos, "unknown-version")
    second = next(lines, None)
    if second is None:
        return
    _, count_pos, text = second
    expected = _java_int(text, _INT32, f"{what} entry count", count_pos)
    if expected < 0:
        raise DecodeError(f"{what} entry count {expected} is negative", count_pos, "bad-length")
    found = 0
    for item in lines:
        found += 1
        yield item
    if found != expected:
        raise DecodeError(
            f"{what} says {expected} entries but has {found}", count_pos, "bad-length"
        )


# -- checkpoints ----------------------------------------------------------------

def checkpoint_kind(file_name: str) -> str | None:
    """``checkpoint_kind`` for a log-dir root checkpoint file name, else None."""
    return CHECKPOINT_FILES.get(file_name.rsplit("/", 1)[-1])


def read_offset_checkpoint(data: bytes, checkpoint_kind: str) -> list[dict]:
    """Rows (see :data:`CHECKPOINT_COLUMNS`) of a ``<topic> <partition> <offset>`` checkpoint.

    ``checkpoint_kind`` is stored as given (use :func:`checkpoint_kind` on the
    file name). ``line`` is the 1-based line number of the entry in the file.
    """
    rows: list[dict] = []
    for number, pos, text in _checkpoint_body(data, checkpoint_kind or "checkpoint"):
        parts = _java_split(text)
        if len(parts) != 3 or parts[0] == "":
            raise DecodeError(f"line {number} {text[:80]!r} is not '<topic> <partition> <offset>'", pos, "corrupt")
        rows.append(
            {
                "checkpoint_kind": checkpoint_kind,
                "topic": parts[0],
                "partition": _java_int(parts[1], _INT32, f"partition on line {number}", pos),
                "offset": _java_int(parts[2], _INT64, f"offset on line {number}", pos),
                "line": number,
            }
        )
    return rows


def read_leader_epoch_checkpoint(data: bytes) -> list[dict]:
    """Rows (see :data:`LEADER_EPOCH_COLUMNS`) of a ``leader-epoch-checkpoint``."""
    rows: list[dict] = []
    for number, pos, text in _checkpoint_body(data, "leader-epoch-checkpoint"):
        parts = _java_split(text)
        if len(parts) != 2:
            raise DecodeError(f"line {number} {text[:80]!r} is not '<leader epoch> <start offset>'", pos, "corrupt")
        rows.append(
            {
                "leader_epoch": _java_int(parts[0], _INT32, f"leader epoch on line {number}", pos),
                "start_offset": _java_int(parts[1], _INT64, f"start offset on line {number}", pos),
            }
        )
    return rows


# -- meta.properties -------------------------------------------------------------

_PROP_WS = " \t\f"


def _unescape(text: str, position: int) -> str:
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c != "\\" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        c = text[i + 1]
        i += 2
        if c == "u":
            hexd = text[i : i + 4]
            if len(hexd) != 4 or not all(h in "0123456789abcdefABCDEF" for h in hexd):
                raise DecodeError("malformed \\uxxxx escape in properties", position, "corrupt")
            out.append(chr(int(hexd, 16)))
            i += 4
        else:
            out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(c, c))
    return "".join(out)


def _parse_properties(data: bytes) -> dict[str, tuple[str, int]]:
    """java.util.Properties.load (ISO-8859-1): key -> (value, byte position of its line)."""
    props: dict[str, tuple[str, int]] = {}
    lines = list(_lines(data, "latin-1"))
    i = 0
    while i < len(lines):
        _, pos, text = lines[i]
        i += 1
        text = text.lstrip(_PROP_WS)
        if not text or text[0] in "#!":
            continue
        # continuation: an odd number of trailing backslashes joins the next line
        while (len(text) - len(text.rstrip("\\"))) % 2 == 1:
            text = text[:-1]
            if i >= len(lines):
                break
            text += lines[i][2].lstrip(_PROP_WS)
            i += 1
        k = 0
        while k < len(text):
            c = text[k]
            if c == "\\":
                k += 2
                continue
            if c in "=:" or c in _PROP_WS:
                break
            k += 1
        key = text[: min(k, len(text))]
        rest = text[min(k, len(text)) :].lstrip(_PROP_WS)
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(_PROP_WS)
        props[_unescape(key, pos)] = (_unescape(rest, pos), pos)
    return props


def _check_uuid(text: str, what: str, position: int) -> None:
    """Kafka Uuid.fromString: URL-safe base64 without padding, 16 bytes, not zero."""
    if not _UUID.match(text):
        raise DecodeError(f"{what} {text[:40]!r} is not a 22-character base64 uuid", position, "corrupt")
    if base64.urlsafe_b64decode(text + "==") == bytes(16):
        raise DecodeError(f"{what} is the all-zero uuid", position, "corrupt")


def read_meta_properties(data: bytes) -> dict:
    """Decode a log dir's ``meta.properties`` (dict shape of :data:`META_PROPERTIES_COLUMNS`).

    ``version`` defaults to 0 when absent (as MetaProperties does); 0 is the
    ZooKeeper-era file with ``broker.id``, 1 the KRaft file with ``node.id``
    (required). ``broker_id`` is ``broker.id`` when present, else ``node.id``;
    ``node_id`` is ``node.id`` or None. ``properties`` keeps every key as JSON.
    """
    props = _parse_properties(data)

    def int_prop(key: str) -> int | None:
        if key not in props:
            return None
        value, pos = props[key]
        return _java_int(value, _INT32, key, pos)

    version = int_prop("version")
    if version is None:
        version = 0
    elif version not in META_PROPERTIES_VERSIONS:
        raise DecodeError(f"meta.properties version {version} is unknown", props["version"][1], "unknown-version")
    broker = int_prop("broker.id")
    node = int_prop("node.id")
    if version == 1 and node is None:
        raise DecodeError("meta.properties version 1 has no node.id", 0, "corrupt")
    directory = props.get("directory.id")
    if directory is not None:
        _check_uuid(directory[0], "directory.id", directory[1])
    cluster = props.get("cluster.id")
    return {
        "version": version,
        "broker_id": broker if broker is not None else node,
        "node_id": node,
        "cluster_id": cluster[0] if cluster else None,
        "directory_id": directory[0] if directory else None,
        "properties": json.dumps({k: v for k, (v, _) in sorted(props.items())}, ensure_ascii=False),
    }


# -- partition.metadata, quorum-state, .kafka_cleanshutdown ------------------------

def read_partition_metadata(data: bytes) -> dict:
    """``partition.metadata``: ``version: 0`` then ``topic_id: <uuid>``.

    Like PartitionMetadataFile, each line must split into exactly two tokens
    (the key names are not checked by the broker either); the topic id must be
    a non-zero Kafka uuid. Returns ``{"version", "topic_id"}``.
    """
    lines = list(_lines(data))
    if not lines:
        raise DecodeError("partition.metadata is empty", 0, "truncated")
    _, pos, text = lines[0]
    parts = _java_split(text)
    if len(parts) != 2:
        raise DecodeError(f"malformed line {text[:80]!r}", pos, "corrupt")
    version = _java_int(parts[1], _INT32, "partition.metadata version", pos)
    if version != PARTITION_METADATA_VERSION:
        raise DecodeError(f"partition.metadata version {version} is unknown", pos, "unknown-version")
    if len(lines) < 2:
        raise DecodeError("partition.metadata has no topic_id line", len(data), "truncated")
    _, pos, text = lines[1]
    parts = _java_split(text)
    if len(parts) != 2:
        raise DecodeError(f"malformed line {text[:80]!r}", pos, "corrupt")
    _check_uuid(parts[1], "topic_id", pos)
    return {"version": version, "topic_id": parts[1]}


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def _json_object(data: bytes, what: str) -> tuple[dict, str]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"{what} is not valid UTF-8", exc.start, "corrupt") from None
    try:
        obj = json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:
        char = getattr(exc, "pos", 0) or 0
        raise DecodeError(f"{what} is not JSON: {exc}", len(text[:char].encode("utf-8")), "corrupt") from None
    except RecursionError:
        raise DecodeError(f"{what} nests too deeply", 0, "corrupt") from None
    if not isinstance(obj, dict):
        raise DecodeError(f"{what} is not a JSON object", 0, "corrupt")
    return obj, text.strip()


def _json_int(obj: dict, key: str, bounds: tuple[int, int], what: str) -> int | None:
    if key not in obj:
        return None
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, int) or not bounds[0] <= value <= bounds[1]:
        raise DecodeError(f"{what} field {key} is {value!r}, not an integer", 0, "corrupt")
    return value


def read_quorum_state(data: bytes) -> dict:
    """KRaft ``quorum-state`` (JSON): ``leader_id``, ``leader_epoch``, ``voted_id``
    when present (None otherwise) and the file's text (stripped) as ``json``."""
    obj, text = _json_object(data, "quorum-state")
    return {
        "leader_id": _json_int(obj, "leaderId", _INT32, "quorum-state"),
        "leader_epoch": _json_int(obj, "leaderEpoch", _INT32, "quorum-state"),
        "voted_id": _json_int(obj, "votedId", _INT32, "quorum-state"),
        "json": text,
    }


def read_clean_shutdown(data: bytes) -> dict:
    """``.kafka_cleanshutdown``: empty before 3.7, else ``{"version":0,"brokerEpoch":N}``.

    Its presence alone says the broker shut down cleanly (so the newest
    producer snapshot is at the log end). Empty or whitespace-only files give
    all-None fields.
    """
    if not data.strip():
        return {"version": None, "broker_epoch": None, "json": None}
    obj, text = _json_object(data, ".kafka_cleanshutdown")
    return {
        "version": _json_int(obj, "version", _INT32, ".kafka_cleanshutdown"),
        "broker_epoch": _json_int(obj, "brokerEpoch", _INT64, ".kafka_cleanshutdown"),
        "json": text,
    }
