"""The broker side of KafkaDirect's datapaths over a Store: `RdmaService`, the thread shell.

It owns the transport (device, listener, completion queues) and the control server, and runs two
threads: the accept loop (queue pairs) and the completion loop (WRITE_WITH_IMM notifications,
hello SENDs, order timeouts, commit-slot folds). The work is done by its parts:

- `grants.py`: the control requests (grants of head files, READ registrations, metadata slots);
- `ordered_commits.py`: writes that landed, committed in order through `PartitionLog.commit_written`
  and acknowledged; the gateway's appends ordered with them;
- `partitions.py`: what is tracked per partition, kept current by the log's listeners;
- `queue_pairs.py`: the client queue pairs and their binding to control sessions;
- `commit_slots.py` (offset commits by FETCH_AND_ADD), `prefault.py` (head files' pages).

Consumers read files one-sidedly: the service only keeps their metadata slots current and
withdraws the registrations of deleted segments.

Lock order: a file's lock, then the service's lock (`lock`, shared by the parts), then the log's
lock. Store listeners called under the log lock (high watermark, roll) only set flags and write
slot words, never take a file lock; the start listener is called with the log's lock free and
takes the service's.
"""

from __future__ import annotations

import logging
import threading
import time

from rdmalog.rdma.broker.access_control import AccessControl
from rdmalog.rdma.broker.commit_slots import CommitSink, CommitSlots
from rdmalog.rdma.broker.grants import Grants
from rdmalog.rdma.broker.ordered_commits import Arrival, OrderedCommits
from rdmalog.rdma.broker.partitions import Partitions, ProduceFile, datapath_counters
from rdmalog.rdma.broker.prefault import Prefaulter
from rdmalog.rdma.broker.queue_pairs import RECV_DEPTH, QueuePairs
from rdmalog.rdma.broker.replicated_acks import ACKS_ALL, held_reply
from rdmalog.rdma.control import ControlServer, Session
from rdmalog.rdma.transport.devices import open_device
from rdmalog.rdma.transport.interface import Opcode, Status, TransportError
from rdmalog.rdma.wire import AckStatus, imm_decode
from rdmalog.security.authorizer import Authorizer
from rdmalog.security.sasl import Credentials

# Enum members read on hot paths, as module constants: attribute access on an Enum class
# costs ~10x a global lookup on Python 3.11.
_SUCCESS = Status.SUCCESS
_RECV = Opcode.RECV
_REVOKED = AckStatus.REVOKED

log = logging.getLogger(__name__)

TICK = 0.01  # seconds between the completion loop's checks of order timeouts and commit folds


