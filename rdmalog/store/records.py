"""Kafka record batches (magic v2): a view over a memoryview, validation, in-place patches, a builder
and record decoding.

Batch layout (big-endian), CRC-32C covering `attributes` to the end of the batch:

    0 baseOffset int64 | 8 batchLength int32 | 12 partitionLeaderEpoch int32 | 16 magic int8
    17 crc uint32 | 21 attributes int16 | 23 lastOffsetDelta int32 | 27 baseTimestamp int64
    35 maxTimestamp int64 | 43 producerId int64 | 51 producerEpoch int16 | 53 baseSequence int32
    57 recordsCount int32 | 61 records...

attributes: bits 0-2 codec, bit 3 timestamp type (1 = LogAppendTime), bit 4 transactional, bit 5 control,
bit 6 delete horizon. baseOffset and partitionLeaderEpoch sit before the CRC'd range, so the broker
patches them without touching the CRC.

A client's batches are checked as Kafka's LogValidator checks them: per batch (one header unpack, one
CRC pass) and, given `RecordRules`, per record in bulk by a C scanner (`_records.c`: offset deltas,
record structure, timestamps against the topic's bounds, keys on compacted topics), compressed
batches decompressed piece by piece into a reused buffer and never re-encoded (in the same C call:
gzip, and lz4, zstd and snappy when the build found their libraries; otherwise through their
Python libraries). The batch's maxTimestamp is the largest
record timestamp: a header that says otherwise is rewritten (with its CRC) when the batch is appended,
as Kafka does. Decoding records into objects is for tests, offsets by time and native clients.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

import crc32c as _crc32c

from rdmalog.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    MessageTooLargeError,
    UnsupportedCompressionTypeError,
)
from rdmalog.store._record_scan import CHECK_TIMESTAMPS, FIXED_TIMESTAMP, KEYS_REQUIRED, RecordScan
from rdmalog.store.compression import Codec, compress, decompress, decompress_pieces

try:  # validate_batches' loop in C (setup.py builds it; optional)
    from rdmalog.store._records import CHECKED_CODECS as _C_CODECS
    from rdmalog.store._records import patch as _c_patch
    from rdmalog.store._records import validate as _c_validate
    from rdmalog.store._records import validate_client as _c_validate_client
except ImportError:  # pragma: no cover - a source tree without the extension built
    _c_validate = _c_validate_client = _c_patch = None
    _C_CODECS = ()

HEADER = struct.Struct(">qiibIhiqqqhii")
BATCH_OVERHEAD = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: bytes not counted by batchLength
MIN_BATCH_LENGTH = BATCH_OVERHEAD - LOG_OVERHEAD  # 49
MAGIC = 2

BASE_OFFSET, LENGTH, LEADER_EPOCH, MAGIC_POS, CRC_POS, ATTRIBUTES = 0, 8, 12, 16, 17, 21
LAST_OFFSET_DELTA, BASE_TIMESTAMP, MAX_TIMESTAMP, PRODUCER_ID = 23, 27, 35, 43
PRODUCER_EPOCH, BASE_SEQUENCE, RECORDS_COUNT, RECORDS = 51, 53, 57, 61

CODEC_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40

CREATE_TIME, LOG_APPEND_TIME = 0, 1
NO_TIMESTAMP = -1

_OFF_LEN = struct.Struct(">qi")
_Q = struct.Struct(">q")
_I = struct.Struct(">i")
_UI = struct.Struct(">I")
_H = struct.Struct(">h")
_ATTR_TO_END = struct.Struct(">hiqq")  # attributes, lastOffsetDelta, baseTimestamp, maxTimestamp


def crc32c(data: bytes | memoryview) -> int:
    """CRC-32C (Castagnoli) as Kafka computes it."""
    return _crc32c.crc32c(data)


class BatchInfo(NamedTuple):
    """What the log needs about one validated batch."""

    position: int  # in the buffer
    size: int  # bytes including the 12-byte log overhead
    last_offset_delta: int
    max_timestamp: int
    count: int
    attributes: int
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    stale_max_timestamp: bool = False  # the header's maxTimestamp (or type) is not its records'


_LONG_MAX = 2**63 - 1
_LONG_MIN = -(2**63)
MAX_RECORD_ERRORS = 1000  # record errors listed per batch (all are counted)


class RecordRules(NamedTuple):
    """What the records of a client's batches are checked against (Kafka's LogValidator)."""

    now: int  # ms
    before_max_ms: int  # message.timestamp.before.max.ms (CreateTime topics)
    after_max_ms: int  # message.timestamp.after.max.ms
    log_append_time: bool  # the topic stamps LogAppendTime
    keys_required: bool  # a compacted topic: null keys are refused
    partition: str = ""  # named in the error messages, as Kafka names it


def validate_batches(
    buf: memoryview,
    max_batch_size: int | None = None,
    *,
    from_client: bool = True,
    allow_control: bool = False,
    rules: RecordRules | None = None,
) -> list[BatchInfo]:
    """Validate every batch in `buf` (length, magic, CRC, count, codec, flags); return their infos.

    `from_client` applies the produce rules (count == lastOffsetDelta + 1, no control batches unless
    `allow_control`, which the broker's own transaction markers need, a sequence with a producer
    id); recovery and imports relax them, as Kafka does for replicated or compacted batches. With
    `rules`, every record of a client's data batch is checked too (see `check_records`) and the
    infos carry the batches' max timestamps computed from their records.
    """
    if rules is not None and from_client and _c_validate_client is not None:
        # a produce request's batches, headers and records, in one C call; None: a bad batch or
        # record (said below); a tuple: records of a codec the build has no library for, left here
        low, high, flags = _record_bounds(rules)
        infos = _c_validate_client(
            buf, -1 if max_batch_size is None else max_batch_size, allow_control, BatchInfo,
            low, high, flags, rules.log_append_time,
        )  # fmt: skip
        if type(infos) is list:
            return infos
        if infos is not None:
            return _with_records(buf, infos, rules, _C_CHECKED)
    if _c_validate is not None:  # the header checks in one C call; None: a bad batch, said below
        infos = _c_validate(
            buf, -1 if max_batch_size is None else max_batch_size, from_client, allow_control,
            BatchInfo,
        )  # fmt: skip
        if infos is not None:
            return infos if rules is None or not from_client else _with_records(buf, infos, rules)
    return _validate_batches(buf, max_batch_size, from_client, allow_control, rules)


# the codecs whose records _records.c checks: all when the build found their libraries
_C_CHECKED = frozenset(_C_CODECS)


def _with_records(
    buf: memoryview,
    infos: Iterable[BatchInfo],
    rules: RecordRules,
    checked: frozenset[int] = frozenset(),
) -> list[BatchInfo]:
    """`infos` of header-checked client batches after their record checks (`check_records`), with
    the max timestamps of their records; batches of a `checked` codec have had theirs."""
    out = []
    for info in infos:
        if info.attributes & CONTROL_BIT or info.attributes & CODEC_MASK in checked:
            out.append(info)
            continue
        records_max = check_records(buf, info.position, info.size, rules)
        stale = records_max != info.max_timestamp or bool(info.attributes & TIMESTAMP_TYPE_BIT)
        out.append(info._replace(max_timestamp=records_max, stale_max_timestamp=stale))
    return out


def _validate_batches(
    buf: memoryview,
    max_batch_size: int | None,
    from_client: bool,
    allow_control: bool,
    rules: RecordRules | None = None,
) -> list[BatchInfo]:
    """validate_batches in Python: raises the Kafka error of the first bad batch."""
    out: list[BatchInfo] = []
    end = len(buf)
    pos = 0
    if end == 0:
        raise CorruptRecordError("empty record set")
    while pos < end:
        if end - pos < BATCH_OVERHEAD:
            raise CorruptRecordError(f"truncated record batch at byte {pos}")
        (_, length, _, magic, crc, attrs, lod, _, max_ts, pid, pepoch, seq, count) = (
            HEADER.unpack_from(buf, pos)
        )
        size = length + LOG_OVERHEAD
        if length < MIN_BATCH_LENGTH or size > end - pos:
            raise CorruptRecordError(f"record batch at byte {pos} has invalid length {length}")
        if magic != MAGIC:
            raise InvalidRecordError(f"record batch magic {magic} is not supported (need 2)")
        if max_batch_size is not None and size > max_batch_size:
            raise MessageTooLargeError(
                f"record batch of {size} bytes exceeds max.message.bytes={max_batch_size}"
            )
        if _crc32c.crc32c(buf[pos + ATTRIBUTES : pos + size]) != crc:
            raise CorruptRecordError(f"record batch at byte {pos} fails its CRC-32C check")
        if attrs & CODEC_MASK > Codec.ZSTD:
            raise UnsupportedCompressionTypeError(f"unknown compression codec {attrs & CODEC_MASK}")
        if lod < 0 or count < 0 or (from_client and count != lod + 1):
            raise InvalidRecordError(
                f"record batch at byte {pos}: {count} records but lastOffsetDelta {lod}"
            )
        stale = False
        if from_client:
            if attrs & CONTROL_BIT and not allow_control:
                raise InvalidRecordError("clients may not write control batches")
            if attrs & TRANSACTIONAL_BIT and pid < 0:
                raise InvalidRecordError("transactional batch without a producer id")
            if pid >= 0 and seq < 0 and not attrs & CONTROL_BIT:
                raise InvalidRecordError(
                    f"invalid sequence number {seq} in record batch with producerId {pid}"
                )
            if rules is not None and not attrs & CONTROL_BIT:
                records_max = check_records(buf, pos, size, rules)
                stale = records_max != max_ts or bool(attrs & TIMESTAMP_TYPE_BIT)
                max_ts = records_max
        out.append(BatchInfo(pos, size, lod, max_ts, count, attrs, pid, pepoch, seq, stale))
        pos += size
    return out


def _record_bounds(rules: RecordRules) -> tuple[int, int, int]:
    """(lowest, highest) CreateTime a record may carry under `rules`, and the RecordScan flags."""
    now, before, after, log_append_time, keys_required, _ = rules
    flags = KEYS_REQUIRED if keys_required else 0
    low = now - before  # clamped by comparisons: min()/max() calls cost more, per produce
    if low < _LONG_MIN:
        low = _LONG_MIN
    high = now + after
    if high > _LONG_MAX:
        high = _LONG_MAX
    if not log_append_time and (low > _LONG_MIN or high < _LONG_MAX):
        flags |= CHECK_TIMESTAMPS
    return low, high, flags


def check_records(buf: memoryview, pos: int, size: int, rules: RecordRules) -> int:
    """Kafka's record-level checks of the client batch at `pos` (its header already checked):
    every record whole, offset deltas 0..count-1, no null key on a compacted topic, CreateTime
    timestamps within the topic's bounds, no LogAppendTime set by the producer where Kafka refuses
    it. Compressed records are decompressed piece by piece (never re-encoded). Returns the batch's
    max timestamp from its records; raises InvalidRecordError or InvalidTimestampError, carrying
    `record_errors`, as Kafka's LogValidator does."""
    (_, _, _, _, _, attrs, _, base_ts, header_max, _, _, _, count) = HEADER.unpack_from(buf, pos)
    stamped = bool(attrs & TIMESTAMP_TYPE_BIT)  # LogAppendTime: every record has maxTimestamp
    low, high, flags = _record_bounds(rules)
    if stamped:
        flags |= FIXED_TIMESTAMP
        base_ts = header_max
    scan = RecordScan(count, base_ts, low, high, flags, MAX_RECORD_ERRORS)
    body = buf[pos + RECORDS : pos + size]
    codec = attrs & CODEC_MASK
    try:
        if codec == Codec.NONE:
            scan.feed(body)
        else:
            for piece in decompress_pieces(codec, body):
                scan.feed(piece)
        records_max, n_errors, found = scan.finish()
    except ValueError as e:
        raise InvalidRecordError(f"record batch at byte {pos}: {e}") from None
    errors: list[tuple[int, str]] = []
    timestamps = False
    for index, kind, ts in found:
        if kind == 1:
            errors.append((index, f"Compacted topic cannot accept message without key in topic partition {rules.partition}."))  # fmt: skip
        else:
            timestamps = True
            errors.append((index, f"Timestamp {ts} of message with offset {index} is out of range. The timestamp should be within [{low}, {high}]"))  # fmt: skip
    if stamped and (rules.log_append_time or header_max == NO_TIMESTAMP) and not n_errors:
        # Kafka refuses a producer's LogAppendTime unless a CreateTime topic can range-check it.
        timestamps, n_errors = True, count
        message = "Producer should not set timestamp type to LogAppendTime."
        errors = [(i, message) for i in range(min(count, MAX_RECORD_ERRORS))]
    if not n_errors:
        return records_max
    exc: InvalidRecordError | InvalidTimestampError
    if timestamps:
        exc = InvalidTimestampError(
            "One or more records have been rejected due to invalid timestamp"
        )
    else:
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
        exc = InvalidRecordError(
            f"One or more records have been rejected due to {n_errors} record errors in total, "
            f"and only showing the first three errors at most: [{shown}]"
        )
    exc.record_errors = tuple(errors)
    raise exc


