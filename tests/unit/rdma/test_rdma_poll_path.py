"""The native clients' hot paths in C: `_batch.take` agrees with the consumer's Python batch loop
(which handles what `take` leaves to it), `_batch.encode_plain` builds the bytes
`records.build_batch` builds, and `_atomic64.sync_words` (the consumer's look at its metadata
slots) copies and compares as it says. The shm READ/WRITE fast paths, which need a connected
queue pair, are tests/integration/test_rdma_fast_paths.py."""

from __future__ import annotations

import struct
from types import SimpleNamespace

import pytest

from rdmalog.errors import CorruptRecordError
from rdmalog.rdma.client import consumer as consumer_module
from rdmalog.rdma.client import producer as producer_module
from rdmalog.rdma.client.consumer import Consumer, ConsumerRecord, _Assignment
from rdmalog.rdma.transport._atomic64 import sync_words
from rdmalog.store.compression import Codec
from rdmalog.store.records import LOG_APPEND_TIME, Record, build_batch, decode_all

needs_c = pytest.mark.skipif(
    consumer_module._c_take is None, reason="rdmalog.rdma.client._batch is not built"
)
encode_plain = producer_module._c_encode


def _batches(*parts: bytes | bytearray) -> bytearray:
    return bytearray(b"".join(parts))


def _plain(base: int, n: int, tag: bytes = b"v", **kw) -> bytearray:
    recs = [Record(b"k%d" % i, tag + b"%d" % i, [("h", b"%d" % i)], 1_000 + i) for i in range(n)]
    return build_batch(recs, base_offset=base, **kw)


def _malformed(base: int) -> bytearray:
    """A batch whose length and header are sound and whose first record's length is not."""
    b = _plain(base, 2)
    b[61] = 0x7F  # the first record's length varint: 63, past the batch's end
    return b


def _impossible_length(base: int) -> bytearray:
    b = _plain(base, 1)
    struct.pack_into(">i", b, 8, 10)  # batchLength below a header's
    return b


STREAMS = {
    "plain": _batches(_plain(0, 3), _plain(3, 1), _plain(4, 5)),
    "log append time": _batches(_plain(0, 2), _plain(2, 3, timestamp_type=LOG_APPEND_TIME)),
    "compressed in the middle": _batches(
        _plain(0, 2), _plain(2, 3, compression=Codec.GZIP), _plain(5, 2)
    ),
    "control batch": _batches(_plain(0, 2), _plain(2, 1, control=True), _plain(3, 2)),
    "partial at the end": _batches(_plain(0, 2), _plain(2, 3))[:-7],
    "impossible length": _batches(_plain(0, 2), _impossible_length(2), _plain(3, 1)),
    "malformed records": _batches(_plain(0, 2), _malformed(2), _plain(4, 1)),
}


def _take(data: bytearray, offset: int, room: int, use_c: bool, monkeypatch) -> tuple:
    """One `Consumer._take` over `data` (kept bytes, as after a READ): the records, the
    assignment's position state, and the error deferred to the next poll."""
    monkeypatch.setattr(
        consumer_module, "_c_take", consumer_module._c_take if use_c else None, raising=True
    )
    c = object.__new__(Consumer)  # _take needs no session: only these
    c.check_crcs, c._deferred, c._due, c._quiet = False, None, False, None
    a = _Assignment("t", 3)
    a.mr = SimpleNamespace(buf=memoryview(bytearray(data)))
    a.offset, a.head, a.have = offset, 0, len(data)
    out: list = []
    c._take(a, out, False, room)
    deferred = c._deferred
    return out, (a.offset, a.head, a.have, a.more), deferred and (type(deferred), str(deferred))


@needs_c
@pytest.mark.parametrize("stream", list(STREAMS))
@pytest.mark.parametrize("offset", [0, 1, 3])
@pytest.mark.parametrize("room", [1, 2, 4, 500])
def test_c_take_agrees_with_the_python_loop(stream, offset, room, monkeypatch):
    data = STREAMS[stream]
    got = _take(data, offset, room, True, monkeypatch)
    want = _take(data, offset, room, False, monkeypatch)
    assert got == want
    out = got[0]
    assert all(type(r) is ConsumerRecord and r.topic == "t" and r.partition == 3 for r in out)
    assert [r.offset for r in out] == sorted({r.offset for r in out})
    assert len(out) <= room and all(r.offset >= offset for r in out)


