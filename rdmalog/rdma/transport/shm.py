"""Same-host transport: regions are shared file mappings, the initiator does the DMA itself.

Layout of one device (one per process and role) in a directory under /dev/shm:

- ``mrtable``: the registered regions and memory windows (rkey, length, access, file path, file
  offset; a window's bounds and queue pair). A region's address names its entry (``index << 32``);
  a peer maps the entry's file on first use and re-checks the entry's rkey word (and a window's
  bounds) on every operation, so a deregistered region answers REM_ACCESS_ERR like a revoked
  RNIC key. Keys are random; a key the entry never held (a guess) moves the peer's queue pair to
  the error state, as an RNIC's remote access error does.
- ``cq-N``: the receive side of a completion queue, a multi-producer ring of fixed slots. A peer's
  WRITE_WITH_IMM and SEND push a slot (imm, byte_len, inline SEND payload) after the data copy,
  so the target sees the data before the notification (release/acquire on the slot word). A slot
  claimed but unpublished for `RING_STALL_S` (its producer was killed mid-push) is skipped.
- ``owner``: flock'ed for the device's life; sweeping dead devices' directories tests it.
- ``cq-N.sock``: a datagram doorbell, rung only when the ring's owner has announced it sleeps
  (always, once an event loop reads it: `notify_fds`).

One-sided READ/WRITE are memcpy into/out of the peer's mapping; FETCH_AND_ADD/CMP_AND_SWAP are
real 64-bit atomics on it (the `_atomic64` extension). A READ costs the target no CPU at all.
Connection setup (the rdmacm analogue) is a JSON handshake over a Unix stream socket, which stays
open so each side can tell when the other is gone.

The files (directories, mappings, the ring) are `shm_files.py`'s. Same user only: a device's
directory is created 0700 and its files 0600, and a device refuses a
peer directory (and a listener) that is not a private directory of its own user. Every check on
this transport is made by the initiator's code (there is no NIC between the processes), so it
stops a client's mistakes, not a hostile process of the broker's user, which can open the
broker's files anyway (see docs/rdma.md, "Security").
"""

from __future__ import annotations

import itertools
import logging
import os
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
    ring_push,
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
    new_rkey,
    recv_setup,
    send_setup,
    wait_readable,
)
from rdmalog.rdma.transport.shm_files import (
    KIND_DISCONNECT,
    KIND_SEND,
    KIND_WRITE_IMM,
    RING_STALL_S,
    SLOT_HDR,
    Ring,
    check_private_dir,
    inside,
    lock_owner,
    make_file,
    map_file,
    remove_dir,
    sweep,
)

log = logging.getLogger(__name__)

MR_ENTRIES = 1024
SETUP_LIMIT = 65536  # bytes of a connection-setup line (ring and region paths)
MR_ENTRY = 256
# Entry layout: rkey @0 (published last), length @8, access @16, file offset @24, path length @32,
# path @40; window start @E_START, end @E_END, bound peer queue pair @E_QP (0: a region, any
# queue pair), the key the entry held before (withdrawn) @E_RETIRED.
E_START, E_END, E_QP, E_RETIRED = 224, 232, 240, 248
MR_PATH_MAX = E_START - 40
ADDR_SHIFT = 32  # region addresses are index << 32: the entry, offsets up to 4 GiB
_OFF_MASK = (1 << ADDR_SHIFT) - 1

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


class ShmMR:
    """A registered region of this device."""

    def __init__(self, dev: ShmDevice, idx: int, rkey: int, buf, access: Access, owned=None):
        self.device = dev
        self.index = idx
        self.rkey = self.lkey = rkey
        self.buf = memoryview(buf).cast("B")
        self.length = len(self.buf)
        self.addr = idx << ADDR_SHIFT
        self.access = int(access)
        self._owned = owned  # the mapping alloc_mr created, closed on deregister
        self.path: bytes = b""
        self.file_offset = 0

    def remote(self) -> RemoteRegion:
        return RemoteRegion(self.addr, self.rkey, self.length)

    def deregister(self) -> None:
        if self.rkey:
            self.device._dereg(self)
            self.rkey = 0


