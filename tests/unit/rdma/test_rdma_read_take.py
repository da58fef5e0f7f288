"""`_batch.read_take`, shm's one-call fetch: it READs with the checks of `copy_checked` (here over a
region table entry built in memory), keeps partial batches as `_fetch` does, and makes lazy
records whose bytes survive the read buffer being written again (`Chunk.detach`)."""

from __future__ import annotations

import struct

import pytest

from rdmalog.rdma.client import consumer as consumer_module
from rdmalog.rdma.client.consumer import ConsumerRecord
from rdmalog.store.records import Record, build_batch

read_take = consumer_module._c_read_take
pytestmark = pytest.mark.skipif(read_take is None, reason="rdmalog.rdma.client._batch is not built")

RKEY, QP = 0x1234_5679, 7


def _plan(src: bytes, rkey: int = RKEY) -> tuple:
    table = bytearray(256)  # one region entry: its rkey word, no window (qp word 0)
    struct.pack_into("<Q", table, 0, rkey)
    return (memoryview(table), 0, RKEY, memoryview(src), QP, 0)


def _log(n: int) -> bytes:
    return b"".join(
        build_batch(
            [Record(b"k%d" % i, b"value-%d" % i * 10, [("h", b"x")], 1000 + i)], base_offset=i
        )
        for i in range(n)
    )


def _read_all(src: bytes, fetch: int, dst_size: int = 4096, keep: bool = True):
    plan, dst = _plan(src), memoryview(bytearray(dst_size))
    pos = head = have = offset = 0
    chunk, records, calls = None, [], 0
    while pos < len(src) or have:
        out: list = []
        r = read_take(plan, dst, fetch, pos, len(src), head, have, offset, 500, "t", 0,
                      ConsumerRecord, out, chunk)  # fmt: skip
        assert type(r) is tuple, r
        pos, head, have, offset, _, more, chunk = r
        assert not more
        records += out if keep else [(x.offset, x.value) for x in out]
        calls += 1
        if pos == len(src) and not out:
            break
    return records, offset, calls


def test_read_take_reads_every_record_in_small_reads():
    src = _log(40)
    records, offset, calls = _read_all(src, 100)  # batches span READs: kept and completed
    assert offset == 40 and calls > 40
    want = [(i, b"k%d" % i, b"value-%d" % i * 10, (("h", b"x"),), 1000 + i) for i in range(40)]
    # every record was kept across later READs into the same buffer (and its moves to the front)
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in records] == want
    assert all(type(r).__name__ == "LazyRecord" for r in records)
    assert records[3] == ConsumerRecord("t", 0, 3, 1003, b"k3", b"value-3" * 10, (("h", b"x"),), 0)


def test_read_take_records_dropped_at_once_need_no_copy():
    records, offset, _ = _read_all(_log(10), 300, keep=False)
    assert offset == 10 and [o for o, _ in records] == list(range(10))


def test_read_take_leaves_what_it_cannot_do_to_the_general_path():
    src = _log(3)
    out: list = []
    # the buffer cannot hold what the READ needs: nothing done
    assert read_take(_plan(src), memoryview(bytearray(16)), 64, 0, len(src), 0, 0, 0, 500, "t",
                     0, ConsumerRecord, out, None) is None  # fmt: skip
    # a revoked key: the READ fails (the kept bytes' head is returned), nothing is read
    dst = memoryview(bytearray(4096))
    bad = _plan(src, rkey=RKEY + 2)
    assert (
        read_take(bad, dst, 64, 0, len(src), 0, 0, 0, 500, "t", 0, ConsumerRecord, out, None) == 0
    )
    assert out == [] and bytes(dst[:64]) == bytes(64)
    with pytest.raises(ValueError, match="outside the buffer"):
        read_take(
            _plan(src), dst, 64, 0, len(src), 4090, 100, 0, 500, "t", 0, ConsumerRecord, out, None
        )
    # room for 1 record: the next batch is left whole for the caller (`more`)
    r = read_take(_plan(src), dst, 4096, 0, len(src), 0, 0, 0, 1, "t", 0, ConsumerRecord, out, None)
    assert r[:6] == (len(src), len(src) // 3, 2 * len(src) // 3, 1, 0, True) and len(out) == 1
