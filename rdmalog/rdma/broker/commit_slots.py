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
these simple commits: UNKNOWN_MEMBER_ID).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from rdmalog.rdma.transport._atomic64 import load, store
from rdmalog.rdma.transport.interface import Access

log = logging.getLogger(__name__)

SLOT_BYTES = 8
MAX_SLOTS = 4096  # commit slots per session (one per group partition the consumer commits)
RESULTS_AT = MAX_SLOTS * SLOT_BYTES  # where the result words start in a session's region
WORD_BITS = 48  # of the folded word kept in a result word: its count, the offset's low bits
WORD_MASK = (1 << WORD_BITS) - 1
COUNT_BITS = 16  # a slot word's commit count, below the offset + 1
COUNT_MASK = (1 << COUNT_BITS) - 1
MAX_OFFSET = (1 << 64 - COUNT_BITS) - 2  # the largest offset a slot word holds

# The coordinator's answer to a fold: {(topic, partition): Kafka error code (0: committed)}
CommitDone = Callable[[dict[tuple[str, int], int]], None]
# (group, {(topic, partition): offset}, done) -> None: hands a commit to the group coordinator
# without waiting for it (it runs on the coordinator's event loop, which calls done afterwards)
CommitSink = Callable[[str, dict[tuple[str, int], int], CommitDone], None]


def slot_word(offset: int, count: int = 1) -> int:
    """The slot value of the `count`th commit (1..65535, cycling) of `offset` (the next offset
    to read)."""
    return (offset + 1) << COUNT_BITS | count


def offset_of(word: int) -> int:
    """The offset a (nonzero) slot word commits."""
    return (word >> COUNT_BITS) - 1


def next_word(old_word: int, offset: int) -> int:
    """The slot word that commits `offset` after `old_word`: always another word, even for the
    same offset (the count moves on, never to 0), so the broker folds every commit."""
    return slot_word(offset, (old_word & COUNT_MASK) % COUNT_MASK + 1)


def add_for(old_word: int, new_word: int) -> int:
    """The FETCH_AND_ADD operand that moves a slot from `old_word` to `new_word`."""
    return (new_word - old_word) & 0xFFFFFFFFFFFFFFFF


def result_word(word: int, error_code: int) -> int:
    """What the broker writes after folding `word`: the coordinator's error code and the word."""
    return (error_code & 0xFFFF) << WORD_BITS | word & WORD_MASK


def parse_result(result: int) -> tuple[int, int]:
    """(low bits of the folded word, Kafka error code) of a result word; (0, 0): none yet."""
    code = result >> WORD_BITS & 0xFFFF
    return result & WORD_MASK, code - 0x10000 if code & 0x8000 else code


class _SessionSlots:
    """One session's commit region and what each of its slots stands for."""

    def __init__(self, device):
        acc = Access.LOCAL_WRITE | Access.REMOTE_ATOMIC | Access.REMOTE_READ
        self.mr = device.alloc_mr(2 * MAX_SLOTS * SLOT_BYTES, acc)  # commit words, result words
        self.index: dict[tuple[str, str, int], int] = {}  # (group, topic, partition) -> slot
        self.folded: list[int] = []  # the word last folded into the coordinator, per slot
        self.closed = False


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
            ss.mr.deregister()


class PendingCommits:
    """The consumer's side: `commit_async` callbacks waiting for the result words of their slots.

    A fold carries a slot's latest word, so it answers every commit of that slot made up to the
    one that wrote the word (earlier commits were superseded by it, as their offsets were)."""

    def __init__(self) -> None:
        self._seq: dict[int, int] = {}  # slot index -> commits made through it
        # [callback, offsets, {slot index: (word, seq)}, {slot index: error code}]; changed in
        # place, so a poller may hold this list and test it (cheaper than calling __bool__)
        self.waiting: list[list] = []

    def __bool__(self) -> bool:
        return bool(self.waiting)

    def add(self, callback, offsets: dict[tuple[str, int], int], slots: dict[int, int]) -> None:
        """A commit of `offsets` whose slots ({index: word}) now hold those words."""
        marks = {}
        for i, word in slots.items():
            seq = self._seq[i] = self._seq.get(i, 0) + 1
            marks[i] = (word, seq)
        self.waiting.append([callback, offsets, marks, {}])

    def indexes(self) -> tuple[int, int]:
        """The smallest range [lo, hi) of slot indexes with commits waiting."""
        ids = [i for w in self.waiting for i in w[2]]
        return min(ids), max(ids) + 1

    def settle(self, result) -> list[tuple]:
        """Apply result words (`result(index)`); returns (callback, offsets, codes) of every commit
        now answered, in commit order, codes being {slot index: Kafka error code}."""
        answered_up_to: dict[int, tuple[int, int]] = {}  # index -> (seq, code)
        for w in self.waiting:
            for i, (word, seq) in w[2].items():
                low, code = parse_result(result(i))
                if (
                    low == word & WORD_MASK
                    and (low or code)
                    and seq > answered_up_to.get(i, (0,))[0]
                ):
                    answered_up_to[i] = (seq, code)
        done, keep = [], []
        for w in self.waiting:
            for i, (_, seq) in w[2].items():
                up = answered_up_to.get(i)
                if up is not None and seq <= up[0]:
                    w[3][i] = up[1]
            (done if len(w[3]) == len(w[2]) else keep).append(w)
        self.waiting[:] = keep
        return [(w[0], w[1], w[3]) for w in done]

    def drop(self) -> list[tuple]:
        """Every commit still waiting (its answer will not come): (callback, offsets)."""
        gone = self.waiting[:]
        self.waiting.clear()
        return [(w[0], w[1]) for w in gone]
