"""The native consumer's C batch decoder (`_batch.c`) agrees with records.decode_records, which the
consumer uses for compressed batches and when the C helper is not built."""

from __future__ import annotations

import gc

import pytest

from rdmalog.rdma.client import consumer
from rdmalog.rdma.client.consumer import ConsumerRecord
from rdmalog.store.records import (
    HEADER,
    LOG_APPEND_TIME,
    TIMESTAMP_TYPE_BIT,
    Record,
    RecordBatch,
    build_batch,
    decode_records,
)

c_decode = consumer._c_decode_plain
needs_c = pytest.mark.skipif(c_decode is None, reason="rdmalog.rdma.client._batch is not built")

RECORDS = [
    Record(b"k0", b"v0", [], 1_000),
    Record(None, b"x" * 1000, [("h", b"1"), ("empty", None)], 1_005),
    Record(b"", None, [], 990),
    Record(b"k" * 300, b"v" * 70_000, [("\u00e9", b"")], 1_010),
    Record(b"k4", b"v4", [], 1_010),  # the previous record's timestamp (its int is reused)
    Record(b"k5", b"v5", [], 1_000),
]


def _expected(buf: bytes, min_offset: int) -> list[ConsumerRecord]:
    return [
        ConsumerRecord("t", 3, r.offset, r.timestamp, r.key, r.value, tuple(r.headers))
        for r in decode_records(RecordBatch(memoryview(buf)))
        if r.offset >= min_offset
    ]


def _c(buf: bytes, min_offset: int, limit: int = 1 << 30) -> list:
    h = HEADER.unpack_from(buf, 0)
    out: list = []
    c_decode(buf, 0, len(buf), h[0], h[7], h[8], h[5] & TIMESTAMP_TYPE_BIT, h[12], min_offset,
             "t", 3, ConsumerRecord, out, limit)  # fmt: skip
    return out


@needs_c
@pytest.mark.parametrize("min_offset", [0, 42, 44, 46])
def test_c_decoder_agrees_with_records(min_offset):
    buf = build_batch(RECORDS, base_offset=42)
    got = _c(buf, min_offset)
    assert got == _expected(buf, min_offset)
    assert all(type(r) is ConsumerRecord for r in got)


@needs_c
def test_c_decoder_appends_at_most_limit_records():
    buf = build_batch(RECORDS, base_offset=42)
    assert [r.offset for r in _c(buf, 0, limit=2)] == [42, 43]
    assert [r.offset for r in _c(buf, 43, limit=2)] == [43, 44]
    assert _c(buf, 0, limit=0) == []


@needs_c
def test_c_decoder_records_stay_out_of_the_garbage_collector():
    """Records hold no container that could close a cycle, so they are not tracked: a poll of
    thousands of records would otherwise pay for collections that traverse them all."""
    got = _c(build_batch(RECORDS), 0)
    assert got[1].headers == (("h", b"1"), ("empty", None)) and got[0].headers == ()
    assert not any(gc.is_tracked(r) or gc.is_tracked(r.headers) for r in got)


@needs_c
def test_c_decoder_reports_log_append_time():
    """A LogAppendTime batch: every record carries the batch's max timestamp and type 1."""
    buf = build_batch(RECORDS, base_offset=7, timestamp_type=LOG_APPEND_TIME)
    got = _c(buf, 0)
    assert [(r.offset, r.timestamp, r.timestamp_type) for r in got] == [
        (7 + i, 1_010, 1) for i in range(len(RECORDS))
    ]
    assert [r.timestamp_type for r in _c(build_batch(RECORDS), 0)] == [0] * len(RECORDS)


@needs_c
def test_c_decoder_refuses_malformed_batches():
    buf = bytearray(build_batch(RECORDS[:2]))
    h = HEADER.unpack_from(buf, 0)
    args = (h[0], h[7], h[8], 0, h[12], 0, "t", 0, ConsumerRecord, [], 100)
    with pytest.raises(ValueError):
        c_decode(bytes(buf[:-5]), 0, len(buf), *args)  # the batch is longer than the buffer
    with pytest.raises(ValueError):
        c_decode(bytes(buf[:-5]), 0, len(buf) - 5, *args)  # the last record is cut
    bad = bytearray(buf)
    bad[61] = 0x7E  # the first record's length varint now claims 63 bytes
    with pytest.raises(ValueError):
        c_decode(bytes(bad), 0, len(bad), *args)
