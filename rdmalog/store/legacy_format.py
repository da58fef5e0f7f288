"""Kafka's message formats v0 and v1 (magic 0 and 1: "message sets"), converted as Kafka 3.x converts
them: a produced message set becomes one v2 batch (`up_convert`), and v2 batches become message sets
for consumers that cannot read v2 (`down_convert`, Fetch v0-v3).

One message (big-endian): offset int64 | size int32 | crc uint32 (CRC-32 of magic..end) | magic int8 |
attributes int8 (bits 0-2 codec; bit 3 LogAppendTime, v1 only) | timestamp int64 (v1 only) |
key (int32 length, -1 = null) | value (the same). A compressed message set is one wrapper message
whose value is the codec's encoding of the inner messages: a v1 wrapper carries its last inner
message's absolute offset and the inner offsets are relative (0..n-1); v0 inner offsets are absolute.
Snappy is snappy-java's framing, LZ4 Kafka's frame (for magic 0 with the header checksum Kafka 0.8
got wrong, which Kafka still reads and writes that way). zstd does not exist below v2.

Conversions are per record in Python: they serve clients older than Kafka 0.11. Each encodes
records as it reads them, so its memory is the bytes in and out: the request's records or a
compressed wrapper's inflated ones (up), the fetch's byte limits or one compressed batch's inflated
records (down); inflation is bounded (the gateway passes `request.max.decoded.bytes`).
"""

from __future__ import annotations

import itertools
import struct
import zlib
from collections.abc import Iterator
from typing import NamedTuple

import xxhash

from rdmalog.errors import (
    CorruptRecordError,
    InvalidRecordError,
    MessageTooLargeError,
    UnsupportedCompressionTypeError,
)
from rdmalog.store.compression import Codec, compress, decompress_bounded
from rdmalog.store.records import (
    BATCH_OVERHEAD,
    CONTROL_BIT,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC_POS,
    NO_TIMESTAMP,
    Record,
    RecordBatch,
    encode_record,
    frame_batch,
    iter_batches,
    iter_records,
)

MAGIC_V0, MAGIC_V1 = 0, 1
CODEC_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
OVERHEAD_V0 = 14  # crc, magic, attributes, key length, value length
OVERHEAD_V1 = 22  # ... and the timestamp
INFLATE_LIMIT = 32 << 20  # decompressed bytes of one wrapper or batch (request.max.decoded.bytes)

_OFFSET_SIZE = struct.Struct(">qi")
_HEAD_V0 = struct.Struct(">Ibb")  # crc, magic, attributes
_I = struct.Struct(">i")
_Q = struct.Struct(">q")


class Message(NamedTuple):
    """One legacy message, decoded (timestamp -1 in v0)."""

    offset: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK


def is_legacy(buf: memoryview | bytes) -> bool:
    """Whether `buf` starts with a magic 0 or 1 message (the magic byte sits where v2's does)."""
    return len(buf) > MAGIC_POS and buf[MAGIC_POS] < 2


# --- reading ---------------------------------------------------------------------------------------


