"""One partition's transactions as its log sees them: markers recognised on append, the aborted
transactions kept in Kafka's `.txnindex` files (and in memory for fetches), rebuilt on recovery.

A transactional batch opens its producer's transaction (`ProducerStateTable.ongoing`) at its first
offset; a control batch (a COMMIT or ABORT marker, written by the transaction coordinator) closes it.
An ABORT adds an entry (producer id, first offset, marker offset, last stable offset) to the index of
the segment the marker lands in, as Kafka's ProducerStateManager does. Fetches at `read_committed` get
the entries overlapping what they read (`aborted_between`) and stop at the last stable offset.

The index files are written as entries arrive and synced with the log's flushes; after an unclean
shutdown the segments recovery validated get theirs rebuilt from the batches (`rebuild`).
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rdmalog.store.records import (
    CONTROL_BIT,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    RECORDS,
    TRANSACTIONAL_BIT,
    BatchInfo,
    Record,
    _read_varint,
    build_batch,
    read_header,
)
from rdmalog.store.segment import FileSlice, log_file_name
from rdmalog.store.transaction_index import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    AbortedTxn,
    read_aborted,
)

if TYPE_CHECKING:
    from rdmalog.store.log import PartitionLog

log = logging.getLogger(__name__)

_ENTRY = struct.Struct(">hqqqq")
_MARKER_KEY = struct.Struct(">hh")  # version 0, type (0 ABORT, 1 COMMIT)
_MARKER_VALUE = struct.Struct(">hi")  # version 0, coordinator epoch
TXN_FLAGS = TRANSACTIONAL_BIT | CONTROL_BIT


def marker_batch(
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    timestamp_ms: int | None = None,
) -> bytearray:
    """A transaction marker as Kafka writes it: a control, transactional batch of one record whose
    key is (version 0, type) and value EndTransactionMarker (version 0, coordinator epoch)."""
    key = _MARKER_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _MARKER_VALUE.pack(0, coordinator_epoch)
    now = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    return build_batch(
        [Record(key, value, timestamp=now)],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        transactional=True,
        control=True,
        now_ms=now,
    )


def _marker_key(buf: memoryview | bytes, pos: int) -> tuple[int, int]:
    """(key length, where the key starts) of the first record of the control batch at `pos`."""
    at = RECORDS + pos
    _, at = _read_varint(buf, at)  # record length
    at += 1  # attributes
    _, at = _read_varint(buf, at)  # timestamp delta
    _, at = _read_varint(buf, at)  # offset delta
    return _read_varint(buf, at)


def marker_type(buf: memoryview | bytes, pos: int = 0) -> int:
    """The control type of the (uncompressed) control batch at `pos`: 0 ABORT, 1 COMMIT, -1 when its
    first record has no readable key (an empty batch left by the cleaner)."""
    try:
        n, at = _marker_key(buf, pos)
        if n < 4 or at + 4 > len(buf):
            return -1
        return _MARKER_KEY.unpack_from(buf, at)[1]
    except Exception:
        return -1


def marker_coordinator_epoch(buf: memoryview | bytes, pos: int = 0) -> int:
    """The coordinator epoch in the value of the control batch at `pos` (-1 when unreadable)."""
    try:
        n, at = _marker_key(buf, pos)
        at += max(n, 0)
        n, at = _read_varint(buf, at)  # value: version int16, coordinator epoch int32
        if n < 6 or at + 6 > len(buf):
            return -1
        return _MARKER_VALUE.unpack_from(buf, at)[1]
    except Exception:
        return -1


class AbortedIndex:
    """The aborted transactions of one log: in memory (ordered by marker offset) and in the `.txnindex`
    of the segment holding each marker."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.entries: list[AbortedTxn] = []
        self._last_offsets: list[int] = []
        self._unsynced: set[int] = set()  # segment bases whose file has entries not synced yet

    def path(self, segment_base: int) -> Path:
        return self.dir / log_file_name(segment_base, ".txnindex")

    def load(self, segment_bases: Iterable[int]) -> None:
        """Read the index file of every segment that has one."""
        self.entries = []
        for base in segment_bases:
            self.entries.extend(read_aborted(self.path(base)))
        self.entries.sort(key=lambda t: t.last_offset)
        self._last_offsets = [t.last_offset for t in self.entries]

    def add(self, segment_base: int, txn: AbortedTxn) -> None:
        """Record an aborted transaction whose marker lies in segment `segment_base`."""
        if self._last_offsets and txn.last_offset <= self._last_offsets[-1]:
            i = bisect.bisect_right(self._last_offsets, txn.last_offset)
        else:
            i = len(self.entries)
        self.entries.insert(i, txn)
        self._last_offsets.insert(i, txn.last_offset)
        fd = os.open(self.path(segment_base), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, _ENTRY.pack(0, *txn))
        finally:
            os.close(fd)
        self._unsynced.add(segment_base)

    def between(self, start: int, upper: int) -> list[AbortedTxn]:
        """Kafka's collectAbortedTransactions: those with a marker at or after `start` that began
        below `upper`, up to the first whose last stable offset reaches `upper`."""
        out = []
        for i in range(bisect.bisect_left(self._last_offsets, start), len(self.entries)):
            txn = self.entries[i]
            if txn.first_offset < upper:
                out.append(txn)
            if txn.last_stable_offset >= upper:
                break
        return out

    def known_below(self, start: int, lso: int, limit: int) -> tuple[list[AbortedTxn], int]:
        """(entries, upto) for a reader of the log file from `start` (a native consumer): every
        aborted transaction with a marker at or after `start` that began below `upto`, which is
        the last stable offset unless more than `limit` of them had to be left out."""
        i = bisect.bisect_left(self._last_offsets, start)
        found = sorted(
            (t for t in self.entries[i:] if t.first_offset < lso), key=lambda t: t.first_offset
        )
        if len(found) <= limit:
            return found, lso
        cut = max(limit, sum(1 for t in found if t.first_offset <= start))
        return found[:cut], found[cut].first_offset if cut < len(found) else lso

    def drop_below(self, offset: int) -> None:
        """Forget entries whose marker lies below `offset` (their segments were deleted)."""
        i = bisect.bisect_left(self._last_offsets, offset)
        if i:
            del self.entries[:i], self._last_offsets[:i]

    def truncate(self, offset: int, segment_bases: list[int]) -> None:
        """Drop entries whose marker is at or after `offset`; the files are rewritten."""
        i = bisect.bisect_left(self._last_offsets, offset)
        if i == len(self.entries):
            return
        del self.entries[i:], self._last_offsets[i:]
        self.rewrite([b for b in segment_bases if self.path(b).exists()], segment_bases)

    def rewrite(self, bases: list[int], segment_bases: list[int]) -> None:
        """Write the index files of segments `bases` again from the entries in memory."""
        for base in bases:
            self.path(base).unlink(missing_ok=True)
        wanted = set(bases)
        for txn in self.entries:
            at = segment_bases[max(bisect.bisect_right(segment_bases, txn.last_offset) - 1, 0)]
            if at in wanted:
                fd = os.open(self.path(at), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                try:
                    os.write(fd, _ENTRY.pack(0, *txn))
                finally:
                    os.close(fd)
                self._unsynced.add(at)

    def dup_unsynced(self) -> list[int]:
        """Descriptors of the index files written since the last call (the caller fsyncs them)."""
        fds = []
        for base in self._unsynced:
            try:
                fds.append(os.open(self.path(base), os.O_RDONLY))
            except FileNotFoundError:
                pass
        self._unsynced.clear()
        return fds


def on_append(
    plog: PartitionLog, buf: memoryview, infos: list[BatchInfo], lasts: list[int]
) -> None:
    """Transaction bookkeeping for batches just appended (`lasts`: each one's last offset): open
    transactions, and the index entry of every ABORT marker. Called under the log's lock."""
    state = plog.producer_state
    for info, last in zip(infos, lasts, strict=True):
        attrs = info.attributes
        if not attrs & TXN_FLAGS or info.producer_id < 0:
            continue
        if attrs & CONTROL_BIT:
            _on_marker(plog, info.producer_id, info.producer_epoch, last,
                       marker_type(buf, info.position))  # fmt: skip
            entry = state.producers.get(info.producer_id)
            if entry is not None:  # what DescribeProducers reports
                entry.coordinator_epoch = marker_coordinator_epoch(buf, info.position)
        else:
            state.begin_transaction(info.producer_id, last - info.last_offset_delta)


def _on_marker(
    plog: PartitionLog, pid: int, epoch: int, offset: int, kind: int, index: bool = True
) -> None:
    """A marker at `offset` ends `pid`'s transaction; an ABORT is indexed when `index`."""
    state = plog.producer_state
    lso = state.stable_offset_after(pid, offset)
    first = state.end_transaction(pid, epoch)
    if index and kind == CONTROL_ABORT and first is not None:
        seg = plog.segments[max(bisect.bisect_right(plog._bases, offset) - 1, 0)]
        plog.aborted.add(seg.base_offset, AbortedTxn(pid, first, offset, lso))


def rebuild(plog: PartitionLog, recovered_from: int | None, walk_all: bool = False) -> None:
    """At open: read the segments' index files, then walk the batches the producer state was not
    restored for (from its snapshot's end, else the log start), reopening transactions; the index
    files of segments from `recovered_from` on (validated by recovery) are rebuilt from their
    markers."""
    bases = [s.base_offset for s in plog.segments]
    state = plog.producer_state
    rebuilt = set() if recovered_from is None else {b for b in bases if b >= recovered_from}
    for b in rebuilt:
        plog.aborted.path(b).unlink(missing_ok=True)
    plog.aborted.load(b for b in bases if b not in rebuilt)
    if walk_all:  # after a truncation: the open transactions as the remaining batches say
        state.valid_to = None
    start = state.valid_to if state.valid_to is not None else plog.log_start_offset
    if state.valid_to is None:
        state.ongoing.clear()
    if start >= plog.log_end_offset:
        return
    for seg in plog.segments:
        if seg.next_offset <= start:
            continue
        index = seg.base_offset in rebuilt
        for pos, h in seg.headers():
            base, attrs, pid, last = h[0], h[5], h[9], h[0] + h[6]
            if last < start or not attrs & TXN_FLAGS or pid < 0:
                continue
            if attrs & CONTROL_BIT:
                batch = seg.batch_at(pos)
                _on_marker(plog, pid, h[10], last, marker_type(batch.buf), index)
            else:
                state.begin_transaction(pid, base)


def offset_after(fd: int, position: int, length: int) -> int | None:
    """The base offset of the batch right after `length` bytes at `position` of a segment file
    (where a fetched slice ends), None when no batch follows there."""
    raw = os.pread(fd, 12, position + length)
    if len(raw) < 12:
        return None
    base, size = read_header(raw)
    return base if size >= MIN_BATCH_LENGTH + LOG_OVERHEAD else None


class TransactionalLog:
    """What a partition log answers about transactions (a mixin of `PartitionLog`): the last
    stable offset and the aborted transactions a read_committed reader must skip."""

    lock: threading.RLock
    aborted: AbortedIndex
    producer_state: Any
    high_watermark: int
    _bases: list[int]

    @property
    def last_stable_offset(self) -> int:
        """The offset below which every transaction is decided: the first offset of the earliest
        open transaction, else the high watermark (what read_committed consumers read up to, and
        what the cleaner may clean up to)."""
        first = self.producer_state.first_unstable_offset()
        hw = self.high_watermark
        return hw if first is None or first > hw else first

    def aborted_transactions(
        self, start: int, upper: int, fetched: FileSlice | None = None
    ) -> list[AbortedTxn]:
        """The aborted transactions a read_committed fetch of [`start`, `upper`) must be told of;
        with the `fetched` slice, bounded by the offset after it (as Kafka bounds them)."""
        if not self.aborted.entries:  # most logs: no lock, no read
            return []
        if fetched is not None:
            after = offset_after(fetched.fileno(), fetched.position, fetched.length)
            upper = upper if after is None else min(upper, after)
        with self.lock:
            return self.aborted.between(start, upper)

    def _reload_aborted(self, _log: object, _old: list) -> None:
        """The aborted transactions again from the index files, after a cleaning swapped segments
        (it drops the entries of transactions whose batches and marker it removed: a client must
        not be told of a transaction whose ABORT marker it will never see)."""
        with self.lock:
            self.aborted.load(self._bases)

    def aborted_from(self, start: int, limit: int) -> tuple[list[AbortedTxn], int]:
        """What a native read_committed consumer learns from `start` on (`AbortedIndex.known_below`:
        the aborted transactions that began below `upto`, and `upto`)."""
        with self.lock:
            return self.aborted.known_below(start, self.last_stable_offset, limit)
