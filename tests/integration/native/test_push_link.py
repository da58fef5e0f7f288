"""The leader's push link (rdmalog/cluster/push.py) against a follower's real RdmaService and Store,
in-process, on shm and tcp: pushed batches are committed as the leader wrote them, credits bound
the writes outstanding and what waits is coalesced, a corrupt write is not committed and is sent
again, and a deposed leader's writes are never committed. (The cluster itself: tests/cluster.)"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from compat_tests.push_pair import EPOCH, Follower, Leader
from rdmalog.rdma.transport.verbs import unavailable_reason


@pytest.fixture(params=["shm", "tcp", "verbs"])
def kind(request) -> str:
    """The link is written against the transport interface alone: verbs is the same code."""
    if request.param == "verbs" and unavailable_reason() is not None:
        pytest.skip(f"verbs: {unavailable_reason()}")
    return request.param


@pytest.fixture
def pair(tmp_path: Path, kind: str):
    follower = Follower(tmp_path / "follower", kind)
    leader = Leader(tmp_path / "leader", follower, kind)
    yield leader, follower
    leader.close()
    follower.close()


def _bytes(plog) -> bytes:
    """The log's segment bytes, every file's data in order."""
    end = plog.log_end_offset  # (a pushed commit leaves the high watermark to the leader)
    files = [plog.read(seg.base_offset, 1 << 30, upper_bound=end) for seg in plog.segments]
    return b"".join(f.read() for f in files if f is not None)


def test_pushed_batches_are_committed_as_the_leader_wrote_them(pair) -> None:
    leader, follower = pair
    assert follower.pushed == [True]  # the follower's fetcher was told to stand aside
    end = leader.append(*[b"value-%d" % i for i in range(200)])
    leader.wait("acknowledged", lambda: leader.acked == end)
    assert follower.log.log_end_offset == end
    assert _bytes(follower.log) == _bytes(leader.log)  # offsets and epochs: the leader's
    assert not leader.pulled and not leader.down


def test_credits_bound_outstanding_writes_and_what_waits_is_coalesced(
    tmp_path: Path, kind: str
) -> None:
    follower = Follower(tmp_path / "follower", kind, credits=4)
    leader = Leader(tmp_path / "leader", follower, kind, batch_max=1024)
    gate = threading.Event()
    commits = follower.svc.ordering.arrive_many
    follower.svc.ordering.arrive_many = lambda arrivals: (gate.wait(30), commits(arrivals))
    try:
        assert leader.link.credits == 4
        end = leader.append(*[b"x" * 64 for _ in range(100)])  # ~130 bytes a batch
        time.sleep(0.3)  # (not a timing assertion: nothing may change while the gate is shut)
        assert len(leader.link.outstanding) == 4  # no more than the credits, however many wait
        assert leader.pp.next_offset == 4
        gate.set()
        leader.wait("acknowledged", lambda: leader.acked == end)
        # after the first four, each write carried several batches (up to 1 KiB)
        assert leader.pp.order < 4 + (100 - 4) // 5
        assert _bytes(follower.log) == _bytes(leader.log)
    finally:
        gate.set()
        leader.close()
        follower.close()


def test_a_corrupt_write_is_not_committed_and_is_sent_again(pair) -> None:
    leader, follower = pair
    end = leader.append(b"a", b"b")
    leader.wait("acknowledged", lambda: leader.acked == end)
    qp = leader.link.qp
    post_write = qp.post_write
    corrupted = []

    def flip_once(wr, mr, offset, length, *args, **kw):
        if corrupted:
            return post_write(wr, mr, offset, length, *args, **kw)
        scratch = leader.link.device.alloc_mr(length, mr.access)
        scratch.buf[:length] = mr.buf[offset : offset + length]
        scratch.buf[length - 1] ^= 0xFF  # a bit flipped on the way: the CRC no longer matches
        corrupted.append(scratch)
        return post_write(wr, scratch, 0, length, *args, **kw)

    qp.post_write = flip_once
    end = leader.append(b"c", b"d", b"e")
    leader.wait("acknowledged after the resend", lambda: leader.acked == end)
    assert corrupted
    assert follower.log.log_end_offset == end
    assert _bytes(follower.log) == _bytes(leader.log)
    assert not leader.pulled and not leader.down  # the same link, a new grant


def test_a_deposed_leaders_writes_are_never_committed(pair) -> None:
    leader, follower = pair
    end = leader.append(b"a", b"b")
    leader.wait("acknowledged", lambda: leader.acked == end)
    follower.current = (3, EPOCH + 1)  # broker 3 leads now; LEADER's grant arrives late
    leader.append(b"late-1", b"late-2")
    leader.wait("the link gives up pushing", lambda: leader.pulled or leader.down)
    assert follower.log.log_end_offset == end  # nothing of the deposed leader was committed
    assert leader.acked == end
    assert "not_follower" in leader.pulled[0]  # and no new grant for it


def test_revoking_first_refuses_writes_already_on_their_way(pair) -> None:
    leader, follower = pair
    end = leader.append(b"a")
    leader.wait("acknowledged", lambda: leader.acked == end)
    follower.current = (3, EPOCH + 1)
    follower.svc.revoke_produce("t", 0)  # what a role change does first on the follower
    assert follower.pushed[-1] is False  # the fetcher pulls again
    leader.append(b"late")
    leader.wait("the link gives up pushing", lambda: leader.pulled or leader.down)
    assert follower.log.log_end_offset == end


def test_rolls_on_both_sides(tmp_path: Path, kind: str) -> None:
    """Small segments, and of different sizes: the follower's head fills (the link asks for the
    next file, as an exclusive producer does) and the leader's rolls (the link moves to its next
    file and lets the old one go)."""
    follower = Follower(tmp_path / "follower", kind, segment_bytes=3000)
    leader = Leader(tmp_path / "leader", follower, kind, segment_bytes=5000)
    try:
        end = leader.append(*[b"r%03d" % i * 20 for i in range(120)])
        leader.wait("acknowledged", lambda: leader.acked == end)
        assert len(follower.log.segments) > 3 and len(leader.log.segments) > 3
        assert _bytes(follower.log) == _bytes(leader.log)
        assert not leader.pulled and not leader.down
        assert leader.pp.retired == []  # the leader's old files are no longer registered
    finally:
        leader.close()
        follower.close()


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_an_event_loop_reads_the_acknowledgements(tmp_path: Path, transport: str) -> None:
    """Given the leader's event loop (what a broker passes), the loop reads the link's completion
    queue itself: batches appended on the loop (the gateway's produces) are acknowledged there,
    with no hand-over from the link's thread; batches appended on another thread (native
    producers') are all acknowledged too (the link's thread busy-polls after them on shm)."""
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, name="test-loop", daemon=True)
    runner.start()
    follower = Follower(tmp_path / "follower", transport)
    leader = Leader(tmp_path / "leader", follower, transport, loop=loop)
    try:
        for i in range(20):  # one at a time, as an acks=all client waits for each
            end = asyncio.run_coroutine_threadsafe(_on_loop(leader.append, b"g%d" % i), loop)
            end = end.result(10)
            leader.wait("acknowledged", lambda end=end: leader.acked == end)
        on_loop = leader.ack_threads.count(runner.ident)
        # (the link's thread polls every 20 ms for what the loop left: it may take a few)
        assert on_loop >= len(leader.ack_threads) // 2, (on_loop, len(leader.ack_threads))
        end = leader.append(*[b"native-%d" % i for i in range(300)])
        leader.wait("acknowledged", lambda: leader.acked == end)
        assert follower.log.log_end_offset == end
        assert _bytes(follower.log) == _bytes(leader.log)
        assert not leader.pulled and not leader.down
    finally:
        leader.close()
        follower.close()
        loop.call_soon_threadsafe(loop.stop)
        runner.join(5)
        loop.close()


async def _on_loop(fn, *args):
    return fn(*args)
