"""Message formats v0/v1 converted as Kafka 3.x converts them, checked against kafka-python's own
legacy message-set builder and reader (what an old kafka-python client sends and parses)."""

from __future__ import annotations

import struct

import pytest
from kafka.record.legacy_records import LegacyRecordBatch, LegacyRecordBatchBuilder

from rdmalog.errors import (
    CorruptRecordError,
    InvalidRecordError,
    MessageTooLargeError,
    UnsupportedCompressionTypeError,
)
from rdmalog.store.compression import Codec
from rdmalog.store.legacy_format import (
    MAGIC_V0,
    MAGIC_V1,
    down_convert,
    encode_message,
    is_legacy,
    iter_messages,
    up_convert,
)
from rdmalog.store.records import (
    LOG_APPEND_TIME,
    Record,
    RecordBatch,
    build_batch,
    set_base_offset,
    set_log_append_time,
    validate_batches,
)
from tests.unit.store.helpers import T0

LEGACY_CODECS = [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4]
ROWS = [(b"k0", b"v0" * 30, T0), (None, b"v1", T0 + 5), (b"k2", None, T0 + 2), (b"", b"", T0 + 1)]


def kafka_python_set(magic: int, codec: Codec, rows=ROWS) -> bytes:
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=int(codec), batch_size=1 << 20)
    for i, (k, v, ts) in enumerate(rows):
        b.append(i, ts if magic else None, k, v)
    return bytes(b.build())


def read_with_kafka_python(data: bytes, magic: int) -> list[tuple]:
    """(offset, timestamp, timestamp type, key, value) of every message, as kafka-python reads a
    Fetch v0-v3 answer (CRCs checked)."""
    out, pos = [], 0
    while pos + 12 <= len(data):
        (size,) = struct.unpack_from(">i", data, pos + 8)
        batch = LegacyRecordBatch(memoryview(data[pos : pos + 12 + size]), magic)
        assert batch.validate_crc()
        for r in batch:
            assert r.validate_crc()
            out.append((r.offset, r.timestamp, r.timestamp_type, r.key, r.value))
        pos += 12 + size
    return out