def batch_is_valid(buf: memoryview | bytes, pos: int, end: int) -> int:
    """Size of a well-formed batch at `pos` (length, magic and CRC check), or 0 when it is not one."""
    if end - pos < BATCH_OVERHEAD:
        return 0
    length = _I.unpack_from(buf, pos + LENGTH)[0]
    size = length + LOG_OVERHEAD
    if length < MIN_BATCH_LENGTH or size > end - pos or buf[pos + MAGIC_POS] != MAGIC:
        return 0
    if (
        _crc32c.crc32c(memoryview(buf)[pos + ATTRIBUTES : pos + size])
        != _UI.unpack_from(buf, pos + CRC_POS)[0]
    ):
        return 0
    return size


# set_base_offset(buf, pos, offset): baseOffset is a batch's first field (BASE_OFFSET 0), so the
# struct's own pack_into is the setter, without a Python call on the append path
set_base_offset = _Q.pack_into


def set_leader_epoch(buf: memoryview | bytearray, pos: int, epoch: int) -> None:
    _I.pack_into(buf, pos + LEADER_EPOCH, epoch)


def set_log_append_time(buf: memoryview | bytearray, pos: int, size: int, timestamp: int) -> None:
    """Stamp LogAppendTime: timestamp-type bit and maxTimestamp, then recompute the CRC."""
    attrs = _H.unpack_from(buf, pos + ATTRIBUTES)[0]
    _H.pack_into(buf, pos + ATTRIBUTES, attrs | TIMESTAMP_TYPE_BIT)
    _Q.pack_into(buf, pos + MAX_TIMESTAMP, timestamp)
    set_crc(buf, pos, size)


