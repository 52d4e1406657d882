"""Payload decompression (auditor.formats.codecs): every codec, Kafka's quirks, inflate limits.

Compressed inputs are produced by independent encoders: zlib/gzip from the standard library,
cramjam (raw snappy; xerial framing assembled here with struct.pack), the lz4 and zstandard
packages, and kafka-python's codec helpers.
"""

from __future__ import annotations

import gzip
import random
import struct
import zlib

import cramjam
import kafka.codec
import lz4.frame
import pytest
import zstandard

from auditor.errors import DecodeError
from auditor.formats.codecs import CODEC_NAMES, codec_name, decompress

MiB = 1 << 20
XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
SAMPLE = b"".join(b"payment %06d amount %d EUR;" % (i, i * 31 % 977) for i in range(5000))


def rand_bytes(n: int, seed: int = 1) -> bytes:
    return random.Random(seed).randbytes(n)


def err(codec: int, data: bytes, **kw) -> DecodeError:
    with pytest.raises(DecodeError) as ei:
        decompress(codec, data, **kw)
    return ei.value


# --------------------------------------------------------------------------- names, none, unknown
def test_codec_names() -> None:
    assert CODEC_NAMES == {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
    assert [codec_name(i) for i in range(8)] == ["none", "gzip", "snappy", "lz4", "zstd", "unknown(5)", "unknown(6)", "unknown(7)"]


def test_none_is_identity() -> None:
    assert decompress(0, SAMPLE) == SAMPLE


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec(codec: int) -> None:
    assert err(codec, b"abc").kind == "corrupt"


# --------------------------------------------------------------------------- gzip
def test_gzip_stdlib_and_kafka_python() -> None:
    assert decompress(1, gzip.compress(SAMPLE, mtime=0)) == SAMPLE
    assert decompress(1, kafka.codec.gzip_encode(SAMPLE)) == SAMPLE
    assert decompress(1, gzip.compress(b"", mtime=0)) == b""


def test_gzip_multi_member_and_trailing_garbage() -> None:
    two = gzip.compress(b"first|", mtime=0) + gzip.compress(b"second", mtime=0)
    assert decompress(1, two) == b"first|second"
    # java.util.zip.GZIPInputStream stops quietly at bytes that are not another gzip header
    assert decompress(1, two + b"not gzip") == b"first|second"


def test_gzip_truncated_and_corrupt() -> None:
    z = gzip.compress(SAMPLE, mtime=0)
    assert err(1, z[: len(z) // 2]).kind == "truncated"
    bad = bytearray(z)
    bad[0] = 0x00
    assert err(1, bytes(bad)).kind == "corrupt"


def gzip_zeros(mib: int) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = bytes(MiB)
    return b"".join([c.compress(chunk) for _ in range(mib)] + [c.flush()])


def test_gzip_bomb_hits_the_inflate_limit() -> None:
    bomb = gzip_zeros(200)  # 200 MiB of zeros in about 200 KB
    assert len(bomb) < 300_000
    e = err(1, bomb, limit=MiB)
    assert e.kind == "inflate-limit" and e.position == 0
    # exactly at the limit is fine, one byte more is not
    assert decompress(1, gzip.compress(bytes(1000), mtime=0), limit=1000) == bytes(1000)
    assert err(1, gzip.compress(bytes(1001), mtime=0), limit=1000).kind == "inflate-limit"
    # the limit counts all members together
    assert err(1, gzip.compress(bytes(600), mtime=0) * 2, limit=1000).kind == "inflate-limit"


# --------------------------------------------------------------------------- snappy
def xerial(data: bytes, block: int) -> bytes:
    out = XERIAL_HEADER
    for i in range(0, len(data), block):
        c = bytes(cramjam.snappy.compress_raw(data[i: i + block]))
        out += struct.pack(">i", len(c)) + c
    return out


def test_snappy_raw_block() -> None:
    # librdkafka writes one raw snappy block
    assert decompress(2, bytes(cramjam.snappy.compress_raw(SAMPLE))) == SAMPLE


@pytest.mark.parametrize("block", [32 * 1024, 1000, len(SAMPLE)])
def test_snappy_xerial_framing(block: int) -> None:
    # Java clients (snappy-java) write the xerial framing: 16-byte header + [int32 len][raw block]...
    framed = xerial(SAMPLE, block)
    assert framed[:8] == b"\x82SNAPPY\x00"
    assert decompress(2, framed) == SAMPLE


def test_snappy_from_kafka_python() -> None:
    assert decompress(2, kafka.codec.snappy_encode(SAMPLE)) == SAMPLE
    assert decompress(2, kafka.codec.snappy_encode(SAMPLE, xerial_compatible=False)) == SAMPLE


def test_snappy_xerial_damage() -> None:
    framed = xerial(SAMPLE, 4096)
    e = err(2, framed[:-10])
    assert e.kind == "truncated" and e.position > 16
    e = err(2, framed[:18])  # chunk length cut off
    assert e.kind == "truncated" and e.position == 16
    bad = bytearray(framed)
    struct.pack_into(">i", bad, 16, -3)
    assert err(2, bytes(bad)).position == 16
    bad = bytearray(framed)
    bad[21:40] = b"\xff" * 19  # inside the first raw block
    assert err(2, bytes(bad)).kind == "corrupt"


def test_snappy_xerial_header_cut_off() -> None:
    assert err(2, XERIAL_HEADER[:12]).kind == "truncated"


def test_snappy_raw_corrupt() -> None:
    assert err(2, b"\xff\xff\xff\xff\x0f" + b"garbage").kind in ("corrupt", "inflate-limit")
    assert err(2, bytes(cramjam.snappy.compress_raw(SAMPLE))[:-20]).kind == "corrupt"


def test_snappy_bombs() -> None:
    raw = bytes(cramjam.snappy.compress_raw(bytes(32 * MiB)))
    assert err(2, raw, limit=MiB).kind == "inflate-limit"
    framed = xerial(bytes(8 * MiB), MiB)
    assert err(2, framed, limit=MiB).kind == "inflate-limit"


# --------------------------------------------------------------------------- lz4
def xxh32_small(data: bytes, seed: int = 0) -> int:
    """xxHash32 for inputs under 16 bytes, written from the xxHash spec for this test."""
    assert len(data) < 16
    P1, P2, P3, P4, P5 = 0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D, 0x27D4EB2F, 0x165667B1
    M = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & M

    acc = (seed + P5 + len(data)) & M
    i = 0
    while len(data) - i >= 4:
        acc = (rotl((acc + int.from_bytes(data[i: i + 4], "little") * P3) & M, 17) * P4) & M
        i += 4
    for b in data[i:]:
        acc = (rotl((acc + b * P5) & M, 11) * P1) & M
    acc ^= acc >> 15
    acc = (acc * P2) & M
    acc ^= acc >> 13
    acc = (acc * P3) & M
    acc ^= acc >> 16
    return acc


def test_xxh32_helper_matches_known_vectors_and_lz4() -> None:
    assert xxh32_small(b"") == 0x02CC5D05
    assert xxh32_small(b"abc") == 0x32D153FF
    # the lz4 C library's header checksum over FLG+BD
    for frame in (lz4.frame.compress(SAMPLE, store_size=False), lz4.frame.compress(SAMPLE, store_size=True)):
        desc_end = 6 + (8 if frame[4] & 0x08 else 0)
        assert frame[desc_end] == (xxh32_small(frame[4:desc_end]) >> 8) & 0xFF


def test_lz4_frames() -> None:
    assert decompress(3, lz4.frame.compress(SAMPLE, block_linked=False)) == SAMPLE
    assert decompress(3, lz4.frame.compress(SAMPLE, block_linked=False, store_size=False)) == SAMPLE
    assert decompress(3, kafka.codec.lz4_encode(SAMPLE)) == SAMPLE
    # several 64 KiB blocks, block and content checksums (Kafka skips both)
    big = SAMPLE * 5
    f = lz4.frame.compress(big, block_linked=False, block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                           block_checksum=True, content_checksum=True)
    assert decompress(3, f) == big
    # incompressible data: blocks stored raw (size bit 31 set)
    noise = rand_bytes(200_000)
    assert decompress(3, lz4.frame.compress(noise, block_linked=False)) == noise
    assert decompress(3, lz4.frame.compress(b"", block_linked=False)) == b""


def test_lz4_dependent_blocks_are_refused() -> None:
    e = err(3, lz4.frame.compress(SAMPLE, block_linked=True))
    assert e.kind == "corrupt" and e.position == 4


def test_lz4_magic0_header_checksum_quirk() -> None:
    """KAFKA-3160: magic-0 writers hashed magic+FLG+BD. Accepted for magic 0 only."""
    good = lz4.frame.compress(SAMPLE, block_linked=False, store_size=False)
    broken_hc = (xxh32_small(good[0:6]) >> 8) & 0xFF
    assert broken_hc != good[6], "the two checksums collide for this header: test would prove nothing"
    quirk = good[:6] + bytes([broken_hc]) + good[7:]
    assert decompress(3, quirk, magic=0) == SAMPLE
    for magic in (1, 2):
        e = err(3, quirk, magic=magic)
        assert e.kind == "corrupt" and e.position == 6
    assert decompress(3, good, magic=2) == SAMPLE


def test_lz4_damage() -> None:
    f = lz4.frame.compress(SAMPLE, block_linked=False, store_size=False)
    assert err(3, f[:5]).kind == "truncated"
    assert err(3, f[:-4]).kind == "truncated"  # end mark missing
    assert err(3, b"\x00" * 20).kind == "corrupt"  # wrong frame magic
    bad = bytearray(f)
    bad[4] = (bad[4] & 0x3F) | 0x80  # version bits 10
    assert err(3, bytes(bad)).kind == "corrupt"
    bad = bytearray(f)
    struct.pack_into("<I", bad, 7, 0x7FFFFFF0)  # block size beyond the maximum
    assert err(3, bytes(bad)).kind == "corrupt"
    bad = bytearray(f)
    bad[20:40] = b"\xff" * 20
    assert err(3, bytes(bad)).kind == "corrupt"


def test_lz4_bomb() -> None:
    c = lz4.frame.LZ4FrameCompressor(block_linked=False)
    chunk = bytes(MiB)
    bomb = c.begin() + b"".join(c.compress(chunk) for _ in range(64)) + c.flush()
    assert len(bomb) < 400_000
    assert err(3, bomb, limit=MiB).kind == "inflate-limit"


# --------------------------------------------------------------------------- zstd
def test_zstd_frames() -> None:
    assert decompress(4, zstandard.ZstdCompressor().compress(SAMPLE)) == SAMPLE
    assert decompress(4, kafka.codec.zstd_encode(SAMPLE)) == SAMPLE
    # a streaming compressor leaves the content size out of the frame header
    co = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    streamed = co.compress(SAMPLE) + co.flush()
    assert decompress(4, streamed) == SAMPLE
    # two frames back to back
    two = zstandard.ZstdCompressor().compress(b"ab") + zstandard.ZstdCompressor().compress(b"cd")
    assert decompress(4, two) == b"abcd"


def test_zstd_damage_and_bomb() -> None:
    z = zstandard.ZstdCompressor().compress(SAMPLE)
    e = err(4, z[:-8])
    assert e.kind == "truncated" and e.position == len(z) - 8
    assert err(4, b"\x28\xb5\x2f\xfd" + b"\xff" * 30).kind == "corrupt"
    co = zstandard.ZstdCompressor().compressobj()
    bomb = b"".join(co.compress(bytes(MiB)) for _ in range(200)) + co.flush()
    assert len(bomb) < 100_000
    e = err(4, bomb, limit=MiB)
    assert e.kind == "inflate-limit" and e.position == 0
