"""Kafka request framing without I/O: bytes in, whole request frames out.

A frame is a 4-byte big-endian size and that many bytes. `FrameReader` hands out the buffer the next
received bytes go to (`buffer()`, what `asyncio.BufferedProtocol.get_buffer` returns, so a socket's
`recv_into` writes straight into it) and turns what was written there into frames (`received(n)`).
Small frames land in a staging buffer and are copied out once; the rest of a frame still arriving is
received straight into that frame's own buffer. `feed(data)` does both for bytes from anywhere (tests).

A size outside 1..max_frame is refused: `received` returns the frames before it and sets `refused` to
the size; the stream cannot be resynchronised, so the caller closes the connection.
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")
STAGE_BYTES = 256 * 1024


class FrameReader:
    """Splits one connection's byte stream into request frames (see the module docstring)."""

    __slots__ = (
        "max_frame",
        "refused",
        "_stage",
        "_stage_mv",
        "_end",
        "_frame",
        "_frame_mv",
        "_got",
    )

    def __init__(self, max_frame: int, stage_bytes: int = STAGE_BYTES) -> None:
        self.max_frame = max_frame
        self.refused: int | None = None  # the size of a refused frame; nothing more is read
        self._stage = bytearray(stage_bytes)
        self._stage_mv = memoryview(self._stage)
        self._end = 0  # bytes held in the stage
        self._frame: bytearray | None = None  # a frame being received into its own buffer
        self._frame_mv: memoryview | None = None
        self._got = 0  # bytes of `_frame` received

    def buffer(self) -> memoryview:
        """Where the next received bytes go (write at most its length, then call `received`)."""
        if self._frame_mv is not None:
            return self._frame_mv[self._got :]
        return self._stage_mv[self._end :]

    def received(self, nbytes: int) -> list[bytearray]:
        """`nbytes` were written into `buffer()`: the frames they complete, in order."""
        if self._frame is not None:
            self._got += nbytes
            if self._got < len(self._frame):
                return []
            frame = self._frame
            self._frame = self._frame_mv = None
            return [frame]
        self._end += nbytes
        stage, end, pos = self._stage, self._end, 0
        frames = []
        while end - pos >= 4:
            size = _SIZE.unpack_from(stage, pos)[0]
            if size <= 0 or size > self.max_frame:
                self.refused = size
                self._end = 0
                return frames
            start = pos + 4
            avail = end - start
            if avail >= size:
                frames.append(stage[start : start + size])
                pos = start + size
                continue
            # The rest of this frame is received straight into its own buffer.
            frame = bytearray(size)
            frame[:avail] = self._stage_mv[start:end]
            self._frame, self._frame_mv, self._got = frame, memoryview(frame), avail
            self._end = 0
            return frames
        rest = end - pos
        if rest and pos:
            stage[:rest] = stage[pos:end]
        self._end = rest
        return frames

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytearray]:
        """The frames `data` completes (copies it into `buffer()` piece by piece)."""
        frames: list[bytearray] = []
        data = memoryview(data)
        while data and self.refused is None:
            buf = self.buffer()
            n = min(len(buf), len(data))
            buf[:n] = data[:n]
            data = data[n:]
            frames += self.received(n)
        return frames
