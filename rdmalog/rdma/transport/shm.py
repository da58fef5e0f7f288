"""Same-host transport: regions are shared file mappings, the initiator does the DMA itself.

Layout of one device (one per process and role) in a directory under /dev/shm:

- ``mrtable``: the registered regions (rkey, length, access, file path, file offset). A peer maps
  it, maps a region's file on first use and re-checks the entry's rkey word on every operation, so
  a deregistered region answers REM_ACCESS_ERR like a revoked RNIC key.
- ``cq-N``: the receive side of a completion queue, a multi-producer ring of fixed slots. A peer's
  WRITE_WITH_IMM and SEND push a slot (imm, byte_len, inline SEND payload) after the data copy,
  so the target sees the data before the notification (release/acquire on the slot word). A slot
  claimed but unpublished for `RING_STALL_S` (its producer was killed mid-push) is skipped.
- ``owner``: flock'ed for the device's life; sweeping dead devices' directories tests it.
- ``cq-N.sock``: a datagram doorbell, rung only when the ring's owner has announced it sleeps.

One-sided READ/WRITE are memcpy into/out of the peer's mapping; FETCH_AND_ADD/CMP_AND_SWAP are
real 64-bit atomics on it (the `_atomic64` extension). A READ costs the target no CPU at all.
Connection setup (the rdmacm analogue) is a JSON handshake over a Unix stream socket, which stays
open so each side can tell when the other is gone.
"""

from __future__ import annotations

import fcntl
import itertools
import mmap
import os
import shutil
import socket
import struct
import tempfile
import threading
import time
import weakref
from collections import deque

from rdmalog.rdma.transport._atomic64 import (
    compare_swap,
    copy,
    copy_checked,
    fetch_add,
    load,
    ring_pop,
    ring_push,
    ring_take,
    ring_wait,
    store,
)
from rdmalog.rdma.transport.interface import (
    MAX_SEND_BYTES,
    Access,
    Opcode,
    RemoteRegion,
    Status,
    TransportError,
    WorkCompletion,
    accept_setup,
    recv_setup,
    send_setup,
    wait_readable,
)

MR_ENTRIES = 1024
SETUP_LIMIT = 65536  # bytes of a connection-setup line (ring and region paths)
MR_ENTRY = 256
MR_PATH_MAX = MR_ENTRY - 40
ADDR_SHIFT = 32  # region addresses are rkey << 32: unique per region, offsets up to 4 GiB

RING_HDR = 256  # reserve @0, head @64, waiting @128: separate cache lines
SLOT_HDR = 24  # seq u64, kind u32, qp_num u32, imm u32, byte_len u32
KIND_SEND, KIND_WRITE_IMM, KIND_DISCONNECT = 1, 2, 3
# A slot claimed but unpublished this long was claimed by a producer that died mid-push: the owner
# skips it (before pushers waiting on a full ring give up, `_Ring.push`'s 1 s).
RING_STALL_S = 0.5

PAGE = mmap.ALLOCATIONGRANULARITY
# plain ints on the hot path: IntFlag arithmetic costs microseconds
_RW, _RR, _RA = int(Access.REMOTE_WRITE), int(Access.REMOTE_READ), int(Access.REMOTE_ATOMIC)
_LW = int(Access.LOCAL_WRITE)
_ids = itertools.count(1)

# Enum members read on hot paths, as module constants: attribute access on an Enum class
# costs ~10x a global lookup on Python 3.11.
_SUCCESS = Status.SUCCESS
_REM_ACCESS_ERR = Status.REM_ACCESS_ERR
_WR_FLUSH_ERR = Status.WR_FLUSH_ERR
_WRITE = Opcode.WRITE
_READ = Opcode.READ
_SEND = Opcode.SEND
_RECV = Opcode.RECV
_RECV_RDMA_WITH_IMM = Opcode.RECV_RDMA_WITH_IMM
_FETCH_AND_ADD = Opcode.FETCH_AND_ADD


