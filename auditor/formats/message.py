"""A small interpreter for Kafka's generated-message schemas.

Kafka describes its internal records (transaction log, metadata log, consumer
offsets, producer snapshots) in JSON schemas with per-field version ranges,
"flexible" versions (compact lengths + trailing tagged-field sections) and
tagged fields. Rather than hand-writing one parser per record and version, each
decoder declares the schema once as :class:`Field` lists and this module reads
any version of it. Unknown tagged fields are kept (as hex), never fatal, so a
newer broker's records still decode.
"""

from __future__ import annotations

from dataclasses import dataclass, field as dc_field
from functools import lru_cache
from typing import Any, Callable, Sequence

from auditor.errors import DecodeError
from auditor.formats.binary import Reader

UNKNOWN_TAGS = "_unknown_tags"


@lru_cache(maxsize=None)  # a schema's few dozen version strings, asked for every field of every record
def _parse_versions(spec: str | None) -> tuple[int, int] | None:
    """``"0+"`` -> (0, inf); ``"1-3"`` -> (1, 3); ``"2"`` -> (2, 2); None/"none" -> None."""
    if spec is None or spec == "none":
        return None
    if spec.endswith("+"):
        return int(spec[:-1]), 1 << 30
    if "-" in spec:
        lo, hi = spec.split("-")
        return int(lo), int(hi)
    return int(spec), int(spec)


def _in(rng: tuple[int, int] | None, version: int) -> bool:
    return rng is not None and rng[0] <= version <= rng[1]


@dataclass(frozen=True)
class Field:
    """One schema field. ``type`` is a Kafka schema type name: int8, int16,
    uint16, int32, int64, float64, bool, string, bytes, uuid, or ``[]T`` for an
    array of T, where T may be ``struct`` (then ``fields`` describes it)."""

    name: str
    type: str
    versions: str = "0+"
    nullable_versions: str | None = None
    tag: int | None = None
    tagged_versions: str | None = None
    default: Any = None
    fields: Sequence["Field"] = dc_field(default_factory=tuple)

    def present(self, version: int) -> bool:
        return _in(_parse_versions(self.versions), version)

    def tagged_in(self, version: int) -> bool:
        return self.tag is not None and _in(_parse_versions(self.tagged_versions or self.versions), version)


@dataclass(frozen=True)
class Schema:
    name: str
    fields: Sequence[Field]
    valid_versions: str = "0"
    flexible_versions: str | None = None

    def is_flexible(self, version: int) -> bool:
        return _in(_parse_versions(self.flexible_versions), version)

    def supports(self, version: int) -> bool:
        return _in(_parse_versions(self.valid_versions), version)


def decode(schema: Schema, r: Reader, version: int, *, strict_version: bool = True) -> dict[str, Any]:
    """Decode one message of ``schema`` at ``version`` from ``r``."""
    if strict_version and not schema.supports(version):
        raise DecodeError(f"{schema.name} version {version} is not known", r.pos, "unknown-version")
    return _struct(schema.fields, r, version, schema.is_flexible(version))


def read_versioned(schema: Schema, value: bytes) -> tuple[int, dict[str, Any]]:
    """A record value framed as Kafka's coordinators write it: an int16 version, then the message.

    The transaction log, ``__consumer_offsets`` (offset commits, group metadata, the KIP-848 records)
    and ``__share_group_state`` all write ``version (int16) + message`` (``MessageUtil.toVersionPrefixedBytes``
    in Kafka's clients) and their readers fail on a version the schema does not list and on bytes left
    after the message, as this does.
    """
    r = Reader(value)
    version = r.int16()
    if not schema.supports(version):
        raise DecodeError(f"{schema.name} version {version} is not known", 0, "unknown-version")
    v = decode(schema, r, version)
    require_consumed(r, schema, version)
    return version, v


def require_consumed(r: Reader, schema: Schema, version: int) -> None:
    """Bytes left after a whole message are an error, as Kafka's generated ``read`` leaves them unread."""
    if r.remaining():
        raise DecodeError(f"{r.remaining()} bytes left after {schema.name} v{version}", r.pos, "corrupt")


_INT16_MAX = 0x7FFF


def read_api_message_frame(r: Reader) -> tuple[int, int, int]:
    """The frame of ``AbstractApiMessageSerde``: frame version, api key and record version.

    The metadata log and ``__remote_log_metadata`` both write three unsigned varints before the message
    body (``AbstractApiMessageSerde.write``); Kafka reads each as a short and rejects one that does not fit
    (``readUnsignedVarint`` then a range check). Checking the frame version is the caller's: each log knows
    which it accepts.
    """
    return (_short_uvarint(r, "frame version"), _short_uvarint(r, "api key"),
            _short_uvarint(r, "record version"))


def _short_uvarint(r: Reader, what: str) -> int:
    at = r.pos
    v = r.uvarint()
    if v > _INT16_MAX:
        raise DecodeError(f"{what} {v} does not fit in an int16", at, "corrupt")
    return v