@needs_c
def test_c_take_stops_at_what_it_does_not_finish():
    take = consumer_module._c_take
    data = STREAMS["compressed in the middle"]
    first = len(_plain(0, 2))
    out: list = []
    assert take(data, 0, len(data), 0, 500, "t", 3, ConsumerRecord, out) == (first, 2, 498)
    assert [r.value for r in out] == [b"v0", b"v1"]
    out = []  # room runs out inside a batch: the position is the next record, not the batch
    assert take(data, 0, len(data), 0, 1, "t", 3, ConsumerRecord, out) == (0, 1, 0)
    assert take(data, 0, len(data), 1, 1, "t", 3, ConsumerRecord, out) == (first, 2, 0)
    assert [r.offset for r in out] == [0, 1]
    data = STREAMS["malformed records"]  # the batch's records taken back out: Python reports it
    out = []
    assert take(data, 0, len(data), 0, 500, "t", 3, ConsumerRecord, out) == (first, 2, 498)
    assert [r.offset for r in out] == [0, 1]
    with pytest.raises(ValueError, match="outside the buffer"):
        take(data, 0, len(data) + 1, 0, 500, "t", 3, ConsumerRecord, out)
    with pytest.raises(TypeError, match="tuple subclass"):
        take(data, 0, len(data), 0, 500, "t", 3, dict, out)


@needs_c
def test_c_take_failure_of_a_malformed_batch_is_the_python_loops_error(monkeypatch):
    out, (offset, _, _, more), deferred = _take(
        STREAMS["malformed records"], 0, 500, True, monkeypatch
    )
    assert [r.offset for r in out] == [0, 1] and offset == 2 and more
    assert deferred[0] is CorruptRecordError and "offsets 2-3 cannot be decoded" in deferred[1]


def test_sync_words_copies_and_says_whether_anything_changed():
    src = bytearray(64)
    dst = bytearray(64)
    assert not sync_words(src, dst, 0, 64)
    struct.pack_into("<Q", src, 24, 7)
    struct.pack_into("<Q", src, 56, 9)  # outside the range: not copied
    assert sync_words(memoryview(src).toreadonly(), dst, 16, 32)
    assert struct.unpack_from("<Q", dst, 24)[0] == 7 and struct.unpack_from("<Q", dst, 56)[0] == 0
    assert not sync_words(src, dst, 16, 32)
    for start, end in ((0, 72), (8, 4), (-8, 8), (4, 12)):
        with pytest.raises(IndexError):
            sync_words(src, dst, start, end)
    with pytest.raises(BufferError):  # the copy must be writable
        sync_words(src, bytes(64), 0, 8)


RECORD_SETS = {
    "one value": [Record(None, b"x" * 100)],
    "pairs": [(b"k", b"v"), (None, None), [b"list", b"pair"]],
    "headers and timestamps": [
        Record(b"k", b"v" * 300, [("h", b"1"), ("none", None), ("\u00e9", b"")], 1_000),
        Record("str key", "str value \u00e9", [(b"bytes key", "str value")], 990),
        Record(None, b"", [], None),  # now_ms
        Record(b"neg", b"ts", [], -5),
    ],
    "big and many": [Record(b"k%d" % i, bytes(range(256)) * i, [], 7 + i) for i in range(40)],
    "buffers": [(bytearray(b"ba"), memoryview(b"mv"))],
}


@needs_c
@pytest.mark.parametrize("name", list(RECORD_SETS))
def test_encode_plain_builds_the_bytes_build_batch_builds(name):
    records = RECORD_SETS[name]
    got = encode_plain(records, 123_456)
    assert type(got) is bytearray
    assert got == build_batch(records, now_ms=123_456)
    assert len(decode_all(got)) == len(records)
    assert encode_plain(iter(records), 123_456) == got  # any iterable, as build_batch


@needs_c
def test_encode_plain_refuses_what_build_batch_refuses():
    with pytest.raises(ValueError, match="at least one record"):
        encode_plain([], 0)
    with pytest.raises(TypeError):
        encode_plain([(1, b"v")], 0)  # a key is bytes, str or None
    with pytest.raises(TypeError):
        encode_plain([Record(b"k", b"v", [("h",)])], 0)
    with pytest.raises(AttributeError):
        encode_plain([object()], 0)