def set_create_time(buf: memoryview | bytearray, pos: int, size: int, max_timestamp: int) -> None:
    """Make the batch a CreateTime batch whose maxTimestamp is `max_timestamp` (its records'), then
    recompute the CRC: what Kafka's setMaxTimestamp does when the header says otherwise."""
    attrs = _H.unpack_from(buf, pos + ATTRIBUTES)[0]
    _H.pack_into(buf, pos + ATTRIBUTES, attrs & ~TIMESTAMP_TYPE_BIT)
    _Q.pack_into(buf, pos + MAX_TIMESTAMP, max_timestamp)
    set_crc(buf, pos, size)


def _patch_batches(
    buf: memoryview | bytearray, infos: list[BatchInfo], base: int, epoch: int, append_time: int
) -> tuple[list[tuple[int, int, int, int]], int, int, int, bool]:
    """Give validated batches their offsets from `base` and leader epoch `epoch` in place; with
    `append_time` >= 0 stamp LogAppendTime, otherwise set the records' max timestamp where the
    header's is stale (CRC rewritten for either). Returns the batches as a segment indexes them
    (position, size, last offset, max timestamp), the next offset, the largest max timestamp,
    every batch's attributes or'ed and whether any has a producer id. One C call
    (`_records.patch`, the same loop) when built."""
    batches = []
    top_ts, attrs, producers, nxt = -1, 0, False, base
    for info in infos:
        pos = info.position
        set_base_offset(buf, pos, nxt)
        set_leader_epoch(buf, pos, epoch)
        max_ts = info.max_timestamp
        if append_time >= 0:
            set_log_append_time(buf, pos, info.size, append_time)
            max_ts = append_time
        elif info.stale_max_timestamp:
            set_create_time(buf, pos, info.size, max_ts)
        last = nxt + info.last_offset_delta
        batches.append((pos, info.size, last, max_ts))
        if max_ts > top_ts:
            top_ts = max_ts
        attrs |= info.attributes
        producers = producers or info.producer_id >= 0
        nxt = last + 1
    return batches, nxt, top_ts, attrs, producers


