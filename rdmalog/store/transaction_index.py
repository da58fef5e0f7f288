"""Kafka's aborted-transaction index (`<base offset>.txnindex` beside a segment) and what a cleaning
round keeps of transactions as it walks the log (Kafka's CleanedTransactionMetadata).

An index entry is an aborted transaction: version int16 (0), producerId int64, firstOffset int64,
lastOffset int64 (its ABORT marker), lastStableOffset int64, big-endian, 34 bytes, in the order the
markers were written. The log writes its entries as ABORT markers are appended (transactions.py);
the cleaner reads them and writes the cleaned segment's.
"""

from __future__ import annotations

import bisect
import heapq
import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from rdmalog.store.segment import log_file_name

_ENTRY = struct.Struct(">hqqqq")
CONTROL_ABORT, CONTROL_COMMIT = 0, 1


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def read_aborted(path: Path) -> list[AbortedTxn]:
    """The entries of a `.txnindex` file; [] when there is none (a torn last entry is dropped)."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    whole = len(raw) - len(raw) % _ENTRY.size
    return [AbortedTxn(*e[1:]) for e in _ENTRY.iter_unpack(raw[:whole])]


def write_aborted(path: Path, entries: Iterable[AbortedTxn]) -> bool:
    """Write `entries` as a `.txnindex` file and sync it; no file when there are none. Returns
    whether a file was written."""
    data = b"".join(_ENTRY.pack(0, *e) for e in entries)
    if not data:
        return False
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def control_type(key: bytes | None) -> int:
    """The type of a control record from its key (version int16, type int16): 0 ABORT, 1 COMMIT,
    -1 for anything else."""
    if key is None or len(key) < 4:
        return -1
    return struct.unpack_from(">h", key, 2)[0]


class CleanedTransactions:
    """Transactions as one cleaning round walks the log in offset order: which data batches belong
    to aborted transactions (dropped whatever their keys), and which markers may go - an ABORT
    marker once no batch of its transaction remains, a COMMIT marker once none was seen. The
    aborted transactions whose markers stay are kept for the cleaned segment's index."""

    def __init__(self) -> None:
        self._aborted: list[tuple[int, int, AbortedTxn]] = []  # heap by first offset
        self._seq = 0
        self._ongoing_aborted: dict[int, list] = {}  # producer id -> [txn, last batch offset seen]
        self._ongoing_committed: set[int] = set()
        self.kept: list[AbortedTxn] = []  # for the cleaned segment's .txnindex

    def add_aborted(self, txns: Iterable[AbortedTxn]) -> None:
        for txn in txns:
            heapq.heappush(self._aborted, (txn.first_offset, self._seq, txn))
            self._seq += 1

    def _consume_up_to(self, offset: int) -> None:
        while self._aborted and self._aborted[0][0] <= offset:
            txn = heapq.heappop(self._aborted)[2]
            self._ongoing_aborted.setdefault(txn.producer_id, [txn, None])

    def on_control_batch(self, last_offset: int, producer_id: int, kind: int | None) -> bool:
        """A control batch was read (`kind`: its record's control type, None for an empty batch);
        whether it may be discarded."""
        self._consume_up_to(last_offset)
        if kind is None:
            return True  # an empty control batch was cleaned before: it may go
        if kind == CONTROL_ABORT:
            ongoing = self._ongoing_aborted.pop(producer_id, None)
            if ongoing is not None and ongoing[1] is not None:
                self.kept.append(ongoing[0])  # batches of it remain: keep its marker
                return False
            return True
        if kind == CONTROL_COMMIT:
            if producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(producer_id)
                return False
            return True
        return False

    def on_batch(self, last_offset: int, transactional: bool, producer_id: int) -> bool:
        """A data batch was read; whether it belongs to an aborted transaction (and may go)."""
        self._consume_up_to(last_offset)
        if not transactional:
            return False
        ongoing = self._ongoing_aborted.get(producer_id)
        if ongoing is not None:
            ongoing[1] = last_offset
            return True
        self._ongoing_committed.add(producer_id)
        return False


def collect_aborted(
    directory: Path, txn_bases: list[int], segment_bases: list[int], start: int, upper: int
) -> list[AbortedTxn]:
    """Kafka's collectAbortedTransactions(start, upper): the aborted transactions overlapping
    [start, upper) (last offset >= start, first offset < upper), read from the `.txnindex` of the
    segment holding `start` on (an index lists the transactions whose markers its segment holds)
    until an entry's last stable offset reaches `upper`. `txn_bases`: the sorted base offsets of
    the segments that have an index."""
    at = bisect.bisect_right(segment_bases, start) - 1
    floor = segment_bases[at] if at >= 0 else 0
    found = []
    for base in txn_bases:
        if base < floor:
            continue
        for txn in read_aborted(directory / log_file_name(base, ".txnindex")):
            if txn.last_offset >= start and txn.first_offset < upper:
                found.append(txn)
            if txn.last_stable_offset >= upper:
                return found
    return found
