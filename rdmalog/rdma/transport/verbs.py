"""Real RDMA through pyverbs: RC queue pairs, rdmacm connection setup. A thin mapping.

Requirements: an RDMA device and Debian's ``python3-pyverbs`` (PyPI's pyverbs does not build
against Debian's rdma-core). Without hardware, Soft-RoCE gives one on any Ethernet interface::

    modprobe rdma_rxe && rdma link add rxe0 type rxe netdev eth0   # then: ibv_devices

One device context and one protection domain per `VerbsDevice`, so a region registered once (a
segment file's mapping) can be addressed through every queue pair. rdmacm (synchronous endpoints)
resolves addresses and exchanges QP numbers; the QPs themselves are "external" QPs on our PD,
moved to RTS with the attributes rdmacm computes, plus REMOTE_ATOMIC access. Immediate data
travels in network byte order as on the wire; WorkCompletion.imm_data is host order.
pyverbs is imported lazily so the rest of the package never needs it. `WrTracker` is the one
piece of bookkeeping between the interface and the device (see its docstring).
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import queue
import socket
import sys
import threading
import time
from collections import deque

from rdmalog.rdma.transport.interface import (
    MAX_SEND_BYTES,
    Access,
    Opcode,
    RemoteRegion,
    Status,
    TransportError,
    WorkCompletion,
)

_UNAVAILABLE: str | None = None


DEBIAN_PYVERBS = "/usr/lib/python3/dist-packages/pyverbs"


def _import_pyverbs() -> None:
    """Import pyverbs; in a virtualenv, load Debian's package alone (same CPython ABI)."""
    try:
        import pyverbs  # noqa: F401
    except ImportError:
        init = os.path.join(DEBIAN_PYVERBS, "__init__.py")
        if not os.path.exists(init):
            raise
        spec = importlib.util.spec_from_file_location(
            "pyverbs", init, submodule_search_locations=[DEBIAN_PYVERBS]
        )
        mod = importlib.util.module_from_spec(spec)
        sys.modules["pyverbs"] = mod
        spec.loader.exec_module(mod)


def unavailable_reason() -> str | None:
    """Why this transport cannot run here (None when pyverbs and a device are present)."""
    global _UNAVAILABLE
    if _UNAVAILABLE is not None:
        return _UNAVAILABLE or None
    try:
        _import_pyverbs()
        import pyverbs.device as d
    except ImportError:
        _UNAVAILABLE = "pyverbs is not installed (apt-get install python3-pyverbs)"
        return _UNAVAILABLE
    try:
        devs = d.get_device_list()
    except Exception as e:  # the kernel has no InfiniBand/RDMA support at all
        _UNAVAILABLE = f"no RDMA device: {e} (/sys/class/infiniband is empty or absent)"
        return _UNAVAILABLE
    if not devs:
        _UNAVAILABLE = "no RDMA device (try Soft-RoCE: rdma link add rxe0 type rxe netdev eth0)"
        return _UNAVAILABLE
    _UNAVAILABLE = ""
    return None


def _address_of(buf) -> int:
    """The virtual address of a writable buffer (an mmap, bytearray or memoryview of one)."""
    view = memoryview(buf)
    if view.readonly:
        raise TransportError("RDMA regions must be writable mappings")
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


_DEREG_LOCK = threading.Lock()
SIGNAL_EVERY = 64  # a run of unsignaled sends is cut by a signaled one (send-queue reclaim)
# SENDs (acknowledgements, session tokens: at most MAX_SEND_BYTES) go inline: the device copies
# the payload at post time, so the sender may rewrite its buffer at once, as the shm and tcp
# transports allow. (An unsignaled SEND without it is read by the RNIC later: a rewrite races it.)

_WRITABLE = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_ATOMIC
ACCESS_ON_DEMAND = 1 << 6  # IBV_ACCESS_ON_DEMAND
# IBV_ODP_SUPPORT_* bits (rc_odp_caps) that remote access of each kind needs
_ODP_NEEDS = {Access.REMOTE_WRITE: 1 << 2, Access.REMOTE_READ: 1 << 3, Access.REMOTE_ATOMIC: 1 << 4}