# patch_batches(buf, infos, base, epoch, append_time): `_patch_batches`, the C loop when built
patch_batches = _c_patch if _c_patch is not None else _patch_batches


_PRODUCER = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence


def stamp_producer(
    buf: memoryview | bytearray, pos: int, size: int, pid: int, epoch: int, seq: int
) -> int:
    """Make the batch at `pos` an idempotent producer's: its id, epoch and first sequence, then
    the CRC again. Returns how many sequence numbers its records take."""
    _PRODUCER.pack_into(buf, pos + PRODUCER_ID, pid, epoch, seq)
    set_crc(buf, pos, size)
    return _I.unpack_from(buf, pos + LAST_OFFSET_DELTA)[0] + 1


def set_crc(buf: memoryview | bytearray, pos: int, size: int) -> None:
    """The CRC-32C of the batch at `pos` (of `size` bytes), over attributes to its end."""
    _UI.pack_into(
        buf, pos + CRC_POS, _crc32c.crc32c(memoryview(buf)[pos + ATTRIBUTES : pos + size])
    )


def read_header(buf: memoryview | bytes, pos: int = 0) -> tuple[int, int]:
    """(baseOffset, size including log overhead) of the batch at `pos`."""
    base, length = _OFF_LEN.unpack_from(buf, pos)
    return base, length + LOG_OVERHEAD