def _make_file(path: str, size: int) -> None:
    """Create a file of `size` bytes with its blocks allocated: a sparse file on a full tmpfs
    (Docker's /dev/shm is 64 MiB) maps fine, and its first touched page that cannot be backed
    kills the toucher with SIGBUS - a peer pushing into a ring, not just its owner."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        os.unlink(path)
        raise TransportError(f"cannot allocate {size} bytes for {path}: {e}") from e
    finally:
        os.close(fd)


def _map_file(
    path: str, offset: int, length: int, write: bool, clamp: bool = False
) -> tuple[mmap.mmap, memoryview]:
    """Map [offset, offset+length) of a file shared; returns the mapping and a view of the range.
    `clamp`: map only what the file still holds (a sealed segment is trimmed to its data)."""
    start = offset - offset % PAGE
    fd = os.open(path, os.O_RDWR if write else os.O_RDONLY)
    try:
        if clamp:
            length = max(0, min(length, os.fstat(fd).st_size - offset))
            if length == 0:
                raise ValueError("nothing left of the region's file")
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if write else 0)
        m = mmap.mmap(fd, length + offset - start, mmap.MAP_SHARED, prot, offset=start)
    finally:
        os.close(fd)
    return m, memoryview(m)[offset - start : offset - start + length]


class ShmMR:
    """A registered region of this device."""

    def __init__(self, dev: ShmDevice, idx: int, rkey: int, buf, access: Access, owned=None):
        self.device = dev
        self.index = idx
        self.rkey = self.lkey = rkey
        self.buf = memoryview(buf).cast("B")
        self.length = len(self.buf)
        self.addr = rkey << ADDR_SHIFT
        self.access = int(access)
        self._owned = owned  # the mapping alloc_mr created, closed on deregister

    def remote(self) -> RemoteRegion:
        return RemoteRegion(self.addr, self.rkey, self.length)

    def deregister(self) -> None:
        if self.rkey:
            self.device._dereg(self)
            self.rkey = 0


class _Ring:
    """A multi-producer, single-consumer ring of fixed slots in a shared file."""

    def __init__(self, path: str, nslots: int, slot_size: int, create: bool):
        self.path, self.nslots, self.slot_size = path, nslots, slot_size
        size = RING_HDR + nslots * slot_size
        if create:
            _make_file(path, size)
        self._map, self.buf = _map_file(path, 0, size, True)
        self.head = load(self.buf, 64)  # consumer-local copy of the head index
        self._stall = (-1, 0.0)  # (head, since when) of an unpublished claimed slot

    def slot_off(self, seq: int) -> int:
        return RING_HDR + (seq % self.nslots) * self.slot_size

    def push(self, kind: int, qp_num: int, imm: int, byte_len: int, payload=None, wait=1.0) -> int:
        """Claim a slot, fill it, publish it (one C call): 1 if the owner sleeps and its doorbell
        must be rung, 0 if not, -1 if the ring stayed full for `wait` seconds."""
        r = ring_push(self.buf, self.nslots, self.slot_size, kind, qp_num, imm, byte_len, payload)
        if r >= 0:
            return r
        deadline = time.monotonic() + wait
        while r < 0 and time.monotonic() < deadline:  # full: the consumer is behind (CQ overrun)
            time.sleep(0)
            r = ring_push(
                self.buf, self.nslots, self.slot_size, kind, qp_num, imm, byte_len, payload
            )
        return r

    def pop(self):
        """(kind, qp_num, imm, byte_len, payload bytes or None) of the next published slot, or
        None."""
        e = ring_pop(self.buf, self.nslots, self.slot_size, self.head)
        if e:
            self.head += 1
            return e
        if e is False and self._skip_stalled():
            return self.pop()
        return None

    def take(self, room: int) -> list | tuple:
        """Up to `room` published slots' entries (as `pop`), oldest first: one C call."""
        es = ring_take(self.buf, self.nslots, self.slot_size, self.head, room)
        if es:
            self.head += len(es)
            return es
        if es is False and self._skip_stalled():
            return self.take(room)
        return ()

    def _skip_stalled(self) -> bool:
        """The slot at the head is claimed but not published: a push under way, or its producer
        was killed mid-push. True once it has been so for RING_STALL_S and was skipped (it would
        block the ring)."""
        now = time.monotonic()
        if self._stall[0] != self.head:
            self._stall = (self.head, now)
        elif now - self._stall[1] >= RING_STALL_S:
            self.head += 1
            store(self.buf, 64, self.head)
            return True
        return False

    def stalled(self) -> bool:
        """Whether a slot is claimed at the head but not published (yet)."""
        return load(self.buf, 0) != self.head

    def ready(self) -> bool:
        return load(self.buf, self.slot_off(self.head)) == self.head + 1

    def spin(self, spin_ns: int) -> bool:
        """Spin without the GIL until the next slot is published or spin_ns pass."""
        return ring_wait(self.buf, self.nslots, self.slot_size, self.head, spin_ns)

    def close(self) -> None:
        self.buf.release()
        try:
            self._map.close()
        except BufferError:  # a view handed out is still alive; the GC closes it later
            pass


