"""read_committed for the native consumer: which batches of a partition belong to aborted
transactions, as Kafka's consumer decides it from a fetch's aborted transactions.

The broker's metadata slot stops a read_committed session's last readable byte at the last stable
offset, so every transaction the consumer reads data of is decided. When it meets a transactional
batch past what it knows, it asks the broker (control op `aborted_transactions`) for the aborted
transactions from that offset on, which are known up to `upto`. Walking batches in order, an aborted
transaction's producer is skipped from the transaction's first offset to its ABORT marker; control
batches are never returned.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from rdmalog.store.records import CONTROL_BIT, TRANSACTIONAL_BIT
from rdmalog.store.transaction_index import CONTROL_ABORT
from rdmalog.store.transactions import marker_type

TXN_FLAGS = TRANSACTIONAL_BIT | CONTROL_BIT
# ask(start) -> ([[producer id, first offset], ...], upto): the broker's answer
Ask = Callable[[int], tuple[list, int]]


class AbortedTransactions:
    """One partition's aborted transactions, as a read_committed consumer walks its batches."""

    __slots__ = ("heap", "producers", "upto")

    def __init__(self) -> None:
        self.heap: list[tuple[int, int]] = []  # (first offset, producer id) not reached yet
        self.producers: set[int] = set()  # producers inside an aborted transaction here
        self.upto = -1  # every aborted transaction that began below this is known

    def skip(self, ask: Ask, buf, pos: int, header: tuple, last: int) -> bool:
        """Whether the batch at `pos` of `buf` (its `header` fields, its last offset) is left out:
        a control batch, or a transactional batch of an aborted transaction. Call it for batches
        with a TXN_FLAGS attribute only, in offset order."""
        if last >= self.upto:
            self._learn(ask, header[0])
        while self.heap and self.heap[0][0] <= last:
            self.producers.add(heapq.heappop(self.heap)[1])
        producer = header[9]
        if header[5] & CONTROL_BIT:
            if marker_type(buf, pos) == CONTROL_ABORT:
                self.producers.discard(producer)
            return True
        return producer in self.producers

    def _learn(self, ask: Ask, start: int) -> None:
        aborted, upto = ask(start)
        for producer, first in aborted:
            if first >= self.upto:  # those below were in an earlier answer
                heapq.heappush(self.heap, (first, producer))
        self.upto = max(self.upto, upto)