class RecordBatch:
    """A read-only view of one v2 batch at `pos` in `buf`."""

    __slots__ = ("buf", "pos", "_h")

    def __init__(self, buf: memoryview | bytes | bytearray, pos: int = 0) -> None:
        self.buf = memoryview(buf)
        self.pos = pos
        if len(self.buf) - pos < BATCH_OVERHEAD:
            raise CorruptRecordError("truncated record batch header")
        self._h = HEADER.unpack_from(self.buf, pos)

    base_offset = property(lambda self: self._h[0])
    batch_length = property(lambda self: self._h[1])
    size = property(lambda self: self._h[1] + LOG_OVERHEAD)
    partition_leader_epoch = property(lambda self: self._h[2])
    magic = property(lambda self: self._h[3])
    crc = property(lambda self: self._h[4])
    attributes = property(lambda self: self._h[5])
    last_offset_delta = property(lambda self: self._h[6])
    last_offset = property(lambda self: self._h[0] + self._h[6])
    next_offset = property(lambda self: self._h[0] + self._h[6] + 1)
    base_timestamp = property(lambda self: self._h[7])
    max_timestamp = property(lambda self: self._h[8])
    producer_id = property(lambda self: self._h[9])
    producer_epoch = property(lambda self: self._h[10])
    base_sequence = property(lambda self: self._h[11])
    count = property(lambda self: self._h[12])
    codec = property(lambda self: Codec(self._h[5] & CODEC_MASK))
    timestamp_type = property(
        lambda self: LOG_APPEND_TIME if self._h[5] & TIMESTAMP_TYPE_BIT else CREATE_TIME
    )
    is_transactional = property(lambda self: bool(self._h[5] & TRANSACTIONAL_BIT))
    is_control = property(lambda self: bool(self._h[5] & CONTROL_BIT))

    def compute_crc(self) -> int:
        return crc32c(self.buf[self.pos + ATTRIBUTES : self.pos + self.size])

    def is_valid(self) -> bool:
        return batch_is_valid(self.buf, self.pos, len(self.buf)) == self.size

    def bytes(self) -> memoryview:
        return self.buf[self.pos : self.pos + self.size]

    def records(self) -> list[Record]:
        """Decode every record (decompressing if needed), with absolute offsets and timestamps."""
        return decode_records(self)

    def __repr__(self) -> str:
        return (
            f"RecordBatch(base_offset={self.base_offset}, count={self.count}, size={self.size}, "
            f"codec={self.codec.name}, max_timestamp={self.max_timestamp})"
        )


