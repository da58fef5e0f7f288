"""The verbs-shaped transport interface every datapath is written against.

Three implementations: `verbs` (pyverbs, RC QPs, rdmacm), `shm` (same host, shared file mappings)
and `tcp` (a software RNIC). Names and numbers follow libibverbs so the `verbs` mapping stays thin:
a region is registered with access flags and gets an rkey, a queue pair posts work requests whose
outcome arrives as work completions on a completion queue. One-sided operations address the peer
by (remote address, rkey); an out-of-bounds or wrong-key access is an error completion, never a
crash of either side.
"""

from __future__ import annotations

import enum
import json
import secrets
import select
import socket
from collections import deque
from dataclasses import dataclass
from typing import Protocol

MAX_SEND_BYTES = 256  # a SEND's payload at most, on every transport (verbs sends it inline)


def wait_readable(fds: list, timeout: float | None) -> bool:
    """Whether one of `fds` (sockets or descriptors) becomes readable - data, EOF or an error -
    within `timeout` seconds (None: no limit). poll(2), not select(2): select refuses
    descriptors above 1023, which a process with many open files (a broker's own clients, a
    Spark executor) hands out."""
    p = select.poll()
    for fd in fds:
        p.register(fd, select.POLLIN)
    return bool(p.poll(None if timeout is None else max(0.0, timeout) * 1000))


class Access(enum.IntFlag):
    """ibv_access_flags."""

    LOCAL_WRITE = 1
    REMOTE_WRITE = 2
    REMOTE_READ = 4
    REMOTE_ATOMIC = 8


class Opcode(enum.IntEnum):
    """ibv_wc_opcode (receive-side values have bit 7 set, as in libibverbs)."""

    SEND = 0
    WRITE = 1
    READ = 2
    CMP_AND_SWAP = 3
    FETCH_AND_ADD = 4
    RECV = 128
    RECV_RDMA_WITH_IMM = 129
    # Work-request opcode only: a WRITE_WITH_IMM completes as WRITE at the initiator and as
    # RECV_RDMA_WITH_IMM at the target, like IBV_WR_RDMA_WRITE_WITH_IMM.
    WRITE_WITH_IMM = 64


class Status(enum.IntEnum):
    """ibv_wc_status (the software transports produce a subset; a device any of them)."""

    SUCCESS = 0
    LOC_LEN_ERR = 1
    LOC_QP_OP_ERR = 2
    LOC_EEC_OP_ERR = 3
    LOC_PROT_ERR = 4
    WR_FLUSH_ERR = 5
    MW_BIND_ERR = 6
    BAD_RESP_ERR = 7
    LOC_ACCESS_ERR = 8
    REM_INV_REQ_ERR = 9
    REM_ACCESS_ERR = 10
    REM_OP_ERR = 11
    RETRY_EXC_ERR = 12
    RNR_RETRY_EXC_ERR = 13
    LOC_RDD_VIOL_ERR = 14
    REM_INV_RD_REQ_ERR = 15
    REM_ABORT_ERR = 16
    INV_EECN_ERR = 17
    INV_EEC_STATE_ERR = 18
    FATAL_ERR = 19
    RESP_TIMEOUT_ERR = 20
    GENERAL_ERR = 21


class TransportError(Exception):
    """Setup failures (connect, register) and posting to a broken queue pair."""


ATOMIC_SIZE = 8  # atomics work on one naturally aligned 64-bit word


@dataclass(slots=True)
class WorkCompletion:
    """ibv_wc: `imm_data` is the host-order value of the 32-bit immediate (None without one)."""

    wr_id: int
    status: Status
    opcode: Opcode
    byte_len: int = 0
    imm_data: int | None = None
    qp_num: int = 0

    @property
    def ok(self) -> bool:
        return self.status == Status.SUCCESS


@dataclass(frozen=True, slots=True)
class RemoteRegion:
    """What a peer needs to address a region one-sidedly: sent over the control channel."""

    addr: int
    rkey: int
    length: int

    def to_dict(self) -> dict[str, int]:
        return {"addr": self.addr, "rkey": self.rkey, "length": self.length}

    @classmethod
    def from_dict(cls, d: dict) -> RemoteRegion:
        return cls(int(d["addr"]), int(d["rkey"]), int(d["length"]))


