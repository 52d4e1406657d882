"""Decompression of record-batch payloads, with a hard inflate limit.

Codec ids are Kafka's (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd). Quirks handled:

* snappy: Java clients write *xerial* framing (``\\x82SNAPPY\\0`` + two int32
  versions + ``[int32 length][raw block]`` chunks); librdkafka writes one raw
  snappy block. Both are accepted, as the broker does.
* lz4: Kafka writes a standard LZ4 frame (FLG 0x60, BD 0x40). Old (magic 0)
  writers computed the header checksum over the magic number too (KAFKA-3160),
  so the frame is parsed here and the header checksum is only enforced for
  magic >= 1; blocks go to the lz4 block decoder.
* zstd: frames from a streaming compressor may omit the content size, so
  decoding is streamed.

Every codec stops with ``DecodeError(kind="inflate-limit")`` once output passes
``limit`` bytes: a 1 KiB bomb must not become gigabytes of memory.
"""

from __future__ import annotations

import struct
import threading
import zlib

from auditor.errors import DecodeError

# cramjam, lz4 and zstandard are imported by the codec that needs them: reading
# batch headers (``txn-audit dump``) never decompresses, and the three cost ~20 ms
# of start-up together.

CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
DEFAULT_INFLATE_LIMIT = 64 * 1024 * 1024

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_LZ4_MAGIC = 0x184D2204
_LZ4_BLOCK_MAX = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}


def codec_name(codec: int) -> str:
    return CODEC_NAMES.get(codec, f"unknown({codec})")


def decompress(codec: int, data: bytes, *, limit: int = DEFAULT_INFLATE_LIMIT, magic: int = 2) -> bytes:
    """Return the decompressed payload; positions in errors are relative to ``data``."""
    if codec == 0:
        return data
    try:
        if codec == 1:
            return _gzip(data, limit)
        if codec == 2:
            return _snappy(data, limit)
        if codec == 3:
            return _lz4_frame(data, limit, magic)
        if codec == 4:
            return _zstd(data, limit)
    except DecodeError:
        raise
    except Exception as exc:  # codec libraries raise their own types
        raise DecodeError(f"{codec_name(codec)} payload does not decompress: {exc}", 0, "corrupt") from None
    raise DecodeError(f"unknown compression codec id {codec}", 0, "corrupt")


def _check(total: int, limit: int, codec: str) -> None:
    if total > limit:
        raise DecodeError(f"{codec} payload inflates past the {limit}-byte limit", 0, "inflate-limit")


def _gzip(data: bytes, limit: int) -> bytes:
    out = bytearray()
    rest = data
    # gzip allows several concatenated members (java.util.zip reads them all)
    while rest:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        chunk = d.decompress(rest, limit + 1 - len(out))
        out += chunk
        _check(len(out), limit, "gzip")
        if d.unconsumed_tail:
            _check(limit + 1, limit, "gzip")
        if not d.eof:
            raise DecodeError("gzip stream ends early", len(data) - len(rest), "truncated")
        rest = d.unused_data
        if rest and not rest.startswith(b"\x1f\x8b"):
            break  # trailing garbage after the last member is ignored, as Java does
    return bytes(out)


def _snappy(data: bytes, limit: int) -> bytes:
    import cramjam

    if not data.startswith(_XERIAL_MAGIC):
        n = cramjam.snappy.decompress_raw_len(data)
        _check(n, limit, "snappy")
        return bytes(cramjam.snappy.decompress_raw(data))
    if len(data) < 16:
        raise DecodeError("xerial snappy header cut off", len(data), "truncated")
    pos = 16
    out = bytearray()
    while pos < len(data):
        if pos + 4 > len(data):
            raise DecodeError("xerial snappy chunk length cut off", pos, "truncated")
        (n,) = struct.unpack_from(">i", data, pos)
        if n < 0 or pos + 4 + n > len(data):
            raise DecodeError(f"xerial snappy chunk of {n} bytes runs past the payload", pos, "truncated")
        block = data[pos + 4 : pos + 4 + n]
        try:
            _check(len(out) + cramjam.snappy.decompress_raw_len(block), limit, "snappy")
            out += bytes(cramjam.snappy.decompress_raw(block))
        except DecodeError:
            raise
        except Exception as exc:
            raise DecodeError(f"snappy chunk does not decompress: {exc}", pos, "corrupt") from None
        pos += 4 + n
    return bytes(out)


