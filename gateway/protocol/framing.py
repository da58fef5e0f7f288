"""Kafka request framing without I/O: bytes in, whole request frames out, memory taken as bytes arrive.

A frame is a 4-byte big-endian size and that many bytes. `FrameReader` hands out the buffer the next
received bytes go to (`buffer()`, what `asyncio.BufferedProtocol.get_buffer` returns, so a socket's
`recv_into` writes straight into it) and turns what was written there into frames (`received(n)`).
`feed(data)` does both for bytes from anywhere (tests).

Memory:

- Received bytes land in a staging buffer (`Stage`) that all readers of an event loop share: a read
  is get-buffer, recv_into, buffer-updated without anything in between, and what a read leaves
  unfinished is moved out of the stage before the next one. Whole frames are copied out once; an idle
  connection holds no buffer at all.
- A frame not received whole gets its own buffer and the rest of it is received straight into it. The
  buffer is allocated up to `FRAME_PREALLOC_BYTES` at once (no copy for the usual frames) and grown,
  doubling, as more bytes arrive: a size prefix alone takes no more than that.
- Before its buffer is allocated, such a frame reserves its whole size from a `FrameBudget` shared by
  the connections (Kafka's `queued.max.request.bytes`). When the budget is spent the reader waits
  (`waiting`): its connection stops reading until another frame completes or a connection closes.

A size outside 1..max_frame is refused: `received` returns the frames before it and sets `refused` to
the size; the stream cannot be resynchronised, so the caller closes the connection.
"""

from __future__ import annotations

import collections
import struct
from collections.abc import Callable

_SIZE = struct.Struct(">i")
STAGE_BYTES = 256 * 1024
FRAME_PREALLOC_BYTES = 1024 * 1024


class Stage:
    """A staging buffer shared by the frame readers of one event loop (one read at a time)."""

    __slots__ = ("buf", "mv", "owner")

    def __init__(self, size: int = STAGE_BYTES) -> None:
        self.buf = bytearray(size)
        self.mv = memoryview(self.buf)
        self.owner: FrameReader | None = None  # whose bytes the last buffer handed out receives


class FrameBudget:
    """Bytes reserved by frames still arriving, across connections, against `limit` (-1: none).

    As Kafka's memory pool for `queued.max.request.bytes` it is not strict: a reservation is granted
    while the total is below the limit, so one frame may take it past the limit and any frame up to
    `socket.request.max.bytes` gets through once others complete. Waiting readers are granted in
    arrival order.
    """

    __slots__ = ("limit", "held", "_waiting")

    def __init__(self, limit: int = -1) -> None:
        self.limit = limit
        self.held = 0
        self._waiting: collections.deque[tuple[FrameReader, int]] = collections.deque()

    def reserve(self, reader: FrameReader, size: int) -> bool:
        """Reserve `size` bytes for `reader`'s frame; False queues it (see `FrameReader.granted`)."""
        if self.limit < 0 or (self.held < self.limit and not self._waiting):
            self.held += size
            return True
        self._waiting.append((reader, size))
        return False

    def release(self, size: int) -> None:
        """Return a reservation; grant waiting readers while the total is below the limit."""
        self.held -= size
        while self._waiting and self.held < self.limit:
            reader, wanted = self._waiting.popleft()
            self.held += wanted
            reader.granted()

    def cancel(self, reader: FrameReader) -> None:
        """Forget a waiting reader (its connection closed)."""
        self._waiting = collections.deque(w for w in self._waiting if w[0] is not reader)


