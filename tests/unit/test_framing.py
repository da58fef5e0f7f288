"""The sans-io frame reader: bytes in any split, frames out, sizes refused; no sockets."""

from __future__ import annotations

import random
import struct

import pytest

from gateway.protocol.framing import FrameReader


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def test_frames_split_anywhere_come_out_whole_and_in_order():
    bodies = [bytes([i % 251]) * n for i, n in enumerate([1, 3, 17, 1000, 70_000, 300_000, 5])]
    stream = b"".join(_frame(b) for b in bodies)
    rng = random.Random(7)
    for _ in range(20):
        reader = FrameReader(max_frame=1 << 20, stage_bytes=64 * 1024)
        out, pos = [], 0
        while pos < len(stream):
            step = rng.choice([1, 2, 3, 4, 5, 100, 4096, 65_536, 200_000])
            out += reader.feed(stream[pos : pos + step])
            pos += step
        assert [bytes(f) for f in out] == bodies
        assert reader.refused is None


def test_many_small_frames_in_one_read():
    reader = FrameReader(max_frame=1024)
    frames = reader.feed(b"".join(_frame(b"x%d" % i) for i in range(500)))
    assert [bytes(f) for f in frames] == [b"x%d" % i for i in range(500)]


def test_a_large_frame_is_received_into_its_own_buffer():
    reader = FrameReader(max_frame=1 << 20, stage_bytes=1024)
    body = bytes(range(256)) * 400
    data = _frame(body)
    assert reader.feed(data[:1000]) == []
    buf = reader.buffer()
    assert len(buf) == len(body) - 996  # the rest of the frame, straight into it
    buf[: len(buf)] = data[1000:]
    (frame,) = reader.received(len(buf))
    assert bytes(frame) == body


@pytest.mark.parametrize("size", [0, -1, -(2**31), 1025])
def test_a_size_outside_the_limits_is_refused_after_the_frames_before_it(size):
    reader = FrameReader(max_frame=1024)
    frames = reader.feed(_frame(b"ok") + struct.pack(">i", size) + b"rest")
    assert [bytes(f) for f in frames] == [b"ok"]
    assert reader.refused == size