class ShmWindow:
    """A memory window: an entry of its own (key, bounds, the peer queue pair it is bound to) over
    its region's file, checked by the peer's transport on every access."""

    def __init__(self, qp: ShmQP, mr: ShmMR, start: int, end: int, access: Access):
        self.device, self.mr = qp.device, mr
        self.start, self.end = start, end
        self.index, self.rkey = qp.device._publish(
            mr.length, access, mr.path, mr.file_offset, start, end, qp.peer_qp_num
        )
        self.addr = self.index << ADDR_SHIFT

    def remote(self) -> RemoteRegion:
        return RemoteRegion(self.addr, self.rkey, self.mr.length)

    def narrow(self, start: int) -> None:
        if start > self.end:  # clamped by comparisons: min()/max() cost more, per produce
            start = self.end
        if start < self.start:
            start = self.start
        if self.rkey and start != self.start:
            self.start = start
            store(self.device._table, self.index * MR_ENTRY + E_START, start)

    def invalidate(self) -> None:
        if self.rkey:
            self.device._unpublish(self.index, self.rkey)
            self.rkey = 0


class ShmCQ:
    """Completion queue: in-process completions plus the shared ring peers notify through."""

    def __init__(self, dev: ShmDevice, depth: int, slot_size: int):
        self.device = dev
        self.id = next(_ids)
        self._local: deque[WorkCompletion] = deque()
        self.ring = Ring(os.path.join(dev.dir, f"cq-{self.id}"), depth, slot_size, True)
        self.doorbell_path = os.path.join(dev.dir, f"cq-{self.id}.sock")
        self._bell = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._bell.bind(self.doorbell_path)
        self._bell.setblocking(False)
        self._sleeping = False
        self._armed = False  # notify_fds() was called: an event loop reads the doorbell
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
            store(ring.buf, 128, int(self._armed))  # (armed: peers keep ringing for the loop)
            self._sleeping = self._armed
            _drain(self._bell)
            out = self.poll(max_entries)
            if out or (deadline is not None and time.monotonic() >= deadline):
                self._recent = bool(out)
                return out

    def notify_fds(self) -> list[int]:
        """The doorbell, for an event loop's reader: from now on the ring says its owner sleeps, so
        every peer's push rings it (and so do local completions). `notified()`, then `poll()`."""
        self._armed = self._sleeping = True
        store(self.ring.buf, 128, 1)
        fetch_add(self.ring.buf, 128, 0)  # full barrier (pairs with push): rung from now on
        return [self._bell.fileno()]

    def spin(self) -> bool:
        """(Armed) busy-poll the ring without the GIL for `spin_ns`, peers not ringing meanwhile (the
        calling thread watches the ring: the loop is not woken for what it sees), then armed
        again: whether a completion is ready. `poll()` next takes it and any pushed in between."""
        ring = self.ring
        store(ring.buf, 128, 0)
        try:
            return ring.spin(self.spin_ns) or bool(self._local)
        finally:
            store(ring.buf, 128, 1)
            fetch_add(ring.buf, 128, 0)  # full barrier: a push from here on rings the doorbell

    def notified(self) -> None:
        """Take the doorbell's rings (before polling: a push after this rings it again)."""
        _drain(self._bell)

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


_REVOKED, _UNKNOWN = 1, 2  # why a lookup found nothing: a withdrawn key, or one never held