def iter_batches(buf: memoryview | bytes | bytearray, pos: int = 0) -> Iterator[RecordBatch]:
    """Walk whole batches in `buf` (no validation); stops at a partial trailing batch."""
    mv = memoryview(buf)
    end = len(mv)
    while end - pos >= BATCH_OVERHEAD:
        length = _I.unpack_from(mv, pos + LENGTH)[0]
        if length < MIN_BATCH_LENGTH or pos + length + LOG_OVERHEAD > end:
            return
        yield RecordBatch(mv, pos)
        pos += length + LOG_OVERHEAD


# --- records -----------------------------------------------------------------------------------------


@dataclass
class Record:
    """One record. `offset` and `timestamp` are absolute once decoded from a batch."""

    key: bytes | None = None
    value: bytes | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp: int | None = None
    offset: int = -1


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def _varint(n: int, out: bytearray) -> None:
    z = _zigzag(n) & 0xFFFFFFFFFFFFFFFF
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def _read_varint(buf: memoryview | bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(buf):
            raise CorruptRecordError("truncated varint in record")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint too long in record")


def _bytes_field(data: bytes | str | None, out: bytearray) -> None:
    if data is None:
        _varint(-1, out)
        return
    if isinstance(data, str):
        data = data.encode()
    _varint(len(data), out)
    out += data


def encode_record(rec: Record, offset_delta: int, timestamp_delta: int) -> bytes:
    """A record's bytes (length-prefixed) as it sits inside a batch."""
    body = bytearray(b"\x00")  # attributes: unused
    _varint(timestamp_delta, body)
    _varint(offset_delta, body)
    _bytes_field(rec.key, body)
    _bytes_field(rec.value, body)
    _varint(len(rec.headers), body)
    for hk, hv in rec.headers:
        _bytes_field(hk, body)
        _bytes_field(hv, body)
    out = bytearray()
    _varint(len(body), out)
    return bytes(out + body)


def build_batch(
    records: Iterable[Record | tuple[bytes | None, bytes | None]],
    *,
    base_offset: int = 0,
    compression: int | Codec = Codec.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    timestamp_type: int = CREATE_TIME,
    transactional: bool = False,
    control: bool = False,
    now_ms: int | None = None,
    xerial: bool = True,
) -> bytearray:
    """Build a v2 batch from records (or (key, value) pairs); records without a timestamp get now."""
    recs = [r if isinstance(r, Record) else Record(r[0], r[1]) for r in records]
    if not recs:
        raise ValueError("a batch needs at least one record")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    stamps = [now if r.timestamp is None else r.timestamp for r in recs]
    base_ts = stamps[0]
    body = b"".join(
        encode_record(r, i, ts - base_ts)
        for i, (r, ts) in enumerate(zip(recs, stamps, strict=True))
    )
    codec = Codec(compression)
    if codec != Codec.NONE:
        body = compress(codec, body, xerial=xerial)
    attrs = codec | (TIMESTAMP_TYPE_BIT if timestamp_type == LOG_APPEND_TIME else 0)
    attrs |= (TRANSACTIONAL_BIT if transactional else 0) | (CONTROL_BIT if control else 0)
    return frame_batch(
        body, len(recs), base_ts, max(stamps), attrs, base_offset=base_offset,
        producer=(producer_id, producer_epoch, base_sequence), leader_epoch=partition_leader_epoch,
    )  # fmt: skip


def frame_batch(
    body: bytes | bytearray,
    count: int,
    base_timestamp: int,
    max_timestamp: int,
    attributes: int,
    *,
    base_offset: int = 0,
    producer: tuple[int, int, int] = (-1, -1, -1),
    leader_epoch: int = -1,
) -> bytearray:
    """A v2 batch around an encoded (and, per `attributes`, compressed) records section `body`
    of `count` records; `producer` is (producer id, epoch, base sequence)."""
    out = bytearray(BATCH_OVERHEAD + len(body))
    HEADER.pack_into(
        out, 0, base_offset, len(out) - LOG_OVERHEAD, leader_epoch, MAGIC, 0, attributes,
        count - 1, base_timestamp, max_timestamp, *producer, count,
    )  # fmt: skip
    out[BATCH_OVERHEAD:] = body
    set_crc(out, 0, len(out))
    return out


def decode_records(batch: RecordBatch) -> list[Record]:
    """Decode the records of `batch` (absolute offsets; LogAppendTime batches use maxTimestamp)."""
    body = batch.bytes()[BATCH_OVERHEAD:]
    data = memoryview(decompress(batch.codec, body)) if batch.codec != Codec.NONE else body
    return list(iter_records(batch, data))


def iter_records(batch: RecordBatch, data: memoryview | bytes) -> Iterator[Record]:
    """The records of `batch` one by one from its (decompressed) records section `data`."""
    log_append = batch.timestamp_type == LOG_APPEND_TIME
    pos = 0
    for _ in range(batch.count):
        length, pos = _read_varint(data, pos)
        end = pos + length
        if length < 0 or end > len(data):
            raise CorruptRecordError("record extends past its batch")
        pos += 1  # attributes
        ts_delta, pos = _read_varint(data, pos)
        off_delta, pos = _read_varint(data, pos)
        key, pos = _read_bytes(data, pos)
        value, pos = _read_bytes(data, pos)
        nh, pos = _read_varint(data, pos)
        headers = []
        for _ in range(nh):
            hk, pos = _read_bytes(data, pos)
            hv, pos = _read_bytes(data, pos)
            headers.append(((hk or b"").decode("utf-8", "replace"), hv))
        if pos != end:
            raise CorruptRecordError("record length does not match its fields")
        ts = batch.max_timestamp if log_append else batch.base_timestamp + ts_delta
        yield Record(key, value, headers, ts, batch.base_offset + off_delta)


def _read_bytes(data: memoryview | bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = _read_varint(data, pos)
    if n < 0:
        return None, pos
    if pos + n > len(data):
        raise CorruptRecordError("record field extends past its record")
    return bytes(data[pos : pos + n]), pos + n


def decode_all(buf: memoryview | bytes | bytearray) -> list[Record]:
    """Every record of every whole batch in `buf` (e.g. a fetched file slice)."""
    return [r for b in iter_batches(buf) for r in decode_records(b)]
