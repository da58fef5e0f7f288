"""A software RNIC over TCP, for hosts without RDMA hardware (what siw does in the kernel).

Each queue pair is one TCP connection carrying 48-byte work-request frames (plus WRITE/SEND
payloads). The target side executes one-sided operations on its registered regions directly in
an engine thread: a WRITE payload is received straight into the region's mapping, a READ is sent
straight out of it, atomics use the same 64-bit atomics as local code, so a broker that reserves
space in its own mapping stays coherent with remote FETCH_AND_ADDs. No request handling above the
engine runs for them. Responses come back in order (RC semantics), so the initiator matches them
to its posted work requests with a FIFO.

The connecting side runs no thread: its completion queue's poll/wait (tcp_cq.py) drives the
connection (responses, incoming SENDs, and any one-sided operation the peer targets at it).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import selectors
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable

from rdmalog.rdma.transport._atomic64 import compare_swap, fetch_add
from rdmalog.rdma.transport.interface import (
    MAX_SEND_BYTES,
    Access,
    Opcode,
    RemoteRegion,
    RetiredKeys,
    Status,
    TransportError,
    WorkCompletion,
    accept_setup,
    new_rkey,
    recv_setup,
    send_setup,
)
from rdmalog.rdma.transport.tcp_cq import TcpCQ, _spin_then_wait

log = logging.getLogger(__name__)

ADDR_SHIFT = 32
SETUP_LIMIT = 4096  # bytes of a connection-setup line
FRAME = struct.Struct("<BBHIQQIIQQ")  # op, status, flags, rkey, wr_id, addr, length, imm, a, b
HDR = FRAME.size
OP_WRITE, OP_WRITE_IMM, OP_READ, OP_FAA, OP_CAS, OP_SEND, OP_DISCONNECT = range(1, 8)
RESP = 0x80
_WC_OP = {
    OP_WRITE: Opcode.WRITE,
    OP_WRITE_IMM: Opcode.WRITE,
    OP_READ: Opcode.READ,
    OP_FAA: Opcode.FETCH_AND_ADD,
    OP_CAS: Opcode.CMP_AND_SWAP,
    OP_SEND: Opcode.SEND,
}
# Arrivals kept for receives not posted yet, per queue pair: far above what a client or the
# broker keeps in flight, it bounds what a peer flooding a queue pair can make its owner hold.
RNR_BACKLOG = 4096
_ids = itertools.count(1)
_RW, _RR, _RA = int(Access.REMOTE_WRITE), int(Access.REMOTE_READ), int(Access.REMOTE_ATOMIC)
_SYNC = object()  # marks a read_now request: its result is returned, not queued


def _consume(bufs, n: int) -> None:
    """Drop the first n bytes of a list (or deque) of buffers just sent."""
    while n and n >= len(bufs[0]):
        n -= len(bufs[0])
        del bufs[0]
    if n:
        bufs[0] = memoryview(bufs[0])[n:]


class _Either:
    """`rkey in` either of two containers."""

    def __init__(self, a, b):
        self.a, self.b = a, b

    def __contains__(self, rkey: int) -> bool:
        return rkey in self.a or rkey in self.b


class TcpMR:
    def __init__(self, dev: TcpDevice, rkey: int, buf, access: Access, owner=None):
        self.device = dev
        self.rkey = self.lkey = rkey
        self.buf = memoryview(buf).cast("B")
        self.length = len(self.buf)
        self.addr = rkey << ADDR_SHIFT
        self.access = access
        self.acc = int(access)  # what the engine tests: IntFlag arithmetic costs microseconds
        self._owner = owner

    def remote(self) -> RemoteRegion:
        return RemoteRegion(self.addr, self.rkey, self.length)

    def deregister(self) -> None:
        self.device._withdraw(self.rkey)
        self.rkey = 0


class TcpWindow:
    """A memory window over part of a region, reachable only through the queue pair it was bound
    on; the engine checks every access against it (see `TcpQP._target`)."""

    def __init__(self, qp: TcpQP, mr: TcpMR, start: int, end: int, access: Access, rkey: int):
        self.qp, self.mr, self.access, self.rkey = qp, mr, access, rkey
        self.acc = int(access)
        self.buf, self.length = mr.buf, mr.length
        self.start, self.end = start, end
        # What the engine can do beyond an RNIC, since it executes the peer's atomics itself:
        # `on_atomic(old, new)` is called after each atomic through this window, and a window
        # with `reservations` (a list) admits a WRITE only inside one of its (start, end)
        # ranges, which the owner adds with `reserve` (e.g. from another window's on_atomic).
        self.on_atomic: Callable[[int, int], None] | None = None
        self.reservations: list[tuple[int, int]] | None = None
        self._handed: list[tuple[int, int]] = []  # notified ranges above start: not writable

    def remote(self) -> RemoteRegion:
        return RemoteRegion(self.rkey << ADDR_SHIFT, self.rkey, self.length)

    def narrow(self, start: int) -> None:
        self.start = max(self.start, min(start, self.end))
        for ranges in (self.reservations, self._handed):
            if ranges:
                ranges[:] = [r for r in ranges if r[1] > self.start]

    def hand_over(self, start: int, end: int) -> None:
        """A WRITE_WITH_IMM put [start, end) here: its bytes are the target's from now on (no
        later WRITE of the queue pair may change them while the target validates them)."""
        self._handed.append((start, end))

    def reserve(self, start: int, end: int) -> None:
        """Admit WRITEs to [start, end) (within the window) until the start moves past it."""
        start, end = max(start, self.start), min(end, self.end)
        if start < end and self.reservations is not None:
            self.reservations.append((start, end))

    def admits(self, off: int, length: int) -> bool:
        end = off + length
        if off < self.start or end > self.end or length < 0:
            return False
        for a, b in self._handed:  # (loops, not any(): this runs for every READ and WRITE)
            if a < end and off < b:
                return False
        res = self.reservations
        if res is None:
            return True
        for a, b in res:
            if a <= off and end <= b:
                return True
        return False

    def invalidate(self) -> None:
        if self.rkey:
            self.qp.device._withdraw(self.rkey)
            self.rkey = 0


class TcpQP:
    def __init__(self, dev: TcpDevice, sock: socket.socket, send_cq: TcpCQ, recv_cq: TcpCQ):
        self.device = dev
        self.qp_num = next(_ids)
        self.sock = sock
        self.send_cq, self.recv_cq = send_cq, recv_cq
        self.closed = False
        self.peer_qp_num = 0
        self._send_lock = threading.Lock()
        self._recv_lock = threading.Lock()  # one reader of the socket at a time
        self._pending: deque[tuple] = deque()  # our requests awaiting responses, in order
        self._recvs: deque[tuple[int, TcpMR, int, int]] = deque()
        self._rnr: deque[tuple] = deque()
        self._hdr = bytearray(HDR)
        self._scratch = bytearray(64 * 1024)
        self._hdr_view = memoryview(self._hdr)
        self._expect(self._hdr_view, self._frame)
        self._sync_status: Status | None = None
        self._fatal: str | None = None  # why a peer's access puts this queue pair in error
        self.max_outstanding = 4096
        self._engine_served = False  # set once the engine executes what arrives
        self._out: deque = deque()  # (engine-served) buffers the socket had no room for yet
        self._writing = False  # the engine waits for room to send them
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    # -- sending -----------------------------------------------------------------------------------
    def _send(self, op, status, rkey, wr_id, addr, length, imm, a, b, payload=None) -> None:
        hdr = FRAME.pack(op, status, 0, rkey, wr_id, addr, length, imm, a, b)
        with self._send_lock:
            if payload is None or len(payload) == 0:
                if not self._engine_served:  # a client's own thread may wait for its peer
                    self.sock.sendall(hdr)
                    return
                bufs = [hdr]
            else:
                bufs = [hdr, payload]
                if not self._engine_served:
                    while bufs:
                        _consume(bufs, self.sock.sendmsg(bufs))
                    return
            if not self._out:  # the common case: the socket takes it all at once
                try:
                    n = self.sock.sendmsg(bufs, (), socket.MSG_DONTWAIT)
                except BlockingIOError:
                    n = 0
                _consume(bufs, n)
                if not bufs:
                    return
            self._out.extend(bufs)
            self._flush()

    # The engine never waits for a peer to make room: what its socket does not take waits in the
    # queue pair's outbox, and the engine takes no more of that peer's frames until it is out
    # (an RNIC whose send queue is full stops executing that queue pair's requests too).
    def _flush(self) -> None:
        """Send what the outbox holds as far as the socket takes it now (under the send lock);
        the engine watches for room while something is left."""
        out = self._out
        while out:
            try:
                n = self.sock.sendmsg(list(itertools.islice(out, 64)), (), socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
            _consume(out, n)
        if bool(out) != self._writing:
            self._writing = bool(out)
            self.device._watch(self, self._writing)

    def _drain(self) -> None:
        """The engine saw room in the socket: send what waits."""
        try:
            with self._send_lock:
                self._flush()
        except OSError:
            self._broken()

    def _post(self, entry: tuple, op, rkey, addr, length, imm, a, b, payload=None) -> None:
        if self.closed:  # a QP in the error state flushes what is posted to it
            if entry[0] is _SYNC:
                self._sync_status = Status.WR_FLUSH_ERR
            else:
                self._fail(entry[0], _WC_OP[entry[1]], Status.WR_FLUSH_ERR)
            return
        if len(self._pending) >= 256 and self not in self.device._served:
            # Nobody else reads a connecting QP's socket: collect finished responses here.
            self._pump(block=False)
            while len(self._pending) >= self.max_outstanding and not self.closed:
                self._pump(block=True, timeout=1.0)
        if len(self._pending) >= self.max_outstanding:
            raise TransportError("send queue full")
        self._pending.append(entry)
        try:
            self._send(op, 0, rkey, 0, addr, length, imm, a, b, payload)
        except OSError:
            self._broken()  # flushes the entry just queued with the rest

    def _fail(self, wr_id: int, op: Opcode, status: Status) -> None:
        self.send_cq._push_local(WorkCompletion(wr_id, status, op, 0, None, self.qp_num))

    @staticmethod
    def _local_ok(mr: TcpMR, offset: int, length: int) -> bool:
        return mr.rkey != 0 and 0 <= offset and 0 <= length and offset + length <= mr.length

    def post_write(self, wr_id, mr, offset, length, remote_addr, rkey, imm=None, signaled=True):
        if not self._local_ok(mr, offset, length):
            return self._fail(wr_id, Opcode.WRITE, Status.LOC_PROT_ERR)
        op = OP_WRITE if imm is None else OP_WRITE_IMM
        entry = (wr_id, OP_WRITE, None, 0, length, signaled)
        payload = mr.buf[offset : offset + length]
        self._post(entry, op, rkey, remote_addr, length, (imm or 0) & 0xFFFFFFFF, 0, 0, payload)

    def post_read(self, wr_id, mr, offset, length, remote_addr, rkey, signaled=True):
        if not self._local_ok(mr, offset, length) or not mr.access & Access.LOCAL_WRITE:
            return self._fail(wr_id, Opcode.READ, Status.LOC_PROT_ERR)
        self._post(
            (wr_id, OP_READ, mr, offset, length, signaled),
            OP_READ,
            rkey,
            remote_addr,
            length,
            0,
            0,
            0,
        )

    def read_now(self, mr, offset, length, remote_addr, rkey) -> Status:
        """A READ whose completion is returned instead of queued (the consumer's fast path)."""
        if not self._local_ok(mr, offset, length):
            return Status.LOC_PROT_ERR
        self._sync_status = None
        self._post(
            (_SYNC, OP_READ, mr, offset, length, False), OP_READ, rkey, remote_addr, length, 0, 0, 0
        )
        deadline = time.monotonic() + 10.0
        while self._sync_status is None:
            if self.closed or time.monotonic() > deadline:
                return Status.RETRY_EXC_ERR
            self._pump(block=True, timeout=1.0)
        return self._sync_status

    def read_plan(self, remote_addr: int, rkey: int) -> None:
        return None  # no shared memory here: every READ is the engine's

    def map_remote(self, remote_addr: int, rkey: int, length: int) -> None:
        return None  # no shared memory here: every look is a READ

    def post_fetch_add(self, wr_id, mr, offset, remote_addr, rkey, add):
        if not self._local_ok(mr, offset, 8) or not mr.access & Access.LOCAL_WRITE:
            return self._fail(wr_id, Opcode.FETCH_AND_ADD, Status.LOC_PROT_ERR)
        add &= 0xFFFFFFFFFFFFFFFF
        self._post((wr_id, OP_FAA, mr, offset, 8, True), OP_FAA, rkey, remote_addr, 8, 0, add, 0)

    def post_cmp_swap(self, wr_id, mr, offset, remote_addr, rkey, compare, swap):
        if not self._local_ok(mr, offset, 8) or not mr.access & Access.LOCAL_WRITE:
            return self._fail(wr_id, Opcode.CMP_AND_SWAP, Status.LOC_PROT_ERR)
        entry = (wr_id, OP_CAS, mr, offset, 8, True)
        self._post(entry, OP_CAS, rkey, remote_addr, 8, 0, compare, swap)

    def post_send(self, wr_id, mr, offset, length, signaled=True):
        if not self._local_ok(mr, offset, length):
            return self._fail(wr_id, Opcode.SEND, Status.LOC_PROT_ERR)
        if length > MAX_SEND_BYTES:
            return self._fail(wr_id, Opcode.SEND, Status.LOC_LEN_ERR)
        entry = (wr_id, OP_SEND, None, 0, length, signaled)
        payload = bytes(mr.buf[offset : offset + length])  # taken at post time (it may wait)
        self._post(entry, OP_SEND, 0, 0, length, 0, 0, 0, payload)

    def post_recv(self, wr_id, mr, offset, length):
        if self.closed:
            raise TransportError("queue pair is closed")
        with self._recv_lock:
            self._recvs.append((wr_id, mr, offset, length))
            while self._rnr and self._recvs:
                self._deliver(*self._rnr.popleft())

    # -- receiving ---------------------------------------------------------------------------------
    # Frames are taken in steps (a header, then its payload), each as far as its bytes have
    # arrived, never waiting for more: the engine serves every queue pair of the process, so a
    # peer that stops mid-frame (a WRITE whose payload never comes) must hold up only itself.
    def _expect(self, view: memoryview, then: Callable[[], None]) -> None:
        """The next `len(view)` bytes of the stream go into view; then `then()` runs."""
        self._rx_view, self._rx_then = view, then

    def _pump(self, block: bool, timeout: float | None = None) -> None:
        """Process every frame already arrived (waiting up to `timeout` for one if block)."""
        if self.closed or not self._recv_lock.acquire(blocking=block):
            return
        try:
            if block and not _spin_then_wait([self.sock], timeout):
                return
            while not self._out and self._serve_one():  # none while answers wait (see _flush)
                pass
        except OSError:  # the peer closed or reset the connection
            self._broken()
        except Exception as e:  # a frame this side cannot take: the peer's bug (or malice)
            log.warning(
                "rdma tcp: queue pair %d closed: bad frame from its peer: %r", self.qp_num, e
            )
            self._broken()
        finally:
            self._recv_lock.release()

    def _serve_one(self) -> bool:
        """Take what has arrived of the current step; True once it completed, False if its bytes
        are not all there yet."""
        view = self._rx_view
        while len(view):
            try:
                n = self.sock.recv_into(view, len(view), socket.MSG_DONTWAIT)
            except BlockingIOError:
                self._rx_view = view
                return False
            if n == 0:
                raise ConnectionError("peer closed")
            view = view[n:]
        then = self._rx_then
        self._rx_view, self._rx_then = self._hdr_view, self._frame  # unless `then` expects more
        then()
        return True

    def _frame(self) -> None:
        """A frame's header arrived: execute it, or expect its payload first."""
        op, status, _, rkey, wr_id, addr, length, imm, a, b = FRAME.unpack(self._hdr)
        if op & RESP:
            self._response(op & 0x7F, status, length, a)
        elif op in (OP_WRITE, OP_WRITE_IMM):
            done = functools.partial(self._write_done, op, wr_id, imm, length)
            if length == 0:  # a zero-length WRITE touches no memory: no key check (IB spec)
                done(Status.SUCCESS)
                return
            view = self._target(rkey, addr, length, _RW, "WRITE")
            if view is not None:  # zero-copy: the payload lands in the mapping
                w = self.device._mrs.get(rkey)
                if op == OP_WRITE_IMM and type(w) is TcpWindow:
                    # Its bytes are handed over with the notification: no later WRITE of this
                    # queue pair (frames are taken in order) can change them while the target
                    # looks at them.
                    off = addr - (rkey << ADDR_SHIFT)
                    done = functools.partial(self._hand_over, w, off, off + length, done)
                self._expect(view, functools.partial(done, Status.SUCCESS))
            else:  # refused: discard the payload, keep the stream in sync
                self._discard(length, functools.partial(done, Status.REM_ACCESS_ERR))
        elif op == OP_READ:
            view = self._target(rkey, addr, length, _RR, "READ")
            st = Status.REM_ACCESS_ERR if view is None else Status.SUCCESS
            self._send(op | RESP, st, 0, wr_id, 0, 0 if view is None else length, 0, 0, 0, view)
            self._error_if_fatal()
        elif op in (OP_FAA, OP_CAS):
            st, old = self._exec_atomic(op, rkey, addr, a, b)
            self._send(op | RESP, st, 0, wr_id, 0, 0, 0, old, 0)
            self._error_if_fatal()
        elif op == OP_SEND:
            if length > MAX_SEND_BYTES:  # every transport refuses such a SEND at post time
                raise ValueError(f"a SEND of {length} bytes")
            data = bytearray(length)
            self._expect(memoryview(data), functools.partial(self._send_arrived, wr_id, data))
        elif op == OP_DISCONNECT:
            raise ConnectionError("peer disconnected")
        else:
            raise ValueError(f"unknown frame op {op}")

    def _write_done(self, op: int, wr_id: int, imm: int, length: int, st: Status) -> None:
        if op == OP_WRITE_IMM and st == Status.SUCCESS:
            st = self._deliver(OP_WRITE_IMM, imm, length, None)
        self._send(op | RESP, st, 0, wr_id, 0, 0, 0, 0, 0)
        self._error_if_fatal()

    @staticmethod
    def _hand_over(w: TcpWindow, start: int, end: int, done: Callable, st: Status) -> None:
        w.hand_over(start, end)
        done(st)

    def _error_if_fatal(self) -> None:
        """After answering a fatal access error: this queue pair goes to the error state (its
        connection closes), as an RNIC's does on a remote access error."""
        if self._fatal is not None:
            log.warning("rdma tcp: queue pair %d closed: %s", self.qp_num, self._fatal)
            raise ConnectionAbortedError(self._fatal)  # _pump closes the queue pair

    def _discard(self, left: int, then: Callable[[], None]) -> None:
        k = min(left, len(self._scratch))
        rest = functools.partial(self._discard, left - k, then) if left > k else then
        self._expect(memoryview(self._scratch)[:k], rest)

    def _send_arrived(self, wr_id: int, data: bytearray) -> None:
        st = self._deliver(OP_SEND, 0, len(data), data)
        self._send(OP_SEND | RESP, st, 0, wr_id, 0, 0, 0, 0, 0)

    def _target(self, rkey: int, addr: int, length: int, need: int, what: str) -> memoryview | None:
        """The target bytes of a one-sided operation, or None: a remote access error. A key never
        handed out (a guess) and any access a window does not allow are fatal (`_fatal`); a key
        withdrawn since, or a plain region's bounds or access flags, are not."""
        mr = self.device._mrs.get(rkey)
        off = addr - (rkey << ADDR_SHIFT)
        if mr is None:
            if rkey not in self.device._retired:
                self._fatal = f"{what} with rkey {rkey:#x}, which was never handed out"
            return None
        if type(mr) is TcpWindow:
            if not mr.mr.rkey:  # its region was withdrawn: so is the window
                mr.invalidate()
                return None
            if mr.qp is not self or (mr.acc & need) != need:
                self._fatal = f"{what} through a window bound to another queue pair or access"
                return None
            if not mr.admits(off, length):
                self._fatal = (
                    f"{what} of [{off}, {off + length}) outside its window [{mr.start}, {mr.end})"
                    + ("" if mr.reservations is None else f" and reservations {mr.reservations}")
                )
                return None
        elif (mr.acc & need) != need or off < 0 or off + length > mr.length:
            return None
        return mr.buf[off : off + length]

    def _exec_atomic(self, op: int, rkey: int, addr: int, a: int, b: int) -> tuple[Status, int]:
        if self._target(rkey, addr, 8, _RA, "atomic") is None:
            return Status.REM_ACCESS_ERR, 0
        mr = self.device._mrs.get(rkey)
        if mr is None:  # withdrawn just now (another thread)
            return Status.REM_ACCESS_ERR, 0
        off = addr - (rkey << ADDR_SHIFT)
        if addr % 8:
            return Status.REM_INV_REQ_ERR, 0
        try:
            if op == OP_FAA:
                old = fetch_add(mr.buf, off, a)
                new = (old + a) & 0xFFFFFFFFFFFFFFFF
            else:
                old = compare_swap(mr.buf, off, a, b)
                new = b if old == a else old
        except ValueError:  # the mapping itself is misaligned
            return Status.REM_INV_REQ_ERR, 0
        if type(mr) is TcpWindow and mr.on_atomic is not None:
            mr.on_atomic(old, new)
        return Status.SUCCESS, old

    def _response(self, op: int, status: int, length: int, value: int) -> None:
        if not self._pending:
            raise ValueError("a response without a request")
        wr_id, kind, mr, off, ln, signaled = self._pending[0]  # popped once complete: a
        st = Status(status)  # connection lost before then flushes it with the rest
        if kind == OP_READ and length:
            if length != ln:
                raise ValueError(f"a READ of {ln} bytes answered with {length}")
            self._expect(mr.buf[off : off + ln], functools.partial(self._completed, st))
            return
        if kind in (OP_FAA, OP_CAS) and st == Status.SUCCESS:
            struct.pack_into("<Q", mr.buf, off, value)
        self._completed(st)

    def _completed(self, st: Status) -> None:
        """The oldest request's response is complete: its completion (if due)."""
        wr_id, kind, _, _, ln, signaled = self._pending.popleft()
        if wr_id is _SYNC:
            self._sync_status = st
        elif signaled or st != Status.SUCCESS:
            n = ln if st == Status.SUCCESS else 0
            self.send_cq._push_local(WorkCompletion(wr_id, st, _WC_OP[kind], n, None, self.qp_num))

    def _deliver(self, kind: int, imm: int, length: int, data) -> Status:
        """Complete a posted receive with an arrival, or keep it until one is posted (the
        sender's RNR retries, without their traffic); past RNR_BACKLOG kept, the sender's
        operation fails as an RNIC's does once its RNR retries run out."""
        if not self._recvs:
            if len(self._rnr) >= RNR_BACKLOG:
                return Status.RNR_RETRY_EXC_ERR
            self._rnr.append((kind, imm, length, data))
            return Status.SUCCESS
        wr_id, mr, off, ln = self._recvs.popleft()
        if kind == OP_WRITE_IMM:
            wc = WorkCompletion(
                wr_id, Status.SUCCESS, Opcode.RECV_RDMA_WITH_IMM, length, imm, self.qp_num
            )
        elif length > ln:
            wc = WorkCompletion(wr_id, Status.LOC_LEN_ERR, Opcode.RECV, 0, None, self.qp_num)
        else:
            mr.buf[off : off + length] = data
            wc = WorkCompletion(wr_id, Status.SUCCESS, Opcode.RECV, length, None, self.qp_num)
        self.recv_cq._push_local(wc)
        return Status.SUCCESS

    def _broken(self) -> None:
        """The connection is gone: flush everything outstanding with error completions."""
        if self.closed:
            return
        self.closed = True
        self.device._unserve(self)
        self.device._drop_windows(self)
        while self._pending:
            wr_id, kind, *_ = self._pending.popleft()
            if wr_id is _SYNC:
                self._sync_status = Status.WR_FLUSH_ERR
            else:
                self._fail(wr_id, _WC_OP[kind], Status.WR_FLUSH_ERR)
        while self._recvs:
            wr_id = self._recvs.popleft()[0]
            self.recv_cq._push_local(
                WorkCompletion(wr_id, Status.WR_FLUSH_ERR, Opcode.RECV, 0, None, self.qp_num)
            )
        try:
            self.sock.close()
        except OSError:
            pass

    def peer_alive(self) -> bool:
        return not self.closed

    def bind_window(self, mr: TcpMR, start: int, end: int, access: Access) -> TcpWindow:
        if not 0 <= start <= end <= mr.length or mr.rkey == 0:
            raise TransportError(f"window [{start}, {end}) outside its region")
        with self.device._lock:
            w = TcpWindow(self, mr, start, end, access, new_rkey(self.device._taken()))
            self.device._mrs[w.rkey] = w
        return w

    def close(self) -> None:
        if not self.closed:
            try:
                self._send(OP_DISCONNECT, 0, 0, 0, 0, 0, 0, 0, 0)
            except OSError:
                pass
            self._broken()
        for cq in {self.send_cq, self.recv_cq}:
            if self in cq._pumped:
                cq._pumped.remove(self)


class TcpListener:
    def __init__(self, dev: TcpDevice, host: str, port: int):
        self.device = dev
        self.sock = socket.create_server((host, port))
        host, port = self.sock.getsockname()[:2]
        self.address = f"{host}:{port}"

    def accept(self, send_cq, recv_cq=None, timeout=None) -> TcpQP:
        conn, peer = accept_setup(self.sock, timeout, SETUP_LIMIT)
        conn.settimeout(None)
        qp = TcpQP(self.device, conn, send_cq, recv_cq or send_cq)
        qp.peer_qp_num = peer["qp"]
        send_setup(conn, {"qp": qp.qp_num})
        self.device._serve(qp)  # from here on the engine executes what arrives
        return qp

    def close(self) -> None:
        self.sock.close()


class TcpDevice:
    """This process's software RNIC: registered regions plus the engine thread serving them."""

    name = "tcp"

    def __init__(self):
        self._mrs: dict[int, TcpMR | TcpWindow] = {}  # by rkey: regions and windows
        self._retired = RetiredKeys()
        self._sel = selectors.DefaultSelector()
        self._engine: threading.Thread | None = None
        self._stop = False
        self._served: set[TcpQP] = set()
        self._lock = threading.Lock()

    def alloc_mr(self, length: int, access: Access) -> TcpMR:
        import mmap

        m = mmap.mmap(-1, max(length, 1))
        return self.reg_mr(memoryview(m)[:length], access, owner=m)

    def reg_mr(
        self, buf, access: Access, path: str | None = None, file_offset: int = 0, owner=None
    ) -> TcpMR:
        with self._lock:
            mr = TcpMR(self, new_rkey(self._taken()), buf, access, owner)
            self._mrs[mr.rkey] = mr
        return mr

    def _taken(self):
        """Keys not to hand out: live ones and those withdrawn recently (under the lock)."""
        return _Either(self._mrs, self._retired)

    def _drop_windows(self, qp: TcpQP) -> None:
        """A queue pair is gone: so are the windows bound on it."""
        for w in [w for w in list(self._mrs.values()) if type(w) is TcpWindow and w.qp is qp]:
            w.invalidate()

    def _withdraw(self, rkey: int) -> None:
        with self._lock:
            if self._mrs.pop(rkey, None) is not None:
                self._retired.add(rkey)

    def create_cq(self, depth: int = 1024) -> TcpCQ:
        return TcpCQ(self)

    def listen(self, host: str = "127.0.0.1", port: int = 0) -> TcpListener:
        return TcpListener(self, host, port)

    def connect(
        self, address: str, send_cq: TcpCQ, recv_cq: TcpCQ | None = None, timeout=5.0
    ) -> TcpQP:
        host, _, port = address.rpartition(":")
        try:
            sock = socket.create_connection((host, int(port)), timeout=timeout)
        except OSError as e:
            raise TransportError(f"cannot connect to {address}: {e}") from e
        qp = TcpQP(self, sock, send_cq, recv_cq or send_cq)
        send_setup(sock, {"qp": qp.qp_num})
        qp.peer_qp_num = recv_setup(sock, SETUP_LIMIT)["qp"]
        sock.settimeout(None)
        for cq in {send_cq, qp.recv_cq}:
            cq._pumped.append(qp)
        return qp

    # -- the engine ------------------------------------------------------------------------------
    def _serve(self, qp: TcpQP) -> None:
        with self._lock:
            self._sel.register(qp.sock, selectors.EVENT_READ, qp)
            self._served.add(qp)
            qp._engine_served = True
            if self._engine is None:
                self._engine = threading.Thread(
                    target=self._run, name="rdma-tcp-engine", daemon=True
                )
                self._engine.start()

    def _unserve(self, qp: TcpQP) -> None:
        with self._lock:
            try:
                self._served.discard(qp)
                self._sel.unregister(qp.sock)
            except (KeyError, ValueError, OSError):
                pass

    def _watch(self, qp: TcpQP, writing: bool) -> None:
        """Have the engine wait for room to send to qp (writing) or for its frames."""
        with self._lock:
            with contextlib.suppress(KeyError, ValueError, OSError):  # unserved or closed since
                self._sel.modify(
                    qp.sock, selectors.EVENT_WRITE if writing else selectors.EVENT_READ, qp
                )

    def _run(self) -> None:
        # The engine sleeps between frames (it does not poll like the initiators): polling
        # measured 12-16 us off an empty poll but cost the broker most of a core for each
        # busy-polling consumer, and would hold the GIL the broker's other threads need.
        while not self._stop:
            try:
                events = self._sel.select(timeout=0.2)
            except OSError:
                continue
            for key, mask in events:
                if mask & selectors.EVENT_WRITE:
                    key.data._drain()
                key.data._pump(block=False)

    def close(self) -> None:
        if self._stop:  # closed already (a client closed twice)
            return
        self._stop = True
        for key in list(self._sel.get_map().values()):
            key.data.close()
        if self._engine is not None:
            self._engine.join(timeout=2)
        self._sel.close()
