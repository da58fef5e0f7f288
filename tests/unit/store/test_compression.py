"""The four codecs, including the framings real clients send (xerial snappy, zstd without size)."""

from __future__ import annotations

import gzip
import os
import struct

import lz4.frame
import pytest
import snappy
import zstandard
from kafka import codec as kp

from rdmalog.errors import CorruptRecordError, UnsupportedCompressionTypeError
from rdmalog.store.compression import (
    XERIAL_HEADER,
    Codec,
    codec_of,
    compress,
    decompress,
    decompress_chunks,
    decompress_pieces,
)

DATA = b"".join(b"record %d with some repetitive payload " % i for i in range(5000)) + os.urandom(
    3000
)


@pytest.mark.parametrize("codec", list(Codec))
def test_round_trip(codec: Codec) -> None:
    assert decompress(codec, compress(codec, DATA)) == DATA
    assert decompress(codec, compress(codec, b"")) == b""


def test_snappy_raw_and_xerial_both_decode() -> None:
    raw = snappy.compress(DATA)
    assert decompress(Codec.SNAPPY, raw) == DATA
    framed = compress(Codec.SNAPPY, DATA)
    assert framed.startswith(XERIAL_HEADER)
    # several 32 KiB blocks, each length-prefixed
    (first_len,) = struct.unpack_from(">i", framed, len(XERIAL_HEADER))
    assert 0 < first_len < len(framed) - 20
    assert decompress(Codec.SNAPPY, framed) == DATA
    assert decompress(Codec.SNAPPY, compress(Codec.SNAPPY, DATA, xerial=False)) == DATA


def test_snappy_interop_with_kafka_python() -> None:
    theirs = kp.snappy_encode(DATA, xerial_compatible=True, xerial_blocksize=32 * 1024)
    assert decompress(Codec.SNAPPY, theirs) == DATA
    assert kp.snappy_decode(compress(Codec.SNAPPY, DATA)) == DATA
    assert kp.snappy_decode(compress(Codec.SNAPPY, DATA, xerial=False)) == DATA


def test_lz4_frames_interop() -> None:
    assert decompress(Codec.LZ4, kp.lz4_encode(DATA)) == DATA
    assert kp.lz4_decode(compress(Codec.LZ4, DATA)) == DATA
    # a frame with content size and checksum (as librdkafka may write) decodes too
    assert (
        decompress(Codec.LZ4, lz4.frame.compress(DATA, store_size=True, content_checksum=True))
        == DATA
    )


def test_zstd_with_and_without_content_size_and_multiple_frames() -> None:
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(DATA)
    assert decompress(Codec.ZSTD, no_size) == DATA
    streamed = zstandard.ZstdCompressor().compressobj()
    frame = streamed.compress(DATA) + streamed.flush()
    assert decompress(Codec.ZSTD, frame) == DATA
    two = zstandard.ZstdCompressor().compress(b"abc") + zstandard.ZstdCompressor().compress(b"def")
    assert decompress(Codec.ZSTD, two) == b"abcdef"
    assert kp.zstd_decode(compress(Codec.ZSTD, DATA)) == DATA


def test_gzip_members_and_interop() -> None:
    assert decompress(Codec.GZIP, gzip.compress(b"one") + gzip.compress(b"two")) == b"onetwo"
    assert decompress(Codec.GZIP, kp.gzip_encode(DATA)) == DATA
    assert kp.gzip_decode(compress(Codec.GZIP, DATA)) == DATA


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_corrupt_input_raises_corrupt_record(codec: Codec) -> None:
    good = compress(codec, DATA)
    with pytest.raises(CorruptRecordError):
        decompress(codec, good[: len(good) // 2] + b"\x00garbage\xff" * 3)


def test_codec_names_and_unknown_ids() -> None:
    assert (
        codec_of("zstd") == Codec.ZSTD
        and codec_of("none") == Codec.NONE
        and codec_of(3) == Codec.LZ4
    )
    with pytest.raises(UnsupportedCompressionTypeError) as e:
        codec_of(5)
    assert e.value.error_code == 76
    with pytest.raises(UnsupportedCompressionTypeError):
        codec_of("brotli")


def _pieces(codec: Codec, data: bytes) -> tuple[bytes | None, str]:
    """What `decompress_pieces` gives (joined), or None and its error text."""
    try:
        return b"".join(bytes(p) for p in decompress_pieces(codec, data)), ""
    except CorruptRecordError as e:
        return None, str(e)


def _chunks(codec: Codec, data: bytes) -> tuple[bytes | None, str]:
    try:
        return b"".join(decompress_chunks(codec, data)), ""
    except CorruptRecordError as e:
        return None, str(e)


@pytest.mark.parametrize("codec", list(Codec)[1:])
def test_pieces_in_a_reused_buffer_match_the_chunks(codec: Codec) -> None:
    """The validation's pieces (snappy blocks inflated into a per-thread buffer) are the same bytes
    and the same errors as `decompress_chunks`, for raw and xerial snappy, blocks larger than the
    buffer, truncated and corrupted input."""
    data = os.urandom(3000) * 50 + b"z" * (3 << 20)  # a raw snappy block past the 1 MiB buffer
    bodies = [compress(codec, data), compress(codec, data[:5000])]
    if codec == Codec.SNAPPY:
        bodies += [snappy.compress(data), snappy.compress(data[:5000])]
    for body in list(bodies):
        bodies += [body[: len(body) // 2], body[:-1], body[:20] + b"\xff" * 8 + body[28:]]
    for body in bodies:
        assert _pieces(codec, body) == _chunks(codec, body)
    assert _pieces(codec, bodies[0])[0] == data
