"""The four Kafka codecs: gzip, snappy (raw and xerial-framed), lz4 frame, zstd.

Codec ids are the low three bits of a batch's attributes. The store keeps batches as produced, so these
are only used for per-record work: validating a produced batch's records (`decompress_chunks`, which
bounds the memory a batch can take whatever it decompresses to), offset-by-timestamp inside a batch,
converting to and from the old message formats, tests and the native client.
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Iterator
from enum import IntEnum

import cramjam
import lz4.frame
import snappy
import zstandard

from rdmalog.errors import (
    CorruptRecordError,
    MessageTooLargeError,
    UnsupportedCompressionTypeError,
)


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


CHUNK = 1 << 20  # decompressed bytes per piece of `decompress_chunks`


def decompress_chunks(
    codec: int | Codec, data: bytes | memoryview, chunk: int = CHUNK
) -> Iterator[bytes]:
    """Decompress a batch's records section piece by piece: gzip, lz4 and zstd in pieces of at most
    about `chunk` bytes; snappy block by block (a block decompresses to at most ~22x its size).
    Raises CorruptRecordError on malformed input."""
    codec = codec_of(codec)
    try:
        if codec == Codec.NONE:
            yield bytes(data)
        elif codec == Codec.GZIP:
            yield from _gunzip_chunks(data, chunk)
        elif codec == Codec.SNAPPY:
            yield from _unsnappy_blocks(memoryview(data))
        elif codec == Codec.LZ4:
            yield from _unlz4_chunks(data, chunk)
        else:
            reader = _zstd_d.stream_reader(data, read_across_frames=True)
            while piece := reader.read(chunk):
                yield piece
    except (UnsupportedCompressionTypeError, CorruptRecordError):
        raise
    except Exception as e:  # every codec library raises its own error type
        raise CorruptRecordError(f"cannot decompress {codec.name} records: {e}") from None


_scratch = threading.local()  # each thread's buffer for `decompress_pieces`


def decompress_pieces(codec: int | Codec, data: bytes | memoryview) -> Iterator[memoryview]:
    """`decompress_chunks`' pieces, snappy blocks inflated into one per-thread buffer of `CHUNK`
    bytes when they fit (python-snappy's own decoder, cramjam's), each piece valid until the next
    is asked for: no fresh object of up to a megabyte per block, so a piece is scanned while
    still in cache (about 15% of snappy's validation CPU). Same pieces, same errors as
    `decompress_chunks` (a block that fails here is decompressed again the other way, which names
    the error). zstd's `readinto` gained nothing measurable, so the other codecs go that way."""
    codec = codec_of(codec)
    if codec != Codec.SNAPPY:
        yield from map(memoryview, decompress_chunks(codec, data))
        return
    buf = getattr(_scratch, "buf", None)
    if buf is None:
        buf = _scratch.buf = memoryview(bytearray(CHUNK))
    _scratch.buf = None  # a nested or concurrent use takes a buffer of its own
    try:
        mv = memoryview(data)
        if mv[: len(XERIAL_MAGIC)] != XERIAL_MAGIC:
            yield _unsnappy_into(mv, buf)
            return
        pos = len(XERIAL_HEADER)
        while pos < len(mv):
            if pos + 4 > len(mv):
                raise CorruptRecordError("truncated xerial snappy block header")
            (n,) = struct.unpack_from(">i", mv, pos)
            if n < 0 or pos + 4 + n > len(mv):
                raise CorruptRecordError("truncated xerial snappy block")
            yield _unsnappy_into(mv[pos + 4 : pos + 4 + n], buf)
            pos += 4 + n
    finally:
        _scratch.buf = buf


def _unsnappy_into(block: memoryview, buf: memoryview) -> memoryview:
    """One raw snappy block inflated into `buf` when it fits, else into a fresh object."""
    try:
        if cramjam.snappy.decompress_raw_len(block) <= len(buf):
            return buf[: cramjam.snappy.decompress_raw_into(block, buf)]
    except Exception:  # noqa: S110 - decompressed below, which raises the error it names
        pass
    try:
        return memoryview(snappy.uncompress(block))
    except Exception as e:  # every codec library raises its own error type
        raise CorruptRecordError(f"cannot decompress SNAPPY records: {e}") from None


def decompress_bounded(codec: int | Codec, data: bytes | memoryview, limit: int) -> bytearray:
    """Decompress whole, taking at most about `limit` bytes (plus one piece) for the result: raises
    MessageTooLargeError past it (a batch that inflates far beyond any budget is refused before it
    takes the memory), CorruptRecordError on malformed input."""
    out = bytearray()
    for piece in decompress_chunks(codec, data, min(CHUNK, max(limit, 1))):
        out += piece
        if len(out) > limit:
            raise MessageTooLargeError(f"{codec_of(codec).name} records inflate past {limit} bytes")
    return out


def _gunzip_chunks(data: bytes | memoryview, chunk: int) -> Iterator[bytes]:
    # Fed input slices small enough that no slice can inflate past `chunk` (deflate expands at
    # most ~1032x): zlib's max_length output limit costs 1.7x the time on Kafka batches.
    mv = memoryview(data)
    step = max(1, chunk // 1032)
    d = zlib.decompressobj(47)  # gzip or zlib header, auto-detected
    pos = 0
    while pos < len(mv):
        piece = d.decompress(mv[pos : pos + step])
        pos += step
        if piece:
            yield piece
        if d.eof and (d.unused_data or pos < len(mv)):  # concatenated gzip members
            mv = memoryview(d.unused_data + bytes(mv[pos:]))
            pos = 0
            d = zlib.decompressobj(47)
    if not d.eof:
        raise CorruptRecordError("truncated gzip stream")


def _unlz4_chunks(data: bytes | memoryview, chunk: int) -> Iterator[bytes]:
    rest = bytes(data)
    while rest:
        d = lz4.frame.LZ4FrameDecompressor()
        piece = d.decompress(rest, max_length=chunk)
        while True:
            if piece:
                yield piece
            if d.eof:
                break
            if d.needs_input:
                raise CorruptRecordError("truncated lz4 frame")
            piece = d.decompress(b"", max_length=chunk)
        rest = d.unused_data


def _unsnappy_blocks(data: memoryview) -> Iterator[bytes]:
    if data[: len(XERIAL_MAGIC)] != XERIAL_MAGIC:
        yield snappy.uncompress(data)
        return
    pos = len(XERIAL_HEADER)
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecordError("truncated xerial snappy block header")
        (n,) = struct.unpack_from(">i", data, pos)
        if n < 0 or pos + 4 + n > len(data):
            raise CorruptRecordError("truncated xerial snappy block")
        yield snappy.uncompress(data[pos + 4 : pos + 4 + n])
        pos += 4 + n


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
