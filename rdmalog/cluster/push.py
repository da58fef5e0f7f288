"""Push replication (KafkaDirect section 4.3.2): a leader writes its new batches straight into its
followers' head segment files with one-sided WRITE_WITH_IMM, as a native producer of each file.

The leader holds one `FollowerLink` per follower broker: an RDMA session (control connection + RC
queue pair, `Endpoint`) to the follower's RDMA service. For each partition it pushes, it asks for
the replica's head file with the producer's `produce_access` request in mode "replica" (naming
itself and its leader epoch): the follower's service arbitrates as for producers, grants only
the leader of the epoch it follows, and tells its fetcher to stand aside while the grant is held.

Each commit on the leader (the gateway's appends, native producers' writes) kicks the links: the
bytes of whole batches after what was sent are written from the leader's own segment mapping
(registered with the link's device: no copy on the leader but the transport's) to the follower's
file at its committed position, immediate = file id | order. The follower validates and commits
them in order (`PartitionLog.commit_written(replicated=True)`) and acknowledges with its log end
offset, which the replica manager takes exactly as a follower's fetch offset.

Credits: the follower's grant says how many writes may be outstanding on the queue pair; the
leader never exceeds them (nor MAX_OUTSTANDING_BYTES of them). Batching: writes waiting for a credit are coalesced, whole batches, up
to `replica.push.batch.max.bytes` per write (a larger batch goes alone).

Back to pull: a refused or corrupt write is resent after a new grant (whose answer carries the
follower's log end offset); repeated failures, a follower that needs what the leader's head file
no longer holds, an error on the queue pair, a lost control connection or writes unanswered for
`replica.lag.time.max.ms` give the partition (or the whole link) back to pull replication. A
follower that catches up by fetching again is pushed again (`PushReplication.caught_up`).

Acknowledgements on the event loop: given the leader's loop (and a transport whose completion
queue has descriptors for one: tcp's sockets and eventfd, shm's doorbell), a link registers them
with `loop.add_reader` and the loop reads its acknowledgements itself: the high watermark
advances and the gateway's acks=all produces are answered in the loop turn that learns the ack,
with no link thread waking and handing over through `call_soon_threadsafe`. The link's thread
then keeps the rest (grants, rolls, the stall check, failures) and polls every 20 ms for what the
loop left. On shm, after writes posted off the loop (native producers'), the link's thread
busy-polls the queue for `spin_ns` with the doorbell off (`ShmCQ.spin`), as it did when it read
every ack: a stream's next acks are taken without waking anyone (docs/performance.md, "Push
replication").
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rdmalog.rdma.client.endpoint import Endpoint, SaslCredentials
from rdmalog.rdma.control import ControlError
from rdmalog.rdma.transport.interface import Access, Opcode, RemoteRegion, Status, TransportError
from rdmalog.rdma.wire import ACK, ACK_SIZE, ACKS_PER_SEND, AckStatus, imm_encode

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">qi")  # a batch's base offset and length (the 12 bytes of log overhead)
_LAST_DELTA = struct.Struct(">i")
_LAST_DELTA_AT = 23
_OVERHEAD = 12
ACK_RECVS = 128
ACK_BUF = ACKS_PER_SEND * ACK_SIZE
# Bytes written and not yet answered, per link, besides the credits: a write is the bytes of whole
# batches (one may be as large as max.message.bytes); on tcp they wait in socket buffers, and a
# leader's event loop must never block on a follower that stopped reading.
MAX_OUTSTANDING_BYTES = 2 << 20
MAX_FAILURES = 3  # refused writes in a row (no progress between) before going back to pull
RETRY_S = 1.0  # a link that failed is not tried again before this
HW_SLOTS = 64  # the leader's high watermark values being written, in turn (a WRITE's source)
_HW = struct.Struct("<q")


@dataclass
class Pushed:
    """One partition pushed over a link: the follower's grant and how far bytes were sent."""

    topic: str
    partition: int
    log: Any  # the leader's PartitionLog
    epoch: int
    file_id: int = -1
    region: RemoteRegion | None = None
    capacity: int = 0
    position: int = 0  # in the follower's file: where the next write goes
    order: int = 0
    next_offset: int = -1  # the leader's offset of the next byte to send
    source: Any = None  # the leader's segment holding next_offset (a LogSegment)
    source_mr: Any = None
    source_pos: int = 0
    state: str = "granting"  # granting, pushing, rolling, resync, gone
    inflight: int = 0
    failures: int = 0
    acked: int = -1
    hw_sent: int = -1  # the last high watermark written to the follower
    hw_word: RemoteRegion | None = None  # the follower's word for it (the grant's)
    retired: list = field(default_factory=list)  # (mr, writes still unanswered) of old sources

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.partition