# (name, read or None, default) per field, in the schema's order, and the tagged fields by tag
_Plan = tuple[tuple[tuple[str, "Callable[[Reader], Any] | None", Any], ...], dict[int, Field]]
# (id of a field list, version, flexible) -> (its plan, the list: kept alive so that its id is not reused);
# the field lists are the schemas' module constants (auditor.formats), so this holds a few hundred entries
_PLANS: dict[tuple[int, int, bool], tuple[_Plan, Sequence[Field]]] = {}
# the scalar types read by a Reader method of no argument
_SCALARS = {"int8": Reader.int8, "int16": Reader.int16, "uint16": Reader.uint16, "int32": Reader.int32,
            "int64": Reader.int64, "float64": Reader.float64, "bool": Reader.boolean, "uuid": Reader.uuid}


def _struct(fields: Sequence[Field], r: Reader, version: int, flexible: bool) -> dict[str, Any]:
    # which fields a version has, which are tagged and how each is read are the same for every
    # record of that version: worked out once (metadata logs hold ~10^5 small records)
    key = (id(fields), version, flexible)
    held = _PLANS.get(key)
    if held is None:
        held = _PLANS[key] = (_plan(fields, version, flexible), fields)
    steps, tagged = held[0]
    out: dict[str, Any] = {}
    for name, read, default in steps:
        out[name] = default if read is None else read(r)
    if flexible:
        _tagged_section(r, version, tagged, out)
    return out


def _plan(fields: Sequence[Field], version: int, flexible: bool) -> _Plan:
    steps = []
    tagged: dict[int, Field] = {}
    for f in fields:
        if flexible and f.tagged_in(version):
            tagged[f.tag] = f  # type: ignore[index]
            steps.append((f.name, None, _default(f)))
        elif not f.present(version):
            steps.append((f.name, None, _default(f)))
        else:
            steps.append((f.name, _reader(f, version, flexible), None))
    return tuple(steps), tagged


def _reader(f: Field, version: int, flexible: bool) -> "Callable[[Reader], Any]":
    """How ``f`` is read at ``version``: what :func:`_value` does for it, chosen once."""
    scalar = _SCALARS.get(f.type)
    if scalar is not None:
        return scalar
    if f.type == "string":
        return lambda r: r.string(flexible, nullable=True)
    return lambda r: _value(f, f.type, r, version, flexible)


def _tagged_section(r: Reader, version: int, tagged: dict[int, Field], out: dict[str, Any]) -> None:
    count = r.uvarint()
    unknown: dict[str, str] = {}
    last = -1
    for _ in range(count):
        at = r.pos
        tag = r.uvarint()
        size = r.uvarint()
        if tag <= last:
            raise DecodeError(f"tagged fields out of order ({tag} after {last})", at, "corrupt")
        last = tag
        body = r.take(size, f"tagged field {tag}")
        f = tagged.get(tag)
        if f is None:
            unknown[str(tag)] = body.hex()
            continue
        sub = Reader(body)
        try:
            out[f.name] = _value(f, f.type, sub, version, True, tagged=True)
        except DecodeError as exc:
            raise exc.at(at) from None
        if sub.remaining():
            raise DecodeError(f"tagged field {tag} ({f.name}) has {sub.remaining()} bytes beyond its value", at, "corrupt")
    if unknown:
        out[UNKNOWN_TAGS] = {**out.get(UNKNOWN_TAGS, {}), **unknown}


def _default(f: Field) -> Any:
    if f.default is not None:
        return f.default
    if f.type.startswith("[]"):
        return None
    if f.type in ("int8", "int16", "uint16", "int32", "int64"):
        return 0
    if f.type == "bool":
        return False
    if f.type == "float64":
        return 0.0
    return None


def _value(f: Field, typ: str, r: Reader, version: int, flexible: bool, *, tagged: bool = False) -> Any:
    nullable = _in(_parse_versions(f.nullable_versions), version)
    if typ.startswith("[]"):
        n = r.array_len(flexible)
        if n == -1:
            if not nullable and f.tag is None:
                raise DecodeError(f"null array for non-nullable {f.name}", r.pos, "corrupt")
            return None
        inner = typ[2:]
        if inner == "struct":
            return [_struct(f.fields, r, version, flexible) for _ in range(n)]
        return [_value(f, inner, r, version, flexible) for _ in range(n)]
    if typ == "struct":
        if nullable:
            # a nullable struct starts with a presence marker (Kafka's generated read(), e.g.
            # ConsumerGroupMemberMetadataValue 4.3.1): an int8 in the message body (-1: null), an
            # unsigned varint inside a tagged field's body (0: null; written even for null)
            present = r.uvarint() > 0 if tagged else r.int8() >= 0
            if not present:
                return None
        return _struct(f.fields, r, version, flexible)
    if typ == "int8":
        return r.int8()
    if typ == "int16":
        return r.int16()
    if typ == "uint16":
        return r.uint16()
    if typ == "int32":
        return r.int32()
    if typ == "int64":
        return r.int64()
    if typ == "float64":
        return r.float64()
    if typ == "bool":
        return r.boolean()
    if typ == "uuid":
        return r.uuid()
    if typ == "string":
        return r.string(flexible, nullable=True)
    if typ == "bytes":
        b = r.bytes_field(flexible)
        return None if b is None else b.hex()
    raise DecodeError(f"schema type {typ!r} not supported", r.pos, "corrupt")