def file_region_flags(access: Access, rc_odp_caps: int) -> int:
    """ibv access flags for registering a writable mapping of a file on disk (a head segment).

    Linux 6.5 and later refuse long-term pins of writable file-backed mappings (the filesystem
    could not write back or move pinned pages), which is what ibv_reg_mr does without on-demand
    paging. With ODP the RNIC faults pages in as it accesses them and pins nothing, so such a
    region is registered ON_DEMAND when the device supports it on RC queue pairs for every kind of
    remote access asked for; otherwise the plain flags (older kernels accept them).
    A read-only registration (REMOTE_READ alone: consumers' regions) is always a plain pin."""
    if not access & _WRITABLE:
        return int(access)
    need = sum(bit for acc, bit in _ODP_NEEDS.items() if access & acc)
    if rc_odp_caps & need == need:
        return int(access) | ACCESS_ON_DEMAND
    return int(access)


# The completion opcode of each work request the interface posts.
_SEND_OPCODES = {
    Opcode.WRITE: Opcode.WRITE,
    Opcode.WRITE_WITH_IMM: Opcode.WRITE,  # completes as a WRITE at the initiator
    Opcode.READ: Opcode.READ,
    Opcode.FETCH_AND_ADD: Opcode.FETCH_AND_ADD,
    Opcode.CMP_AND_SWAP: Opcode.CMP_AND_SWAP,
    Opcode.SEND: Opcode.SEND,
}


def wc_status(value: int) -> Status:
    """A device's ibv_wc_status as a Status (an unknown value is a GENERAL_ERR, never a crash)."""
    try:
        return Status(value)
    except ValueError:
        return Status.GENERAL_ERR


class WrTracker:
    """One queue pair's work requests between the interface and the device (no I/O).

    Every posted request gets an id of its own on the device, so a completion names its request
    even where the application uses the same ids on both queues. Two device rules make this
    necessary: an error completion's opcode is undefined (libibverbs), so it comes from what was
    posted; and unsignaled sends hold their send-queue slots until a later signaled one
    completes, so every SIGNAL_EVERY-th unsignaled send goes out signaled and its successful
    completion is swallowed here (a producer that posts only unsignaled WRITEs would otherwise
    fill its send queue after `depth` writes)."""

    def __init__(self, signal_every: int = SIGNAL_EVERY):
        self.signal_every = signal_every
        self._lock = threading.Lock()  # posts and polls may come from different threads
        self._last = 0
        self._run = 0  # unsignaled sends since the last signaled one
        # (device id, application id, completion opcode, signaled by the application), in order
        self._sends: deque[tuple[int, int, Opcode, bool]] = deque()
        self._recvs: dict[int, int] = {}  # device id -> application id

    def send(self, wr_id: int, opcode: Opcode, signaled: bool) -> tuple[int, bool]:
        """(device id, signaled on the device) for a send-queue request."""
        with self._lock:
            self._last += 1
            device_signaled = signaled
            self._run = 0 if signaled else self._run + 1
            if self._run >= self.signal_every:
                device_signaled, self._run = True, 0
            self._sends.append((self._last, wr_id, _SEND_OPCODES[opcode], signaled))
            return self._last, device_signaled

    def recv(self, wr_id: int) -> int:
        """The device id for a receive."""
        with self._lock:
            self._last += 1
            self._recvs[self._last] = wr_id
            return self._last

    def complete(self, device_id: int, status: Status, opcode: int) -> tuple[int, Opcode] | None:
        """(application id, opcode) of a device completion; None when it is not the
        application's (an internally signaled send that succeeded, or an unknown id)."""
        with self._lock:
            wr_id = self._recvs.pop(device_id, None)
            if wr_id is not None:
                ok = status == Status.SUCCESS and opcode == Opcode.RECV_RDMA_WITH_IMM
                return wr_id, Opcode.RECV_RDMA_WITH_IMM if ok else Opcode.RECV
            sends = self._sends
            while sends and sends[0][0] < device_id:  # a send queue completes in order
                sends.popleft()
            if not sends or sends[0][0] != device_id:
                return None
            _, wr_id, op, signaled = sends.popleft()
            if status == Status.SUCCESS and not signaled:
                return None
            return wr_id, op


