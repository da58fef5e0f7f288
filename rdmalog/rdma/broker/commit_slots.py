"""Offset commits by RDMA FETCH_AND_ADD (the commit slot KafkaDirect names as future work, 5.4).

A native consumer of a group asks once per partition for a **commit slot**: an 8-byte word in a
region the broker registered for its session with REMOTE_ATOMIC. The word holds the committed
offset + 1 above a 16-bit commit count (0: nothing committed through it). The consumer is the
slot's only writer and keeps its value, so a commit is one FETCH_AND_ADD of (new word - old word),
modulo 2**64: no request, no broker CPU on the commit's path. The count changes with every commit,
so a commit of the offset the slot already holds is one too (a retry after a refusal, or after
another consumer of the group committed elsewhere). The broker folds changed slots into the group
coordinator (`__consumer_offsets`, as a simple commit: generation -1) every
`rdma.commit.interval.ms` and when the session ends, so a commit is durable within that
interval, as a Kafka consumer's asynchronous commit is once its request lands; a broker that dies
before folding loses at most that interval of commits (the consumer re-reads those records:
at-least-once).

The coordinator's answer comes back the same way: after a fold the broker writes each folded
slot's **result word** (error code:16 | low 48 bits of the folded word; code 0: committed), in
the second half of the region, where the consumer READs it to call `commit_async` callbacks, as
a Kafka consumer learns of a refused asynchronous commit (a group with active members refuses
these simple commits: UNKNOWN_MEMBER_ID). Both words' layouts are in `rdmalog.rdma.commit_words`,
shared with the consumer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from rdmalog.rdma.commit_words import (
    MAX_SLOTS,
    RESULTS_AT,
    SLOT_BYTES,
    offset_of,
    result_word,
)
from rdmalog.rdma.transport._atomic64 import load, store
from rdmalog.rdma.transport.interface import Access

log = logging.getLogger(__name__)

# The coordinator's answer to a fold: {(topic, partition): Kafka error code (0: committed)}
CommitDone = Callable[[dict[tuple[str, int], int]], None]
# (group, {(topic, partition): offset}, done) -> None: hands a commit to the group coordinator
# without waiting for it (it runs on the coordinator's event loop, which calls done afterwards)
CommitSink = Callable[[str, dict[tuple[str, int], int], CommitDone], None]


class _SessionSlots:
    """One session's commit region and what each of its slots stands for."""

    def __init__(self, device):
        acc = Access.LOCAL_WRITE | Access.REMOTE_ATOMIC | Access.REMOTE_READ
        self.mr = device.alloc_mr(2 * MAX_SLOTS * SLOT_BYTES, acc)  # commit words, result words
        self.index: dict[tuple[str, str, int], int] = {}  # (group, topic, partition) -> slot
        self.folded: list[int] = []  # the word last folded into the coordinator, per slot
        self.closed = False
        self.window = None  # what the session is handed: a window bound to its queue pair


class CommitSlots:
    """The broker's side: hands out slots, folds changed ones into the coordinator via `sink`."""

    def __init__(self, device, sink: CommitSink | None):
        self.device = device
        self.sink = sink
        self._lock = threading.Lock()
        self._sessions: dict[int, _SessionSlots] = {}

    def slot(self, session: int, group: str, topic: str, partition: int, qp) -> dict:
        """The slot of (group, topic, partition) for a session: region (a window over the
        session's commit region, bound to its queue pair `qp`), index and its word now."""
        if self.sink is None:
            raise ValueError("this broker has no group coordinator to fold commits into")
        if not group:
            raise ValueError("a commit slot needs a group id")
        with self._lock:
            ss = self._sessions.get(session)
            if ss is None:
                ss = self._sessions[session] = _SessionSlots(self.device)
                ss.window = qp.bind_window(
                    ss.mr, 0, ss.mr.length, Access.REMOTE_ATOMIC | Access.REMOTE_READ
                )
            key = (group, topic, int(partition))
            i = ss.index.get(key)
            if i is None:
                if len(ss.index) >= MAX_SLOTS:
                    raise ValueError(f"a session has at most {MAX_SLOTS} commit slots")
                i = ss.index[key] = len(ss.folded)
                ss.folded.append(0)
            return {
                "region": ss.window.remote().to_dict(),
                "index": i,
                "word": load(ss.mr.buf, i * SLOT_BYTES),
                "results_at": RESULTS_AT,
            }

    def fold(self, session: int | None = None) -> None:
        """Commit every slot whose word changed since it was last folded (one session's, or all)."""
        with self._lock:
            chosen = (
                list(self._sessions.values())
                if session is None
                else [s for s in (self._sessions.get(session),) if s is not None]
            )
            # group -> (session, slot, word, (topic, partition)) of every slot that moved
            folded: dict[str, list[tuple[_SessionSlots, int, int, tuple[str, int]]]] = {}
            for ss in chosen:
                for (group, topic, partition), i in ss.index.items():
                    word = load(ss.mr.buf, i * SLOT_BYTES)
                    if word != ss.folded[i] and word != 0:
                        ss.folded[i] = word
                        folded.setdefault(group, []).append((ss, i, word, (topic, partition)))
        for group, moved in folded.items():
            offsets = {tp: offset_of(word) for _, _, word, tp in moved}
            try:  # hands the commit over; never waits for it
                self.sink(group, offsets, lambda errors, m=moved: self._answer(m, errors))
            except Exception:  # e.g. the coordinator's event loop is closed: keep serving
                log.exception("folding RDMA commits of group %s failed", group)

    def _answer(self, folded, errors: dict[tuple[str, int], int]) -> None:
        """The coordinator answered a fold: write each slot's result word (any thread)."""
        with self._lock:
            for ss, i, word, tp in folded:
                if not ss.closed:  # a closed session's region is gone
                    store(
                        ss.mr.buf, RESULTS_AT + i * SLOT_BYTES, result_word(word, errors.get(tp, 0))
                    )

    def close_session(self, session: int) -> None:
        """Fold what the session committed, then withdraw its region."""
        self.fold(session)
        with self._lock:
            ss = self._sessions.pop(session, None)
            if ss is not None:
                ss.closed = True
        if ss is not None:
            if ss.window is not None:
                ss.window.invalidate()
            ss.mr.deregister()