class FrameReader:
    """Splits one connection's byte stream into request frames (see the module docstring)."""

    __slots__ = (
        "max_frame",
        "refused",
        "waiting",
        "_stage",
        "_budget",
        "_on_granted",
        "_head",
        "_frame",
        "_frame_mv",
        "_size",
        "_got",
    )

    def __init__(
        self,
        max_frame: int,
        stage: Stage | None = None,
        budget: FrameBudget | None = None,
        on_granted: Callable[[], None] | None = None,
    ) -> None:
        self.max_frame = max_frame
        self.refused: int | None = None  # the size of a refused frame; nothing more is read
        self.waiting = False  # a frame waits for its reservation: read nothing until `on_granted`
        self._stage = stage if stage is not None else Stage()
        self._budget = budget if budget is not None else FrameBudget()
        self._on_granted = on_granted
        self._head = (
            b""  # bytes received ahead of a frame buffer: a partial size, or a waiting frame
        )
        self._frame: bytearray | None = None  # the frame being received into its own buffer
        self._frame_mv: memoryview | None = None
        self._size = 0  # that frame's size (its buffer may be smaller yet)
        self._got = 0  # bytes of it received

    @property
    def partial(self) -> bool:
        """True while a frame has started arriving and is not complete."""
        return self._frame is not None or bool(self._head)

    def buffer(self) -> memoryview:
        """Where the next received bytes go (write at most its length, then call `received`)."""
        if self._frame_mv is not None:
            if self._got == len(self._frame_mv):
                self._grow()
            return self._frame_mv[self._got :]
        stage = self._stage
        stage.owner = self
        head = len(self._head)
        if head:
            stage.buf[:head] = self._head
        return stage.mv[head:]

    def received(self, nbytes: int) -> list[bytearray]:
        """`nbytes` were written into `buffer()`: the frames they complete, in order."""
        if self._frame is not None:
            self._got += nbytes
            if self._got < self._size:
                return []
            frame = self._frame
            self._frame = self._frame_mv = None
            self._budget.release(self._size)
            return [frame]
        stage = self._stage
        if stage.owner is not self:
            raise RuntimeError("received bytes into a stage buffer handed to another reader")
        buf, end, pos = stage.buf, len(self._head) + nbytes, 0
        self._head = b""
        frames = []
        while end - pos >= 4:
            size = _SIZE.unpack_from(buf, pos)[0]
            if size <= 0 or size > self.max_frame:
                self.refused = size
                return frames
            start = pos + 4
            if end - start >= size:
                frames.append(buf[start : start + size])
                pos = start + size
                continue
            if not self._start_frame(size, stage.mv[start:end]):
                self._head = bytes(stage.mv[pos:end])  # kept until the reservation is granted
            return frames
        if pos < end:
            self._head = bytes(stage.mv[pos:end])
        return frames

    def granted(self) -> None:
        """The budget reserved the waiting frame's size: allocate it and let reading resume."""
        self.waiting = False
        head = memoryview(self._head)
        self._allocate(_SIZE.unpack_from(head)[0], head[4:])
        self._head = b""
        if self._on_granted is not None:
            self._on_granted()

    def close(self) -> None:
        """The connection is gone: give back what this reader reserved."""
        if self.waiting:
            self._budget.cancel(self)
            self.waiting = False
        elif self._frame is not None:
            self._frame = self._frame_mv = None
            self._budget.release(self._size)
        self._head = b""

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytearray]:
        """The frames `data` completes (copies it into `buffer()` piece by piece); stops early when
        a frame is refused or waits for its reservation."""
        frames: list[bytearray] = []
        data = memoryview(data)
        while data and self.refused is None and not self.waiting:
            buf = self.buffer()
            n = min(len(buf), len(data))
            buf[:n] = data[:n]
            data = data[n:]
            frames += self.received(n)
        return frames

    def _start_frame(self, size: int, first: memoryview) -> bool:
        """A frame of `size` bytes whose first bytes are `first`: reserve and allocate it, or wait."""
        if self.waiting or not self._budget.reserve(self, size):
            self.waiting = True
            return False
        self._allocate(size, first)
        return True

    def _allocate(self, size: int, first: memoryview) -> None:
        frame = bytearray(max(min(size, FRAME_PREALLOC_BYTES), len(first)))
        frame[: len(first)] = first
        self._frame, self._frame_mv = frame, memoryview(frame)
        self._size, self._got = size, len(first)

    def _grow(self) -> None:
        """The frame's buffer is full and the frame is not: double it (up to the frame's size)."""
        frame = bytearray(min(self._size, 2 * len(self._frame_mv)))
        frame[: self._got] = self._frame_mv[: self._got]
        self._frame, self._frame_mv = frame, memoryview(frame)