@functools.cache
def _ibv_wr_opcodes() -> dict[Opcode, int]:
    """The interface's work-request opcodes as libibverbs' (pyverbs is imported lazily)."""
    import pyverbs.enums as e

    return {
        Opcode.WRITE: e.IBV_WR_RDMA_WRITE,
        Opcode.WRITE_WITH_IMM: e.IBV_WR_RDMA_WRITE_WITH_IMM,
        Opcode.READ: e.IBV_WR_RDMA_READ,
        Opcode.FETCH_AND_ADD: e.IBV_WR_ATOMIC_FETCH_AND_ADD,
        Opcode.CMP_AND_SWAP: e.IBV_WR_ATOMIC_CMP_AND_SWP,
        Opcode.SEND: e.IBV_WR_SEND,
    }


def send_wr(
    device_id: int, op: Opcode, addr: int, length: int, lkey: int, signaled: bool, imm=None
):
    """A pyverbs SendWR of one local range (set_wr_rdma / set_wr_atomic add the remote side)."""
    import pyverbs.enums as e
    from pyverbs.wr import SGE, SendWR

    opcode = _ibv_wr_opcodes()[op]
    flags = e.IBV_SEND_SIGNALED if signaled else 0
    if op == Opcode.SEND:
        if length > MAX_SEND_BYTES:
            raise TransportError(f"SEND of {length} bytes: at most {MAX_SEND_BYTES} (inline)")
        flags |= e.IBV_SEND_INLINE
    kw = {"imm_data": socket.htonl(imm & 0xFFFFFFFF)} if imm is not None else {}  # big-endian
    sg = [SGE(addr, length, lkey)]
    return SendWR(wr_id=device_id, opcode=opcode, num_sge=1, sg=sg, send_flags=flags, **kw)


class VerbsMR:
    def __init__(self, dev: VerbsDevice, buf, access: Access, owner=None, flags: int | None = None):
        from pyverbs.mr import MR
        from pyverbs.pyverbs_error import PyverbsRDMAError

        self.buf = memoryview(buf).cast("B")
        self.length = len(self.buf)
        self.addr = _address_of(self.buf)
        self.access = access
        self._owner = owner
        flags = int(access) if flags is None else flags
        try:
            self.mr = MR(dev.pd, self.length, flags, address=self.addr)
        except PyverbsRDMAError as e:
            raise TransportError(f"ibv_reg_mr of {self.length} bytes failed: {e}") from e
        self.rkey, self.lkey = self.mr.rkey, self.mr.lkey

    def remote(self) -> RemoteRegion:
        return RemoteRegion(self.addr, self.rkey, self.length)

    def deregister(self) -> None:
        with _DEREG_LOCK:  # once, whichever threads ask (see ShmDevice._dereg)
            if self.rkey:
                self.mr.close()  # ibv_dereg_mr: later remote accesses fail with REM_ACCESS_ERR
                self.rkey = 0


class RegionWindow:
    """What `bind_window` gives on verbs today: the region itself, under its own key. The RNIC
    enforces the registered region's bounds and access flags, not the window's: a producer
    granted a head file can write anywhere in it (committed bytes too), a consumer read all of
    it, from any queue pair of the protection domain that knows the key.

    Where type 2 memory windows would bind (untested without a device, so not done): register
    the head file with IBV_ACCESS_MW_BIND as well, `ibv_alloc_mw(pd, IBV_MW_TYPE_2)` per holder,
    and post IBV_WR_BIND_MW on the holder's queue pair over [committed position, end of file)
    (exclusive) or over each reservation (shared, which needs the broker to see it: a two-sided
    reservation instead of the FETCH_AND_ADD); `narrow` is a new bind (a new rkey the producer
    must be told), `invalidate` an IBV_WR_LOCAL_INV. Whether a device binds windows over an ODP
    region (which Linux >= 6.5 needs for writable file mappings, see docs/rdma.md) is to be
    checked on the device."""

    def __init__(self, mr: VerbsMR, start: int, end: int):
        self.mr, self.start, self.end = mr, start, end
        self.rkey = mr.rkey

    def remote(self) -> RemoteRegion:
        return self.mr.remote()

    def narrow(self, start: int) -> None:
        self.start = max(self.start, min(start, self.end))  # bookkeeping only: see the class

    def invalidate(self) -> None:
        self.rkey = 0  # the region's key stays valid until the region is deregistered


