"""A partition log's files used in place: what a transport that registers them needs of the log.

RDMA producers write batches straight into the head file's mapping, consumers READ files
one-sidedly, and a follower will take its leader's batches the same way. The log alone decides
what is committed: these methods of `PartitionLog` (this class is its mixin) take the log's lock
themselves and hand out files as `SegmentFile`s (what a transport registers), never their
committed size.

- `head_for_writing()`: the head file, rolled first when it has no room, and its committed
  position, with the log's lock held for the block: register its mapping there (no roll or trim
  can come in between).
- `validate_written(head, position, end)`, `commit_written(head, position, end, ...)`: the bytes a
  writer put at [position, end) of `head`, validated as a produce request's batches, then patched
  (offsets, leader epoch, LogAppendTime) and committed in place; `commit_run(head, position,
  ends)`: consecutive writes committed together, each holding whole batches. `HeadMovedError`
  when `head` is no longer the head, something else was committed at `position` first, or the
  log end is not the offset the writer expected: nothing is committed then.
- `roll_head(head)`: roll when `head` is still the head and holds data (its writer found it full).
- `file_for_reading(offset)`, `next_file(base_offset)`: the file holding an offset and the file
  after one, with the lock held for the block as above; `readable_end(file)`: how far a reader may
  read it now.
- `prepare_standby()`: with `preallocate`, the next head file is allocated before the roll needs it.

Roll, high watermark and log start listeners (`add_roll_listener` ...) tell a transport when to
revoke or refresh what it handed out.
"""

from __future__ import annotations

import logging
import mmap
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol

from rdmalog.errors import InvalidRecordError, KafkaError, OffsetOutOfRangeError
from rdmalog.store.append_result import AppendResult
from rdmalog.store.disk import storage_error
from rdmalog.store.records import BatchInfo, validate_batches
from rdmalog.store.segment import LogSegment, log_file_name

try:  # the in-place commit's common case in one C call (setup.py builds it; optional)
    from rdmalog.store._records import commit_plain as _c_commit_plain
except ImportError:  # pragma: no cover - a source tree without the extension built
    _c_commit_plain = None

if TYPE_CHECKING:
    from rdmalog.config import TopicConfig
    from rdmalog.store.leader_epochs import LeaderEpochCache

log = logging.getLogger(__name__)

STANDBY_FILE = "standby.log.tmp"  # the next head file, allocated ahead of the roll (`preallocate`)
EARLIEST, LATEST = -2, -1  # `file_for_reading` offsets, as in Kafka's ListOffsets


class SegmentFile(Protocol):
    """A segment's log file as the log hands it out: what a transport registers, and the identity
    it gives back to the log's methods."""

    @property
    def base_offset(self) -> int: ...

    @property
    def path(self) -> Path: ...

    @property
    def capacity(self) -> int:
        """Length of the mapping (a head file's preallocated size)."""
        ...

    @property
    def mmap(self) -> mmap.mmap | None:
        """The shared mapping. Read it where the log hands the file out (its lock held): a roll
        may trim and remap the file later, but not while a registration still exports it."""
        ...


class ReadStart(NamedTuple):
    """Where a reader of `offset` starts: the byte `position` of its batch in `file`."""

    file: SegmentFile
    position: int
    offset: int


class HeadMovedError(Exception):
    """The written bytes are not where the log's head now ends (it rolled, something else was
    committed there first, or the log end is not the offset the writer expected): nothing was
    committed. Not a Kafka error: the writer's view of the log is stale."""