class _Peer:
    """The peer device's region table, mapped once per connection, and its mapped regions."""

    def __init__(self, dir_: str):
        self.dir = dir_
        self._map, self.table = map_file(
            os.path.join(dir_, "mrtable"), 0, MR_ENTRIES * MR_ENTRY, False
        )
        # rkey -> (view of the file range, access, entry offset, window's queue pair or 0,
        # mapping, entry index)
        self.regions: dict[int, tuple[memoryview, int, int, int, object]] = {}

    def region(self, idx: int, rkey: int) -> tuple | int:
        """The live mapping record of entry `idx` if it holds `rkey`; else _REVOKED (it held the
        key before) or _UNKNOWN."""
        eoff = idx * MR_ENTRY
        if not 0 < idx < MR_ENTRIES or rkey == 0:
            return _UNKNOWN
        if load(self.table, eoff) != rkey:
            self.regions.pop(rkey, None)
            return _REVOKED if load(self.table, eoff + E_RETIRED) == rkey else _UNKNOWN
        r = self.regions.get(rkey)
        if r is None:
            self._prune()
            length, access, foff, plen = struct.unpack_from("<QQQQ", self.table, eoff + 8)
            qp = load(self.table, eoff + E_QP)
            path = bytes(self.table[eoff + 40 : eoff + 40 + min(plen, MR_PATH_MAX)])
            if load(self.table, eoff) != rkey:  # revoked while read: the entry is another's now
                return _REVOKED
            write = bool(access & (Access.REMOTE_WRITE | Access.REMOTE_ATOMIC))
            try:
                m, view = map_file(path.decode(), foff, length, write, clamp=True)
            except (OSError, ValueError):  # the file is gone (retention) or shorter than registered
                return _REVOKED
            r = self.regions[rkey] = (view, int(access), eoff, qp, m, idx)
        return r

    def _prune(self) -> None:
        """Drop the mappings of regions revoked since: a peer that moved on never names their
        rkeys again, and its mapping would hold a deleted segment file's space."""
        for k in [k for k, r in self.regions.items() if load(self.table, r[2]) != k]:
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
        self._peer_ring: Ring | None = None
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
            check_private_dir(peer["dir"])
            inside(peer["dir"], ring)
            inside(peer["dir"], bell)
            p = _Peer(peer["dir"])
            try:
                r = Ring(ring, nslots, slot, False)
            except BaseException:
                p.close()
                raise
        except (KeyError, TypeError, ValueError, OverflowError, OSError, TransportError) as e:
            raise TransportError(f"bad connection setup: {e!r}") from e
        self.peer_qp_num, self._peer, self._peer_ring, self._peer_bell = qpn, p, r, bell

    # -- posting ----------------------------------------------------------------------------------
    def _complete(
        self, wr_id: int, status: Status, op: Opcode, n: int, signaled: bool, own: bool = False
    ) -> None:
        """Queue the completion; `own`: the error is this request's own (it moved the queue pair
        to the error state itself), not a flush."""
        if status == _REM_ACCESS_ERR and self.closed and not own:
            status = _WR_FLUSH_ERR  # a QP in the error state flushes what is posted to it
        if signaled or status != _SUCCESS:
            self.send_cq._push_local(WorkCompletion(wr_id, status, op, n, None, self.qp_num))

    def _remote(
        self, raddr: int, rkey: int, length: int, need: int, what: str = "access"
    ) -> tuple[memoryview | None, int]:
        """The peer's bytes an operation names, or (None, _): a remote access error. A key the
        entry never held, or an access a window does not allow, moves this queue pair to the
        error state (`_to_error`), as on an RNIC; a withdrawn key, or a region's bounds or
        access flags, do not."""
        if self.closed or self._peer is None:
            return None, -1
        idx, off = raddr >> ADDR_SHIFT, raddr & ((1 << ADDR_SHIFT) - 1)
        r = self._peer.region(idx, rkey)
        if type(r) is int:
            if r == _UNKNOWN:
                self._to_error(f"{what} with rkey {rkey:#x}, which the peer never handed out")
            return None, 0
        view, access, eoff, qp, _, _ = r
        if qp:  # a window: bound to one queue pair, and only [start, end) of it
            table = self._peer.table
            lo, hi = load(table, eoff + E_START), load(table, eoff + E_END)
            if qp != self.qp_num or (access & need) != need:
                self._to_error(f"{what} through a window of another queue pair or access")
                return None, 0
            if off < lo or length < 0 or off + length > hi or off + length > len(view):
                self._to_error(f"{what} of [{off}, {off + length}) outside its window [{lo}, {hi})")
                return None, 0
        elif (access & need) != need or length < 0 or off + length > len(view):
            return None, 0
        return view, off

    def _to_error(self, why: str) -> None:
        """The error state: the peer is told (its receives flush), everything posted from now on
        is flushed."""
        log.warning("rdma shm: queue pair %d in error: %s", self.qp_num, why)
        if not self.closed and self._peer_ring is not None:
            self._notify(KIND_DISCONNECT, 0, 0)
        self.closed = True

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
        # A region written before: one C call (its rkey word and a window's bounds and queue
        # pair checked, bounds, the copy); the first WRITE of a region, a zero-length one and
        # every failure take the general path.
        peer, done = self._peer, False
        r = peer.regions.get(rkey) if peer is not None and length and mr.rkey else None
        if r is not None and r[1] & _RW and not self.closed and remote_addr >> ADDR_SHIFT == r[5]:
            roff = remote_addr & _OFF_MASK
            done = copy_checked(
                peer.table, r[2], rkey, r[0], roff, mr.buf, offset, length, self.qp_num, roff
            )
        if not done:
            if not self._local(mr, offset, length):
                return self._complete(wr_id, Status.LOC_PROT_ERR, _WRITE, 0, True)
            if length == 0 and not self.closed and self._peer is not None:
                view, roff = None, 0  # a zero-length WRITE touches no memory: no key check
            else:
                view, roff = self._remote(remote_addr, rkey, length, _RW, "WRITE")
                if view is None:
                    return self._complete(wr_id, _REM_ACCESS_ERR, _WRITE, 0, True, roff >= 0)
            if length and not copy(
                view, roff, mr.buf, offset, length
            ):  # the file shrank under us (SIGBUS)
                return self._complete(wr_id, _REM_ACCESS_ERR, _WRITE, 0, True)
        if imm is not None and (
            self.closed or not self._notify(KIND_WRITE_IMM, imm & 0xFFFFFFFF, length)
        ):
            return self._complete(wr_id, Status.RNR_RETRY_EXC_ERR, _WRITE, 0, True)
        if signaled:  # (an unsignaled success queues nothing)
            self._complete(wr_id, _SUCCESS, _WRITE, length, True)

    def post_read(self, wr_id, mr, offset, length, remote_addr, rkey, signaled=True):
        if not self._local(mr, offset, length) or not mr.access & _LW:
            return self._complete(wr_id, Status.LOC_PROT_ERR, _READ, 0, True)
        view, roff = self._remote(remote_addr, rkey, length, _RR, "READ")
        if view is None:
            return self._complete(wr_id, _REM_ACCESS_ERR, _READ, 0, True, roff >= 0)
        if not copy(mr.buf, offset, view, roff, length):
            return self._complete(wr_id, _REM_ACCESS_ERR, _READ, 0, True)
        self._complete(wr_id, _SUCCESS, _READ, length, signaled)

    def read_now(self, mr, offset, length, remote_addr, rkey) -> Status:
        """A READ whose completion is returned instead of queued (the consumer's fast path): of
        a region mapped before, one C call that re-checks its rkey word (and a window's bounds
        and queue pair) and copies; the first READ of a region, and every failure, take the
        general path."""
        peer = self._peer
        if peer is not None and not self.closed and mr.rkey:
            r = peer.regions.get(rkey)
            if r is not None and r[1] & _RR and remote_addr >> ADDR_SHIFT == r[5]:
                roff = remote_addr & _OFF_MASK
                if copy_checked(
                    peer.table, r[2], rkey, mr.buf, offset, r[0], roff, length, self.qp_num, roff
                ):
                    return _SUCCESS
        if not self._local(mr, offset, length):
            return Status.LOC_PROT_ERR
        view, roff = self._remote(remote_addr, rkey, length, _RR, "READ")
        if view is None:
            return _WR_FLUSH_ERR if roff < 0 else _REM_ACCESS_ERR
        return _SUCCESS if copy(mr.buf, offset, view, roff, length) else _REM_ACCESS_ERR

    def read_plan(self, remote_addr: int, rkey: int) -> tuple | None:
        peer = self._peer
        r = peer.regions.get(rkey) if peer is not None and not self.closed else None
        if r is None or not r[1] & _RR or remote_addr >> ADDR_SHIFT != r[5]:
            return None
        return (peer.table, r[2], rkey, r[0], self.qp_num, remote_addr & _OFF_MASK)

    def map_remote(self, remote_addr: int, rkey: int, length: int) -> memoryview | None:
        """A live read-only view of peer memory: reading it is a READ that completes at once."""
        view, roff = self._remote(remote_addr, rkey, length, _RR, "READ")
        return None if view is None else view[roff : roff + length].toreadonly()

    def _atomic(self, wr_id, mr, offset, remote_addr, rkey, op, a, b):
        if not self._local(mr, offset, 8) or not mr.access & _LW:
            return self._complete(wr_id, Status.LOC_PROT_ERR, op, 0, True)
        view, roff = self._remote(remote_addr, rkey, 8, _RA, "atomic")
        if view is None or remote_addr % 8:
            st = _REM_ACCESS_ERR if view is None else Status.REM_INV_REQ_ERR
            return self._complete(wr_id, st, op, 0, True, roff >= 0)
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

    def bind_window(self, mr: ShmMR, start: int, end: int, access: Access) -> ShmWindow:
        if not 0 <= start <= end <= mr.length or mr.rkey == 0 or not mr.path:
            raise TransportError(f"window [{start}, {end}) outside its file region")
        return ShmWindow(self, mr, start, end, access)

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


