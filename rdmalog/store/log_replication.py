"""What a replicated partition needs of its log (a mixin of PartitionLog): the follower's append of
the leader's batches as they are, a high watermark moved from outside, leader epochs, truncation.

The log stays unaware of roles: the replica manager (rdmalog/cluster) decides who leads and calls
these. In replicated mode (`PartitionLog(replicated=True)`, what cluster mode opens) appends no
longer move the high watermark; `set_high_watermark` does, with the minimum log end offset over the
in-sync replicas, and the log's high watermark listeners run then as they do in single-broker mode.

Followers keep the leader's bytes: `append_replicated` validates each batch (sizes, magic, CRC-32C)
and checks that its base offset follows the log end offset, but patches nothing, so segment files
hold the same batches, byte for byte, as the leader's. Producer state, transactions (open ones and
the aborted-transaction index) and the leader epoch cache are updated from the batch headers, so a
follower that becomes leader detects a retried batch as a duplicate, stops read_committed consumers
at the right last stable offset, tells them of aborted transactions and answers
OffsetForLeaderEpoch as the old leader did.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

from rdmalog.errors import CorruptRecordError, KafkaStorageError
from rdmalog.store.append_result import AppendResult
from rdmalog.store.producer_state import ProducerStateTable
from rdmalog.store.records import CONTROL_BIT, BatchInfo, _c_validate, validate_batches
from rdmalog.store.transactions import TXN_FLAGS
from rdmalog.store.transactions import on_append as track_transactions

if TYPE_CHECKING:
    from rdmalog.store.log import PartitionLog
    from rdmalog.store.segment import LogSegment

log = logging.getLogger(__name__)

_BASE_OFFSET = struct.Struct(">q")
_EPOCH = struct.Struct(">i")
_EPOCH_AT = 12
_new = tuple.__new__


class ReplicatedLog:
    """Replication operations of a PartitionLog (mixed into it; uses its lock and segments)."""

    def add_append_listener(self: PartitionLog, cb: Callable[[PartitionLog], None]) -> None:
        """`cb(log)` after every append (the log end offset moved), on the appending thread. A
        leader wakes its followers' long-polling fetches with it."""
        self._append_listeners.append(cb)

    def remove_append_listener(self: PartitionLog, cb: Callable[[PartitionLog], None]) -> None:
        if cb in self._append_listeners:
            self._append_listeners.remove(cb)

    def _appended(self: PartitionLog) -> None:
        if not self._append_listeners:  # the common case: no follower or reader waits
            return
        for cb in list(self._append_listeners):
            try:
                cb(self)
            except Exception:
                log.exception("%s: append listener failed", self.name)

    def set_high_watermark(self: PartitionLog, hw: int) -> bool:
        """Advance the high watermark to `hw` (capped at the log end offset; never backwards, only
        truncation lowers it); True when it moved. Listeners run after, outside the lock."""
        with self.lock:
            advanced = self._advance_hw(hw)
        if advanced:
            self._notify()
        return advanced

    def begin_leader_epoch(self: PartitionLog, epoch: int) -> None:
        """This replica leads from its log end offset in `epoch` (Kafka records it on becoming
        leader): appends stamp it, OffsetForLeaderEpoch answers with it."""
        with self.lock:
            if self.leader_epochs.assign(epoch, self.log_end_offset):
                self.leader_epochs.save()

    def append_replicated(self: PartitionLog, buf: memoryview | bytes) -> int:
        """Append the leader's batches as they are (their offsets, epochs and bytes); batches wholly
        below the log end offset are skipped, offsets a compacted leader no longer has are skipped
        over. Returns the new log end offset. A batch overlapping the log end raises
        CorruptRecordError (the follower truncates and fetches again)."""
        mv = memoryview(buf)
        infos = validate_batches(mv, None, from_client=False, allow_control=True)
        with self.lock:
            if self.closed:
                raise KafkaStorageError(f"{self.name} is closed")
            expected = self.log_end_offset
            runs: list[list[tuple[int, int, int, int]]] = []  # per segment to write into
            run: list[tuple[int, int, int, int]] = []
            run_bytes = 0
            epochs: list[tuple[int, int]] = []
            seg_bytes = self.active_segment.size  # in the segment the current run goes to
            limit = self.config.segment_bytes
            for info in infos:
                pos = info.position
                base = _BASE_OFFSET.unpack_from(mv, pos)[0]
                last = base + info.last_offset_delta
                if last < expected:
                    continue  # already here (a fetch from inside a batch)
                # a batch after a gap is taken as it is: the leader's cleaner removed the offsets
                # between (Kafka's appendAsFollower asks only that offsets move forward)
                if base < expected:
                    if self.log_end_offset == self.log_start_offset == expected:
                        self._reset_locked(base)  # an empty log starting inside this batch
                    else:
                        raise CorruptRecordError(
                            f"{self.name}: replicated batch at offset {base} overlaps the log "
                            f"end offset {expected}"
                        )
                if seg_bytes + run_bytes and seg_bytes + run_bytes + info.size > limit:
                    if run:
                        runs.append(run)
                    run, run_bytes, seg_bytes = [], 0, 0  # the append rolls before this batch
                run.append((pos, info.size, last, info.max_timestamp))
                run_bytes += info.size
                epochs.append((_EPOCH.unpack_from(mv, pos + _EPOCH_AT)[0], base))
                expected = last + 1
            if run:
                runs.append(run)
            for batches in runs:
                start = batches[0][0]
                end = batches[-1][0] + batches[-1][1]
                nbytes = end - start
                seg = self._maybe_roll(nbytes, max(b[3] for b in batches), batches[-1][2])
                rel = [(p - start, size, last, ts) for p, size, last, ts in batches]
                try:
                    seg.append(mv[start:end], rel)
                except OSError as e:
                    raise KafkaStorageError(f"{self.name}: {e}") from e
                self.log_end_offset = batches[-1][2] + 1
            self._track_replicated(mv, infos, epochs)
            end_offset = self.log_end_offset
        if runs:
            self._appended()
        return end_offset

    def _commit_replicated(
        self: PartitionLog, seg: LogSegment, position: int, end: int
    ) -> AppendResult:
        """`commit_written(replicated=True)` under the log's lock: the leader's batches written at
        [position, end) of the head `seg` (push replication), validated as a fetched response is
        (sizes, magic, CRC-32C), offsets moving forward from the log end offset (a compacted
        leader's batches leave gaps); committed as they are. CorruptRecordError otherwise (nothing committed)."""
        if self.closed:
            raise KafkaStorageError(f"{self.name} is closed")
        with self._written(seg, position, end) as mv:
            # the header checks in one C call; None (a bad batch): the general path says why
            infos = None if _c_validate is None else _c_validate(mv, -1, False, True, BatchInfo)
            if infos is None:
                infos = validate_batches(mv, None, from_client=False, allow_control=True)
            first = expected = self.log_end_offset
            batches, new_epochs = [], []
            epochs = self.leader_epochs
            latest = epochs.entries[-1][0] if epochs.entries else -1
            tracked = False
            for info in infos:  # one pass: offsets, index entries, epochs (see _track_replicated)
                p = info.position
                base = _BASE_OFFSET.unpack_from(mv, p)[0]
                if base < expected:  # offsets only move forward (a cleaned leader leaves gaps)
                    raise CorruptRecordError(
                        f"{self.name}: pushed batch at offset {base} overlaps the log end {expected}"
                    )
                expected = base + info.last_offset_delta + 1
                batches.append((p, info.size, expected - 1, info.max_timestamp))
                epoch = _EPOCH.unpack_from(mv, p + _EPOCH_AT)[0]
                if epoch > latest:  # a new epoch starts here (assign's test, without its call)
                    new_epochs.append((epoch, base))
                    latest = epoch
                tracked |= info.producer_id >= 0 or bool(info.attributes & TXN_FLAGS)
            seg.commit_written(batches, end - position)
            self.log_end_offset = expected
            if tracked:  # idempotent or transactional batches: their producers' state too
                self._track_replicated(mv, infos, None)
            if new_epochs:
                for epoch, base in new_epochs:
                    epochs.assign(epoch, base)
                epochs.save()
        # (AppendResult's fields, made without namedtuple's Python-level __new__)
        result = _new(AppendResult, (first, expected - 1, -1, self.log_start_offset, False, False))
        if self._append_listeners:  # (the log's lock is reentrant: listeners only queue work)
            self._appended()
        return result

    def _track_replicated(
        self: PartitionLog, mv: memoryview, infos: list, epochs: list[tuple[int, int]] | None
    ) -> None:
        """Producer state, open transactions and aborted ones (`.txnindex`), and leader epochs
        from the appended batches' headers (under the lock). `epochs` None: every batch of
        `infos` was appended, its epochs recorded already (`_commit_replicated`)."""
        by_base = None if epochs is None else dict((b, e) for e, b in epochs)
        saved = False
        txn_infos, txn_lasts = [], []
        for info in infos:
            base = _BASE_OFFSET.unpack_from(mv, info.position)[0]
            if by_base is not None and base not in by_base:
                continue
            last = base + info.last_offset_delta
            if info.attributes & TXN_FLAGS:
                txn_infos.append(info)
                txn_lasts.append(last)
            if info.producer_id >= 0 and not info.attributes & CONTROL_BIT:
                self.producer_state.update(
                    info.producer_id, info.producer_epoch, info.base_sequence, info.count,
                    base, last, info.max_timestamp,
                )  # fmt: skip
            if by_base is not None:
                saved |= self.leader_epochs.assign(by_base[base], base)
        if txn_infos:  # a follower that becomes leader knows the last stable offset
            track_transactions(self, mv, txn_infos, txn_lasts)
        if saved:
            self.leader_epochs.save()

    def reset_to(self: PartitionLog, offset: int) -> None:
        """Drop every segment and start empty at `offset` (a follower behind the leader's log start
        offset: Kafka's truncateFullyAndStartAt)."""
        before = self.log_start_offset
        with self.lock:
            self._reset_locked(offset)
        self._start_moved(before)

    def _reset_locked(self: PartitionLog, offset: int) -> None:
        for seg in self.segments:
            seg.delete()
        head = self._segment(offset, new=True)
        head.preallocate()
        self.segments = [head]
        self._bases = [offset]
        self.log_start_offset = self.log_end_offset = self.high_watermark = offset
        self.recovery_point = offset
        self.producer_state = ProducerStateTable()
        self.leader_epochs.entries = []
        self.leader_epochs.save()