def _bytes_field(buf: memoryview | bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    if pos + 4 > end:
        raise CorruptRecordError("message field is truncated")
    n = _I.unpack_from(buf, pos)[0]
    pos += 4
    if n < 0:
        return None, pos
    if pos + n > end:
        raise CorruptRecordError("message field extends past its message")
    return bytes(buf[pos : pos + n]), pos + n


def iter_messages(buf: memoryview | bytes, max_size: int | None = None) -> Iterator[Message]:
    """Every message of a message set, CRC-checked; raises CorruptRecordError on a bad or truncated
    one, MessageTooLargeError on one over `max_size` bytes (log overhead included)."""
    mv = memoryview(buf)
    end = len(mv)
    pos = 0
    while pos < end:
        if end - pos < LOG_OVERHEAD:
            raise CorruptRecordError(f"truncated message at byte {pos}")
        offset, size = _OFFSET_SIZE.unpack_from(mv, pos)
        body = pos + LOG_OVERHEAD
        if size < OVERHEAD_V0 or body + size > end:
            raise CorruptRecordError(f"message at byte {pos} has invalid size {size}")
        if max_size is not None and size + LOG_OVERHEAD > max_size:
            raise MessageTooLargeError(
                f"message of {size + LOG_OVERHEAD} bytes exceeds max.message.bytes={max_size}"
            )
        crc, magic, attrs = _HEAD_V0.unpack_from(mv, body)
        stop = body + size
        if zlib.crc32(mv[body + 4 : stop]) != crc:
            raise CorruptRecordError(f"message at byte {pos} fails its CRC-32 check")
        p = body + 6
        if magic == MAGIC_V1:
            if size < OVERHEAD_V1:
                raise CorruptRecordError(f"message at byte {pos} has invalid size {size}")
            ts = _Q.unpack_from(mv, p)[0]
            p += 8
        elif magic == MAGIC_V0:
            ts = NO_TIMESTAMP
        else:
            raise InvalidRecordError(f"message magic {magic} in a message set")
        key, p = _bytes_field(mv, p, stop)
        value, p = _bytes_field(mv, p, stop)
        if p != stop:
            raise CorruptRecordError(f"message at byte {pos}: its size does not match its fields")
        yield Message(offset, magic, attrs, ts, key, value)
        pos = stop


def _inner_messages(wrapper: Message, max_inflated: int) -> Iterator[Message]:
    """The inner messages of a compressed wrapper one by one, as Kafka's deep iteration gives them:
    (v1) with the wrapper's timestamp when it is LogAppendTime. Their offsets are left as written
    (v1: relative); up-conversion assigns offsets on append. The wrapper inflates to at most
    `max_inflated` bytes (MessageTooLargeError past it)."""
    codec = wrapper.codec
    if codec >= Codec.ZSTD:
        raise InvalidRecordError(
            f"invalid compression codec {codec} in a magic {wrapper.magic} message"
        )
    if wrapper.value is None:
        raise InvalidRecordError("compressed message with a null value")
    data = wrapper.value
    if codec == Codec.LZ4 and wrapper.magic == MAGIC_V0:
        data = _lz4_header_checksum(data, broken=False)
    stamped = wrapper.magic == MAGIC_V1 and wrapper.attributes & TIMESTAMP_TYPE_BIT
    empty = True
    for m in iter_messages(decompress_bounded(codec, data, max_inflated)):
        if m.magic != wrapper.magic:
            raise InvalidRecordError(
                f"compressed message magic {m.magic} does not match wrapper magic {wrapper.magic}"
            )
        if m.codec:
            raise InvalidRecordError("inner messages must not be compressed")
        empty = False
        yield m._replace(timestamp=wrapper.timestamp) if stamped else m
    if empty:
        raise InvalidRecordError("compressed message set with no inner messages")


# --- up-conversion (produce) -----------------------------------------------------------------------


def up_convert(
    buf: memoryview | bytes,
    max_message_bytes: int | None = None,
    max_inflated: int = INFLATE_LIMIT,
) -> bytearray:
    """A produced message set (magic 0 or 1) as one v2 batch, as Kafka 3.x's LogValidator converts
    it: the records in order with their keys, values and timestamps (v0: none), compressed with the
    wrapper's codec (compression.type=producer); offsets are assigned on append. Messages are
    encoded as they are read (no per-message objects kept): the memory taken is the wrapper's
    inflated records (at most `max_inflated` bytes) and the batch built, both within the request's
    size or that bound."""
    outer = iter_messages(buf, max_message_bytes)
    first = next(outer, None)
    if first is None:
        raise CorruptRecordError("empty message set")
    magic = first.magic
    codec = Codec.NONE
    if first.codec:
        if next(outer, None) is not None:
            raise InvalidRecordError("compressed outer record has more than one batch")
        codec = Codec(first.codec) if first.codec < Codec.ZSTD else Codec.NONE
        messages: Iterator[Message] = _inner_messages(first, max_inflated)
    else:
        messages = itertools.chain((first,), outer)
    body = bytearray()
    count = 0
    base_ts = max_ts = NO_TIMESTAMP
    for m in messages:
        if m.magic != magic:
            raise InvalidRecordError(
                f"message magic {m.magic} is not the same as the first message's {magic}"
            )
        if m.codec and not codec:
            raise InvalidRecordError("compressed outer record has more than one batch")
        if count == 0:
            base_ts = max_ts = m.timestamp
        max_ts = max(max_ts, m.timestamp)
        body += encode_record(Record(m.key, m.value, [], m.timestamp), count, m.timestamp - base_ts)
        count += 1
    if codec != Codec.NONE:
        body = compress(codec, body)
    return frame_batch(body, count, base_ts, max_ts, codec)


# --- down-conversion (fetch) -----------------------------------------------------------------------


def encode_message(
    offset: int, magic: int, attributes: int, timestamp: int, key: bytes | None, value: bytes | None
) -> bytes:
    """One message of format `magic`, with its log overhead."""
    body = bytearray(struct.pack(">bb", magic, attributes))
    if magic == MAGIC_V1:
        body += _Q.pack(timestamp)
    for field in (key, value):
        if field is None:
            body += b"\xff\xff\xff\xff"
        else:
            body += _I.pack(len(field)) + field
    crc = zlib.crc32(body)
    return _OFFSET_SIZE.pack(offset, len(body) + 4) + struct.pack(">I", crc) + body


def _convert_batch(batch: RecordBatch, magic: int, fetch_offset: int, max_inflated: int) -> bytes:
    """One v2 batch as magic-`magic` messages: an uncompressed batch record by record from
    `fetch_offset`, a compressed one whole as one wrapper of the same codec (its records inflated
    within `max_inflated` bytes). Records are encoded as they are read."""
    stamped = batch.timestamp_type == LOG_APPEND_TIME
    type_bit = TIMESTAMP_TYPE_BIT if stamped and magic == MAGIC_V1 else 0
    section = batch.bytes()[BATCH_OVERHEAD:]
    codec = batch.codec
    out = bytearray()
    if codec == Codec.NONE:
        for r in iter_records(batch, section):
            if r.offset >= fetch_offset:
                out += encode_message(r.offset, magic, type_bit, r.timestamp, r.key, r.value)
        return bytes(out)
    first = last = None
    max_ts = NO_TIMESTAMP
    for r in iter_records(batch, decompress_bounded(codec, section, max_inflated)):
        if first is None:
            first = r.offset
        last = r.offset
        max_ts = max(max_ts, r.timestamp)
        inner_offset = r.offset - first if magic == MAGIC_V1 else r.offset
        out += encode_message(inner_offset, magic, type_bit, r.timestamp, r.key, r.value)
    if last is None:
        return b""
    packed = compress(codec, out)
    if codec == Codec.LZ4 and magic == MAGIC_V0:
        packed = _lz4_header_checksum(packed, broken=True)
    stamp = batch.max_timestamp if stamped else max_ts
    return encode_message(last, magic, codec | type_bit, stamp, None, packed)


def down_convert(
    data: bytes | memoryview,
    magic: int,
    fetch_offset: int,
    limit: int,
    max_inflated: int = INFLATE_LIMIT,
) -> bytes:
    """The whole v2 batches in `data` (a fetch's read) as a message set of format `magic`, as
    Kafka's down-conversion makes it: control batches left out, records of an uncompressed batch
    below `fetch_offset` dropped. The first converted batch is always whole; later ones only while
    the total stays within `limit` bytes. A zstd batch cannot be converted: it ends the set, and
    UnsupportedCompressionTypeError is raised when it comes first. A compressed batch inflating
    past `max_inflated` bytes ends the set the same way (MessageTooLargeError when first)."""
    out = bytearray()
    for batch in iter_batches(data):
        if batch.attributes & CONTROL_BIT or batch.next_offset <= fetch_offset:
            continue
        if batch.codec == Codec.ZSTD:
            if out:
                break
            raise UnsupportedCompressionTypeError(
                "down-conversion of zstandard-compressed batches is not supported"
            )
        try:
            converted = _convert_batch(batch, magic, fetch_offset, max_inflated)
        except MessageTooLargeError:
            if out:
                break
            raise
        if out and len(out) + len(converted) > limit:
            break
        out += converted
    return bytes(out)


def _lz4_header_checksum(frame: bytes, broken: bool) -> bytes:
    """An LZ4 frame with its header checksum byte set as Kafka's magic-0 messages have it
    (`broken`: computed over the magic number too, Kafka 0.8's mistake) or as LZ4 specifies."""
    if len(frame) < 7:
        raise CorruptRecordError("truncated lz4 frame header")
    descriptor_end = 4 + 2 + (8 if frame[4] & 0x08 else 0)  # FLG, BD, optional content size
    if len(frame) <= descriptor_end:
        raise CorruptRecordError("truncated lz4 frame header")
    start = 0 if broken else 4
    hc = (xxhash.xxh32_intdigest(frame[start:descriptor_end]) >> 8) & 0xFF
    return frame[:descriptor_end] + bytes([hc]) + frame[descriptor_end + 1 :]