@pytest.mark.parametrize("magic", [MAGIC_V0, MAGIC_V1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_up_conversion_keeps_records_and_timestamps(magic: int, codec: Codec) -> None:
    sent = kafka_python_set(magic, codec)
    assert is_legacy(sent)
    batch = up_convert(sent)
    (info,) = validate_batches(memoryview(batch))
    rb = RecordBatch(batch)
    assert rb.codec == codec and rb.magic == 2 and rb.count == len(ROWS)
    got = [(r.key, r.value, r.timestamp, r.offset) for r in rb.records()]
    stamps = [ts if magic else -1 for _, _, ts in ROWS]
    assert got == [
        (k, v, ts, i) for i, ((k, v, _), ts) in enumerate(zip(ROWS, stamps, strict=True))
    ]
    assert info.max_timestamp == max(stamps)


def test_up_conversion_of_uncompressed_sets_of_many_messages() -> None:
    sent = b"".join(encode_message(i, MAGIC_V1, 0, T0 + i, b"k%d" % i, b"v") for i in range(5))
    rb = RecordBatch(up_convert(sent))
    assert [r.key for r in rb.records()] == [b"k%d" % i for i in range(5)]


def test_up_conversion_refuses_what_kafka_refuses() -> None:
    good = kafka_python_set(MAGIC_V1, Codec.NONE)
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        up_convert(bad_crc)
    with pytest.raises(CorruptRecordError):
        up_convert(good[:-1])
    with pytest.raises(MessageTooLargeError):
        up_convert(good, max_message_bytes=20)
    mixed = kafka_python_set(MAGIC_V0, Codec.NONE) + kafka_python_set(MAGIC_V1, Codec.NONE)
    with pytest.raises(InvalidRecordError, match="magic"):
        up_convert(mixed)
    two = kafka_python_set(MAGIC_V1, Codec.GZIP) * 2
    with pytest.raises(InvalidRecordError, match="more than one"):
        up_convert(two)
    zstd = encode_message(0, MAGIC_V1, int(Codec.ZSTD), T0, None, b"x" * 20)
    with pytest.raises(InvalidRecordError):
        up_convert(zstd)


def stored_batches(codec: Codec, log_append_time: bool = False) -> bytes:
    """Two stored batches (offsets 10-13, 14-15), as a fetch reads them."""
    a = build_batch([Record(k, v, [("h", b"x")], ts) for k, v, ts in ROWS], compression=codec)
    b = build_batch([Record(b"x", b"y", [], T0 + 9), Record(b"z", None, [], T0 + 3)], compression=codec)  # fmt: skip
    set_base_offset(a, 0, 10)
    set_base_offset(b, 0, 14)
    if log_append_time:
        set_log_append_time(a, 0, len(a), T0 + 100)
        set_log_append_time(b, 0, len(b), T0 + 200)
    return bytes(a + b)


@pytest.mark.parametrize("magic", [MAGIC_V0, MAGIC_V1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_down_conversion_reads_back_with_kafka_python(magic: int, codec: Codec) -> None:
    data = stored_batches(codec)
    out = down_convert(data, magic, 11, 1 << 20)
    got = read_with_kafka_python(out, magic)
    want = [(10 + i, ts, k, v) for i, (k, v, ts) in enumerate(ROWS)]
    want += [(14, T0 + 9, b"x", b"y"), (15, T0 + 3, b"z", None)]
    if codec == Codec.NONE:
        want = [w for w in want if w[0] >= 11]  # a compressed batch goes whole, as in Kafka
    assert [(o, k, v) for o, _, _, k, v in got] == [(o, k, v) for o, _, k, v in want]
    if magic == MAGIC_V1:
        assert [ts for _, ts, _, _, _ in got] == [ts for _, ts, _, _ in want]
        assert {tt for _, _, tt, _, _ in got} == {0}  # CreateTime


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP])
def test_down_conversion_keeps_log_append_time(codec: Codec) -> None:
    out = down_convert(stored_batches(codec, log_append_time=True), MAGIC_V1, 10, 1 << 20)
    got = read_with_kafka_python(out, MAGIC_V1)
    assert [(o, ts, tt) for o, ts, tt, _, _ in got] == [
        (10, T0 + 100, 1), (11, T0 + 100, 1), (12, T0 + 100, 1), (13, T0 + 100, 1),
        (14, T0 + 200, 1), (15, T0 + 200, 1),
    ]  # fmt: skip
    assert RecordBatch(stored_batches(codec, True)).timestamp_type == LOG_APPEND_TIME


def test_down_conversion_limits_and_zstd() -> None:
    data = stored_batches(Codec.NONE)
    whole = down_convert(data, MAGIC_V1, 10, 1 << 20)
    first = down_convert(data, MAGIC_V1, 10, 1)  # the first batch always comes whole
    assert [m.offset for m in iter_messages(first)] == [10, 11, 12, 13]
    assert len(first) < len(whole)
    zstd = bytes(build_batch([(b"k", b"v")], compression=Codec.ZSTD))
    with pytest.raises(UnsupportedCompressionTypeError):
        down_convert(zstd, MAGIC_V1, 0, 1 << 20)
    z = bytearray(zstd)
    set_base_offset(z, 0, 16)
    assert down_convert(data + bytes(z), MAGIC_V1, 10, 1 << 20) == whole  # zstd ends the set
    ctl = build_batch([Record(b"\0\0\0\0", b"\0" * 6)], control=True, producer_id=1)
    set_base_offset(ctl, 0, 16)
    assert down_convert(data + bytes(ctl), MAGIC_V1, 10, 1 << 20) == whole  # control: left out


def test_round_trip_through_both_conversions() -> None:
    for codec in LEGACY_CODECS:
        for magic in (MAGIC_V0, MAGIC_V1):
            batch = up_convert(kafka_python_set(magic, codec))
            back = list(iter_messages(down_convert(bytes(batch), magic, 0, 1 << 20)))
            if codec == Codec.NONE:
                assert [(m.key, m.value) for m in back] == [(k, v) for k, v, _ in ROWS]
            else:
                assert len(back) == 1 and back[0].codec == codec


def test_conversions_inflate_within_their_bound() -> None:
    """A compressed set or batch inflating past the bound is refused before it takes the memory
    (MESSAGE_TOO_LARGE), up and down; a later such batch ends a down-converted set."""
    rows = [(b"k%d" % i, b"\0" * 4096, T0) for i in range(64)]  # 256 KiB, gzips to ~1 KiB
    bomb = kafka_python_set(MAGIC_V1, Codec.GZIP, rows)
    assert len(up_convert(bomb, max_inflated=1 << 20)) < 8192
    with pytest.raises(MessageTooLargeError, match="inflate"):
        up_convert(bomb, max_inflated=64 << 10)
    batch = build_batch([Record(k, v, [], ts) for k, v, ts in rows], compression=Codec.GZIP)
    assert down_convert(bytes(batch), MAGIC_V1, 0, 1 << 20, max_inflated=1 << 20)
    with pytest.raises(MessageTooLargeError, match="inflate"):
        down_convert(bytes(batch), MAGIC_V1, 0, 1 << 20, max_inflated=64 << 10)
    small = build_batch([Record(b"a", b"b", [], T0)])
    set_base_offset(batch, 0, 1)
    out = down_convert(bytes(small + batch), MAGIC_V1, 0, 1 << 20, max_inflated=64 << 10)
    assert [m.offset for m in iter_messages(out)] == [0]
