"""One topic-partition's log: append, read (file slices), offsets by time, recovery, retention, flush,
high watermark.

Threading: appends and reads come from the gateway's event-loop thread; `flush()` runs in a worker
thread and `maintain()` in the store's maintenance thread. State changes happen under `self.lock`;
fsync runs outside it (on dup'ed descriptors, so a concurrent deletion cannot close them).

High watermark (single broker): the log end offset, except that an append which meets the flush policy
(`flush.messages` unflushed messages) returns `flush_needed=True`; the high watermark then stops at the
flushed offset until `flush()` has made everything up to that append durable. Listeners (`add_listener`)
run after the high watermark advances, on the thread that advanced it. A `replicated` log (cluster
mode) leaves its high watermark to the replica manager: see log_replication.py.

Idempotent producers: `append` checks each batch's (producer id, epoch, sequence) against the
partition's ProducerStateTable (Kafka's rules); a retried batch is acknowledged with the offsets it got
the first time and not written again. The table is snapshotted to `rdmalog-producer-state.json` on close
and rebuilt from batch headers after a crash. Leader epochs are kept in Kafka's `leader-epoch-checkpoint`
(rebuilt from the batches' partitionLeaderEpoch fields when missing); appends stamp `log.leader_epoch`.

In-place access (RDMA, and next replication): `in_place.py` (a mixin of this class) hands out the
head file to register, commits bytes written into it (`commit_written(head, position, end)`, the
same validation and patching as `append`) and tells readers how far a file is readable;
`add_roll_listener(cb)` reports `cb(log, old_segment, new_segment)` when the head changes, before
the old file is trimmed to its data (a trim waits while the old mapping is still exported).

Compaction: the log cleaner (`cleaner.py`, run by `cleaner_manager.py`) reads sealed segments
without the log's lock and swaps cleaned copies in with `replace_segments` (`segment_swap.py`, a
mixin of this class), telling swap listeners.
"""

from __future__ import annotations

import bisect
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from rdmalog.config import TopicConfig
from rdmalog.errors import (
    KafkaStorageError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
)
from rdmalog.store.append_result import AppendResult
from rdmalog.store.disk import storage_error
from rdmalog.store.in_place import InPlaceAccess
from rdmalog.store.leader_epochs import FILE_NAME as LEADER_EPOCH_FILE
from rdmalog.store.leader_epochs import LeaderEpochCache
from rdmalog.store.log_loader import (
    load_leader_epochs,
    load_producer_state,
    load_segments,
    segment_bases,
)
from rdmalog.store.log_replication import ReplicatedLog
from rdmalog.store.producer_state import ProducerStateTable
from rdmalog.store.records import (
    CONTROL_BIT,
    LOG_APPEND_TIME,
    BatchInfo,
    RecordRules,
    decode_records,
    patch_batches,
    validate_batches,
)
from rdmalog.store.segment import FileSlice, LogSegment
from rdmalog.store.segment_swap import SegmentSwap
from rdmalog.store.stats import LOG_STATS
from rdmalog.store.transactions import TXN_FLAGS, AbortedIndex, TransactionalLog
from rdmalog.store.transactions import on_append as track_transactions
from rdmalog.store.transactions import rebuild as rebuild_transactions

log = logging.getLogger(__name__)
# Builds a NamedTuple from a tuple of all its fields without the Python-level __new__ that calling
# the class runs (~2k instructions less each): for the ones made on every produce.
_new_tuple = tuple.__new__

INT_MAX = 2**31 - 1
PRODUCER_STATE_FILE = "rdmalog-producer-state.json"


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class TimestampOffset(NamedTuple):
    timestamp: int
    offset: int


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """`my-topic-3` -> ('my-topic', 3); None when `name` is not a partition directory."""
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        return None
    return topic, int(part)


