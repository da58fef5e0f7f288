"""One broker's replica of a partition and what its leader knows of each follower (Kafka's
Partition and Replica state), with the error codes and role names the cluster modules share."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rdmalog.cluster import znodes as Z
from rdmalog.errors import InvalidConfigError

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
OFFSET_OUT_OF_RANGE = 1
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75

LEADER, FOLLOWER, OFFLINE = "leader", "follower", "offline"


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


@dataclass
class FollowerProgress:
    """What a leader knows of one follower (Kafka's replica state)."""

    leo: int = -1  # the offset of its last fetch (-1: not fetched in this leader epoch yet)
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    leader_leo_at_last_fetch: int = -1


@dataclass
class Replica:
    """This broker's replica of one partition."""

    topic: str
    partition: int
    log: Any  # PartitionLog
    role: str = OFFLINE
    leader_id: int = -1
    leader_epoch: int = -1
    state: Z.PartitionState | None = None
    isr: tuple[int, ...] = ()
    replicas: list[int] = field(default_factory=list)
    followers: dict[int, FollowerProgress] = field(default_factory=dict)
    isr_pending: tuple[int, ...] | None = None  # an ISR change being written to ZooKeeper
    # acks=all waits: (offset the high watermark must reach, deadline (monotonic s), done(code));
    # added from any thread (native producers' commits), so changed under `wait_lock`
    waiters: list[tuple[int, float, Callable[[int], None]]] = field(default_factory=list)
    wait_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # followers' progress and the high watermark: changed on the loop and by push links' threads
    # (their acknowledgements, no hop to the loop), so under `hw_lock` (reentrant: progress then
    # the advance it brings); the ISR as the high watermark counts it changes under it too
    hw_lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    pushed: set[int] = field(default_factory=set)  # leader: followers it pushes to (push.py)
    push_grant: bool = False  # follower: its leader holds this replica's head (the fetcher waits)

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.partition

    def min_isr(self) -> int:
        try:
            return int(self.log.config.get("min.insync.replicas"))
        except (InvalidConfigError, TypeError, ValueError):
            return 1