class ShmDevice:
    """This process's shm endpoint: a directory of shared files (see the module docstring)."""

    name = "shm"

    def __init__(self, root: str | None = None, max_send: int = 488):
        base = root or ("/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir())
        sweep(base)
        self.dir = tempfile.mkdtemp(prefix=f"rdmalog-{os.getpid()}-", dir=base)  # 0700
        check_private_dir(self.dir)
        # also at exit; only by this process, not by a forked child exiting
        self._finalizer = weakref.finalize(
            self, remove_dir, self.dir, os.getpid(), lock_owner(self.dir)
        )
        self.slot_size = SLOT_HDR + -(-max_send // 8) * 8  # slots stay 8-byte aligned
        make_file(os.path.join(self.dir, "mrtable"), MR_ENTRIES * MR_ENTRY)
        self._tmap, self._table = map_file(
            os.path.join(self.dir, "mrtable"), 0, MR_ENTRIES * MR_ENTRY, True
        )
        self._free = deque(range(1, MR_ENTRIES))  # entry 0 unused: address 0 names nothing
        self._qps: dict[int, ShmQP] = {}
        self._mrs: dict[int, ShmMR | None] = {}  # live keys: regions (and windows: None)
        self._lock = threading.RLock()

    def _register(self, buf, access: Access, path: str | None, foff: int, owned=None) -> ShmMR:
        remote = access & (Access.REMOTE_READ | Access.REMOTE_WRITE | Access.REMOTE_ATOMIC)
        if remote and path is None:
            raise TransportError("shm regions peers can reach must be file mappings (give path)")
        pbytes = os.path.abspath(path).encode() if path else b""
        length = len(memoryview(buf).cast("B"))
        idx, rkey = self._publish(length, access, pbytes, foff, 0, length, 0, publish=False)
        mr = ShmMR(self, idx, rkey, buf, access, owned)
        mr.path, mr.file_offset = pbytes, foff
        with self._lock:
            self._mrs[rkey] = mr
            store(self._table, idx * MR_ENTRY, rkey)  # publish last: peers check this word
        return mr

    def _publish(
        self,
        length: int,
        access: Access,
        pbytes: bytes,
        foff: int,
        start: int,
        end: int,
        qp: int,
        publish: bool = True,
    ) -> tuple[int, int]:
        """Fill a free entry for a region or window; (index, new random rkey). Entries are reused
        oldest-freed first, so a withdrawn key stays recognisable (E_RETIRED) for long."""
        if len(pbytes) > MR_PATH_MAX:
            raise TransportError("region file path too long")
        with self._lock:
            if not self._free:
                raise TransportError("region table full")
            idx = self._free.popleft()
            rkey = new_rkey(self._mrs)
            eoff = idx * MR_ENTRY
            t = self._table
            struct.pack_into("<QQQQ", t, eoff + 8, length, int(access), foff, len(pbytes))
            t[eoff + 40 : eoff + 40 + len(pbytes)] = pbytes
            struct.pack_into("<QQQ", t, eoff + E_START, start, end, qp)
            if publish:
                self._mrs[rkey] = None  # a window: taken, no region object
                store(t, eoff, rkey)
        return idx, rkey

    def _unpublish(self, idx: int, rkey: int) -> bool:
        """Withdraw entry idx if it still holds rkey: peers see the key gone (and that it was
        there: E_RETIRED), and the entry is free again."""
        eoff = idx * MR_ENTRY
        with self._lock:
            if rkey not in self._mrs or load(self._table, eoff) != rkey:
                return False
            store(self._table, eoff + E_RETIRED, rkey)
            store(self._table, eoff, 0)
            del self._mrs[rkey]
            self._free.append(idx)
            return True

    def _dereg(self, mr: ShmMR) -> None:
        """Once per region, whichever threads ask (a grant can be revoked by a roll listener
        and by the completion loop at the same time): a table slot freed twice would later
        be handed to two regions."""
        with self._lock:
            if self._mrs.get(mr.rkey) is not mr:
                return
            self._unpublish(mr.index, mr.rkey)
            owned, mr._owned = mr._owned, None
        if owned is not None:
            m, path = owned
            try:  # exported (a consumer's lazy records, client/_lazy_records.c): the mapping
                mr.buf.release()  # stays until they let go
                m.close()
            except BufferError:
                pass
            os.unlink(path)

    def alloc_mr(self, length: int, access: Access) -> ShmMR:
        path = os.path.join(self.dir, f"mr-{next(_ids)}")
        make_file(path, max(length, 1))
        m, view = map_file(path, 0, max(length, 1), True)
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
        check_private_dir(os.path.dirname(address))  # the listener is in its device's directory
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