class MemoryRegion(Protocol):
    """A registered buffer: `buf` is the local view, (`addr`, `rkey`) name it for peers."""

    buf: memoryview
    addr: int
    rkey: int
    lkey: int
    length: int
    access: Access

    def remote(self) -> RemoteRegion: ...

    def deregister(self) -> None: ...


class MemoryWindow(Protocol):
    """A type 2 memory window (ibv_bind_mw): part of a registered region, reachable under its
    own rkey and only through the queue pair it was bound on. It is addressed as its region is
    (`remote().addr` is the region's base), but only [start, end) of it is reachable, with the
    access it was bound with. What a peer does outside it is a remote access error that moves
    the peer's queue pair to the error state (see `QueuePair.bind_window`)."""

    rkey: int
    start: int
    end: int

    def remote(self) -> RemoteRegion: ...

    def narrow(self, start: int) -> None:
        """Move the window's start up to `start` (a producer's committed position). The software
        transports do it in place; an RNIC would need a new bind (a new rkey), so `verbs` keeps
        the window it bound."""
        ...

    def invalidate(self) -> None:
        """Withdraw it (IBV_WR_LOCAL_INV): its rkey answers REM_ACCESS_ERR from now on."""
        ...


class CompletionQueue(Protocol):
    def poll(self, max_entries: int = 16) -> list[WorkCompletion]:
        """Return up to `max_entries` completions without blocking."""
        ...

    def wait(self, timeout: float | None, max_entries: int = 16) -> list[WorkCompletion]:
        """Poll, blocking up to `timeout` seconds for at least one completion."""
        ...


class QueuePair(Protocol):
    """A connected reliable queue pair. Local buffers are (MemoryRegion, offset, length)."""

    qp_num: int
    send_cq: CompletionQueue
    recv_cq: CompletionQueue

    def post_send(
        self, wr_id: int, mr: MemoryRegion, offset: int, length: int, signaled: bool = True
    ) -> None:
        """SEND a small message (at most MAX_SEND_BYTES on every transport). Its payload is taken at
        post time (inline on verbs), so the buffer may be rewritten as soon as this returns."""
        ...

    def post_recv(self, wr_id: int, mr: MemoryRegion, offset: int, length: int) -> None: ...

    def post_write(
        self,
        wr_id: int,
        mr: MemoryRegion,
        offset: int,
        length: int,
        remote_addr: int,
        rkey: int,
        imm: int | None = None,
        signaled: bool = True,
    ) -> None:
        """RDMA WRITE; with `imm` it is WRITE_WITH_IMM and consumes a receive at the target."""
        ...

    def post_read(
        self,
        wr_id: int,
        mr: MemoryRegion,
        offset: int,
        length: int,
        remote_addr: int,
        rkey: int,
        signaled: bool = True,
    ) -> None: ...

    def read_now(
        self, mr: MemoryRegion, offset: int, length: int, remote_addr: int, rkey: int
    ) -> Status:
        """A READ whose completion status is returned rather than queued (the native consumer's
        fast path). verbs posts a READ and waits for its completion on the send CQ (which no one
        else may poll meanwhile); shm copies at once; tcp asks the peer's engine and waits. With
        no completion within 10 s: RETRY_EXC_ERR."""
        ...

    def read_plan(self, remote_addr: int, rkey: int) -> tuple | None:
        """Where memory is shared (shm), for a region READ before: what one C call needs to READ
        it again with every check a READ makes (client/_batch.c's read_take: the peer's region
        table, the entry, rkey, the mapping, this queue pair's number, remote_addr's offset in
        the mapping). None elsewhere, or while the region is not mapped (READ it first)."""
        ...

    def map_remote(self, remote_addr: int, rkey: int, length: int) -> memoryview | None:
        """A live read-only view of the peer's region, where memory is shared (shm): reading it
        is a READ that completes at once. None where it is not (verbs, tcp): READ instead."""
        ...

    def post_fetch_add(
        self, wr_id: int, mr: MemoryRegion, offset: int, remote_addr: int, rkey: int, add: int
    ) -> None:
        """The old 64-bit value lands in mr at offset (host byte order)."""
        ...

    def post_cmp_swap(
        self,
        wr_id: int,
        mr: MemoryRegion,
        offset: int,
        remote_addr: int,
        rkey: int,
        compare: int,
        swap: int,
    ) -> None: ...

    def bind_window(self, mr: MemoryRegion, start: int, end: int, access: Access) -> MemoryWindow:
        """Bind a window over [start, end) of `mr` (registered by this side) for this queue
        pair's peer: only this queue pair reaches it. On `tcp` the engine enforces it; on `shm`
        the peer's transport does (the initiator executes one-sided verbs there); on `verbs` the
        RNIC does (a type 2 MW; the region needs IBV_ACCESS_MW_BIND)."""
        ...

    def close(self) -> None: ...