class ShmCQ:
    """Completion queue: in-process completions plus the shared ring peers notify through."""

    def __init__(self, dev: ShmDevice, depth: int, slot_size: int):
        self.device = dev
        self.id = next(_ids)
        self._local: deque[WorkCompletion] = deque()
        self.ring = _Ring(os.path.join(dev.dir, f"cq-{self.id}"), depth, slot_size, True)
        self.doorbell_path = os.path.join(dev.dir, f"cq-{self.id}.sock")
        self._bell = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._bell.bind(self.doorbell_path)
        self._bell.setblocking(False)
        self._sleeping = False
        self.spin_ns = 200_000  # busy-poll this long before sleeping on the doorbell
        self._recent = True  # the last wait found completions: the next one busy-polls first

    def describe(self) -> dict:
        r = self.ring
        return {"ring": r.path, "nslots": r.nslots, "slot": r.slot_size, "bell": self.doorbell_path}

    def _push_local(self, wc: WorkCompletion) -> None:
        self._local.append(wc)
        if self._sleeping:  # another thread sleeps in wait(): wake it
            _ring_bell(self.doorbell_path)

    def poll(self, max_entries: int = 16) -> list[WorkCompletion]:
        out: list[WorkCompletion] = []
        local = self._local
        while local and len(out) < max_entries:
            out.append(local.popleft())
        if len(out) < max_entries:
            qps = self.device._qps
            for e in self.ring.take(max_entries - len(out)):
                qp = qps.get(e[1])
                if qp is not None:
                    qp._incoming(e, out)
        return out

    def wait(self, timeout: float | None, max_entries: int = 16) -> list[WorkCompletion]:
        """Completions, waiting up to `timeout` seconds (None: until one arrives). Right after
        traffic (the last wait found completions) it busy-polls the ring for `spin_ns` before it
        sleeps on the doorbell, as a KafkaDirect broker polls its CQ: a peer's next push is seen
        at once instead of after a wake-up (tens of microseconds on a VM). A wait that found
        nothing does not spin the next time, so an idle queue costs no CPU."""
        spin = 0
        if self._recent and not self._local:  # (returns at once when a slot is published)
            spin = self.spin_ns
            if timeout is not None and timeout * 1e9 < spin:
                spin = int(timeout * 1e9)
            if spin > 0:
                self.ring.spin(spin)
        out = self.poll(max_entries)
        if out:
            self._recent = True
            return out
        deadline = None if timeout is None else time.monotonic() + timeout - spin * 1e-9
        ring = self.ring
        while True:
            self._sleeping = True
            store(ring.buf, 128, 1)
            fetch_add(ring.buf, 128, 0)  # full barrier before re-checking (pairs with push)
            if not ring.ready() and not self._local:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if ring.stalled():  # wake to skip the slot if its producer is dead
                    left = RING_STALL_S if left is None else min(left, RING_STALL_S)
                wait_readable([self._bell], left)
            store(ring.buf, 128, 0)
            self._sleeping = False
            _drain(self._bell)
            out = self.poll(max_entries)
            if out or (deadline is not None and time.monotonic() >= deadline):
                self._recent = bool(out)
                return out

    def close(self) -> None:
        self._bell.close()
        self.ring.close()