class VerbsCQ:
    def __init__(self, dev: VerbsDevice, depth: int):
        from pyverbs.cq import CQ

        self.cq = CQ(dev.ctx, depth, None, None, 0)
        self.qps: dict[int, VerbsQP] = {}  # the queue pairs completing here, by number

    def poll(self, max_entries: int = 16) -> list[WorkCompletion]:
        n, wcs = self.cq.poll(max_entries)
        out = []
        for wc in wcs[:n]:
            qp = self.qps.get(wc.qp_num)
            if qp is None:  # closed meanwhile: nobody waits for it
                continue
            status = wc_status(wc.status)
            mine = qp.wrs.complete(wc.wr_id, status, wc.opcode)
            if mine is None:
                continue
            wr_id, op = mine
            imm = socket.ntohl(wc.imm_data) if op == Opcode.RECV_RDMA_WITH_IMM else None
            out.append(WorkCompletion(wr_id, status, op, wc.byte_len, imm, wc.qp_num))
        return out

    def wait(self, timeout: float | None, max_entries: int = 16) -> list[WorkCompletion]:
        deadline = None if timeout is None else time.monotonic() + timeout
        spins = 0
        while True:  # busy poll first (latency), then back off (CPU)
            out = self.poll(max_entries)
            if out or (deadline is not None and time.monotonic() >= deadline):
                return out
            spins += 1
            if spins > 2000:
                time.sleep(50e-6)

    def close(self) -> None:
        self.cq.close()