class Device(Protocol):
    """One endpoint of a transport in this process: a protection domain plus connection setup."""

    name: str

    def alloc_mr(self, length: int, access: Access) -> MemoryRegion:
        """Allocate and register memory the peer can address (shm backs it with a shared file)."""
        ...

    def reg_mr(
        self, buf, access: Access, path: str | None = None, file_offset: int = 0
    ) -> MemoryRegion:
        """Register an existing buffer; `path`/`file_offset` name its file when it maps one."""
        ...

    def create_cq(self, depth: int = 1024) -> CompletionQueue: ...

    def listen(self, host: str = "127.0.0.1", port: int = 0) -> Listener: ...

    def connect(
        self, address: str, send_cq: CompletionQueue, recv_cq: CompletionQueue | None = None
    ) -> QueuePair: ...

    def close(self) -> None: ...


class Listener(Protocol):
    address: str

    def accept(
        self,
        send_cq: CompletionQueue,
        recv_cq: CompletionQueue | None = None,
        timeout: float | None = None,
    ) -> QueuePair: ...

    def close(self) -> None: ...


def new_rkey(taken) -> int:
    """A random, nonzero 32-bit key that `taken` (live and recently retired keys) does not hold:
    a peer cannot guess another's key, and a key a peer may still hold is not handed out again."""
    while True:
        rkey = secrets.randbits(32)
        if rkey and rkey not in taken:
            return rkey


class RetiredKeys:
    """The last `limit` keys withdrawn: a peer naming one of them held it legitimately (its access
    was revoked since: an error completion), while a key never handed out is a guess (the queue
    pair goes to the error state). Bounded, so a long-lived device does not grow with every key."""

    def __init__(self, limit: int = 1 << 16):
        self._order: deque[int] = deque()
        self._set: set[int] = set()
        self.limit = limit

    def add(self, rkey: int) -> None:
        if rkey in self._set:
            return
        self._order.append(rkey)
        self._set.add(rkey)
        while len(self._order) > self.limit:
            self._set.discard(self._order.popleft())

    def __contains__(self, rkey: int) -> bool:
        return rkey in self._set


def check_bounds(length_of_region: int, offset: int, length: int) -> bool:
    """True when [offset, offset+length) lies inside a region of `length_of_region` bytes."""
    return 0 <= offset and 0 <= length and offset + length <= length_of_region


# -- connection setup of the software transports: one JSON line each way over a stream socket --
def send_setup(sock: socket.socket, message: dict) -> None:
    sock.sendall(json.dumps(message).encode() + b"\n")


def recv_setup(sock: socket.socket, limit: int) -> dict:
    """The peer's setup line, read byte by byte so that nothing after it is consumed (the socket
    carries the transport's own traffic next); TransportError on close or past `limit` bytes."""
    data = b""
    while not data.endswith(b"\n"):
        c = sock.recv(1)
        if not c:
            raise TransportError("peer closed during connection setup")
        data += c
        if len(data) > limit:
            raise TransportError("oversized connection request")
    return json.loads(data)


def accept_setup(
    listener: socket.socket, timeout: float | None, limit: int
) -> tuple[socket.socket, dict]:
    """Accept one connection request and read its setup line (at most 5 s)."""
    listener.settimeout(timeout)
    try:
        conn, _ = listener.accept()
    except TimeoutError as e:
        raise TransportError("no connection request") from e
    conn.settimeout(5.0)
    return conn, recv_setup(conn, limit)
