"""The RDMA service's client queue pairs: their posted receives, the acknowledgements queued for
them, and which control session each belongs to.

A client opens a control session, asks `hello` for a token, connects a queue pair and SENDs the
token on it (the first receive the service sees); `attach` then waits until that has bound the
queue pair to the session. Writes on an unbound queue pair are refused (it has no grants).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import struct
import threading

from rdmalog.rdma.broker.partitions import Reply
from rdmalog.rdma.control import Session
from rdmalog.rdma.transport.interface import Access, TransportError
from rdmalog.rdma.wire import ACK, ACK_SIZE, ACKS_PER_SEND, AckStatus

log = logging.getLogger(__name__)

RECV_DEPTH = 256  # receives kept posted per queue pair (bounds a producer's in-flight writes)
ACKS_AT = RECV_DEPTH * 64  # where a client queue pair's region keeps the acknowledgements to send
HELLO = struct.Struct("<Q")


class ClientQP:
    """The service's end of one client queue pair: posted receives and queued acknowledgements."""

    def __init__(self, device, qp, acks_due: set[ClientQP]):
        self.qp = qp
        self.session: int | None = None
        self.owner: Session | None = None  # the control session it is bound to
        # One region: RECV_DEPTH 64-byte receive buffers, then the acknowledgements to send.
        self.mr = device.alloc_mr(ACKS_AT + ACKS_PER_SEND * ACK_SIZE, Access.LOCAL_WRITE)
        self._lock = threading.Lock()
        self._queued = 0  # acknowledgements packed at ACKS_AT, not sent yet
        self._acks_due = acks_due  # the service's set of queue pairs with acknowledgements queued
        # ((file id, now), its reply): the last made
        self._reply: tuple[tuple[int, bool] | None, Reply] = (None, self.ack)
        self.closed = False

    def close(self) -> None:
        """Close the queue pair and give back its buffers' region (a device has a fixed number
        of them: shm 1024); what its receives still complete is ignored (its qp_num is no
        longer the service's), and so are acknowledgements still due to it (writes of a dead
        producer given up later): their buffer is gone."""
        with self._lock:  # after any send_acks under way, before any later one
            if self.closed:  # closed by another thread (its session's end, its own error)
                return
            self.closed = True
            self._queued = 0
        self.qp.close()
        with contextlib.suppress(TransportError, BufferError):
            self.mr.deregister()

    def post_all(self) -> None:
        for i in range(RECV_DEPTH):
            self.qp.post_recv(i, self.mr, i * 64, 64)

    def repost(self, i: int) -> None:
        """Post receive i again; a client gone since (its queue pair closed) needs none, and what
        it sent before still counts."""
        try:
            self.qp.post_recv(i, self.mr, i * 64, 64)
        except TransportError:
            pass

    def ack(
        self,
        file_id: int,
        order: int,
        status: AckStatus,
        base: int,
        last: int,
        nxt: int,
        _append_time: int = -1,
    ) -> None:
        """Queue an acknowledgement: packed into the SEND buffer, sent by `send_acks` (the service
        calls it once it has committed what it could: a run of writes costs one SEND, not one
        each) or as soon as the buffer holds ACKS_PER_SEND. (The log append time of a gateway
        append's reply has no field here.)"""
        with self._lock:
            if self.closed:
                return
            n = self._queued
            ACK.pack_into(
                self.mr.buf, ACKS_AT + n * ACK_SIZE, file_id, order, status, base, last, nxt
            )
            self._queued = n = n + 1
            if n == ACKS_PER_SEND:
                self._post()
                return
        self._acks_due.add(self)

    def ack_now(
        self,
        file_id: int,
        order: int,
        status: AckStatus,
        base: int,
        last: int,
        nxt: int,
        _append_time: int = -1,
    ) -> None:
        """`ack`, then SEND it at once with any queued before it: a leader's pushed write (one
        write per poll, the leader waiting for it) skips the queue and `send_acks`."""
        with self._lock:
            if self.closed:
                return
            n = self._queued
            ACK.pack_into(
                self.mr.buf, ACKS_AT + n * ACK_SIZE, file_id, order, status, base, last, nxt
            )
            self._queued = n + 1
            self._post()

    def send_acks(self) -> None:
        with self._lock:
            if self._queued:  # none once closed
                self._post()

    def _post(self) -> None:
        """SEND the queued acknowledgements (a SEND's payload is taken at post time, so the
        buffer is free again at once); under the lock."""
        n, self._queued = self._queued, 0
        try:
            self.qp.post_send(0, self.mr, ACKS_AT, n * ACK_SIZE, signaled=False)
        except (TransportError, OSError):
            pass  # the client is gone

    def reply(self, file_id: int, now: bool = False) -> Reply:
        """What answers the writes of file `file_id` on this queue pair (the last one made is
        kept: a queue pair's writes go to one file or a few); `now`: `ack_now` (a replica's)."""
        key, reply = self._reply
        if key != (file_id, now):
            reply = functools.partial(self.ack_now if now else self.ack, file_id)
            self._reply = ((file_id, now), reply)
        return reply


