"""Record batch v2: byte-exact against kafka-python's and aiokafka's builders, validation, patches."""

from __future__ import annotations

import struct

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder

from rdmalog.errors import (
    CorruptRecordError,
    InvalidRecordError,
    MessageTooLargeError,
    UnsupportedCompressionTypeError,
)
from rdmalog.store import records as records_module
from rdmalog.store.compression import Codec
from rdmalog.store.records import (
    ATTRIBUTES,
    BATCH_OVERHEAD,
    CRC_POS,
    LOG_APPEND_TIME,
    BatchInfo,
    Record,
    RecordBatch,
    build_batch,
    crc32c,
    decode_all,
    iter_batches,
    set_base_offset,
    set_leader_epoch,
    set_log_append_time,
    validate_batches,
)

RECORDS = [
    Record(b"key-0", b"value-0" * 40, [("h1", b"x"), ("h2", None)], 1_000),  # compressible
    Record(None, b"value-1" * 40, [], 1_007),
    Record(b"key-2", None, [], 999),  # a timestamp below the base: negative delta
    Record(b"", b"", [("empty", b"")], 1_010),
]


def kafka_python_batch(
    codec: int = 0, pid: int = -1, epoch: int = -1, seq: int = -1, txn: bool = False
) -> bytes:
    b = KpBuilder(
        magic=2, compression_type=codec, is_transactional=txn, producer_id=pid,
        producer_epoch=epoch, base_sequence=seq, batch_size=1 << 20,
    )  # fmt: skip
    for i, r in enumerate(RECORDS):
        b.append(i, r.timestamp, r.key, r.value, r.headers)
    return bytes(b.build())


def test_uncompressed_batch_is_byte_identical_to_kafka_python() -> None:
    theirs = kafka_python_batch(pid=42, epoch=3, seq=7)
    # kafka-python writes partitionLeaderEpoch 0 (Java writes -1): everything else must match.
    ours = build_batch(
        RECORDS, producer_id=42, producer_epoch=3, base_sequence=7, partition_leader_epoch=0
    )
    assert bytes(ours) == theirs


def test_batch_is_byte_identical_to_aiokafka() -> None:
    b = AioBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                   producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)  # fmt: skip
    for i, r in enumerate(RECORDS):
        b.append(i, r.timestamp, r.key, r.value, r.headers)
    theirs = bytes(b.build())
    assert bytes(build_batch(RECORDS)) == theirs  # aiokafka, like Java, writes epoch -1


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_kafka_python_compressed_batches_validate_and_decode(codec: int) -> None:
    raw = bytearray(kafka_python_batch(codec=codec))
    (info,) = validate_batches(memoryview(raw))
    assert info.count == 4 and info.last_offset_delta == 3 and info.attributes & 7 == codec
    assert info.max_timestamp == 1_010
    got = decode_all(raw)
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in got] == [
        (i, r.key, r.value, r.headers, r.timestamp) for i, r in enumerate(RECORDS)
    ]


@pytest.mark.parametrize("codec", list(Codec))
def test_our_batches_read_by_kafka_python(codec: Codec) -> None:
    raw = bytes(build_batch(RECORDS, compression=codec, base_offset=100, transactional=False))
    kb = KpBatch(raw)
    assert kb.validate_crc()
    assert kb.base_offset == 100 and kb.compression_type == codec
    recs = list(kb)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in recs] == [
        (100 + i, r.key, r.value, r.timestamp) for i, r in enumerate(RECORDS)
    ]
    assert [list(r.headers) for r in recs][0] == [("h1", b"x"), ("h2", None)]


