"""Offset commits by RDMA FETCH_AND_ADD (the commit slot KafkaDirect names as future work, 5.4).

A native consumer of a group asks once per partition for a **commit slot**: an 8-byte word in a
region the broker registered for its session with REMOTE_ATOMIC. The word holds the committed
offset + 1 (0: nothing committed through it). The consumer is the slot's only writer and keeps
its value, so a commit is one FETCH_AND_ADD of (new word - old word), modulo 2**64: no request,
no broker CPU on the commit's path. The broker folds changed slots into the group coordinator
(`__consumer_offsets`, as a simple commit: generation -1) every `rdma.commit.interval.ms` and
when the session ends, so a commit is durable within that interval, as a Kafka consumer's
asynchronous commit is once its request lands; a broker that dies before folding loses at most
that interval of commits (the consumer re-reads those records: at-least-once).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from rdmalog.rdma._atomic64 import load
from rdmalog.rdma.transport import Access

log = logging.getLogger(__name__)

SLOT_BYTES = 8
MAX_SLOTS = 4096  # commit slots per session (one per group partition the consumer commits)

# (group, {(topic, partition): offset}) -> None: hands a commit to the group coordinator without
# waiting for it (it runs on the coordinator's event loop)
CommitSink = Callable[[str, dict[tuple[str, int], int]], None]


def slot_word(offset: int) -> int:
    """The slot value that commits `offset` (the next offset to read)."""
    return offset + 1


def add_for(old_word: int, offset: int) -> int:
    """The FETCH_AND_ADD operand that moves a slot from `old_word` to commit `offset`."""
    return (slot_word(offset) - old_word) & 0xFFFFFFFFFFFFFFFF


class _SessionSlots:
    """One session's commit region and what each of its slots stands for."""

    def __init__(self, device):
        acc = Access.LOCAL_WRITE | Access.REMOTE_ATOMIC | Access.REMOTE_READ
        self.mr = device.alloc_mr(MAX_SLOTS * SLOT_BYTES, acc)
        self.index: dict[tuple[str, str, int], int] = {}  # (group, topic, partition) -> slot
        self.folded: list[int] = []  # the word last folded into the coordinator, per slot


class CommitSlots:
    """The broker's side: hands out slots, folds changed ones into the coordinator via `sink`."""

    def __init__(self, device, sink: CommitSink | None):
        self.device = device
        self.sink = sink
        self._lock = threading.Lock()
        self._sessions: dict[int, _SessionSlots] = {}

    def slot(self, session: int, group: str, topic: str, partition: int) -> dict:
        """The slot of (group, topic, partition) for a session: region, index and its word now."""
        if self.sink is None:
            raise ValueError("this broker has no group coordinator to fold commits into")
        if not group:
            raise ValueError("a commit slot needs a group id")
        with self._lock:
            ss = self._sessions.get(session)
            if ss is None:
                ss = self._sessions[session] = _SessionSlots(self.device)
            key = (group, topic, int(partition))
            i = ss.index.get(key)
            if i is None:
                if len(ss.index) >= MAX_SLOTS:
                    raise ValueError(f"a session has at most {MAX_SLOTS} commit slots")
                i = ss.index[key] = len(ss.folded)
                ss.folded.append(0)
            return {
                "region": ss.mr.remote().to_dict(),
                "index": i,
                "word": load(ss.mr.buf, i * SLOT_BYTES),
            }

    def fold(self, session: int | None = None) -> None:
        """Commit every slot whose word changed since it was last folded (one session's, or all)."""
        with self._lock:
            chosen = (
                list(self._sessions.values())
                if session is None
                else [s for s in (self._sessions.get(session),) if s is not None]
            )
            by_group: dict[str, dict[tuple[str, int], int]] = {}
            for ss in chosen:
                for (group, topic, partition), i in ss.index.items():
                    word = load(ss.mr.buf, i * SLOT_BYTES)
                    if word != ss.folded[i] and word != 0:
                        ss.folded[i] = word
                        by_group.setdefault(group, {})[(topic, partition)] = word - 1
        for group, offsets in by_group.items():
            try:
                self.sink(group, offsets)  # hands the commit over; never waits for it
            except Exception:  # e.g. the coordinator's event loop is closed: keep serving
                log.exception("folding RDMA commits of group %s failed", group)

    def close_session(self, session: int) -> None:
        """Fold what the session committed, then withdraw its region."""
        self.fold(session)
        with self._lock:
            ss = self._sessions.pop(session, None)
        if ss is not None:
            ss.mr.deregister()
