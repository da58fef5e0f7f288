"""The head-file prefaulter: allocates pages ahead of the write position, never changes contents."""

from __future__ import annotations

import mmap
import os
import time

import pytest

from rdmalog.rdma.prefault import Prefaulter

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
        assert _wait(lambda: 7 not in pf._files or pf._files[7][1] >= SIZE)
    finally:
        pf.stop()
