"""The head-file prefaulter: allocates pages ahead of the write position, never changes contents."""

from __future__ import annotations

import mmap
import os
import time

import pytest

from rdmalog.rdma.broker.prefault import Prefaulter

SIZE = 8 << 20


def _wait(pred, rounds: int = 500) -> bool:
    for _ in range(rounds):
        if pred():
            return True
        time.sleep(0.01)
    return pred()


@pytest.fixture
def sparse(tmp_path):
    path = tmp_path / "00000000000000000000.log"
    with open(path, "w+b") as f:
        f.truncate(SIZE)
        m = mmap.mmap(f.fileno(), SIZE)
        m[:5] = b"batch"
        yield path, m
        m.close()


def test_populates_ahead_without_changing_contents(sparse):
    path, m = sparse
    allocated = lambda: os.stat(path).st_blocks * 512  # noqa: E731
    before = allocated()
    pf = Prefaulter(ahead=2 << 20)
    try:
        pf.want(1, m, 5, SIZE)  # just granted: a small lead
        assert _wait(lambda: allocated() >= before + (256 << 10))
        pf.want(1, m, 2 << 20, SIZE)  # 2 MiB written since: the lead grows to `ahead`
        assert _wait(lambda: allocated() >= before + (4 << 20) - 4096)
        assert m[:5] == b"batch" and m[5 : 4 << 20].count(0) == (4 << 20) - 5
        pf.forget(1)
    finally:
        pf.stop()
    assert not pf._thread.is_alive()


def test_an_unmapped_file_is_dropped_quietly(tmp_path):
    path = tmp_path / "f"
    with open(path, "w+b") as f:
        f.truncate(SIZE)
        m = mmap.mmap(f.fileno(), SIZE)
    pf = Prefaulter(ahead=SIZE)
    try:
        pf.want(7, m, 0, SIZE)
        m.close()  # rolled and closed under the prefaulter: madvise fails, nothing crashes
        pf.want(7, m, 1 << 20, SIZE)
        assert _wait(lambda: 7 not in pf._leads or pf._leads[7][1] >= SIZE)
    finally:
        pf.stop()


def _resident_pages(m: mmap.mmap, start: int, end: int) -> int:
    import ctypes

    from rdmalog.rdma.broker.prefault import address_of

    vec = (ctypes.c_ubyte * ((end - start) // mmap.PAGESIZE))()
    libc = ctypes.CDLL(None, use_errno=True)
    rc = libc.mincore(ctypes.c_void_p(address_of(m) + start), ctypes.c_size_t(end - start), vec)
    assert rc == 0, os.strerror(ctypes.get_errno())
    return sum(v & 1 for v in vec)


def test_populate_makes_the_grant_part_resident_now_and_the_rest_in_the_background(tmp_path):
    """A granted head: the first `grant_resident` bytes are resident when populate returns (it
    does not wait for the rest: with the background thread stopped the rest stays absent), the
    rest follows from the background thread; contents never change."""
    size = 64 << 20  # larger than the kernel's readahead around the populated part
    path = tmp_path / "00000000000000000000.log"
    with open(path, "w+b") as f:
        f.truncate(size)
        os.posix_fallocate(f.fileno(), 0, size)
        m = mmap.mmap(f.fileno(), size)
    m[:5] = b"batch"
    pages = size // mmap.PAGESIZE
    idle = Prefaulter(grant_resident=1 << 20)
    idle.stop()
    running = Prefaulter(grant_resident=1 << 20)
    try:
        assert idle.populate(3, m, 5, size)
        assert _resident_pages(m, 0, 1 << 20) == (1 << 20) // mmap.PAGESIZE
        assert _resident_pages(m, 0, size) < pages
        assert running.populate(3, m, 5, size)
        assert _wait(lambda: _resident_pages(m, 0, size) == pages)
        assert _wait(lambda: running._fills[3][1] == size)
        assert m[:5] == b"batch" and m[5:].count(0) == size - 5
        running.forget(3)
        assert 3 not in running._fills
    finally:
        running.stop()
        m.close()


def test_a_resident_heads_lead_goes_before_its_fill(tmp_path):
    """A resident head gets the writable lead too (ext4's first-write work done ahead of the
    producer), and the lead's chunks go before the background fill's: the producer is about to
    write there. Contents never change."""
    from rdmalog.rdma.broker.prefault import MADV_POPULATE_READ, MADV_POPULATE_WRITE, STEP

    size = 16 << 20
    path = tmp_path / "00000000000000000000.log"
    with open(path, "w+b") as f:
        os.posix_fallocate(f.fileno(), 0, size)
        m = mmap.mmap(f.fileno(), size)
    m[:5] = b"batch"
    idle = Prefaulter(grant_resident=1 << 20)
    idle.stop()  # no thread: the queue stays as asked
    running = Prefaulter(grant_resident=1 << 20)
    try:
        assert idle.populate(4, m, 5, size)
        assert idle._next()[4] == MADV_POPULATE_READ  # the fill, [1 MiB, size)
        idle.want(4, m, 5, size)
        files, key, _, n, advice = idle._next()
        assert (files is idle._leads, key, n, advice) == (True, 4, STEP, MADV_POPULATE_WRITE)
        assert running.populate(4, m, 5, size)
        running.want(4, m, 5, size)
        assert _wait(lambda: running._leads[4][1] == running._leads[4][2] >= STEP)
        assert _wait(lambda: running._fills[4][1] == size)
        assert m[:5] == b"batch" and m[5:].count(0) == size - 5
        running.forget(4)
        assert 4 not in running._leads and 4 not in running._fills
    finally:
        running.stop()
        m.close()
