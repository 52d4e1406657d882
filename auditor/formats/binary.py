"""Bounds-checked big-endian reader for Kafka's wire and disk encodings.

Kafka writes fixed-width integers big-endian two's complement, zig-zag varints
inside records, and unsigned LEB128 varints in flexible ("compact") generated
messages. Every read is bounds-checked and raises :class:`TruncatedError` at the
exact byte where the input ran out, never an ``IndexError`` or ``struct.error``.
"""

from __future__ import annotations

import base64
import struct
import uuid as _uuid

from auditor.errors import DecodeError, TruncatedError

_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")


class Reader:
    """Cursor over a bytes-like object; ``pos`` is relative to the buffer start."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None) -> None:
        self.buf = memoryview(buf) if not isinstance(buf, memoryview) else buf
        self.pos = pos
        self.end = len(self.buf) if end is None else end

    # -- basics -----------------------------------------------------------
    def remaining(self) -> int:
        return self.end - self.pos

    def _need(self, n: int, what: str) -> int:
        if n < 0:
            raise DecodeError(f"negative length {n} for {what}", self.pos, "bad-length")
        if self.pos + n > self.end:
            raise TruncatedError(
                f"need {n} bytes for {what}, only {self.end - self.pos} left", self.pos
            )
        p = self.pos
        self.pos += n
        return p

    def take(self, n: int, what: str = "bytes") -> bytes:
        p = self._need(n, what)
        return bytes(self.buf[p : p + n])

    def skip(self, n: int, what: str = "bytes") -> None:
        self._need(n, what)

    def int8(self) -> int:
        p = self._need(1, "int8")
        v = self.buf[p]
        return v - 256 if v > 127 else v

    def uint8(self) -> int:
        return self.buf[self._need(1, "uint8")]

    def boolean(self) -> bool:
        return self.uint8() != 0

    def int16(self) -> int:
        return _I16.unpack_from(self.buf, self._need(2, "int16"))[0]

    def uint16(self) -> int:
        return _U16.unpack_from(self.buf, self._need(2, "uint16"))[0]

    def int32(self) -> int:
        return _I32.unpack_from(self.buf, self._need(4, "int32"))[0]

    def uint32(self) -> int:
        return _U32.unpack_from(self.buf, self._need(4, "uint32"))[0]

    def int64(self) -> int:
        return _I64.unpack_from(self.buf, self._need(8, "int64"))[0]

    def float64(self) -> float:
        return _F64.unpack_from(self.buf, self._need(8, "float64"))[0]

    def uuid(self) -> str:
        """Kafka Uuid, rendered the way Kafka prints it: URL-safe base64, no padding."""
        raw = self.take(16, "uuid")
        return uuid_to_kafka_str(raw)

    # -- varints ------------------------------------------------------------
    def uvarint(self, max_bytes: int = 5) -> int:
        start = self.pos
        result = 0
        shift = 0
        for i in range(max_bytes):
            if self.pos >= self.end:
                raise TruncatedError("varint runs past end of input", start)
            b = self.buf[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
        raise DecodeError(f"varint longer than {max_bytes} bytes", start, "corrupt")

    def varint(self) -> int:
        u = self.uvarint(5) & 0xFFFFFFFF
        v = (u >> 1) ^ -(u & 1)
        return v

    def varlong(self) -> int:
        u = self.uvarint(10) & 0xFFFFFFFFFFFFFFFF
        return (u >> 1) ^ -(u & 1)

    # -- strings / bytes of generated messages --------------------------------
    def string(self, flexible: bool, nullable: bool = True) -> str | None:
        start = self.pos
        if flexible:
            n = self.uvarint() - 1
        else:
            n = self.int16()
        if n < 0:
            if n == -1 and nullable:
                return None
            raise DecodeError(f"bad string length {n}", start, "bad-length")
        raw = self.take(n, "string")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError(f"string is not UTF-8: {exc}", start, "corrupt") from None

    def bytes_field(self, flexible: bool) -> bytes | None:
        start = self.pos
        n = self.uvarint() - 1 if flexible else self.int32()
        if n == -1:
            return None
        if n < -1:
            raise DecodeError(f"bad bytes length {n}", start, "bad-length")
        return self.take(n, "bytes")

    def array_len(self, flexible: bool) -> int:
        start = self.pos
        n = self.uvarint() - 1 if flexible else self.int32()
        if n < -1:
            raise DecodeError(f"bad array length {n}", start, "bad-length")
        # an element takes at least one byte: a larger count cannot be honest
        if n > self.remaining():
            raise DecodeError(f"array length {n} exceeds the {self.remaining()} bytes left", start, "bad-length")
        return n


def uuid_to_kafka_str(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def kafka_str_to_uuid_hex(s: str) -> str:
    pad = "=" * (-len(s) % 4)
    return _uuid.UUID(bytes=base64.urlsafe_b64decode(s + pad)).hex


def wrap64(v: int) -> int:
    """Java long arithmetic: a corrupt header or delta must not give an int outside int64."""
    return (v + 2**63) % 2**64 - 2**63


def zigzag_encode(v: int) -> int:
    return (v << 1) ^ (v >> 63)