def _xxh32(data: bytes, seed: int = 0) -> int:
    """xxHash32, only ever run over the 2-10 byte LZ4 frame descriptor."""
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    m = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & m

    n = len(data)
    i = 0
    if n >= 16:
        v = [(seed + p1 + p2) & m, (seed + p2) & m, seed & m, (seed - p1) & m]
        while i + 16 <= n:
            for k in range(4):
                (lane,) = struct.unpack_from("<I", data, i)
                v[k] = (rotl((v[k] + lane * p2) & m, 13) * p1) & m
                i += 4
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & m
    else:
        h = (seed + p5) & m
    h = (h + n) & m
    while i + 4 <= n:
        (lane,) = struct.unpack_from("<I", data, i)
        h = (rotl((h + lane * p3) & m, 17) * p4) & m
        i += 4
    while i < n:
        h = (rotl((h + data[i] * p5) & m, 11) * p1) & m
        i += 1
    h ^= h >> 15
    h = (h * p2) & m
    h ^= h >> 13
    h = (h * p3) & m
    h ^= h >> 16
    return h


def _lz4_frame(data: bytes, limit: int, magic: int) -> bytes:
    import lz4.block

    if len(data) < 7:
        raise DecodeError("lz4 frame header cut off", 0, "truncated")
    (m,) = struct.unpack_from("<I", data, 0)
    if m != _LZ4_MAGIC:
        raise DecodeError(f"lz4 frame magic {m:#x} is not {_LZ4_MAGIC:#x}", 0, "corrupt")
    flg, bd = data[4], data[5]
    if (flg >> 6) != 1:
        raise DecodeError(f"lz4 frame version {(flg >> 6)} is not 01", 4, "corrupt")
    if not flg & 0x20:
        raise DecodeError("lz4 dependent blocks are not supported by Kafka", 4, "corrupt")
    block_checksum = bool(flg & 0x10)
    has_size = bool(flg & 0x08)
    block_max = _LZ4_BLOCK_MAX.get((bd >> 4) & 0x7)
    if block_max is None:
        raise DecodeError(f"lz4 block-size id {(bd >> 4) & 7} is invalid", 5, "corrupt")
    pos = 6 + (8 if has_size else 0)
    if pos + 1 > len(data):
        raise DecodeError("lz4 frame header cut off", pos, "truncated")
    hc = data[pos]
    if magic >= 1:  # magic-0 writers hashed the magic number too (KAFKA-3160): not checked
        want = (_xxh32(data[4:pos]) >> 8) & 0xFF
        if hc != want:
            raise DecodeError(f"lz4 header checksum {hc:#x} != {want:#x}", pos, "corrupt")
    pos += 1
    out = bytearray()
    while True:
        if pos + 4 > len(data):
            raise DecodeError("lz4 block size cut off (no end mark)", pos, "truncated")
        (size,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if size == 0:
            break
        stored = bool(size & 0x80000000)
        size &= 0x7FFFFFFF
        if size > block_max or pos + size > len(data):
            raise DecodeError(f"lz4 block of {size} bytes is invalid or runs past the payload", pos - 4, "corrupt")
        block = data[pos : pos + size]
        if stored:
            out += block
        else:
            try:
                out += lz4.block.decompress(block, uncompressed_size=block_max)
            except Exception as exc:
                raise DecodeError(f"lz4 block does not decompress: {exc}", pos, "corrupt") from None
        _check(len(out), limit, "lz4")
        pos += size + (4 if block_checksum else 0)
    return bytes(out)


_ZSTD = threading.local()


def _zstd_decompressor():
    """This thread's ``zstandard.ZstdDecompressor``, made once: making one allocates and sets up a
    decompression context, which cost more than decompressing a ~20 KiB batch (13 us against ~11 us
    here: ``dump --records`` of 1 GiB of zstd batches spent 2 of its 7 CPU-s on it). Each
    ``decompressobj()`` starts a new frame on it (a session reset); one is used at a time."""
    d = getattr(_ZSTD, "decompressor", None)
    if d is None:
        import zstandard

        d = _ZSTD.decompressor = zstandard.ZstdDecompressor()
    return d


def _zstd(data: bytes, limit: int) -> bytes:
    """Frame by frame through a decompressobj, so a frame cut short is an error.

    (A stream_reader silently returns the partial output of a truncated frame.)
    The decompressobj has no output cap, so input goes in small slices: one
    input byte yields at most ~32 KiB (a 4-byte RLE block is 128 KiB), and the
    slice shrinks with the budget left, keeping a bomb's overshoot near ``limit``.
    """
    out = bytearray()
    pos = 0
    while pos < len(data):
        dobj = _zstd_decompressor().decompressobj()
        while True:
            step = max(256, min(1 << 16, (limit + 1 - len(out)) >> 15))
            chunk = data[pos : pos + step]
            if not chunk:
                raise DecodeError("zstd frame ends early", len(data), "truncated")
            out += dobj.decompress(chunk)
            _check(len(out), limit, "zstd")
            if dobj.eof:
                pos += len(chunk) - len(dobj.unused_data)
                break
            pos += len(chunk)
    return bytes(out)