def _drain(sock: socket.socket) -> None:
    try:
        while sock.recv(64):
            pass
    except (BlockingIOError, OSError):
        pass


_bell_sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
_bell_sender.setblocking(False)


def _ring_bell(path: str) -> None:
    try:
        _bell_sender.sendto(b"\x01", path)
    except OSError:  # full (already rung) or the peer is gone
        pass


class _Peer:
    """The peer device's region table, mapped once per connection, and its mapped regions."""

    def __init__(self, dir_: str):
        self.dir = dir_
        self._map, self.table = _map_file(
            os.path.join(dir_, "mrtable"), 0, MR_ENTRIES * MR_ENTRY, False
        )
        self.regions: dict[int, tuple[memoryview, int, int, object]] = {}

    def region(self, rkey: int, need: Access) -> memoryview | None:
        """The live view of the region named by rkey, or None when unknown/revoked/no access."""
        idx = rkey & (MR_ENTRIES - 1)
        eoff = idx * MR_ENTRY
        if load(self.table, eoff) != rkey or rkey == 0:
            self.regions.pop(rkey, None)
            return None
        r = self.regions.get(rkey)
        if r is None:
            self._prune()
            length, access, foff, plen = struct.unpack_from("<QQQQ", self.table, eoff + 8)
            path = bytes(self.table[eoff + 40 : eoff + 40 + plen])
            if load(self.table, eoff) != rkey:  # revoked while read: the entry is another's now
                return None
            write = bool(access & (Access.REMOTE_WRITE | Access.REMOTE_ATOMIC))
            try:
                m, view = _map_file(path.decode(), foff, length, write, clamp=True)
            except (OSError, ValueError):  # the file is gone (retention) or shorter than registered
                return None
            r = self.regions[rkey] = (view, int(access), length, m)
        if (r[1] & need) != need:
            return None
        return r[0]

    def _prune(self) -> None:
        """Drop the mappings of regions revoked since: a peer that moved on never names their
        rkeys again, and its mapping would hold a deleted segment file's space."""
        for k in [
            k for k in self.regions if load(self.table, (k & (MR_ENTRIES - 1)) * MR_ENTRY) != k
        ]:
            del self.regions[k]

    def close(self) -> None:
        self.regions.clear()
        self.table.release()
        self._map.close()


