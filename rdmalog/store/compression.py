"""The four Kafka codecs: gzip, snappy (raw and xerial-framed), lz4 frame, zstd.

Codec ids are the low three bits of a batch's attributes. The store keeps batches as produced, so these
are only used for per-record work: offset-by-timestamp inside a batch, tests and the native client.
"""

from __future__ import annotations

import struct
import zlib
from enum import IntEnum

import lz4.frame
import snappy
import zstandard

from rdmalog.errors import CorruptRecordError, UnsupportedCompressionTypeError


class Codec(IntEnum):
    """Compression codec ids (attributes bits 0-2)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


CODEC_NAMES = {"none": Codec.NONE, "uncompressed": Codec.NONE, "gzip": Codec.GZIP}
CODEC_NAMES.update({"snappy": Codec.SNAPPY, "lz4": Codec.LZ4, "zstd": Codec.ZSTD})

# snappy-java's SnappyOutputStream framing: magic, version 1, compatible version 1, then
# (int32 length, raw snappy block) pairs.
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size

_zstd_c = zstandard.ZstdCompressor(level=3)
_zstd_d = zstandard.ZstdDecompressor()


def codec_of(value: int | str | Codec) -> Codec:
    """Codec from an id or a name (`gzip`, `lz4`, ...)."""
    if isinstance(value, str):
        try:
            return CODEC_NAMES[value.lower()]
        except KeyError:
            raise UnsupportedCompressionTypeError(f"unknown compression type {value!r}") from None
    try:
        return Codec(value)
    except ValueError:
        raise UnsupportedCompressionTypeError(f"unknown compression codec id {value}") from None


def compress(codec: int | Codec, data: bytes | memoryview, *, xerial: bool = True) -> bytes:
    """Compress `data` as a Kafka producer would (snappy xerial-framed like the Java client)."""
    codec = codec_of(codec)
    if codec == Codec.NONE:
        return bytes(data)
    if codec == Codec.GZIP:
        c = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31: gzip container
        return c.compress(data) + c.flush()
    if codec == Codec.SNAPPY:
        if not xerial:
            return snappy.compress(bytes(data))
        mv = memoryview(data)
        out = [XERIAL_HEADER]
        for i in range(0, len(mv), XERIAL_BLOCK):
            block = snappy.compress(bytes(mv[i : i + XERIAL_BLOCK]))
            out += [struct.pack(">i", len(block)), block]
        return b"".join(out)
    if codec == Codec.LZ4:
        # Independent 64 KiB blocks, no content size: what Kafka's KafkaLZ4BlockOutputStream writes.
        return lz4.frame.compress(
            bytes(data),
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    return _zstd_c.compress(bytes(data))


def decompress(codec: int | Codec, data: bytes | memoryview) -> bytes:
    """Decompress a batch's records section; raises CorruptRecordError on malformed input."""
    codec = codec_of(codec)
    try:
        if codec == Codec.NONE:
            return bytes(data)
        if codec == Codec.GZIP:
            return _gunzip(bytes(data))
        if codec == Codec.SNAPPY:
            return _unsnappy(bytes(data))
        if codec == Codec.LZ4:
            return lz4.frame.decompress(bytes(data))
        return _unzstd(bytes(data))
    except UnsupportedCompressionTypeError:
        raise
    except Exception as e:  # every codec library raises its own error type
        raise CorruptRecordError(f"cannot decompress {codec.name} records: {e}") from None


def _gunzip(data: bytes) -> bytes:
    out = []
    while data:
        d = zlib.decompressobj(47)  # gzip or zlib header, auto-detected
        out.append(d.decompress(data))
        if not d.eof:
            raise CorruptRecordError("truncated gzip stream")
        data = d.unused_data  # concatenated gzip members
    return b"".join(out)


def _unsnappy(data: bytes) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        return snappy.uncompress(data)
    pos, out = len(XERIAL_HEADER), []
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecordError("truncated xerial snappy block header")
        (n,) = struct.unpack_from(">i", data, pos)
        if n < 0 or pos + 4 + n > len(data):
            raise CorruptRecordError("truncated xerial snappy block")
        out.append(snappy.uncompress(data[pos + 4 : pos + 4 + n]))
        pos += 4 + n
    return b"".join(out)


def _unzstd(data: bytes) -> bytes:
    # decompressobj handles frames without a content size; loop for concatenated frames.
    out = []
    while data:
        d = _zstd_d.decompressobj()
        out.append(d.decompress(data))
        if not d.eof:
            raise CorruptRecordError("truncated zstd frame")
        data = d.unused_data
    return b"".join(out)


def compress_as_kafka(codec: int | Codec, data: bytes | memoryview) -> bytes:
    """Compress `data` as Kafka's broker (Java) writes a batch it re-builds, for the log cleaner:
    gzip with GZIPOutputStream's header (OS byte 255, as JDK 16+ writes it), zstd streamed as
    zstd-jni's output stream closes (no content size in the frame header, the data flushed as a
    block, then an empty last block); snappy (xerial) and lz4 as `compress` writes them, which is
    already what Kafka writes."""
    codec = codec_of(codec)
    if codec == Codec.GZIP:
        out = bytearray(compress(codec, data))
        out[9] = 255  # the gzip header's OS field
        return bytes(out)
    if codec == Codec.ZSTD:
        stream = _zstd_streaming.compressobj()
        return (
            stream.compress(bytes(data))
            + stream.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
            + stream.flush(zstandard.COMPRESSOBJ_FLUSH_FINISH)
        )
    return compress(codec, data)


_zstd_streaming = zstandard.ZstdCompressor(level=3, write_content_size=False)
