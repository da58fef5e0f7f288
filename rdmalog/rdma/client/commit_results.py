"""The native consumer's side of commit slots: `commit_async` callbacks waiting for their answer.

The broker writes a result word for each slot it folded into the group coordinator
(`rdmalog.rdma.commit_words`); the consumer READs them and settles the commits they answer.
"""

from __future__ import annotations

from rdmalog.rdma.commit_words import WORD_MASK, parse_result


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