def test_header_fields_and_view() -> None:
    raw = build_batch(RECORDS, base_offset=5, producer_id=9, producer_epoch=2, base_sequence=11,
                      partition_leader_epoch=4, transactional=True)  # fmt: skip
    b = RecordBatch(raw)
    assert (b.base_offset, b.last_offset, b.next_offset, b.count) == (5, 8, 9, 4)
    assert (b.producer_id, b.producer_epoch, b.base_sequence, b.partition_leader_epoch) == (
        9,
        2,
        11,
        4,
    )
    assert b.is_transactional and not b.is_control and b.magic == 2
    assert b.base_timestamp == 1_000 and b.max_timestamp == 1_010
    assert b.size == len(raw) == b.batch_length + 12
    assert b.crc == b.compute_crc() and b.is_valid()


def test_patching_offset_and_epoch_keeps_the_crc() -> None:
    raw = build_batch(RECORDS)
    crc = RecordBatch(raw).crc
    set_base_offset(raw, 0, 123456789)
    set_leader_epoch(raw, 0, 17)
    b = RecordBatch(raw)
    assert (b.base_offset, b.partition_leader_epoch, b.crc) == (123456789, 17, crc)
    assert b.is_valid() and KpBatch(bytes(raw)).validate_crc()
    assert [r.offset for r in decode_all(raw)] == [123456789 + i for i in range(4)]


def test_log_append_time_rewrites_attributes_timestamp_and_crc() -> None:
    raw = build_batch(RECORDS, compression=Codec.LZ4)
    set_log_append_time(raw, 0, len(raw), 5_000)
    b = RecordBatch(raw)
    assert b.timestamp_type == LOG_APPEND_TIME and b.max_timestamp == 5_000 and b.is_valid()
    kb = KpBatch(bytes(raw))
    assert kb.validate_crc() and kb.timestamp_type == 1
    assert {r.timestamp for r in decode_all(raw)} == {5_000}


def test_validate_several_batches_in_one_buffer() -> None:
    a, b = build_batch(RECORDS[:1]), build_batch(RECORDS, compression=Codec.ZSTD)
    infos = validate_batches(memoryview(a + b))
    assert [(i.position, i.size, i.count) for i in infos] == [(0, len(a), 1), (len(a), len(b), 4)]


def _recrc(raw: bytearray) -> bytearray:
    struct.pack_into(">I", raw, CRC_POS, crc32c(memoryview(raw)[ATTRIBUTES:]))
    return raw


def test_flipped_byte_fails_crc() -> None:
    raw = build_batch(RECORDS)
    for pos in (ATTRIBUTES, BATCH_OVERHEAD + 3, len(raw) - 1):
        bad = bytearray(raw)
        bad[pos] ^= 0x01
        with pytest.raises(CorruptRecordError):
            validate_batches(memoryview(bad))


def test_truncated_and_bad_length() -> None:
    raw = build_batch(RECORDS)
    with pytest.raises(CorruptRecordError):
        validate_batches(memoryview(raw[:-1]))
    with pytest.raises(CorruptRecordError):
        validate_batches(memoryview(raw[:30]))
    bad = bytearray(raw)
    struct.pack_into(">i", bad, 8, 10)
    with pytest.raises(CorruptRecordError):
        validate_batches(memoryview(bad))
    with pytest.raises(CorruptRecordError):
        validate_batches(memoryview(b""))