class InPlaceAccess:
    """Mixin of PartitionLog: in-place access to its files (see the module docstring)."""

    # What it uses of PartitionLog (and its methods roll, _append, record_rules, _notify,
    # _appended, _save_epochs)
    lock: threading.RLock
    segments: list[LogSegment]
    config: TopicConfig
    dir: Path
    name: str
    closed: bool
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    recovery_point: int
    replicated: bool
    leader_epochs: LeaderEpochCache
    clock: Callable[[], int]
    _flush_target: int
    _record_limits: tuple
    _append_listeners: list
    _standby: str | None  # None, "making" or "ready"

    # --- writing in place -------------------------------------------------------------------------

    @contextmanager
    def head_for_writing(self) -> Iterator[tuple[SegmentFile, int]]:
        """(head file, its committed position), the head rolled first when it has no room; the
        log's lock is held until the block ends."""
        with self.lock:
            seg = self.segments[-1]
            if seg.mmap is None or seg.size >= seg.capacity:
                seg = self.roll()
                seg.preallocate()
            yield seg, seg.size

    def validate_written(self, head: SegmentFile, position: int, end: int) -> list[BatchInfo]:
        """Validate the bytes written at [position, end) of `head` as a produce request's batches;
        raises HeadMovedError (see the class) or the Kafka error of invalid bytes."""
        with self.lock:
            with self._written(self._head_at(head, position), position, end) as mv:
                return self._validate(mv)

    def commit_written(
        self,
        head: SegmentFile,
        position: int,
        end: int,
        *,
        expected_base_offset: int | None = None,
        leader_epoch: int | None = None,
        infos: list[BatchInfo] | None = None,
        replicated: bool = False,
    ) -> AppendResult:
        """Commit the batches written at [position, end) of the head file `head`, where its
        committed bytes end: validate them (unless `infos` came from `validate_written` of the
        same bytes), apply the idempotent producers' rules, patch offsets and leader epoch in
        place, index, advance the log end. `expected_base_offset`: the offset the first batch
        must take (a follower passes its leader's); `leader_epoch` None stamps the log's. A
        retried batch is answered with its first offsets and not committed (`duplicate`).
        `replicated`: the bytes are a leader's batches (push replication): validated as a
        follower's fetch is, their offsets must continue the log, nothing is patched (the
        follower's file holds the leader's bytes). Raises HeadMovedError or a Kafka error;
        nothing is committed then."""
        if replicated and expected_base_offset is None:  # push replication's writes
            with self.lock:
                self._head_at(head, position)
                return self._commit_replicated(head, position, end)
        if (
            infos is None
            and not replicated
            and expected_base_offset is None
            and leader_epoch is None
            and _c_commit_plain is not None
        ):
            done = self._commit_plain(head, position, end)
            if type(done) is AppendResult:
                return done
            infos = done  # None, or the checked batches of an idempotent producer
        with self.lock:
            seg = self._head_at(head, position)
            if expected_base_offset is not None and expected_base_offset != self.log_end_offset:
                raise HeadMovedError(
                    f"{self.name}: written batches start at offset {expected_base_offset}, "
                    f"the log ends at {self.log_end_offset}"
                )
            if replicated:
                return self._commit_replicated(seg, position, end)
            with self._written(seg, position, end) as mv:  # one view: validated, then patched
                if infos is None:
                    infos = self._validate(mv)
                return self._append(mv, infos, leader_epoch, in_place=True)

    def commit_run(
        self, head: SegmentFile, position: int, ends: list[int]
    ) -> tuple[AppendResult, list[int]] | None:
        """Commit a run of consecutive writes at [position, position + ends[-1]) of `head` as one
        commit: `ends` are the writes' ends relative to `position`, each write must hold whole
        batches. Returns the answer and the number of offsets each write took, or None with
        nothing committed when the writes must be committed one by one (`commit_written` each):
        a write not ending on a batch's end, bytes that do not validate (one by one, the writes
        before the bad one still commit), or a retry of an idempotent producer's batch the log
        already holds (answered per write with its offsets), a sequence or epoch error. Plain
        batches without a producer id take one C call (`_commit_plain`, which checks the
        boundaries too). Raises HeadMovedError as `commit_written`."""
        end = position + ends[-1]
        infos = None
        if _c_commit_plain is not None:
            done = self._commit_plain(head, position, end, ends)
            if type(done) is tuple:
                return done
            infos = done  # an idempotent producer's plain batches, checked, boundaries too
        if infos is None:
            try:
                infos = self.validate_written(head, position, end)
            except KafkaError:
                return None
        counts, i = [], 0
        for write_end in ends:  # each write must hold whole batches (positions from `position`)
            first = i
            while i < len(infos) and infos[i].position < write_end:
                i += 1
            if i == first or infos[i - 1].position + infos[i - 1].size != write_end:
                return None
            counts.append(sum(info.last_offset_delta + 1 for info in infos[first:i]))
        try:  # an idempotent producer's sequence or epoch error: one by one names it
            res = self.commit_written(head, position, end, infos=infos)
        except KafkaError:
            return None
        return None if res.duplicate else (res, counts)

    def _commit_plain(
        self, head: SegmentFile, position: int, end: int, ends: list[int] | None = None
    ) -> AppendResult | tuple[AppendResult, list[int]] | list[BatchInfo] | None:
        """`commit_written`'s common case, folded: plain data batches with no producer id, no
        transaction, into the head of an open log, checked and patched by one C call
        (`_records.commit_plain`: CRC, LogValidator's record checks, offsets, epoch,
        timestamps), then the bookkeeping `_append` does for them. An idempotent producer's
        plain batches are checked by the same call and returned as infos, nothing done: the
        general path checks their sequences and commits them. None, nothing done, for
        everything else (and for bad bytes): the general path then commits, or raises the
        precise error. With `ends` (a run, see `commit_run`): (answer, offsets per write), the
        write boundaries checked in C. tests/unit/store/test_in_place_fast.py checks the paths
        alike."""
        with self.lock:
            segs = self.segments
            seg = segs[-1] if segs else None
            if seg is not head or seg.size != position or self.closed:
                return None
            mm = seg.mmap
            if mm is None or end > seg.capacity:
                return None
            cfg = self.config
            limits = self._record_limits
            if limits[0] is not cfg:
                self.record_rules()  # resolves the topic's limits once per config
                limits = self._record_limits
            _, before, after, log_append, compacted, _ = limits
            entries = self.leader_epochs.entries  # self.leader_epoch, without its two calls
            epoch = entries[-1][0] if entries else 0
            base = self.log_end_offset
            now = self.clock()
            done = _c_commit_plain(
                mm, position, end, cfg.max_message_bytes, now, before, after, compacted,
                log_append, base, epoch, BatchInfo, ends,
            )  # fmt: skip
            if type(done) is not tuple:
                return done
            batches, nxt = done[0], done[1]
            try:
                seg.commit_written(batches, end - position)
            except OSError as e:  # as `_append`: Kafka's KAFKA_STORAGE_ERROR
                raise storage_error(e, self.dir, f"appending to {self.name}") from e
            self.log_end_offset = nxt
            if not entries and self.leader_epochs.assign(epoch, base):
                self._save_epochs()
            flush_needed = nxt - self.recovery_point >= cfg.flush_messages
            if flush_needed:
                self._flush_target = nxt
            # `_advance_hw` without its call: the new high watermark is at most the log end
            advanced = not self.replicated and self._flush_target <= self.recovery_point
            if advanced:
                self.high_watermark = nxt
            result = AppendResult(
                base, nxt - 1, now if log_append else -1, self.log_start_offset, flush_needed
            )
        if advanced:
            self._notify()
        if self._append_listeners:
            self._appended()
        return result if ends is None else (result, done[3])

    def _head_at(self, head: SegmentFile, position: int) -> LogSegment:
        """The head segment, when it is `head` and its committed bytes end at `position`."""
        seg = self.segments[-1] if self.segments else None
        if seg is not head or seg.size != position:
            raise HeadMovedError(f"{self.name}: the head moved past the written bytes")
        return seg

    @staticmethod
    def _written(seg: LogSegment, position: int, end: int) -> memoryview:
        """A view of [position, end) of seg's mapping (release it: `with`)."""
        mm = seg.mmap
        if mm is None or not 0 <= position <= end <= seg.capacity:
            raise InvalidRecordError("written region is outside the active segment")
        return memoryview(mm)[position:end]

    def _validate(self, mv: memoryview) -> list[BatchInfo]:
        """The batches in `mv`, checked as `append` checks them."""
        return validate_batches(mv, self.config.max_message_bytes, rules=self.record_rules())

    def roll_head(self, head: SegmentFile) -> None:
        """Roll when `head` is still the head and holds data (its writer found it full)."""
        with self.lock:
            seg = self.segments[-1] if self.segments else None
            if seg is head and seg.size:
                self.roll()

    # --- reading in place -------------------------------------------------------------------------

    @contextmanager
    def file_for_reading(self, offset: int) -> Iterator[ReadStart]:
        """Where to read `offset` (EARLIEST: the log start, LATEST: the high watermark) from; the
        log's lock is held until the block ends. OffsetOutOfRangeError outside the log."""
        with self.lock:
            if offset == EARLIEST:
                offset = self.log_start_offset
            elif offset == LATEST:
                offset = self.high_watermark
            if offset < self.log_start_offset or offset > self.log_end_offset:
                raise OffsetOutOfRangeError(
                    f"offset {offset} outside [{self.log_start_offset}, {self.log_end_offset}]"
                )
            seg, start = self.segments[-1], self.segments[-1].size
            for cand in self.segments:  # cleaned logs have gaps: the batch may start past it
                if cand.next_offset <= offset:
                    continue
                found = cand.find_position(offset)
                if found is not None:
                    seg, start = cand, found[0]
                    break
            yield ReadStart(seg, start, offset)

    @contextmanager
    def next_file(self, base_offset: int, committed: bool = False) -> Iterator[SegmentFile | None]:
        """The file after the one starting at `base_offset` (sealed files left empty by the
        cleaner skipped); None while that one is not readable to its end (`committed`: up to the
        last stable offset) or no file follows. The log's lock is held until the block ends."""
        with self.lock:
            current = [seg for seg in self.segments if seg.base_offset == base_offset]
            later = [
                seg
                for seg in self.segments
                if seg.base_offset > base_offset and (seg.size or seg is self.segments[-1])
            ]
            if not later or (current and not self.readable_end(current[0], committed)[2]):
                yield None
            else:
                yield later[0]

    def readable_end(self, file: SegmentFile, committed: bool = False) -> tuple[int, bool, bool]:
        """(last readable byte, mutable, to its end) of a file of this log: where its committed
        batches below the high watermark (`committed`: the last stable offset, for read_committed
        readers) end, whether more may be committed into it (it is the head of an open log), and
        whether that is where its committed batches end."""
        seg = file
        with self.lock:
            hw = self.last_stable_offset if committed else self.high_watermark
            if seg.next_offset <= hw:
                lrb = seg.size
            else:
                found = seg.find_position(hw)
                lrb = found[0] if found else seg.size
            mutable = bool(not self.closed and self.segments and seg is self.segments[-1])
            return lrb, mutable, lrb == seg.size

    # --- the standby head file --------------------------------------------------------------------

    def prepare_standby(self) -> Path | None:
        """With `preallocate`: allocate the file the next roll will take (blocks now, under no lock),
        so a roll renames it instead of allocating a segment; callers may also make it resident
        (the RDMA service does). Returns its path once ready, None when not applicable or already
        there. Any thread."""
        with self.lock:
            if self.closed or not self.config.preallocate or self._standby is not None:
                return None
            self._standby = "making"
            size = self.config.segment_bytes
        path = self.dir / STANDBY_FILE
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.ftruncate(fd, size)
                os.posix_fallocate(fd, 0, size)
            finally:
                os.close(fd)
        except OSError as e:  # e.g. a full disk: the roll allocates (and reports) as usual
            log.warning("%s: cannot prepare the next head file: %s", self.name, e)
            path.unlink(missing_ok=True)
            with self.lock:
                self._standby = None
            return None
        with self.lock:
            if self.closed or self._standby != "making":
                path.unlink(missing_ok=True)
                return None
            self._standby = "ready"
        return path

    def _adopt_standby(self, base_offset: int) -> None:
        """Under the lock, on roll: a ready standby of the right size becomes the new segment's log
        file (a rename: the blocks and resident pages come along)."""
        if self._standby != "ready":
            return
        self._standby = None
        path = self.dir / STANDBY_FILE
        try:
            if path.stat().st_size == self.config.segment_bytes:
                os.rename(path, self.dir / log_file_name(base_offset, ".log"))
            else:
                path.unlink()
        except OSError as e:
            log.warning("%s: standby head file not used: %s", self.name, e)

    def _drop_standby(self) -> None:
        self._standby = None
        (self.dir / STANDBY_FILE).unlink(missing_ok=True)