class QueuePairs:
    """The accepted queue pairs by number, and their binding to control sessions. `lock` is the
    service's (a session's state is read under it)."""

    def __init__(self, device, lock: threading.RLock):
        self.device = device
        self.lock = lock
        self.by_num: dict[int, ClientQP] = {}
        self.acks_due: set[ClientQP] = set()  # queue pairs with acknowledgements to send
        self._tokens: dict[int, Session] = {}
        self._bound = threading.Condition(lock)

    def accept(self, qp) -> None:
        """List a queue pair the listener accepted and post its receives; one that fails in
        setup is closed again."""
        cqp = None
        try:
            cqp = ClientQP(self.device, qp, self.acks_due)
            with self.lock:
                self.by_num[qp.qp_num] = cqp
            cqp.post_all()  # only now: a completion must find its QP in by_num
        except Exception as exc:  # e.g. the peer closed right after connecting
            if isinstance(exc, TransportError):
                log.info("rdma: queue pair %s closed during setup: %s", qp.qp_num, exc)
            else:
                log.exception("rdma: queue pair setup failed")
            if cqp is not None:  # listed in by_num, and its region registered
                self.drop(cqp)
            else:
                qp.close()

    def drop(self, cqp: ClientQP) -> None:
        """Forget a client queue pair (if still listed) and close it."""
        with self.lock:
            if self.by_num.get(cqp.qp.qp_num) is cqp:
                del self.by_num[cqp.qp.qp_num]
        cqp.close()

    def token(self, s: Session) -> int:
        """A token for session s's queue pair to say hello with."""
        token = int.from_bytes(os.urandom(8), "little")
        with self.lock:
            self._tokens[token] = s
        return token

    def hello(self, cqp: ClientQP, wr_id: int) -> None:
        """Receive `wr_id` of cqp completed: the token it carries binds cqp to its session (a
        second hello of the session replaces the first queue pair)."""
        token = HELLO.unpack_from(cqp.mr.buf, wr_id * 64)[0]
        cqp.repost(wr_id)
        with self.lock:
            s = self._tokens.pop(token, None)
            old = None
            if s is not None:
                old = s.state.get("qp")
                s.state["qp"] = cqp
                cqp.session, cqp.owner = s.id, s
                self._bound.notify_all()
        if old is not None and old is not cqp:
            self.drop(old)

    def wait_attached(self, s: Session, timeout: float) -> bool:
        """Whether a queue pair said hello with s's token (waits up to `timeout` seconds)."""
        with self.lock:
            return self._bound.wait_for(lambda: "qp" in s.state, timeout=timeout)

    def session_closed(self, s: Session) -> None:
        """Forget s's tokens and drop its queue pair."""
        with self.lock:
            cqp = s.state.get("qp")
            for token, sess in list(self._tokens.items()):
                if sess is s:
                    del self._tokens[token]
        if cqp is not None:
            self.drop(cqp)

    def close(self) -> None:
        for cqp in list(self.by_num.values()):
            cqp.close()