class VerbsQP:
    def __init__(self, dev: VerbsDevice, cmid, send_cq: VerbsCQ, recv_cq: VerbsCQ, depth: int):
        import pyverbs.enums as e
        from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr

        self.device, self.cmid = dev, cmid
        self.send_cq, self.recv_cq = send_cq, recv_cq
        cap = QPCap(
            max_send_wr=depth,
            max_recv_wr=depth,
            max_send_sge=1,
            max_recv_sge=1,
            max_inline_data=MAX_SEND_BYTES,
        )
        init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=send_cq.cq, rcq=recv_cq.cq, cap=cap)
        self.qp = QP(dev.pd, init, QPAttr())
        self.qp_num = self.qp.qp_num
        self.wrs = WrTracker()
        send_cq.qps[self.qp_num] = recv_cq.qps[self.qp_num] = self
        self.closed = False

    def to_rts(self) -> None:
        """Move the external QP INIT -> RTR -> RTS with rdmacm's attributes (+ atomics)."""
        import pyverbs.enums as e

        for state in (e.IBV_QPS_INIT, e.IBV_QPS_RTR, e.IBV_QPS_RTS):
            attr, mask = self.cmid.init_qp_attr(state)
            if state == e.IBV_QPS_INIT:
                attr.qp_access_flags = int(
                    Access.LOCAL_WRITE
                    | Access.REMOTE_WRITE
                    | Access.REMOTE_READ
                    | Access.REMOTE_ATOMIC
                )
            self.qp.modify(attr, mask)

    def _wr(self, wr_id, op: Opcode, mr, offset, length, signaled=True, imm=None):
        """The device work request for an interface post (ids and signaling via `wrs`)."""
        if not (0 <= offset and offset + length <= mr.length):
            raise TransportError("local buffer out of bounds")
        device_id, signaled = self.wrs.send(wr_id, op, signaled)
        return send_wr(device_id, op, mr.addr + offset, length, mr.lkey, signaled, imm)

    def post_write(self, wr_id, mr, offset, length, remote_addr, rkey, imm=None, signaled=True):
        op = Opcode.WRITE if imm is None else Opcode.WRITE_WITH_IMM
        wr = self._wr(wr_id, op, mr, offset, length, signaled, imm)
        wr.set_wr_rdma(rkey, remote_addr)
        self.qp.post_send(wr)

    def post_read(self, wr_id, mr, offset, length, remote_addr, rkey, signaled=True):
        wr = self._wr(wr_id, Opcode.READ, mr, offset, length, signaled)
        wr.set_wr_rdma(rkey, remote_addr)
        self.qp.post_send(wr)

    def read_now(self, mr, offset, length, remote_addr, rkey) -> Status:
        """READ and wait for it (the send CQ must not be shared with other posters)."""
        self.post_read(0xFFFF_FFFF_FFFF_FFFF, mr, offset, length, remote_addr, rkey)
        for wc in self.send_cq.wait(10.0, 1):
            return wc.status
        return Status.RETRY_EXC_ERR

    def read_plan(self, remote_addr: int, rkey: int) -> None:
        return None  # the RNIC READs

    def map_remote(self, remote_addr: int, rkey: int, length: int) -> None:
        return None

    def _atomic(self, wr_id, op: Opcode, mr, offset, remote_addr, rkey, a, b):
        if remote_addr % 8:
            raise TransportError("remote atomic address must be 8-byte aligned")
        wr = self._wr(wr_id, op, mr, offset, 8)
        wr.set_wr_atomic(rkey, remote_addr, a, b)
        self.qp.post_send(wr)

    def post_fetch_add(self, wr_id, mr, offset, remote_addr, rkey, add):
        self._atomic(wr_id, Opcode.FETCH_AND_ADD, mr, offset, remote_addr, rkey, add, 0)

    def post_cmp_swap(self, wr_id, mr, offset, remote_addr, rkey, compare, swap):
        self._atomic(wr_id, Opcode.CMP_AND_SWAP, mr, offset, remote_addr, rkey, compare, swap)

    def post_send(self, wr_id, mr, offset, length, signaled=True):
        self.qp.post_send(self._wr(wr_id, Opcode.SEND, mr, offset, length, signaled))

    def post_recv(self, wr_id, mr, offset, length):
        from pyverbs.wr import SGE, RecvWR

        sg = [SGE(mr.addr + offset, length, mr.lkey)] if length else []
        self.qp.post_recv(RecvWR(wr_id=self.wrs.recv(wr_id), num_sge=len(sg), sg=sg))

    def peer_alive(self) -> bool:
        return not self.closed

    def bind_window(self, mr: VerbsMR, start: int, end: int, access: Access) -> RegionWindow:
        """The region itself (no memory window is bound: see RegionWindow)."""
        if not 0 <= start <= end <= mr.length or not mr.rkey:
            raise TransportError(f"window [{start}, {end}) outside its region")
        return RegionWindow(mr, start, end)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self.cmid.disconnect()
            except Exception:
                pass
            self.qp.close()
            self.cmid.close()
            for cq in (self.send_cq, self.recv_cq):  # its late (flush) completions have no reader
                if cq.qps.get(self.qp_num) is self:
                    del cq.qps[self.qp_num]


def _conn_param(qp_num: int):
    from pyverbs.cmid import ConnParam

    # resources/depth: outstanding READs/atomics each way (the device clips them)
    return ConnParam(resources=16, depth=16, retry=7, rnr_retry=7, qp_num=qp_num)