class PartitionLog(InPlaceAccess, ReplicatedLog, SegmentSwap, TransactionalLog):
    """The segments of one partition directory `<topic>-<partition>`."""

    def __init__(
        self,
        directory: Path,
        topic: str,
        partition: int,
        config: TopicConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean_shutdown: bool = False,
        clock: Callable[[], int] = wall_clock_ms,
        replicated: bool = False,
        high_watermark: int = 0,
    ) -> None:
        self.dir = Path(directory)
        self.topic = topic
        self.partition = partition
        self.config = config
        self.clock = clock
        self.lock = threading.RLock()
        self.segments: list[LogSegment] = []
        # Set for a partition adopted without its topic's configs: retention deletes nothing.
        self.deletion_suspended = False
        self._bases: list[int] = []
        self.log_start_offset = log_start_offset
        self.log_end_offset = 0
        self.high_watermark = 0
        # replicated: the replica manager moves the high watermark (set_high_watermark), starting
        # from the checkpointed one; otherwise it follows the log end offset and the flush policy
        self.replicated = replicated
        self._checkpoint_hw = high_watermark
        self.recovery_point = recovery_point
        self._clean_shutdown = clean_shutdown
        self._flush_target = 0  # the high watermark may not pass recovery_point below this
        self._truncated = False  # a truncation not synced yet
        # (config, before.max.ms, after.max.ms, LogAppendTime?, compacted?): see record_rules
        self._record_limits: tuple = (None,)
        self._epochs_unsynced = False  # the leader epochs changed since the last flush
        self.last_flush_ms = clock()
        self._producers_checked_ms = clock()  # last producer.id.expiration check
        self._listeners: list[Callable[[PartitionLog], None]] = []
        self._roll_listeners: list[Callable[[PartitionLog, LogSegment, LogSegment], None]] = []
        self._start_listeners: list[Callable[[PartitionLog], None]] = []
        self._append_listeners: list[Callable[[PartitionLog], None]] = []
        self._swap_listeners: list[Callable[[PartitionLog, list[LogSegment]], None]] = []
        self.producer_state = ProducerStateTable()
        self.aborted = AbortedIndex(self.dir)  # aborted transactions (.txnindex)
        self.add_swap_listener(self._reload_aborted)  # the cleaner rewrote some index files
        self.leader_epochs = LeaderEpochCache(self.dir / LEADER_EPOCH_FILE)
        self._standby: str | None = None  # None, "making" or "ready"
        self.closed = True

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.name}, start={self.log_start_offset}, end={self.log_end_offset}, "
            f"hw={self.high_watermark}, segments={len(self.segments)})"
        )

    # --- open and recovery ---------------------------------------------------------------------------

    def _segment(self, base_offset: int, new: bool = False) -> LogSegment:
        cfg = self.config
        seg = LogSegment(
            self.dir,
            base_offset,
            segment_bytes=cfg.segment_bytes,
            index_bytes=cfg.segment_index_bytes,
            index_interval=cfg.index_interval_bytes,
            allocate_storage=cfg.preallocate,
            new=new,
        )
        seg.created_ms = self.clock()
        return seg

    def create(self) -> PartitionLog:
        """Make a new, empty log: its directory (FileExistsError when it exists) and head segment.
        On failure nothing is left behind."""
        self.dir.mkdir()
        try:
            return self._start([self._segment(self.log_start_offset, new=True)], loaded=False)
        except BaseException:
            self.delete()
            raise

    def open(self) -> PartitionLog:
        """Load segments; after an unclean shutdown validate everything from the recovery point.
        A missing directory is made (an empty log)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        bases = segment_bases(self.dir)
        if not bases:
            return self._start([self._segment(self.log_start_offset, new=True)], loaded=False)
        first = 0 if not self._clean_shutdown else len(bases)
        if not self._clean_shutdown:  # recover from the segment holding the recovery point on
            first = max(0, bisect.bisect_right(bases, self.recovery_point) - 1)
        segs = load_segments(self.name, [self._segment(b) for b in bases], first)
        return self._start(
            segs, loaded=True, recovered_from=bases[first] if first < len(bases) else None
        )

    def _start(
        self, segs: list[LogSegment], loaded: bool, recovered_from: int | None = None
    ) -> PartitionLog:
        """Take `segs` (the last one becomes the head) and the offsets they end at; a log that was
        `loaded` also rebuilds its leader epochs and producer state (`recovered_from`: the first
        offset of the segments recovery validated)."""
        head = segs[-1]
        head.preallocate()
        self.segments = segs
        self._bases = [s.base_offset for s in segs]
        self.log_end_offset = max(head.next_offset, head.base_offset)
        self.log_start_offset = min(
            max(self.log_start_offset, segs[0].base_offset), self.log_end_offset
        )
        self.recovery_point = self.log_end_offset
        self.high_watermark = (
            min(self._checkpoint_hw, self.log_end_offset)
            if self.replicated
            else self.log_end_offset
        )
        self._flush_target = 0
        self.last_flush_ms = self.clock()
        if loaded:
            self.leader_epochs = load_leader_epochs(self, recovered_from)
            self.producer_state = load_producer_state(self, PRODUCER_STATE_FILE)
            rebuild_transactions(self, recovered_from)
        self.closed = False
        return self

    def _save_epochs(self) -> None:
        """The leader epochs changed: the next flush writes and syncs their checkpoint (off the
        append path, as Kafka does since KAFKA-15046; recovery assigns the epochs of batches past
        the recovery point again)."""
        self._epochs_unsynced = True

    @property
    def leader_epoch(self) -> int:
        """The epoch this (single) broker leads the partition in: stamped on appended batches."""
        return max(self.leader_epochs.latest_epoch, 0)

    def epoch_end_offset(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (largest epoch <= `epoch`, the offset where it ends). A log with no
        epoch yet is led in epoch 0 from its end, as a Kafka leader records when it takes over."""
        with self.lock:
            if not self.leader_epochs.entries and epoch == self.leader_epoch:
                return epoch, self.log_end_offset
            return self.leader_epochs.end_offset_for(epoch, self.log_end_offset)

    # --- append --------------------------------------------------------------------------------------

    def append(
        self,
        buf: memoryview | bytearray | bytes,
        leader_epoch: int | None = None,
        *,
        allow_control: bool = False,
    ) -> AppendResult:
        """Validate every batch in `buf`, assign offsets in place and write it with one pwrite.
        `leader_epoch` None stamps `self.leader_epoch`; `allow_control` admits control batches (the
        broker's own transaction markers)."""
        mv = memoryview(buf)
        if mv.readonly:
            mv = memoryview(bytearray(mv))  # patching needs a writable buffer
        cfg = self.config
        infos = validate_batches(
            mv, cfg.max_message_bytes, allow_control=allow_control, rules=self.record_rules()
        )
        if len(mv) > cfg.segment_bytes:
            raise RecordListTooLargeError(
                f"{len(mv)} bytes of batches exceed segment.bytes={cfg.segment_bytes}"
            )
        return self._append(mv, infos, leader_epoch, in_place=False)

    def record_rules(self) -> RecordRules:
        """What a client's records are checked against now: the topic's timestamp bounds
        (`message.timestamp.before/after.max.ms`, capped by the older `difference.max.ms`), its
        timestamp type, and whether it is compacted (keys required)."""
        cfg = self.config
        if self._record_limits[0] is not cfg:  # configs are immutable: resolved once per config
            diff = cfg.get("message.timestamp.difference.max.ms")
            self._record_limits = (
                cfg,
                min(cfg.get("message.timestamp.before.max.ms"), diff),
                min(cfg.get("message.timestamp.after.max.ms"), diff),
                cfg.log_append_time,
                "compact" in cfg.cleanup_policy,
                self.name,  # formatted once: the rules name it in their errors
            )
        _, before, after, log_append_time, compacted, name = self._record_limits
        return _new_tuple(
            RecordRules, (self.clock(), before, after, log_append_time, compacted, name)
        )

    def _append(
        self, mv: memoryview, infos: list[BatchInfo], leader_epoch: int | None, in_place: bool
    ) -> AppendResult:
        cfg = self.config
        log_append = cfg.log_append_time
        now = self.clock() if log_append else -1
        with self.lock:
            if self.closed:
                raise KafkaStorageError(f"{self.name} is closed")
            if leader_epoch is None:  # self.leader_epoch, without its two calls
                epochs = self.leader_epochs.entries
                leader_epoch = epochs[-1][0] if epochs and epochs[-1][0] > 0 else 0
            duplicate = self.producer_state.check_batches(infos)
            if duplicate is not None:
                return AppendResult(
                    duplicate.first_offset,
                    duplicate.last_offset,
                    duplicate.timestamp if log_append else -1,
                    self.log_start_offset,
                    # its first flush may be pending
                    not self.replicated and duplicate.last_offset >= self.high_watermark,
                    duplicate=True,
                )
            base = self.log_end_offset
            batches, nxt, top_ts, attrs, producers = patch_batches(
                mv, infos, base, leader_epoch, now
            )
            try:
                if in_place:
                    self.segments[-1].commit_written(batches, len(mv))
                else:
                    seg = self.segments[-1]  # _maybe_roll, inlined: one call per produce less
                    if seg.size and self._should_roll(seg, len(mv), top_ts, nxt - 1):
                        seg = self.roll()
                    seg.append(mv, batches)
            except OSError as e:  # disk full, I/O error: Kafka's KAFKA_STORAGE_ERROR
                raise storage_error(e, self.dir, f"appending to {self.name}") from e
            self.log_end_offset = nxt
            for info, (_, _, last, max_ts) in zip(infos, batches, strict=True) if producers else ():
                if info.producer_id >= 0 and not info.attributes & CONTROL_BIT:
                    self.producer_state.update(
                        info.producer_id, info.producer_epoch, info.base_sequence,
                        info.last_offset_delta + 1,  # sequences span offsets (cleaned batches)
                        last - info.last_offset_delta, last, max_ts,
                    )  # fmt: skip
            if attrs & TXN_FLAGS:
                track_transactions(self, mv, infos, [b[2] for b in batches])
            if self.leader_epochs.assign(leader_epoch, base):
                self._save_epochs()
            flush_needed = nxt - self.recovery_point >= cfg.flush_messages
            if flush_needed:
                self._flush_target = nxt
            advanced = not self.replicated and self._advance_hw(
                nxt if self._flush_target <= self.recovery_point else self.high_watermark
            )
            result = _new_tuple(  # AppendResult(...) without the NamedTuple's Python __new__
                AppendResult,
                (
                    base,
                    nxt - 1,
                    now if log_append else -1,
                    self.log_start_offset,
                    flush_needed,
                    False,
                ),
            )
        if advanced and self._listeners:  # the listener passes only when someone listens
            self._notify()
        if self._append_listeners:
            self._appended()
        return result

    def holds_retry(self, infos: list[BatchInfo]) -> bool:
        """Whether these batches, about to be appended, include a retry of an idempotent producer's
        batch this log already holds (raises the Kafka error when they would be refused)."""
        with self.lock:
            return self.producer_state.check_batches(infos) is not None

    def _advance_hw(self, hw: int) -> bool:
        if hw > self.high_watermark:
            self.high_watermark = min(hw, self.log_end_offset)
            return True
        return False

    def _notify(self) -> None:
        for cb in list(self._listeners):
            try:
                cb(self)
            except Exception:
                log.exception("%s: high watermark listener failed", self.name)

    def add_listener(self, cb: Callable[[PartitionLog], None]) -> None:
        """`cb(log)` after every high watermark advance (on the advancing thread)."""
        self._listeners.append(cb)

    def remove_listener(self, cb: Callable[[PartitionLog], None]) -> None:
        if cb in self._listeners:
            self._listeners.remove(cb)

    def add_start_listener(self, cb: Callable[[PartitionLog], None]) -> None:
        """`cb(log)` after retention or DeleteRecords moved the log start offset, called with none
        of the log's locks held (so it may take locks that are taken before the log's)."""
        self._start_listeners.append(cb)

    def remove_start_listener(self, cb: Callable[[PartitionLog], None]) -> None:
        if cb in self._start_listeners:
            self._start_listeners.remove(cb)

    def _start_moved(self, before: int) -> None:
        if self.log_start_offset != before:
            for cb in list(self._start_listeners):
                try:
                    cb(self)
                except Exception:
                    log.exception("%s: log start listener failed", self.name)

    def add_roll_listener(self, cb: Callable[[PartitionLog, LogSegment, LogSegment], None]) -> None:
        """`cb(log, old_segment, new_segment)` after the head segment changes (under the log lock)."""
        self._roll_listeners.append(cb)

    def remove_roll_listener(
        self, cb: Callable[[PartitionLog, LogSegment, LogSegment], None]
    ) -> None:
        if cb in self._roll_listeners:
            self._roll_listeners.remove(cb)

    # --- roll ----------------------------------------------------------------------------------------

    def _should_roll(self, seg: LogSegment, nbytes: int, max_ts: int, last_offset: int) -> bool:
        if seg.size == 0:
            return False
        cfg = self.config
        if seg.size + nbytes > cfg.segment_bytes or seg.is_full:
            return True
        if last_offset - seg.base_offset > INT_MAX:
            return True
        # Kafka's time roll: new batch's timestamp vs the segment's first batch, else segment age.
        if seg.first_batch_timestamp >= 0 and max_ts >= 0:
            waited = max_ts - seg.first_batch_timestamp
        else:
            waited = self.clock() - seg.created_ms
        return waited > cfg.segment_ms

    def _maybe_roll(self, nbytes: int, max_ts: int, last_offset: int) -> LogSegment:
        seg = self.active_segment
        if self._should_roll(seg, nbytes, max_ts, last_offset):
            seg = self.roll()
        return seg

    def roll(self) -> LogSegment:
        """Seal the head segment and start a new one at the log end offset."""
        with self.lock:
            old = self.active_segment
            if old.size == 0:
                return old
            self._adopt_standby(self.log_end_offset)
            new = self._segment(self.log_end_offset, new=True)
            new.preallocate()
            self.segments.append(new)
            self._bases.append(new.base_offset)
            for cb in list(self._roll_listeners):  # before the trim: transports revoke access first
                try:
                    cb(self, old, new)
                except Exception:  # as the other listeners: the roll itself must complete
                    log.exception("%s: roll listener failed", self.name)
            old.seal()
            return new

    # --- reads ---------------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, upper_bound: int | None = None) -> FileSlice | None:
        """Whole batches from the one holding `offset`, below the high watermark (or `upper_bound`);
        at least one batch even if larger than `max_bytes`. None when nothing is readable yet."""
        with self.lock:
            if offset < self.log_start_offset or offset > self.log_end_offset:
                raise OffsetOutOfRangeError(
                    f"offset {offset} is outside [{self.log_start_offset}, {self.log_end_offset}] of {self.name}"
                )
            upper = (
                self.high_watermark
                if upper_bound is None
                else min(upper_bound, self.log_end_offset)
            )
            if offset >= upper:
                return None
            i = max(bisect.bisect_right(self._bases, offset) - 1, 0)
            for seg in self.segments[i:]:
                if seg.next_offset > offset:  # may hold the first batch ending at or after it
                    found = seg.slice(offset, max_bytes, upper)
                    if found is not None:  # else cleaned away: offsets have gaps, go on
                        return found
            return None

    def offset_for_timestamp(
        self, timestamp: int, upper_bound: int | None = None
    ) -> TimestampOffset | None:
        """First record (offset order) with timestamp >= `timestamp`, exact to the record; None if no
        record below the high watermark (or `upper_bound`) qualifies."""
        with self.lock:
            upper = self.high_watermark if upper_bound is None else upper_bound
            for seg in self.segments:
                if seg.max_timestamp < timestamp:
                    continue
                found = seg.find_offset_by_timestamp(timestamp, self.log_start_offset)
                if found is not None:
                    return TimestampOffset(found[1], found[0]) if found[0] < upper else None
            return None

    def max_timestamp(self) -> TimestampOffset:
        """(largest timestamp, offset of the first record carrying it); (-1, -1) on an empty log."""
        with self.lock:
            best = None
            for seg in self.segments:
                if seg.size and (best is None or seg.max_timestamp > best.max_timestamp):
                    best = seg
            if best is None or best.max_timestamp < 0:
                return TimestampOffset(-1, -1)
            found = best.find_position(best.offset_of_max_timestamp)
            if found is None:
                return TimestampOffset(best.max_timestamp, best.offset_of_max_timestamp)
            batch = best.batch_at(found[0])
            if batch.timestamp_type == LOG_APPEND_TIME:
                return TimestampOffset(batch.max_timestamp, batch.base_offset)
            for rec in decode_records(batch):
                if rec.timestamp == best.max_timestamp:
                    return TimestampOffset(best.max_timestamp, rec.offset)
            return TimestampOffset(best.max_timestamp, batch.last_offset)

    def legacy_offsets_before(self, timestamp: int, max_num_offsets: int) -> list[int]:
        """ListOffsets v0 (Kafka's legacyFetchOffsetsBefore): up to `max_num_offsets` segment start
        offsets (and the log end, when the head holds data) of segments last modified at or before
        `timestamp` (-1: from the newest, -2: from the oldest), newest first."""
        with self.lock:
            points = [
                (
                    max(seg.base_offset, self.log_start_offset),
                    int(os.stat(seg.path).st_mtime * 1000),
                )
                for seg in self.segments
            ]
            if self.segments[-1].size > 0:
                points.append((self.log_end_offset, self.clock()))
        if timestamp == -1:
            start = len(points) - 1
        elif timestamp == -2:
            start = 0
        else:
            start = len(points) - 1
            while start >= 0 and points[start][1] > timestamp:
                start -= 1
        picked = [points[i][0] for i in range(start, start - min(max_num_offsets, start + 1), -1)]
        return sorted(picked, reverse=True)

    # --- log start, retention, truncation -------------------------------------------------------------

    def delete_records(self, before_offset: int) -> int:
        """Advance the log start offset to `before_offset` (-1: the high watermark); delete segments
        wholly below it. Returns the new log start offset (DeleteRecords' low watermark)."""
        before = self.log_start_offset
        with self.lock:
            target = self.high_watermark if before_offset == -1 else before_offset
            if target < 0 or target > self.high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot delete records before {before_offset}: high watermark is {self.high_watermark}"
                )
            if target > self.log_start_offset:
                self.log_start_offset = target
            self._delete_oldest(
                lambda seg, upper: upper <= self.log_start_offset, roll_active=False
            )
            start = self.log_start_offset
        self._start_moved(before)
        return start

    def _delete_oldest(
        self, predicate: Callable[[LogSegment, int], bool], roll_active: bool
    ) -> int:
        """Delete segments from the oldest while `predicate(segment, its upper offset)` holds and the
        segment lies below the high watermark. The head is rolled first when it must go too."""
        deleted = 0
        while self.segments:
            seg = self.segments[0]
            is_head = len(self.segments) == 1
            upper = self.log_end_offset if is_head else self.segments[1].base_offset
            if upper > self.high_watermark or not predicate(seg, upper):
                break
            if is_head:
                if not roll_active or seg.size == 0:
                    break
                self.roll()
            self.segments.pop(0)
            self._bases.pop(0)
            seg.delete()
            deleted += 1
        if deleted:
            self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        self._on_start_offset()
        return deleted

    def _on_start_offset(self) -> None:
        """Forget leader epochs below the log start offset. Producer state stays (Kafka keeps it
        too): a retry of a deleted batch must still be answered as a duplicate."""
        self.aborted.drop_below(self.log_start_offset)
        before = list(self.leader_epochs.entries)
        self.leader_epochs.truncate_from_start(self.log_start_offset)
        if self.leader_epochs.entries != before:
            self._save_epochs()

    def apply_retention(self, now: int | None = None) -> int:
        """Delete segments past `retention.ms` or beyond `retention.bytes`; return how many went."""
        now = self.clock() if now is None else now
        cfg = self.config
        if "delete" not in cfg.cleanup_policy:
            return 0
        before = self.log_start_offset
        with self.lock:
            deleted = 0
            if self.deletion_suspended:
                pass  # only what DeleteRecords released below goes (the last step)
            elif cfg.retention_ms >= 0:
                deleted += self._delete_oldest(
                    lambda seg, _: now - seg.largest_timestamp() > cfg.retention_ms,
                    roll_active=True,
                )
            if cfg.retention_bytes >= 0 and not self.deletion_suspended:
                excess = [self.size_in_bytes - cfg.retention_bytes]

                def over(seg: LogSegment, _: int) -> bool:
                    if excess[0] - seg.size < 0:
                        return False
                    excess[0] -= seg.size
                    return True

                deleted += self._delete_oldest(over, roll_active=False)
            deleted += self._delete_oldest(
                lambda seg, upper: upper <= self.log_start_offset, roll_active=False
            )
            after = self.log_start_offset
        if deleted:
            log.info(
                "%s: retention deleted %d segment(s), log start offset %d -> %d",
                self.name, deleted, before, after,
            )  # fmt: skip
        self._start_moved(before)
        return deleted

    def truncate_to(self, offset: int) -> None:
        """Drop everything at and after `offset` (whole batches; replication and tests)."""
        with self.lock:
            if offset >= self.log_end_offset:
                return
            while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
                self.segments.pop().delete()
                self._bases.pop()
            head = self.segments[-1]
            if head.base_offset >= offset:
                head.truncate_to(head.base_offset)
            else:
                head.truncate_to(offset)
            head.preallocate()
            self.log_end_offset = max(head.next_offset, head.base_offset)
            self.high_watermark = min(self.high_watermark, self.log_end_offset)
            self.recovery_point = min(self.recovery_point, self.log_end_offset)
            self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
            self._truncated = True
            self.producer_state.truncate_after(self.log_end_offset)
            self.aborted.truncate(self.log_end_offset, self._bases)
            rebuild_transactions(self, None, walk_all=True)
            self.leader_epochs.truncate_from_end(self.log_end_offset)
            self._save_epochs()

    # --- flush and maintenance -----------------------------------------------------------------------

    def flush(self) -> None:
        """fsync everything appended so far (call off the event loop); advances the recovery point and,
        when the flush policy held it back, the high watermark."""
        with self.lock:
            if self.closed:
                return
            target = self.log_end_offset
            fds = []
            epochs = self._epochs_unsynced
            if target > self.recovery_point or self._truncated or epochs:  # else nothing new
                self._truncated = self._epochs_unsynced = False
                for seg in self.segments:
                    if seg.next_offset > self.recovery_point or seg is self.segments[-1]:
                        fds += seg.dup_fds()
                fds += self.aborted.dup_unsynced()
                if epochs:
                    self.leader_epochs.save(sync=False)
                    fds.append(os.open(self.leader_epochs.path, os.O_RDONLY))
        began = time.perf_counter()
        try:
            for fd in fds:
                os.fsync(fd)
        except BaseException:
            self._epochs_unsynced |= epochs
            raise
        finally:
            for fd in fds:
                os.close(fd)
        if fds:
            LOG_STATS.flush.observe((time.perf_counter() - began) * 1000)
        with self.lock:
            self.recovery_point = max(self.recovery_point, target)
            self.last_flush_ms = self.clock()
            hw = (
                self.log_end_offset
                if self._flush_target <= self.recovery_point
                else self.recovery_point
            )
            advanced = not self.replicated and self._advance_hw(hw)
        if advanced:
            self._notify()

    def maintain(self, now: int | None = None, retention: bool = True) -> None:
        """Background work: time-based flush (`flush.ms`), time-based roll (`segment.ms`), expiry of
        idle producer ids (`producer.id.expiration.ms`), retention."""
        if self.closed:
            return
        now = self.clock() if now is None else now
        cfg = self.config
        if self.log_end_offset > self.recovery_point and now - self.last_flush_ms >= cfg.flush_ms:
            self.flush()
        with self.lock:
            # A quiet head rolls segment.ms after it was created (by wall clock, not record time:
            # replayed old timestamps must not roll on every pass; appends use Kafka's rule).
            seg = self.active_segment
            if seg.size and now - seg.created_ms > cfg.segment_ms:
                self.roll()
            for seg in self.segments[:-1]:
                if seg.trim_pending:
                    seg.try_trim()
            broker = cfg.broker
            if now - self._producers_checked_ms >= broker.get(
                "producer.id.expiration.check.interval.ms"
            ):
                self._producers_checked_ms = now
                self.producer_state.expire(now, broker.get("producer.id.expiration.ms"))
        if retention:
            self.apply_retention(now)

    def close(self) -> None:
        """Flush and close every segment (trimming the head to its data)."""
        if self.closed:
            return
        self.flush()
        with self.lock:
            self.closed = True
            self._drop_standby()
            for seg in self.segments:
                seg.close()
            if self.log_end_offset > self.log_start_offset or self.producer_state.producers:
                # spares the next start a walk of the log; an empty log has nothing to walk
                self.producer_state.snapshot(self.dir / PRODUCER_STATE_FILE, self.log_end_offset)

    def delete(self) -> None:
        """Close the log and remove its directory (open FileSlices keep their files readable)."""
        with self.lock:
            self.closed = True
            for seg in self.segments:
                seg.delete()
            self.segments = []
            self._bases = []
        shutil.rmtree(self.dir, ignore_errors=True)
        self._notify()  # listeners learn the log is closed: RDMA readers see their file sealed