class FollowerLink(Endpoint):
    """The leader's session with one follower broker's RDMA service, and its pushing thread."""

    def __init__(
        self,
        leader_id: int,
        follower_id: int,
        control_address: str,
        transport: str,
        *,
        batch_max: int,
        stall_s: float,
        on_ack: Callable[[Pushed, int], None],
        on_pull: Callable[[Pushed, str], None],
        on_down: Callable[[FollowerLink, str], None],
        sasl: SaslCredentials | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        """`sasl`: the inter-broker login, for a follower whose RDMA service requires one; `loop`:
        the event loop that reads the acknowledgements (None: the link's thread does)."""
        super().__init__(control_address, transport, timeout=5.0, sasl=sasl)
        self.leader_id, self.follower_id = leader_id, follower_id
        self.batch_max = batch_max
        self.stall_s = stall_s
        self.on_ack, self.on_pull, self.on_down = on_ack, on_pull, on_down
        self.lock = threading.Lock()  # posting state; never held while waiting for another lock
        self.parts: dict[tuple[str, int], Pushed] = {}
        self.by_file: dict[int, Pushed] = {}
        self.credits = 1  # until a grant says how many
        # writes not answered yet, oldest first: (wr id, file id, order, posted at)
        self.outstanding: deque[tuple[int, int, int, float, int]] = deque()  # ..., bytes
        self.outstanding_bytes = 0
        self._wr = 0
        self._acked: list[tuple[Pushed, int]] = []  # acknowledgements to report (on_ack)
        self._work: deque[Callable[[], None]] = deque()
        self._stop = threading.Event()
        self.acks = self.device.alloc_mr(ACK_RECVS * ACK_BUF, Access.LOCAL_WRITE)
        for i in range(ACK_RECVS):
            self.qp.post_recv(i, self.acks, i * ACK_BUF, ACK_BUF)
        self.hw_buf = self.device.alloc_mr(HW_SLOTS * _HW.size, Access.LOCAL_WRITE)
        self._hw_slot = 0
        self.down: str | None = None
        # (the loop reading the acks) the link's thread has work the loop cannot do
        self._wake = threading.Event()
        self._loop_error: Exception | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_fds: list[int] = []  # dups: the link never closes a descriptor under the loop
        # (the loop reading the acks, shm) after traffic the thread busy-polls the queue, GIL
        # released and the doorbell off: a stream's next acks need no wake-up of the loop
        self._spin = hasattr(self.cq, "spin")
        self._recent = False
        self._streams = False  # the last writes were posted off the loop (native producers')
        self._loop_ident = -1
        if loop is not None and hasattr(self.cq, "notify_fds") and not loop.is_closed():
            self._loop = loop
            self._loop_fds = [os.dup(fd) for fd in self.cq.notify_fds()]
            loop.call_soon_threadsafe(self._attach)
        self.thread = threading.Thread(target=self._run, name=f"push-to-{follower_id}", daemon=True)
        self.thread.start()

    # -- what the replication manager asks (any thread) ----------------------------------------------
    def push(self, pp: Pushed) -> None:
        """Start pushing pp (a grant is asked for on the link's thread)."""
        with self.lock:
            old = self.parts.get(pp.key)
            if old is not None:
                old.state = "gone"
            self.parts[pp.key] = pp
        self._work.append(lambda: self._grant(pp))
        self._wake.set()

    def remove(self, key: tuple[str, int]) -> None:
        """Stop pushing a partition (leadership moved): its grant is given back."""
        with self.lock:
            pp = self.parts.pop(key, None)
            if pp is None:
                return
            pp.state = "gone"
        self._work.append(lambda: self._release(pp))
        self._wake.set()

    def kick(self, plog: Any) -> None:
        """The leader's log grew: send what is new (called on the committing thread)."""
        key = (plog.topic, plog.partition)
        self._streams = threading.get_ident() != self._loop_ident  # (see _readable)
        with self.lock:
            pp = self.parts.get(key)
            if pp is not None and pp.state == "pushing" and pp.log is plog:
                self._pump(pp)

    def high_watermark(self, plog: Any, hw: int) -> None:
        """The leader's high watermark of a pushed partition advanced (any thread): WRITE it into
        the follower's word for the grant, one-sided (nothing runs on the follower for it; on
        shm not even a wake-up). The follower takes it when its role changes (a failover
        serves what was replicated at once), its fetches every replica.fetch.wait.max.ms."""
        key = (plog.topic, plog.partition)
        with self.lock:
            pp = self.parts.get(key)
            if pp is None or pp.state != "pushing" or pp.log is not plog or hw <= pp.hw_sent:
                return
            if pp.hw_word is None:
                return
            off = self._hw_slot * _HW.size
            _HW.pack_into(self.hw_buf.buf, off, hw)
            try:
                self.qp.post_write(
                    0, self.hw_buf, off, _HW.size, pp.hw_word.addr, pp.hw_word.rkey,
                    signaled=False,
                )  # fmt: skip
            except TransportError:
                return  # the link's thread sees the queue pair fail
            self._hw_slot = (self._hw_slot + 1) % HW_SLOTS
            pp.hw_sent = hw

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self.thread is not threading.current_thread():
            self.thread.join(5)
        self._detach_from_loop()
        super().close()

    # -- the event loop's side (acknowledgements read where they are answered) ------------------------
    def _attach(self) -> None:
        """(On the loop) watch the completion queue's descriptors."""
        if self._stop.is_set() or self.down is not None:
            self._detach()
            return
        self._loop_ident = threading.get_ident()
        for fd in self._loop_fds:
            self._loop.add_reader(fd, self._readable)

    def _readable(self) -> None:
        """(On the loop) completions may be ready: take them, answer what they acknowledge, and
        leave to the link's thread what would block (control requests, the log's lock)."""
        if self._stop.is_set() or self.down is not None:
            self._detach()
            return
        try:
            self.cq.notified()
            got = self._service(None)
        except Exception as exc:  # the thread fails the link (on_down, pull) as for its own
            self._loop_error = exc
            self._detach()
            self._wake.set()
            return
        if got and self._spin and self._streams and not self._recent:
            # native producers' writes: the thread watches for their next acks (see _run); the
            # gateway's stay the loop's (a thread spinning for nothing takes the core the
            # answer and the client need)
            self._recent = True
            self._wake.set()
        elif self._work or any(self._thread_work(pp) for pp in list(self.parts.values())):
            self._wake.set()

    def _detach(self) -> None:
        """(On the loop) stop watching; the duplicated descriptors are closed."""
        fds, self._loop_fds = self._loop_fds, []
        for fd in fds:
            if not self._loop.is_closed():
                self._loop.remove_reader(fd)
            os.close(fd)

    def _detach_from_loop(self) -> None:
        """_detach on the loop, from any thread (a loop that no longer runs keeps the fds)."""
        loop = self._loop
        if loop is None or not self._loop_fds:
            return
        if loop.is_closed():
            self._detach()
            return
        try:
            if asyncio.get_running_loop() is loop:
                self._detach()
                return
        except RuntimeError:
            pass
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        loop.call_soon_threadsafe(lambda: (self._detach(), done.set_result(None)))
        try:
            done.result(2.0)
        except concurrent.futures.TimeoutError:
            log.info("push link to broker %d: event loop not running; fds left", self.follower_id)

    # -- the link's thread ------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                while self._work:
                    self._work.popleft()()
                if self._loop is None:
                    got = self._service(self.cq.wait(0.02, 64))
                else:  # the loop reads the acknowledgements; this polls for what it left
                    if self._spin and self._recent:  # right after traffic: this thread watches
                        self._recent = False  # the queue for the next ones (no loop wake-up)
                        self.cq.spin()
                    else:
                        self._wake.wait(0.02)
                        self._wake.clear()
                    if self._loop_error is not None:
                        raise self._loop_error
                    got = self._service(None)
                    self._recent = self._recent or got
                self._after_pump()
                self._check_stall()
                if not got and not self.ctl.alive():
                    raise TransportError("the follower's control connection closed")
        except Exception as exc:  # the link is gone: every partition on it goes back to pull
            if not self._stop.is_set():
                self._fail(f"{exc}")

    def _service(self, wcs: list | None) -> bool:
        """Take completions (None: poll the queue for all that are ready), post what their
        credits allow, and report the acknowledgements (on the calling thread: the loop's or the
        link's). Whether there were any."""
        got = False
        with self.lock:
            while True:
                batch = self.cq.poll(64) if wcs is None else wcs
                for wc in batch:
                    self._completion(wc)
                got = got or bool(batch)
                if wcs is not None or len(batch) < 64:
                    break
            for pp in list(self.parts.values()):
                if pp.state == "pushing":
                    self._pump(pp)
            acked, self._acked = self._acked, []
        for pp, leo in acked:  # outside the lock: the high watermark it moves is sent
            self.on_ack(pp, leo)  # on the links, this one's included
        return got

    def _thread_work(self, pp: Pushed) -> bool:
        """Whether pp needs what only the link's thread does (see _after_pump)."""
        if pp.state in ("rolling", "resync"):
            return pp.inflight == 0
        return pp.state == "pushing" and pp.source is not None and self._source_done(pp)

    def _fail(self, why: str) -> None:
        with self.lock:
            self.down = why
            parts, self.parts = list(self.parts.values()), {}
        for pp in parts:
            pp.state = "gone"
        self.on_down(self, why)

    def _after_pump(self) -> None:
        """Work the pump found but cannot do under the link's lock: rolls (a control request)
        and the next source file (the leader log's lock)."""
        for pp in list(self.parts.values()):
            if pp.state == "rolling" and pp.inflight == 0:
                self._roll(pp)
            elif pp.state == "resync" and pp.inflight == 0:
                self._grant(pp)
            elif pp.state == "pushing" and pp.source is not None and self._source_done(pp):
                self._next_source(pp)

    def _check_stall(self) -> None:
        if self.outstanding and time.monotonic() - self.outstanding[0][3] > self.stall_s:
            raise TransportError(f"writes unanswered for {self.stall_s:.1f} s")

    # -- grants -----------------------------------------------------------------------------------
    def _grant(self, pp: Pushed) -> None:
        """Ask for the replica's head file; push from the follower's log end offset."""
        if pp.state == "gone":
            return
        r = self._ask(
            pp, "produce_access", topic=pp.topic, partition=pp.partition, mode="replica",
            leader=self.leader_id, leader_epoch=pp.epoch,
        )  # fmt: skip
        if r is None:
            return
        with self.lock:
            if pp.state == "gone":
                return
            self._take_grant(pp, r)
            pp.next_offset = r["log_end_offset"]
            self.credits = max(1, int(r.get("credits", 1)))
        if not self._source_at(pp, pp.next_offset):
            self._to_pull(pp, f"offset {pp.next_offset} is not in the leader's head file")
            return
        with self.lock:
            if pp.state != "gone":
                pp.state = "pushing"
                self._pump(pp)
        log.info(
            "%s-%d: pushing to follower %d from offset %d (file %d, %d credits)",
            *pp.key, self.follower_id, pp.next_offset, pp.file_id, self.credits,
        )  # fmt: skip

    def _ask(self, pp: Pushed, op: str, **args) -> dict | None:
        """A control request for pp; refused (not following that leader, not authorized ...):
        pp goes back to pull and None. A lost connection raises (the whole link goes)."""
        try:
            return self.control(op, **args)
        except TransportError:
            raise
        except Exception as exc:  # ControlError or the Kafka error it names
            self._to_pull(pp, f"{op} refused: {exc}")
            return None

    def _take_grant(self, pp: Pushed, r: dict) -> None:
        self.by_file.pop(pp.file_id, None)
        pp.file_id = r["file_id"]
        pp.region = RemoteRegion.from_dict(r["region"])
        pp.capacity, pp.position, pp.order = r["length"], r["position"], r["order"]
        pp.hw_word = RemoteRegion.from_dict(r["word"]) if r.get("word") else None
        pp.hw_sent = -1  # a new grant, a new word
        self.by_file[pp.file_id] = pp

    def _roll(self, pp: Pushed) -> None:
        """The follower's head file is full: it rolls, and grants the new one."""
        r = self._ask(
            pp, "next_file", topic=pp.topic, partition=pp.partition, file_id=pp.file_id,
            mode="replica", leader=self.leader_id, leader_epoch=pp.epoch,
        )  # fmt: skip
        if r is None:
            return
        with self.lock:
            if pp.state != "gone":
                self._take_grant(pp, r)
                if r["log_end_offset"] != pp.next_offset:
                    pp.state = "resync"
                else:
                    pp.state = "pushing"
                    self._pump(pp)

    def _release(self, pp: Pushed) -> None:
        self._drop_sources(pp)
        if pp.file_id >= 0 and self.down is None:
            try:
                self.control("release_produce", file_id=pp.file_id)
            except ControlError:
                pass
        with self.lock:
            self.by_file.pop(pp.file_id, None)

    def _to_pull(self, pp: Pushed, why: str) -> None:
        """Give pp back to pull replication."""
        with self.lock:
            if self.parts.get(pp.key) is pp:
                del self.parts[pp.key]
            was_gone = pp.state == "gone"
            pp.state = "gone"
        self._release(pp)
        if not was_gone:
            log.info("%s-%d: pull replication for follower %d (%s)", *pp.key, self.follower_id, why)
            self.on_pull(pp, why)

    # -- the leader's files -----------------------------------------------------------------------
    def _source_at(self, pp: Pushed, offset: int) -> bool:
        """Make the leader's file holding `offset` (a batch must start there) the source."""
        plog = pp.log
        try:
            with plog.lock:
                if offset > plog.log_end_offset or not plog.segments:
                    return False
                with plog.file_for_reading(offset) as at:
                    seg, pos = at.file, at.position
                    if seg is not plog.segments[-1] and pos >= seg.size:
                        return False
                    if pos < seg.size and _HEADER.unpack_from(seg.mmap, pos)[0] < offset:
                        return False
                    mm = seg.mmap
                    if mm is None:
                        return False
                    mr = self.device.reg_mr(mm, Access.LOCAL_WRITE, path=str(seg.path))
        except Exception as exc:  # out of range, a closed log: pull
            log.info("%s-%d: no source at %d: %r", *pp.key, offset, exc)
            return False
        with self.lock:
            if pp.source_mr is not None:  # deregistered once its writes are answered
                pp.retired.append([pp.source_mr, pp.inflight])
                self._work.append(lambda: self._free_retired(pp))
            pp.source, pp.source_mr, pp.source_pos = seg, mr, pos
        return True

    def _source_done(self, pp: Pushed) -> bool:
        """Everything of the source was sent and the leader has rolled past it."""
        seg = pp.source
        return pp.source_pos >= seg.size and pp.log.segments[-1] is not seg

    def _next_source(self, pp: Pushed) -> None:
        if not self._source_at(pp, pp.next_offset) or pp.source_pos != 0:
            self._to_pull(pp, "the leader's next file is not where expected")

    def _drop_sources(self, pp: Pushed) -> None:
        with self.lock:
            mrs = [m for m, _ in pp.retired] + [pp.source_mr]
            pp.retired, pp.source_mr, pp.source = [], None, None
        for mr in mrs:
            if mr is not None:
                try:
                    mr.deregister()
                except (TransportError, BufferError):
                    pass

    # -- posting (the link's lock held) ------------------------------------------------------------
    def _pump(self, pp: Pushed) -> None:
        """Post writes of what the leader committed after pp's last one, as credits allow."""
        seg = pp.source
        if seg is None:
            return
        mm = pp.source_mr.buf
        while (
            len(self.outstanding) < self.credits
            and self.outstanding_bytes < MAX_OUTSTANDING_BYTES
            and pp.state == "pushing"
        ):
            end = seg.size
            pos = start = pp.source_pos
            offset = pp.next_offset
            room = pp.capacity - pp.position
            while pos + _OVERHEAD <= end:
                base, length = _HEADER.unpack_from(mm, pos)
                size = length + _OVERHEAD
                if base < offset or pos + size > end:  # (offsets may skip: compaction)
                    break
                if pos > start and (pos + size - start > self.batch_max):
                    break
                if pos + size - start > room:
                    break
                offset = base + _LAST_DELTA.unpack_from(mm, pos + _LAST_DELTA_AT)[0] + 1
                pos += size
            if pos == start:
                if start + _OVERHEAD <= end and room < end - start:
                    pp.state = "rolling"  # the next batch does not fit the follower's file
                return
            n = pos - start
            self._wr += 1
            order = pp.order
            try:
                self.qp.post_write(
                    self._wr, pp.source_mr, start, n, pp.region.addr + pp.position,
                    pp.region.rkey, imm=imm_encode(pp.file_id, order), signaled=False,
                )  # fmt: skip
            except TransportError:
                pp.state = "resync"
                return
            pp.order = (order + 1) & 0xFFFF
            pp.position += n
            pp.source_pos = pos
            pp.next_offset = offset
            pp.inflight += 1
            self.outstanding.append((self._wr, pp.file_id, order, time.monotonic(), n))
            self.outstanding_bytes += n

    def _completion(self, wc) -> None:
        if wc.opcode == Opcode.RECV:
            if wc.status != Status.SUCCESS:
                raise TransportError(f"the queue pair failed: {wc.status.name}")
            off = wc.wr_id * ACK_BUF
            n = wc.byte_len - wc.byte_len % ACK_SIZE
            for fid, order, status, _base, last, _ in ACK.iter_unpack(self.acks.buf[off : off + n]):
                self._ack(fid, order, status, last)
            self.qp.post_recv(wc.wr_id, self.acks, off, ACK_BUF)
        elif wc.status == Status.WR_FLUSH_ERR:
            raise TransportError("the queue pair to the follower was flushed")
        elif wc.status != Status.SUCCESS:
            # A write that never reached the file (its grant was revoked: a roll, a leader
            # change): the follower will not answer it. Granted again, or back to pull.
            for entry in self.outstanding:
                if entry[0] == wc.wr_id:
                    self._ack(entry[1], entry[2], AckStatus.REVOKED, -1)
                    break

    def _ack(self, fid: int, order: int, status: int, last: int) -> None:
        for i, entry in enumerate(self.outstanding):
            if entry[1] == fid and entry[2] == order:
                del self.outstanding[i]
                self.outstanding_bytes -= entry[4]
                break
        pp = self.by_file.get(fid)
        if pp is None:
            return
        pp.inflight = max(0, pp.inflight - 1)
        if pp.retired and pp.inflight == 0:
            self._work.append(lambda: self._free_retired(pp))
        if pp.state == "gone":
            return
        if status == AckStatus.OK:
            pp.failures = 0
            pp.acked = last + 1
            self._acked.append((pp, last + 1))  # reported once the lock is released
            return
        if pp.state == "pushing" or pp.state == "rolling":
            pp.failures += 1
            log.info(
                "%s-%d: follower %d refused a pushed write (%s); granting again",
                *pp.key, self.follower_id, AckStatus(status).name,
            )  # fmt: skip
            pp.state = "resync" if pp.failures <= MAX_FAILURES else "failed"
            if pp.state == "failed":
                self._work.append(lambda: self._to_pull(pp, "writes refused repeatedly"))

    def _free_retired(self, pp: Pushed) -> None:
        with self.lock:
            if pp.inflight:
                return
            mrs, pp.retired = [m for m, _ in pp.retired], []
        for mr in mrs:
            try:
                mr.deregister()
            except (TransportError, BufferError):
                pass


class PushReplication:
    """The leader's side of push replication for one broker: a link per follower broker, the
    partitions pushed over each, and the replica manager's hooks (`caught_up`, `appended`,
    `stop_leading`). Acknowledgements go to `acked(topic, partition, follower, epoch, leo)`
    and fallbacks to `pulled(topic, partition, follower)`, both on any thread."""

    def __init__(
        self,
        leader_id: int,
        rdma_of: Callable[[int], tuple[str, str] | None],
        acked: Callable[[str, int, int, int, int], None],
        pulled: Callable[[str, int, int], None],
        *,
        batch_max: int = 4096,
        stall_s: float = 30.0,
        sasl: SaslCredentials | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        """`loop`: the event loop the links' acknowledgements are read on (see the module's doc)."""
        self.loop = loop
        self.leader_id = leader_id
        self.sasl = sasl
        self.rdma_of = rdma_of
        self.acked, self.pulled = acked, pulled
        self.batch_max, self.stall_s = batch_max, stall_s
        self.links: dict[int, FollowerLink] = {}
        self._failed_at: dict[int, float] = {}
        self._lock = threading.Lock()
        self._connecting: set[int] = set()

    def caught_up(self, plog: Any, epoch: int, follower: int) -> bool:
        """A follower fetched up to the leader's log end: push to it from now on. Returns True
        when pushing starts (the link is made in a thread when new)."""
        with self._lock:
            if follower in self._connecting:
                return False
            if time.monotonic() - self._failed_at.get(follower, -RETRY_S) < RETRY_S:
                return False
            link = self.links.get(follower)
            if link is None:
                self._connecting.add(follower)
        pp = Pushed(plog.topic, plog.partition, plog, epoch)
        if link is not None:
            link.push(pp)
            return True
        threading.Thread(
            target=self._connect, args=(follower, pp), name="push-connect", daemon=True
        ).start()
        return True

    def _connect(self, follower: int, pp: Pushed) -> None:
        try:
            where = self.rdma_of(follower)
            if where is None:
                raise TransportError("the follower serves no RDMA transport")
            link = FollowerLink(
                self.leader_id, follower, where[0], where[1],
                batch_max=self.batch_max, stall_s=self.stall_s,
                on_ack=lambda p, leo: self.acked(p.topic, p.partition, follower, p.epoch, leo),
                on_pull=lambda p, _why: self.pulled(p.topic, p.partition, follower),
                on_down=self._down, sasl=self.sasl, loop=self.loop,
            )  # fmt: skip
        except Exception as exc:
            log.info("push replication to broker %d not possible: %r; pulling", follower, exc)
            with self._lock:
                self._connecting.discard(follower)
                self._failed_at[follower] = time.monotonic()
            self.pulled(pp.topic, pp.partition, follower)
            return
        with self._lock:
            self._connecting.discard(follower)
            self.links[follower] = link
        link.push(pp)

    def _down(self, link: FollowerLink, why: str) -> None:
        log.info("push link to broker %d is down (%s): pull replication", link.follower_id, why)
        with self._lock:
            if self.links.get(link.follower_id) is link:
                del self.links[link.follower_id]
            self._failed_at[link.follower_id] = time.monotonic()
        threading.Thread(target=link.close, daemon=True).start()
        self.pulled("", -1, link.follower_id)  # every partition of that follower

    def appended(self, plog: Any) -> None:
        """The leader's log grew (any thread): push it."""
        for link in list(self.links.values()):
            link.kick(plog)

    def high_watermark(self, plog: Any, hw: int) -> None:
        """The leader's high watermark of `plog` advanced: tell the followers it is pushed to."""
        for link in list(self.links.values()):
            link.high_watermark(plog, hw)

    def stop_leading(self, topic: str, partition: int) -> None:
        for link in list(self.links.values()):
            link.remove((topic, partition))

    def forget_follower(self, topic: str, partition: int, follower: int) -> None:
        link = self.links.get(follower)
        if link is not None:
            link.remove((topic, partition))

    def stats(self) -> dict:
        return {
            f: {"partitions": len(link.parts), "outstanding": len(link.outstanding)}
            for f, link in list(self.links.items())
        }

    def close(self) -> None:
        with self._lock:
            links, self.links = list(self.links.values()), {}
        for link in links:
            link.close()
