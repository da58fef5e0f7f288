"""The native consumer's batch decoder: C (`_batch.c`) and Python agree with records.decode_records."""

from __future__ import annotations

import pytest

from rdmalog.rdma import consumer
from rdmalog.rdma.consumer import ConsumerRecord, _Assignment, _decode_plain
from rdmalog.records import (
    HEADER,
    TIMESTAMP_TYPE_BIT,
    Record,
    RecordBatch,
    build_batch,
    decode_records,
)

c_decode = consumer._c_decode_plain
needs_c = pytest.mark.skipif(c_decode is None, reason="rdmalog.rdma._batch is not built")

RECORDS = [
    Record(b"k0", b"v0", [], 1_000),
    Record(None, b"x" * 1000, [("h", b"1"), ("empty", None)], 1_005),
    Record(b"", None, [], 990),
    Record(b"k" * 300, b"v" * 70_000, [("\u00e9", b"")], 1_010),
]


def _expected(buf: bytes, min_offset: int) -> list[ConsumerRecord]:
    return [
        ConsumerRecord("t", 3, r.offset, r.timestamp, r.key, r.value, r.headers)
        for r in decode_records(RecordBatch(memoryview(buf)))
        if r.offset >= min_offset
    ]


def _both(buf: bytes, min_offset: int) -> tuple[list, list]:
    h = HEADER.unpack_from(buf, 0)
    a = _Assignment("t", 3)
    a.offset = min_offset
    py: list = []
    _decode_plain(memoryview(buf), 0, len(buf), h, a, py)
    c: list = []
    if c_decode is not None:
        c_decode(buf, 0, len(buf), h[0], h[7], h[8], h[5] & TIMESTAMP_TYPE_BIT, h[12], min_offset,
                 "t", 3, ConsumerRecord, c)  # fmt: skip
    return py, c


@pytest.mark.parametrize("min_offset", [0, 42, 44, 46])
def test_decoders_agree_with_records(min_offset):
    buf = build_batch(RECORDS, base_offset=42)
    want = _expected(buf, min_offset)
    py, c = _both(buf, min_offset)
    assert py == want
    if c_decode is not None:
        assert c == want
        assert all(type(r) is ConsumerRecord for r in c)


@needs_c
def test_c_decoder_refuses_malformed_batches():
    buf = bytearray(build_batch(RECORDS[:2]))
    h = HEADER.unpack_from(buf, 0)
    args = (h[0], h[7], h[8], 0, h[12], 0, "t", 0, ConsumerRecord, [])
    with pytest.raises(ValueError):
        c_decode(bytes(buf[:-5]), 0, len(buf), *args)  # the batch is longer than the buffer
    with pytest.raises(ValueError):
        c_decode(bytes(buf[:-5]), 0, len(buf) - 5, *args)  # the last record is cut
    bad = bytearray(buf)
    bad[61] = 0x7E  # the first record's length varint now claims 63 bytes
    with pytest.raises(ValueError):
        c_decode(bytes(bad), 0, len(bad), *args)