def test_bad_magic_count_codec_and_control() -> None:
    bad = bytearray(build_batch(RECORDS))
    bad[16] = 1
    with pytest.raises(InvalidRecordError):
        validate_batches(memoryview(bad))
    bad = bytearray(build_batch(RECORDS))
    struct.pack_into(">i", bad, 57, 3)  # recordsCount outside the CRC? no: inside, so re-CRC
    with pytest.raises(InvalidRecordError):
        validate_batches(memoryview(_recrc(bad)))
    assert validate_batches(memoryview(bad), from_client=False)[0].count == 3
    bad = bytearray(build_batch(RECORDS))
    struct.pack_into(">h", bad, ATTRIBUTES, 6)
    with pytest.raises(UnsupportedCompressionTypeError):
        validate_batches(memoryview(_recrc(bad)))
    ctl = build_batch(
        [Record(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")], control=True, producer_id=1
    )
    with pytest.raises(InvalidRecordError):
        validate_batches(memoryview(ctl))
    assert validate_batches(memoryview(ctl), from_client=False)
    with pytest.raises(InvalidRecordError):
        validate_batches(memoryview(build_batch(RECORDS, transactional=True)))


def test_max_batch_size() -> None:
    raw = build_batch(RECORDS)
    validate_batches(memoryview(raw), len(raw))
    with pytest.raises(MessageTooLargeError) as e:
        validate_batches(memoryview(raw), len(raw) - 1)
    assert e.value.error_code == 10


def test_iter_batches_stops_at_a_partial_batch() -> None:
    a, b = build_batch(RECORDS[:2]), build_batch(RECORDS[2:], base_offset=2)
    buf = a + b[:-5]
    assert [x.base_offset for x in iter_batches(buf)] == [0]
    assert [r.offset for r in decode_all(a + b)] == [0, 1, 2, 3]


def test_decode_rejects_garbage_records() -> None:
    raw = build_batch(RECORDS)
    raw[BATCH_OVERHEAD] = 0x7F  # first record's length varint now claims too much
    with pytest.raises(CorruptRecordError):
        decode_all(raw)


def _cases() -> list[tuple[bytes, dict]]:
    """Buffers and validate_batches arguments, good and bad, for the C check against Python."""
    plain, zstd = build_batch(RECORDS), build_batch(RECORDS, compression=Codec.ZSTD)
    idem = build_batch(RECORDS[:2], producer_id=7, producer_epoch=3, base_sequence=11)
    ctl = build_batch(
        [Record(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")], control=True, producer_id=1
    )
    cases: list[tuple[bytes, dict]] = [
        (plain, {}), (plain + zstd + idem, {}), (idem, {"max_batch_size": len(idem)}),
        (plain, {"max_batch_size": len(plain) - 1}), (ctl, {}), (ctl, {"allow_control": True}),
        (ctl, {"from_client": False}), (b"", {}), (plain[:-1], {}), (plain[:30], {}),
        (plain + plain[:70], {}), (build_batch(RECORDS, transactional=True), {}),
    ]  # fmt: skip
    for pos, value, fmt in ((16, 1, ">b"), (57, 3, ">i"), (ATTRIBUTES, 6, ">h"), (8, 10, ">i")):
        for recrc in (False, True):
            bad = bytearray(plain)
            struct.pack_into(fmt, bad, pos, value)
            cases.append((bytes(_recrc(bad) if recrc else bad), {}))
            cases.append((bytes(bad), {"from_client": False}))
    neg = bytearray(plain)
    struct.pack_into(">h", neg, ATTRIBUTES, -32768)  # a negative attributes field, codec 0
    cases.append((bytes(_recrc(neg)), {}))
    for i in range(0, len(plain), 7):
        flipped = bytearray(plain)
        flipped[i] ^= 0x40
        cases.append((bytes(flipped), {}))
    return cases


@pytest.mark.skipif(records_module._c_validate is None, reason="the C extension is not built")
def test_the_c_check_agrees_with_the_python_one() -> None:
    """records.validate_batches takes the C check's infos, or says in Python why a batch is bad:
    the C check must pass exactly the buffers Python passes, with the same infos."""
    for raw, kw in _cases():
        opts = {"max_batch_size": None, "from_client": True, "allow_control": False, **kw}
        try:
            want = records_module._validate_batches(memoryview(raw), *opts.values())
        except Exception:
            want = None
        got = records_module._c_validate(
            memoryview(raw), -1 if opts["max_batch_size"] is None else opts["max_batch_size"],
            opts["from_client"], opts["allow_control"], BatchInfo,
        )  # fmt: skip
        assert got == want, (raw[:70], kw)
        assert got is None or all(type(i) is BatchInfo for i in got)
