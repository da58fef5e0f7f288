"""Small responses with file slices written in one system call: the slices read (pread) and
written with the frame's memory parts in one writev, instead of cork, write, sendfile, write,
uncork (five system calls). A follower's fetch at the log end is such a response, twice on every
acks=all produce's path with replication factor 3; a consumer's at the log end too."""

from __future__ import annotations

import asyncio
import os

# larger responses keep sendfile (a copy of this much costs less than 4 calls)
WRITEV_MAX = 16 * 1024


def slice_fd(sl) -> int:
    """The file descriptor a log slice reads from."""
    fileno = getattr(sl, "fileno", None)
    if fileno is not None:
        return fileno()
    f = sl.file
    return f if isinstance(f, int) else f.fileno()


def write_small(fd: int, transport: asyncio.WriteTransport, buf: bytearray, parts: list) -> bool:
    """Write the response `buf` with its file-slice `parts` ((position in buf, slice)) on socket
    `fd` in one writev, the transport queueing what the socket does not take. False, with nothing
    written, when it is not a small response of slices with nothing queued ahead, or a slice reads
    short (the caller's sendfile path reports that); OSError from the socket goes to the caller."""
    if transport.get_write_buffer_size():
        return False
    total = len(buf)
    for _, part in parts:
        if isinstance(part, bytes | bytearray):  # a large answer's pre-encoded array
            return False
        total += max(part.length, 0)
    if total > WRITEV_MAX:
        return False
    mv = memoryview(buf)
    pieces: list = []
    pos = 0
    for at, part in parts:
        if at > pos:
            pieces.append(mv[pos:at])
            pos = at
        if part.length > 0:
            data = os.pread(slice_fd(part), part.length, part.position)
            if len(data) != part.length:
                return False
            pieces.append(data)
    if pos < len(buf):
        pieces.append(mv[pos:])
    try:
        n = os.writev(fd, pieces)
    except (BlockingIOError, InterruptedError):
        n = 0
    if n < total:  # the socket took part of it: the rest in order behind it
        transport.write(b"".join(pieces)[n:])
    return True