class VerbsListener:
    """A listening rdmacm id. Its synchronous `get_request()` cannot be interrupted or given a
    timeout, so one thread waits in it and hands requests over; `accept(timeout=...)` waits on
    that hand-over, and so returns (TransportError) when nobody connects in time."""

    def __init__(self, dev: VerbsDevice, host: str, port: int):
        import pyverbs.cm_enums as ce
        from pyverbs.cmid import CMID, AddrInfo

        self.device = dev
        port = port or _free_port(host)
        ai = AddrInfo(
            src=host, src_service=str(port), port_space=ce.RDMA_PS_TCP, flags=ce.RAI_PASSIVE
        )
        self.cmid = CMID(creator=ai)
        self.cmid.listen(backlog=64)
        self.address = f"{host}:{port}"
        self._requests: queue.Queue = queue.Queue()
        self._closed = False
        self._lock = threading.Lock()
        self._waiter = threading.Thread(
            target=self._wait_requests, name="rdmacm-listen", daemon=True
        )
        self._waiter.start()

    def _wait_requests(self) -> None:
        while True:
            try:
                child = self.cmid.get_request()  # blocks: synchronous rdmacm endpoint
            except Exception as e:  # the id failed: accept() reports it
                child = e
            with self._lock:
                if self._closed:  # close() left the listening id to us: it is no longer in use
                    if not isinstance(child, Exception):
                        child.close()  # the peer's connect fails (rejected)
                    self.cmid.close()
                    return
                self._requests.put(child)
                if isinstance(child, Exception):
                    return

    def accept(self, send_cq, recv_cq=None, timeout=None) -> VerbsQP:
        try:
            child = self._requests.get(timeout=timeout)
        except queue.Empty:
            raise TransportError("no connection request") from None
        if isinstance(child, Exception):
            self._requests.put(child)  # every later accept fails the same way
            raise TransportError(f"rdmacm listener failed: {child}")
        qp = VerbsQP(self.device, child, send_cq, recv_cq or send_cq, self.device.depth)
        qp.to_rts()
        child.accept(_conn_param(qp.qp_num))
        return qp

    def close(self) -> None:
        """Stop listening. While the waiting thread is inside get_request() the id stays open
        (destroying it under that call would free what the call uses): the thread closes it when
        the next request arrives, or it goes with the process."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if not self._waiter.is_alive():
                self.cmid.close()
        while True:  # requests nobody will accept: close them so their peers fail fast
            try:
                child = self._requests.get_nowait()
            except queue.Empty:
                break
            if not isinstance(child, Exception):
                child.close()


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class VerbsDevice:
    name = "verbs"

    def __init__(self, device_name: str | None = None, depth: int = 1024):
        reason = unavailable_reason()
        if reason:
            raise TransportError(reason)
        import pyverbs.device as d
        from pyverbs.pd import PD

        names = [dev.name.decode() for dev in d.get_device_list()]
        self.ctx = d.Context(name=device_name or names[0])
        self.pd = PD(self.ctx)
        self.depth = depth
        self.rc_odp_caps = 0  # what on-demand paging supports on RC queue pairs (none: 0)
        try:
            odp = self.ctx.query_device_ex().odp_caps
            if odp.general_caps & 1:  # IBV_ODP_SUPPORT
                self.rc_odp_caps = odp.rc_odp_caps
        except Exception:  # a provider without ibv_query_device_ex
            pass

    def alloc_mr(self, length: int, access: Access) -> VerbsMR:
        import mmap

        m = mmap.mmap(-1, max(length, 1))
        return VerbsMR(self, memoryview(m)[:length], access, owner=m)

    def reg_mr(self, buf, access: Access, path: str | None = None, file_offset: int = 0) -> VerbsMR:
        flags = file_region_flags(access, self.rc_odp_caps) if path else int(access)
        try:
            return VerbsMR(self, buf, access, flags=flags)
        except TransportError as e:
            if path and access & _WRITABLE and not flags & ACCESS_ON_DEMAND:
                raise TransportError(
                    f"{e}: {path} is mapped writable, Linux >= 6.5 refuses to pin such a file"
                    " mapping, and this device has no on-demand paging (ODP) for RC writes"
                ) from e
            raise

    def create_cq(self, depth: int = 1024) -> VerbsCQ:
        return VerbsCQ(self, depth)

    def listen(self, host: str = "127.0.0.1", port: int = 0) -> VerbsListener:
        return VerbsListener(self, host, port)

    def connect(self, address: str, send_cq: VerbsCQ, recv_cq: VerbsCQ | None = None) -> VerbsQP:
        import pyverbs.cm_enums as ce
        from pyverbs.cmid import CMID, AddrInfo

        host, _, port = address.rpartition(":")
        ai = AddrInfo(dst=host, dst_service=port, port_space=ce.RDMA_PS_TCP)
        cmid = CMID(creator=ai)
        qp = VerbsQP(self, cmid, send_cq, recv_cq or send_cq, self.depth)
        cmid.connect(_conn_param(qp.qp_num))
        qp.to_rts()
        cmid.establish()
        return qp

    def close(self) -> None:
        self.pd.close()
        self.ctx.close()
