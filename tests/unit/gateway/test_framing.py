"""The sans-io frame reader: bytes in any split, frames out, sizes refused, memory taken as bytes
arrive and within the shared budget; no sockets."""

from __future__ import annotations

import random
import struct

import pytest

from gateway.protocol.framing import FRAME_PREALLOC_BYTES, FrameBudget, FrameReader, Stage


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def test_frames_split_anywhere_come_out_whole_and_in_order():
    bodies = [bytes([i % 251]) * n for i, n in enumerate([1, 3, 17, 1000, 70_000, 300_000, 5])]
    stream = b"".join(_frame(b) for b in bodies)
    rng = random.Random(7)
    for _ in range(20):
        reader = FrameReader(max_frame=1 << 20, stage=Stage(64 * 1024))
        out, pos = [], 0
        while pos < len(stream):
            step = rng.choice([1, 2, 3, 4, 5, 100, 4096, 65_536, 200_000])
            out += reader.feed(stream[pos : pos + step])
            pos += step
        assert [bytes(f) for f in out] == bodies
        assert reader.refused is None and not reader.partial


def test_readers_sharing_a_stage_keep_their_streams_apart():
    stage = Stage(4096)
    streams = [b"".join(_frame(b"%d-%d" % (r, i) * (i + 1)) for i in range(40)) for r in range(3)]
    readers = [FrameReader(1 << 20, stage) for _ in streams]
    out: list[list[bytes]] = [[] for _ in streams]
    pos = [0] * len(streams)
    rng = random.Random(3)
    while any(p < len(s) for p, s in zip(pos, streams, strict=True)):
        r = rng.randrange(len(streams))
        chunk = streams[r][pos[r] : pos[r] + rng.choice([1, 3, 7, 50, 333])]
        pos[r] += len(chunk)
        out[r] += [bytes(f) for f in readers[r].feed(chunk)]
    for r, stream in enumerate(streams):
        assert b"".join(_frame(f) for f in out[r]) == stream


def test_many_small_frames_in_one_read():
    reader = FrameReader(max_frame=1024)
    frames = reader.feed(b"".join(_frame(b"x%d" % i) for i in range(500)))
    assert [bytes(f) for f in frames] == [b"x%d" % i for i in range(500)]


def test_a_large_frame_is_received_into_its_own_buffer():
    reader = FrameReader(max_frame=1 << 20, stage=Stage(1024))
    body = bytes(range(256)) * 400
    data = _frame(body)
    assert reader.feed(data[:1000]) == []
    buf = reader.buffer()
    assert len(buf) == len(body) - 996  # the rest of the frame, straight into it
    buf[: len(buf)] = data[1000:]
    (frame,) = reader.received(len(buf))
    assert bytes(frame) == body


def test_a_size_prefix_alone_takes_no_more_than_the_preallocation():
    reader = FrameReader(max_frame=200 << 20)
    assert reader.feed(struct.pack(">i", 100 << 20) + b"x") == []
    assert len(reader.buffer()) == FRAME_PREALLOC_BYTES - 1
    assert reader.partial


def test_a_frame_larger_than_the_preallocation_grows_as_it_arrives():
    body = bytes(range(251)) * ((5 * FRAME_PREALLOC_BYTES) // 251)
    reader = FrameReader(max_frame=len(body))
    data = memoryview(_frame(body))
    sizes, frames = [], []
    while data:
        buf = reader.buffer()
        sizes.append(len(buf))
        n = min(len(buf), 300_000, len(data))
        buf[:n] = data[:n]
        data = data[n:]
        frames += reader.received(n)
    assert [bytes(f) for f in frames] == [body]
    assert max(sizes) <= len(body) - FRAME_PREALLOC_BYTES


@pytest.mark.parametrize("size", [0, -1, -(2**31), 1025])
def test_a_size_outside_the_limits_is_refused_after_the_frames_before_it(size):
    reader = FrameReader(max_frame=1024)
    frames = reader.feed(_frame(b"ok") + struct.pack(">i", size) + b"rest")
    assert [bytes(f) for f in frames] == [b"ok"]
    assert reader.refused == size


def test_frames_wait_for_the_budget_and_go_on_when_it_frees():
    budget = FrameBudget(limit=100_000)
    stage = Stage(1024)
    granted: list[int] = []
    readers = [FrameReader(100_000, stage, budget, lambda i=i: granted.append(i)) for i in range(3)]
    bodies = [bytes([i]) * 60_000 for i in range(3)]
    for reader, body in zip(readers, bodies, strict=True):
        assert reader.feed(_frame(body)[:500]) == []
    # the first two frames fit (not strict: 60 + 60 kB > 100 kB), the third waits
    assert not readers[0].waiting and not readers[1].waiting and readers[2].waiting
    assert budget.held == 120_000
    assert readers[2].feed(b"more") == []  # a waiting reader takes nothing
    assert [bytes(f) for f in readers[0].feed(_frame(bodies[0])[500:])] == [bodies[0]]
    assert granted == [2] and not readers[2].waiting and budget.held == 120_000
    readers[1].close()  # its connection went away
    assert budget.held == 60_000
    assert [bytes(f) for f in readers[2].feed(_frame(bodies[2])[500:])] == [bodies[2]]
    assert budget.held == 0


def test_a_closed_waiting_reader_leaves_the_queue():
    budget = FrameBudget(limit=10)
    first, second = FrameReader(1000, budget=budget), FrameReader(1000, budget=budget)
    first.feed(_frame(b"a" * 100)[:10])
    second.feed(_frame(b"b" * 100)[:10])
    assert second.waiting
    second.close()
    first.close()
    assert budget.held == 0 and not second.waiting