class ShmQP:
    """A connected queue pair; one-sided operations run here, in the initiator's thread."""

    def __init__(self, dev: ShmDevice, sock: socket.socket, send_cq: ShmCQ, recv_cq: ShmCQ):
        self.device = dev
        self.qp_num = next(_ids)
        self.send_cq, self.recv_cq = send_cq, recv_cq
        self.sock = sock
        self._recvs: deque[tuple[int, ShmMR, int, int]] = deque()
        self._rnr: deque[tuple] = deque()  # arrivals waiting for a posted receive
        self.peer_qp_num = 0
        self._peer: _Peer | None = None
        self._peer_ring: _Ring | None = None
        self._peer_bell = ""
        self._lock = threading.Lock()  # posting threads share the peer ring claim path only
        self.closed = False
        dev._qps[self.qp_num] = self

    def hello(self) -> dict:
        return {"dir": self.device.dir, "qp": self.qp_num, **self.recv_cq.describe()}

    def _attach(self, peer) -> None:
        """Map what the peer's hello names; TransportError for a setup line that is not a hello
        or names nothing mappable (the caller closes the queue pair)."""
        try:
            qpn, ring, bell = int(peer["qp"]), peer["ring"], str(peer["bell"])
            nslots, slot = int(peer["nslots"]), int(peer["slot"])
            if nslots < 1 or slot % 8 or slot < SLOT_HDR + MAX_SEND_BYTES:  # pushes would raise
                raise ValueError(f"ring geometry {nslots} x {slot}")
            p = _Peer(peer["dir"])
            try:
                r = _Ring(ring, nslots, slot, False)
            except BaseException:
                p.close()
                raise
        except (KeyError, TypeError, ValueError, OverflowError, OSError) as e:
            raise TransportError(f"bad connection setup: {e!r}") from e
        self.peer_qp_num, self._peer, self._peer_ring, self._peer_bell = qpn, p, r, bell

    # -- posting ----------------------------------------------------------------------------------
    def _complete(self, wr_id: int, status: Status, op: Opcode, n: int, signaled: bool) -> None:
        if status == _REM_ACCESS_ERR and self.closed:
            status = _WR_FLUSH_ERR  # a QP in the error state flushes what is posted to it
        if signaled or status != _SUCCESS:
            self.send_cq._push_local(WorkCompletion(wr_id, status, op, n, None, self.qp_num))

    def _remote(
        self, raddr: int, rkey: int, length: int, need: Access
    ) -> tuple[memoryview | None, int]:
        if self.closed or self._peer is None:
            return None, -1
        view = self._peer.region(rkey, need)
        off = raddr - (rkey << ADDR_SHIFT)
        if view is None or off < 0 or length < 0 or off + length > len(view):
            return None, 0
        return view, off

    def _local(self, mr: ShmMR, offset: int, length: int) -> bool:
        return mr.rkey != 0 and 0 <= offset and 0 <= length and offset + length <= mr.length

    def _notify(self, kind: int, imm: int, byte_len: int, payload=None) -> bool:
        ring = self._peer_ring
        qpn = self.peer_qp_num
        with self._lock:
            r = ring_push(ring.buf, ring.nslots, ring.slot_size, kind, qpn, imm, byte_len, payload)
            if r < 0:  # full: the peer is behind; wait for room (ring.push's retries)
                r = ring.push(kind, qpn, imm, byte_len, payload)
        if r > 0:
            _ring_bell(self._peer_bell)
        return r >= 0

    def post_write(self, wr_id, mr, offset, length, remote_addr, rkey, imm=None, signaled=True):
        # A region written before: one C call (its rkey word checked, bounds, the copy); the
        # first WRITE of a region, a zero-length one and every failure take the general path.
        peer, done = self._peer, False
        r = peer.regions.get(rkey) if peer is not None and length and mr.rkey else None
        if r is not None and r[1] & _RW and not self.closed:
            eoff = (rkey & (MR_ENTRIES - 1)) * MR_ENTRY
            roff = remote_addr - (rkey << ADDR_SHIFT)
            done = copy_checked(peer.table, eoff, rkey, r[0], roff, mr.buf, offset, length)
        if not done:
            if not self._local(mr, offset, length):
                return self._complete(wr_id, Status.LOC_PROT_ERR, _WRITE, 0, True)
            if length == 0 and not self.closed and self._peer is not None:
                view, roff = None, 0  # a zero-length WRITE touches no memory: no key check
            else:
                view, roff = self._remote(remote_addr, rkey, length, _RW)
                if view is None:
                    return self._complete(wr_id, _REM_ACCESS_ERR, _WRITE, 0, True)
            if length and not copy(
                view, roff, mr.buf, offset, length
            ):  # the file shrank under us (SIGBUS)
                return self._complete(wr_id, _REM_ACCESS_ERR, _WRITE, 0, True)
        if imm is not None and (
            self.closed or not self._notify(KIND_WRITE_IMM, imm & 0xFFFFFFFF, length)
        ):
            return self._complete(wr_id, Status.RNR_RETRY_EXC_ERR, _WRITE, 0, True)
        self._complete(wr_id, _SUCCESS, _WRITE, length, signaled)

    def post_read(self, wr_id, mr, offset, length, remote_addr, rkey, signaled=True):
        if not self._local(mr, offset, length) or not mr.access & _LW:
            return self._complete(wr_id, Status.LOC_PROT_ERR, _READ, 0, True)
        view, roff = self._remote(remote_addr, rkey, length, _RR)
        if view is None:
            return self._complete(wr_id, _REM_ACCESS_ERR, _READ, 0, True)
        if not copy(mr.buf, offset, view, roff, length):
            return self._complete(wr_id, _REM_ACCESS_ERR, _READ, 0, True)
        self._complete(wr_id, _SUCCESS, _READ, length, signaled)

    def read_now(self, mr, offset, length, remote_addr, rkey) -> Status:
        """A READ whose completion is returned instead of queued (the consumer's fast path): of
        a region mapped before, one C call that re-checks its rkey word and copies; the first
        READ of a region, and every failure, take the general path."""
        peer = self._peer
        if peer is not None and not self.closed and mr.rkey:
            r = peer.regions.get(rkey)
            if r is not None and r[1] & _RR:
                eoff = (rkey & (MR_ENTRIES - 1)) * MR_ENTRY
                roff = remote_addr - (rkey << ADDR_SHIFT)
                if copy_checked(peer.table, eoff, rkey, mr.buf, offset, r[0], roff, length):
                    return _SUCCESS
        view, roff = self._remote(remote_addr, rkey, length, _RR)
        if view is None or not self._local(mr, offset, length):
            return _REM_ACCESS_ERR
        return _SUCCESS if copy(mr.buf, offset, view, roff, length) else _REM_ACCESS_ERR

    def map_remote(self, remote_addr: int, rkey: int, length: int) -> memoryview | None:
        """A live read-only view of peer memory: reading it is a READ that completes at once."""
        view, roff = self._remote(remote_addr, rkey, length, _RR)
        return None if view is None else view[roff : roff + length].toreadonly()

    def _atomic(self, wr_id, mr, offset, remote_addr, rkey, op, a, b):
        if not self._local(mr, offset, 8) or not mr.access & _LW:
            return self._complete(wr_id, Status.LOC_PROT_ERR, op, 0, True)
        view, roff = self._remote(remote_addr, rkey, 8, _RA)
        if view is None or remote_addr % 8:
            st = _REM_ACCESS_ERR if view is None else Status.REM_INV_REQ_ERR
            return self._complete(wr_id, st, op, 0, True)
        if op == _FETCH_AND_ADD:
            old = fetch_add(view, roff, a & 0xFFFFFFFFFFFFFFFF)
        else:
            old = compare_swap(view, roff, a, b)
        struct.pack_into("<Q", mr.buf, offset, old)
        self._complete(wr_id, _SUCCESS, op, 8, True)

    def post_fetch_add(self, wr_id, mr, offset, remote_addr, rkey, add):
        self._atomic(wr_id, mr, offset, remote_addr, rkey, _FETCH_AND_ADD, add, 0)

    def post_cmp_swap(self, wr_id, mr, offset, remote_addr, rkey, compare, swap):
        self._atomic(wr_id, mr, offset, remote_addr, rkey, Opcode.CMP_AND_SWAP, compare, swap)

    def post_send(self, wr_id, mr, offset, length, signaled=True):
        if self.closed:
            return self._complete(wr_id, _WR_FLUSH_ERR, _SEND, 0, True)
        if not (mr.rkey and 0 <= offset and 0 <= length and offset + length <= mr.length):
            return self._complete(wr_id, Status.LOC_PROT_ERR, _SEND, 0, True)
        if length > MAX_SEND_BYTES:  # (a ring slot holds more)
            return self._complete(wr_id, Status.LOC_LEN_ERR, _SEND, 0, True)
        if not self._notify(KIND_SEND, 0, length, mr.buf[offset : offset + length]):
            return self._complete(wr_id, Status.RNR_RETRY_EXC_ERR, _SEND, 0, True)
        if signaled:
            self._complete(wr_id, _SUCCESS, _SEND, length, True)

    def post_recv(self, wr_id, mr, offset, length):
        if self.closed:
            raise TransportError("queue pair is closed")
        self._recvs.append((wr_id, mr, offset, length))
        while self._rnr and self._recvs:
            out: list[WorkCompletion] = []
            self._incoming(self._rnr.popleft(), out)
            for wc in out:
                self.recv_cq._push_local(wc)

    # -- receiving (called from the CQ's poll) ----------------------------------------------------
    def _incoming(self, e: tuple, out: list[WorkCompletion]) -> None:
        kind, _, imm, blen, payload = e
        if kind == KIND_DISCONNECT:
            self._flush(out)
            return
        if not self._recvs:
            self._rnr.append(e)  # the sender's RNR retry, without the retry traffic
            return
        wr_id, mr, off, ln = self._recvs.popleft()
        if kind == KIND_WRITE_IMM:
            out.append(WorkCompletion(wr_id, _SUCCESS, _RECV_RDMA_WITH_IMM, blen, imm, self.qp_num))
        elif blen > ln:
            out.append(WorkCompletion(wr_id, Status.LOC_LEN_ERR, _RECV, 0, None, self.qp_num))
        else:
            mr.buf[off : off + blen] = payload
            out.append(WorkCompletion(wr_id, _SUCCESS, _RECV, blen, None, self.qp_num))

    def _flush(self, out: list[WorkCompletion]) -> None:
        self.closed = True
        while self._recvs:
            wr_id = self._recvs.popleft()[0]
            out.append(WorkCompletion(wr_id, _WR_FLUSH_ERR, _RECV, 0, None, self.qp_num))

    def peer_alive(self) -> bool:
        """False once the peer closed its end (or died): the connection socket reads EOF."""
        try:
            return self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
        except BlockingIOError:
            return True
        except OSError:
            return False

    def close(self) -> None:
        if self._peer_ring is not None and not self.closed:
            self._notify(KIND_DISCONNECT, 0, 0)
        self.closed = True
        self.device._qps.pop(self.qp_num, None)
        self.sock.close()
        if self._peer is not None:
            self._peer.close()
            self._peer_ring.close()
            self._peer = self._peer_ring = None


