"""acks=all for native producers in cluster mode: a committed write's acknowledgement is held
until the high watermark covers its batch, as Kafka answers an acks=all produce.

A producer says `acks` (-1: all, 1: the leader's commit) and `request_timeout_ms` in its
`produce_access` request; they hold for the session. In cluster mode (`Partitions.replicated_wait`
set by the replica manager) an acks=all session's writes are answered once the ISR holds them:
OK as usual, or NOT_REPLICATED with the Kafka error code (REQUEST_TIMED_OUT after the timeout,
NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below `min.insync.replicas`,
NOT_LEADER_OR_FOLLOWER when leadership moved) in the base offset field; the batch was committed
by the leader then, as Kafka's after-append errors say. Refusals before the commit
(NOT_ENOUGH_REPLICAS) are made when access is granted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rdmalog.rdma.broker.partitions import Reply
from rdmalog.rdma.control import ControlError, Session, arg
from rdmalog.rdma.wire import AckStatus

_ACK_OK = AckStatus.OK
_NOT_REPLICATED = AckStatus.NOT_REPLICATED

ACKS_ALL, ACKS_LEADER = -1, 1
MAX_TIMEOUT_MS = (1 << 31) - 1

# (topic, partition, last offset, timeout in seconds, done(Kafka error code)): done on any thread
ReplicatedWait = Callable[[str, int, int, float, Callable[[int], None]], None]


def take_acks(s: Session, req: dict) -> int:
    """The `acks` and `request_timeout_ms` of a produce_access request, kept for the session
    (absent: acks=1, today's clients); returns acks."""
    acks = arg(req, "acks", int, ACKS_LEADER)
    if acks not in (ACKS_ALL, ACKS_LEADER):
        raise ControlError("invalid_request", f"acks must be -1 (all) or 1, not {acks}")
    timeout_ms = arg(req, "request_timeout_ms", int, 30000)
    if not 0 <= timeout_ms <= MAX_TIMEOUT_MS:
        raise ControlError("invalid_request", f"request_timeout_ms out of range: {timeout_ms}")
    s.state["acks"] = (acks, timeout_ms / 1000)
    return acks


def held_reply(cqp: Any, file_id: int, plog: Any, timeout_s: float, wait: ReplicatedWait) -> Reply:
    """The reply of one write of an acks=all session: a commit's acknowledgement is queued and
    sent once `wait` says the ISR holds the batch (at once when it already does)."""
    ack = cqp.ack
    topic, partition = plog.topic, plog.partition

    def reply(order, status, base, last, nxt, _append_time=-1) -> None:
        if status != _ACK_OK:
            ack(file_id, order, status, base, last, nxt)
            return

        def done(code: int) -> None:
            if code:
                ack(file_id, order, _NOT_REPLICATED, code, last, nxt)
            else:
                ack(file_id, order, _ACK_OK, base, last, nxt)
            cqp.send_acks()

        wait(topic, partition, last, timeout_s, done)

    return reply