class RdmaService:
    """KafkaDirect's RDMA module for one broker: `start()`, serve, `stop()`."""

    def __init__(
        self,
        store,
        transport: str = "shm",
        host: str = "127.0.0.1",
        control_port: int = 0,
        order_timeout: float = 1.0,
        slots_per_consumer: int = 1024,
        commit_sink: CommitSink | None = None,
        commit_interval: float = 0.1,
        credentials: Credentials | None = None,
        authorizer: Authorizer | None = None,
        replica_credits: int = 32,
    ):
        """`credentials`: require SASL on control connections (None: every session is
        User:ANONYMOUS); `authorizer`: what each principal may be granted (None: everything);
        `replica_credits`: the writes a leader pushing to this broker may have outstanding."""
        self.store = store
        self.kind = transport
        self.host = host
        self.device = open_device(transport)
        self.listener = self.device.listen(host)
        self.rdma_address = self.listener.address
        self.recv_cq = self.device.create_cq(4096)
        self.send_cq = self.device.create_cq(4096)
        self.commit_slots = CommitSlots(self.device, commit_sink)  # offset commits by FETCH_AND_ADD
        self.commit_interval = commit_interval
        self.lock = threading.RLock()
        self.files: dict[int, ProduceFile] = {}  # granted head files by file id
        self.partitions = Partitions(store, self.lock)
        self.parts = self.partitions.by_key
        self.queue_pairs = QueuePairs(self.device, self.lock)
        self.qps = self.queue_pairs.by_num
        self.prefault = Prefaulter()
        self.counters = datapath_counters()  # grants, commits, revocations (gateway/metrics.py)
        self.ordering = OrderedCommits(
            self.lock,
            self.files,
            self.queue_pairs.acks_due,
            self.prefault,
            self.partitions.get,
            order_timeout,
            self.counters,
        )
        self.grants = Grants(
            store=store,
            device=self.device,
            lock=self.lock,
            files=self.files,
            partitions=self.partitions,
            queue_pairs=self.queue_pairs,
            ordering=self.ordering,
            commit_slots=self.commit_slots,
            prefault=self.prefault,
            slots_per_consumer=slots_per_consumer,
            hello_reply={"rdma_address": self.rdma_address, "transport": transport},
            access=AccessControl(credentials, authorizer),
            replica_credits=min(replica_credits, RECV_DEPTH // 2),
            counters=self.counters,
        )
        self.control = ControlServer(self.grants.handle, self._session_closed, host, control_port)
        self.control_address = self.control.address
        self.grants.access.authorizer.add_listener(self._access_changed)
        _warn_if_exposed(transport, host, credentials is not None)
        self._stop = threading.Event()
        # The completion loop's test: a plain attribute (Event.is_set is a Python call).
        self._running = True
        self._threads: list[threading.Thread] = []

    @property
    def order_timeout(self) -> float:
        """Seconds a write waits for its missing predecessor (`rdma.order.timeout.ms`)."""
        return self.ordering.order_timeout

    @order_timeout.setter
    def order_timeout(self, seconds: float) -> None:
        self.ordering.order_timeout = seconds

    # -- life cycle --------------------------------------------------------------------------------
    def start(self) -> RdmaService:
        for target, name in (
            (self._accept_loop, "rdma-accept"),
            (self._completion_loop, "rdma-cq"),
        ):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        self.control.start()
        return self

    def stop(self) -> None:
        self._running = False
        self._stop.set()
        self.control.stop()
        for t in self._threads:
            t.join(5)
        self.commit_slots.fold()  # what sessions still open committed through their slots
        with self.lock:
            for f in list(self.files.values()):
                f.revoke()
            self.partitions.stop_listening()
        self.prefault.stop()
        self.queue_pairs.close()
        self.listener.close()
        for cq in (self.recv_cq, self.send_cq):  # tcp: an eventfd each, no GC closes them
            cq.close()
        self.device.close()

    def __enter__(self) -> RdmaService:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- the gateway's appends (see OrderedCommits) ------------------------------------------------
    @property
    def leader_check(self):
        """Cluster mode: `check(topic, partition)` is 0 where this broker leads (see Partitions)."""
        return self.partitions.leader_check

    @leader_check.setter
    def leader_check(self, check) -> None:
        self.partitions.leader_check = check

    def revoke_produce(self, topic: str, partition: int) -> None:
        """Withdraw a partition's produce grant (cluster mode: its leadership moved away, or the
        leader pushing to this follower did). Once this returns nothing more of it is
        committed: a commit under way finishes first (it holds the file's lock)."""
        with self.lock:
            ps = self.parts.get((topic, partition))
            f = None if ps is None else ps.produce
        if ps is not None:  # a pushed replica takes what its leader last said was replicated
            hw = max(ps.replica_hw, 0 if f is None else f.replica_hw())
            if hw > 0:  # (capped at this log's end; never backwards) before it may lead itself
                ps.log.set_high_watermark(hw)
        if f is not None and not f.revoked:
            with f.lock:
                self.ordering.revoke(f)

    def serve_replicas(self, check, pushed) -> None:
        """Cluster mode, push replication: `check(topic, partition, leader, epoch)` says whether
        this broker follows `leader` in `epoch` (whose grants of the replica's head it then
        honours); `pushed(topic, partition, held)` is told when such a grant starts and ends."""
        self.partitions.replica_check = check
        self.partitions.replica_pushed = pushed

    def replicated_acks(self, wait, isr_check) -> None:
        """Cluster mode: native producers with acks=all are answered once `wait(topic, partition,
        last_offset, timeout_s, done)` calls `done(code)` (replicated_acks.py), and refused at
        their grant while `isr_check(topic, partition)` says too few replicas are in sync."""
        self.partitions.replicated_wait = wait
        self.partitions.isr_check = isr_check

    def try_append(self, topic: str, partition: int, buf, leader_epoch: int | None = None):
        """A plain append when no RDMA producer holds the head; None: call `append` off the loop."""
        return self.ordering.try_append(topic, partition, buf, leader_epoch)

    def append(self, topic: str, partition: int, buf, leader_epoch: int | None = None):
        """An append ordered with the RDMA writes of a shared grant (it may wait)."""
        return self.ordering.append(topic, partition, buf, leader_epoch)

    # -- threads -----------------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                qp = self.listener.accept(self.send_cq, self.recv_cq, timeout=0.2)
            except (TransportError, OSError):
                continue
            except Exception:  # one bad connection request must not stop every later accept
                log.exception("rdma: connection setup failed")
                continue
            self.queue_pairs.accept(qp)

    def _completion_loop(self) -> None:
        """Notice writes and commit them on this thread, no hand-off: the commit of a write is
        done by the thread whose completion poll saw it. Every 10 ms (`TICK`) it also gives up
        writes that waited too long, drains the send queue's error completions and folds the
        commit slots when due."""
        ordering, acks_due = self.ordering, self.queue_pairs.acks_due
        wait, take = self.recv_cq.wait, self._completion
        last_tick = last_fold = time.monotonic()
        while self._running:
            try:
                wcs = wait(0.02, 64)
            except Exception:  # keep serving: one bad completion must not stop the broker
                log.exception("rdma completion wait failed")
                continue
            if wcs:
                arrivals: list[Arrival] = []
                for wc in wcs:
                    try:
                        a = take(wc)
                    except Exception:
                        log.exception("rdma completion failed")
                    else:
                        if a is not None:
                            arrivals.append(a)
                try:  # as above: one failure must not stop every later commit
                    if arrivals:
                        ordering.arrive_many(arrivals)
                    elif acks_due:  # writes refused in _completion (no grant)
                        ordering.send_acks()
                except Exception:
                    log.exception("rdma commit failed")
            now = time.monotonic()
            if now - last_tick < TICK:
                continue
            last_tick = now
            try:  # as above
                self.send_cq.poll(256)  # acks are unsignaled: only errors land here
                ordering.check_timeouts(now)
                if now - last_fold > self.commit_interval:
                    last_fold = now
                    self.commit_slots.fold()
            except Exception:
                log.exception("rdma timeout check, send queue or commit fold failed")

    def _completion(self, wc) -> Arrival | None:
        """Handle one completion; a produce notification is returned for `arrive_many`."""
        cqp = self.qps.get(wc.qp_num)
        if cqp is None:
            return None
        if wc.status != _SUCCESS:  # flushed: the client is gone or its queue pair is in error
            if cqp.owner is None:  # one that never said hello has no session to clean up
                self.queue_pairs.drop(cqp)
            elif not cqp.closed:  # its session ends with it: a queue pair in error (a key
                # it guessed, an access outside its windows) takes the client's access along
                log.info("rdma: session %d ends: its queue pair is gone", cqp.session)
                self.queue_pairs.drop(cqp)
                self.control.end(cqp.owner)
            return None
        if wc.opcode == _RECV:  # hello: bind this QP to the control session
            self.queue_pairs.hello(cqp, wc.wr_id)
            return None
        cqp.repost(wc.wr_id)
        file_id, order = imm_decode(wc.imm_data)
        f = self.files.get(file_id)
        if f is None or cqp.session not in f.sessions:
            cqp.ack(file_id, order, _REVOKED, -1, -1, 0)
            return None
        if f.replica_of is not None:  # a leader's pushed write: acknowledged at once
            return f, order, wc.byte_len, cqp.reply(file_id, True)
        wait = self.partitions.replicated_wait
        if wait is not None:  # cluster mode: acks=all waits for the ISR
            acks = cqp.owner.state.get("acks")
            if acks is not None and acks[0] == ACKS_ALL:
                return f, order, wc.byte_len, held_reply(cqp, file_id, f.part.log, acks[1], wait)
        return f, order, wc.byte_len, cqp.reply(file_id)

    def _session_closed(self, s: Session) -> None:
        self.grants.release_session(s)
        self.queue_pairs.session_closed(s)

    def _access_changed(self) -> None:
        """The authorizer changed (any thread): withdraw grants no longer allowed."""
        for s in self.control.sessions():
            try:
                self.grants.recheck(s)
            except Exception:  # one session's failure must not keep the others' grants
                log.exception("rdma: re-checking session %d after an ACL change failed", s.id)

    # -- introspection (tests, bench) --------------------------------------------------------------
    def stats(self) -> dict:
        with self.lock:
            return {
                "qps": len(self.qps),
                "grants": len(self.files),
                "readers": sum(len(p.readers) for p in self.parts.values()),
                "slots": sum(
                    len(rf.slots) for p in self.parts.values() for rf in p.readers.values()
                ),
            }


def _warn_if_exposed(transport: str, host: str, authenticated: bool) -> None:
    """The control port and the tcp transport carry no TLS: say so when they listen beyond the
    loopback interface (trusted networks only, see docs/rdma.md "Security")."""
    import ipaddress

    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if loopback:
        return
    what = "control requests" + (" and tcp datapaths" if transport == "tcp" else "")
    log.warning(
        "rdma: %s listen on %s without TLS: use a trusted network only%s",
        what,
        host,
        "" if not authenticated else " (SASL PLAIN would send passwords in clear: prefer SCRAM)",
    )