class ShmListener:
    def __init__(self, dev: ShmDevice):
        self.device = dev
        self.address = os.path.join(dev.dir, f"listen-{next(_ids)}.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.address)
        self.sock.listen(64)

    def accept(self, send_cq, recv_cq=None, timeout=None) -> ShmQP:
        conn, peer = accept_setup(self.sock, timeout, SETUP_LIMIT)
        qp = ShmQP(self.device, conn, send_cq, recv_cq or send_cq)
        try:
            qp._attach(peer)
            send_setup(conn, qp.hello())
        except BaseException:  # a bad request must not leave a half-made QP or its connection
            qp.close()
            raise
        return qp

    def close(self) -> None:
        self.sock.close()
        try:
            os.unlink(self.address)
        except FileNotFoundError:
            pass


def _remove_dir(path: str, owner: int, lock_fd: int) -> None:
    """A device's directory, removed by the process that made it: a forked child inherits the
    device (and its exit handlers) but must not take it from its parent. Then its owner lock."""
    if os.getpid() == owner:
        shutil.rmtree(path, ignore_errors=True)
    os.close(lock_fd)


def _lock_owner(dir_: str) -> int:
    """Take the directory's owner lock, held for the device's life (and by forked children): the
    sweep's liveness test. Locked before it is named `owner`, so no sweep sees it unlocked."""
    tmp = os.path.join(dir_, "owner.tmp")
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(tmp, os.path.join(dir_, "owner"))
    return fd


def _owner_gone(path: str, pid: int) -> bool:
    """Whether a device directory's owner is gone: its lock is free. Not by its pid: a live
    owner in another pid namespace sharing /dev/shm looks dead, and a dead one's pid is reused.
    A directory not locked yet (being made) is judged by its pid."""
    try:
        fd = os.open(os.path.join(path, "owner"), os.O_RDONLY)
    except FileNotFoundError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass  # alive, someone else's
        return False
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _sweep(base: str) -> None:
    """Remove device directories left by processes that died without closing them."""
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        parts = name.split("-")
        if len(parts) < 3 or parts[0] != "rdmalog" or not parts[1].isdigit():
            continue
        path = os.path.join(base, name)
        if _owner_gone(path, int(parts[1])):
            shutil.rmtree(path, ignore_errors=True)


class ShmDevice:
    """This process's shm endpoint: a directory of shared files (see the module docstring)."""

    name = "shm"

    def __init__(self, root: str | None = None, max_send: int = 488):
        base = root or ("/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir())
        _sweep(base)
        self.dir = tempfile.mkdtemp(prefix=f"rdmalog-{os.getpid()}-", dir=base)
        # also at exit; only by this process, not by a forked child exiting
        self._finalizer = weakref.finalize(
            self, _remove_dir, self.dir, os.getpid(), _lock_owner(self.dir)
        )
        self.slot_size = SLOT_HDR + -(-max_send // 8) * 8  # slots stay 8-byte aligned
        _make_file(os.path.join(self.dir, "mrtable"), MR_ENTRIES * MR_ENTRY)
        self._tmap, self._table = _map_file(
            os.path.join(self.dir, "mrtable"), 0, MR_ENTRIES * MR_ENTRY, True
        )
        self._free = list(range(MR_ENTRIES - 1, 0, -1))  # entry 0 unused: rkey 0 means "none"
        self._gen = itertools.count(1)
        self._qps: dict[int, ShmQP] = {}
        self._mrs: dict[int, ShmMR] = {}
        self._lock = threading.Lock()

    def _register(self, buf, access: Access, path: str | None, foff: int, owned=None) -> ShmMR:
        remote = access & (Access.REMOTE_READ | Access.REMOTE_WRITE | Access.REMOTE_ATOMIC)
        if remote and path is None:
            raise TransportError("shm regions peers can reach must be file mappings (give path)")
        pbytes = os.path.abspath(path).encode() if path else b""
        if len(pbytes) > MR_PATH_MAX:
            raise TransportError("region file path too long")
        with self._lock:
            if not self._free:
                raise TransportError("region table full")
            idx = self._free.pop()
            rkey = ((next(self._gen) << 10) | idx) & 0xFFFFFFFF
            mr = ShmMR(self, idx, rkey, buf, access, owned)
            eoff = idx * MR_ENTRY
            struct.pack_into(
                "<QQQQ", self._table, eoff + 8, mr.length, int(access), foff, len(pbytes)
            )
            self._table[eoff + 40 : eoff + 40 + len(pbytes)] = pbytes
            store(self._table, eoff, rkey)  # publish last: peers check this word
            self._mrs[rkey] = mr
        return mr

    def _dereg(self, mr: ShmMR) -> None:
        """Once per region, whichever threads ask (a grant can be revoked by a roll listener
        and by the completion loop at the same time): a table slot freed twice would later
        be handed to two regions."""
        with self._lock:
            if self._mrs.get(mr.rkey) is not mr:
                return
            store(self._table, mr.index * MR_ENTRY, 0)
            del self._mrs[mr.rkey]
            self._free.append(mr.index)
            owned, mr._owned = mr._owned, None
        if owned is not None:
            m, path = owned
            mr.buf.release()
            try:
                m.close()
            except BufferError:
                pass
            os.unlink(path)

    def alloc_mr(self, length: int, access: Access) -> ShmMR:
        path = os.path.join(self.dir, f"mr-{next(_ids)}")
        _make_file(path, max(length, 1))
        m, view = _map_file(path, 0, max(length, 1), True)
        return self._register(view[:length], access, path, 0, owned=(m, path))

    def reg_mr(self, buf, access: Access, path: str | None = None, file_offset: int = 0) -> ShmMR:
        return self._register(buf, access, path, file_offset)

    def create_cq(self, depth: int = 1024) -> ShmCQ:
        return ShmCQ(self, depth, self.slot_size)

    def listen(self, host: str = "127.0.0.1", port: int = 0) -> ShmListener:
        return ShmListener(self)

    def connect(
        self, address: str, send_cq: ShmCQ, recv_cq: ShmCQ | None = None, timeout=5.0
    ) -> ShmQP:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(address)
        except OSError as e:
            sock.close()
            raise TransportError(f"cannot connect to {address}: {e}") from e
        qp = ShmQP(self, sock, send_cq, recv_cq or send_cq)
        try:
            send_setup(sock, qp.hello())
            qp._attach(recv_setup(sock, SETUP_LIMIT))
        except BaseException:
            qp.close()
            raise
        return qp

    def close(self) -> None:
        for qp in list(self._qps.values()):
            qp.close()
        self._table.release()
        self._tmap.close()
        self._finalizer()
