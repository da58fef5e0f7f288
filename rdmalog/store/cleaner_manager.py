"""The log cleaner of a Store: which compacted log to clean and when, the cleaner threads, and the
cleaner checkpoint (Kafka's LogCleaner and LogCleanerManager).

Every `log.cleaner.backoff.ms` without work, each of the `log.cleaner.threads` threads picks the
filthiest compacted log: the one with the largest dirty ratio (bytes of the dirty section over
bytes of the log up to the first uncleanable offset) above the topic's `min.cleanable.dirty.ratio`,
or one whose oldest dirty record waited `max.compaction.lag.ms`. The dirty section starts at the
log's entry in `cleaner-offset-checkpoint` (Kafka's file, in the log dir) and ends at the first
uncleanable offset: the head segment, the last stable offset, or the first segment holding a
record younger than `min.compaction.lag.ms`. `cleaner.py` cleans it; the checkpoint then moves to
where the round ended.

The threads share one I/O throttle (`log.cleaner.io.max.bytes.per.second`) and split the dedupe
buffer (`log.cleaner.dedupe.buffer.size`). They only read sealed segments and swap cleaned copies
in under the log's lock for a few renames, so produce and fetch never wait on a clean. Partitions
adopted with deletion suspended (`deletion_suspended`) are not cleaned. A topic's deletion aborts
its cleaning first (`abort_and_pause`); a round that fails unexpectedly marks its partition
uncleanable until restart, as Kafka does.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, NamedTuple

from rdmalog.errors import InvalidConfigError
from rdmalog.store import checkpoints as ck
from rdmalog.store._cleaner import ENTRY_SIZE, OffsetMap
from rdmalog.store.cleaner import Cleaner, CleanerStats, LogCleaningAborted, segments_between

if TYPE_CHECKING:
    from rdmalog.config import BrokerConfig
    from rdmalog.store.log import PartitionLog
    from rdmalog.store.log_manager import Store

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "cleaner-offset-checkpoint"
# broker configs whose live change restarts the cleaner threads (Kafka's LogCleaner reconfigurables)
RESTART_KEYS = (
    "log.cleaner.threads",
    "log.cleaner.dedupe.buffer.size",
    "log.cleaner.io.buffer.size",
    "log.cleaner.io.buffer.load.factor",
)
_CLEANING, _ABORTED = "cleaning", "aborted"  # else a paused count (int)


LONG_OFFSET = 2**63 - 1


def _non_active_from(segments: list, offset: int) -> list:
    """Kafka's nonActiveLogSegmentsFrom: the sealed segments from the one holding `offset` on."""
    active = segments[-1].base_offset
    return [] if offset > active else segments_between(segments, offset, active)


class LogToClean(NamedTuple):
    """A compacted log's cleanable state (Kafka's LogToClean)."""

    log: PartitionLog
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


def cleanable_offsets(
    plog: PartitionLog, last_clean: int | None, now: int
) -> tuple[int, int, bool]:
    """(first dirty offset, first uncleanable offset, whether the checkpoint was invalid) of
    `plog` (Kafka's cleanableOffsets): a checkpoint below the log start or past the log end is
    reset to the log start."""
    with plog.lock:
        start, end = plog.log_start_offset, plog.log_end_offset
        first_dirty = start if last_clean is None else last_clean
        force = first_dirty < start or first_dirty > end
        if force:
            if first_dirty > end:
                log.warning(
                    "%s: cleaner checkpoint %d is past the log end %d; cleaning from the start",
                    plog.name, first_dirty, end,
                )  # fmt: skip
            first_dirty = start
        bounds = [plog.last_stable_offset, plog.active_segment.base_offset]
        lag = max(plog.config.get("min.compaction.lag.ms"), 0)
        if lag > 0:
            for seg in _non_active_from(plog.segments, first_dirty):
                if seg.largest_timestamp() > now - lag:  # too young to clean
                    bounds.append(seg.base_offset)
                    break
        return first_dirty, max(first_dirty, min(bounds)), force


def max_compaction_delay(plog: PartitionLog, first_dirty: int, now: int) -> int:
    """How long past `max.compaction.lag.ms` the oldest dirty batch (by its segment's first
    batch timestamp) has waited; 0 when it has not."""
    with plog.lock:
        dirty = _non_active_from(plog.segments, first_dirty)
        stamps = [s.first_batch_timestamp for s in dirty if s.first_batch_timestamp > 0]
        lag = max(plog.config.get("max.compaction.lag.ms"), 0)
    until = now - lag
    earliest = min(stamps, default=LONG_OFFSET)
    return until - earliest if earliest < until else 0


def log_to_clean(
    plog: PartitionLog, first_dirty: int, uncleanable: int, need_now: bool
) -> LogToClean:
    """The sizes Kafka's LogToClean computes: clean bytes below the first dirty offset, cleanable
    bytes from it to the first uncleanable segment (the one holding `uncleanable`)."""
    with plog.lock:
        holding = _non_active_from(plog.segments, uncleanable)
        first_uncleanable = holding[0].base_offset if holding else plog.active_segment.base_offset
        clean = sum(s.size for s in plog.segments if s.base_offset < first_dirty)
        cleanable = sum(
            s.size
            for s in segments_between(
                plog.segments, min(first_dirty, first_uncleanable), first_uncleanable
            )
        )
    return LogToClean(plog, first_dirty, first_uncleanable, clean, cleanable, need_now)


class Throttler:
    """Kafka's Throttler: sleeps when the bytes observed in a check interval exceed the rate.
    Shared by the cleaner threads (one at a time sleeps). `sleep(seconds)` is interrupted by
    the cleaner's stop; `clock` gives nanoseconds."""

    def __init__(
        self,
        bytes_per_second: float,
        sleep: Callable[[float], object],
        check_ms: int = 300,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self.rate = bytes_per_second
        self.sleep = sleep
        self.check_ns = check_ms * 1_000_000
        self.clock = clock
        self._lock = threading.Lock()
        self._period_start = clock()
        self._observed = 0.0
        self.slept_s = 0.0  # in total (bench, tests)

    def maybe_throttle(self, observed: int) -> None:
        if self.rate >= 1.7e308:  # unlimited (Double.MaxValue)
            return
        with self._lock:
            self._observed += observed
            elapsed = self.clock() - self._period_start
            if elapsed > self.check_ns and self._observed > 0:
                if self._observed * 1e9 / elapsed > self.rate:
                    sleep_s = self._observed / self.rate - elapsed / 1e9
                    if sleep_s > 0:
                        self.sleep(sleep_s)
                        self.slept_s += sleep_s
                self._period_start = self.clock()
                self._observed = 0.0


class LogCleaner:
    """The cleaner of `store`'s compacted logs (see the module docstring)."""

    def __init__(self, store: Store, config: BrokerConfig) -> None:
        self.store = store
        self.enabled = bool(config.get("log.cleaner.enable"))
        self.num_threads = config.get("log.cleaner.threads")
        self.backoff_s = config.get("log.cleaner.backoff.ms") / 1000
        self.checkpoint_path = store.dir / CHECKPOINT_FILE
        self._stop = threading.Event()
        self.throttler = Throttler(
            config.get("log.cleaner.io.max.bytes.per.second"), self._stop.wait
        )
        self._config = config
        self._cond = threading.Condition()
        self._state: dict[PartitionLog, str | int] = {}
        self._uncleanable: set[PartitionLog] = set()
        self._checkpoints = ck.read_offset_checkpoint(self.checkpoint_path)
        self._file_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._lifecycle = threading.RLock()  # start, stop and a live restart, one at a time
        self._closed = False
        self._foreground: Cleaner | None = None
        self.dirtiest_ratio = 0.0
        self.last_stats: CleanerStats | None = None

    def validate(self, config: BrokerConfig) -> None:
        """Kafka's limits on a live change: 1 to twice the running threads, at least half."""
        threads, current = config.get("log.cleaner.threads"), self.num_threads
        if threads == current:
            return
        if threads < 1:
            raise InvalidConfigError("Log cleaner threads should be at least 1")
        if threads < current / 2:
            raise InvalidConfigError(
                f"Log cleaner threads cannot be reduced to less than half the current value {current}"
            )
        if threads > current * 2:
            raise InvalidConfigError(
                f"Log cleaner threads cannot be increased to more than double the current value "
                f"{current}"
            )

    def reconfigure(self, config: BrokerConfig) -> None:
        """Dynamic broker configs changed: the I/O throttle and backoff apply from the next check;
        a new thread count or buffer size restarts the threads, as Kafka's cleaner does (in a
        thread of its own: a round in progress is abandoned at its next check)."""
        restart = any(config.get(k) != self._config.get(k) for k in RESTART_KEYS)
        self._config = config
        self.throttler.rate = config.get("log.cleaner.io.max.bytes.per.second")
        self.backoff_s = config.get("log.cleaner.backoff.ms") / 1000
        if restart:
            self.num_threads = config.get("log.cleaner.threads")
            threading.Thread(target=self._restart, name="rdmalog-cleaner-restart").start()

    def _restart(self) -> None:
        with self._lifecycle:
            if self._threads:
                self._stop_threads()
                self.start()
                log.info("log cleaner restarted: %d threads", len(self._threads))

    def _new_cleaner(self) -> Cleaner:
        cfg = self._config
        threads = max(self.num_threads, 1)
        memory = min(cfg.get("log.cleaner.dedupe.buffer.size") // threads, 2**31 - 1)
        return Cleaner(
            OffsetMap(max(memory, ENTRY_SIZE)),
            io_buffer_size=cfg.get("log.cleaner.io.buffer.size") // threads // 2,
            load_factor=cfg.get("log.cleaner.io.buffer.load.factor"),
            throttle=self.throttler.maybe_throttle,
            check_done=self._check_done,
            clock=self.store.clock,
        )

    # --- threads -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the cleaner threads (none when `log.cleaner.enable` is false)."""
        with self._lifecycle:
            if not self.enabled or self._threads or self._closed:
                return
            self._stop.clear()
            for i in range(self.num_threads):
                t = threading.Thread(
                    target=self._run,
                    args=(self._new_cleaner(),),
                    name=f"rdmalog-cleaner-{i}",
                    daemon=True,
                )
                t.start()
                self._threads.append(t)

    def stop(self) -> None:
        """Stop the threads for good; a round in progress is abandoned at its next check (nothing
        half swapped)."""
        with self._lifecycle:
            self._closed = True
            self._stop_threads()

    def _stop_threads(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()
        self._threads = []

    def _run(self, cleaner: Cleaner) -> None:
        while not self._stop.is_set():
            try:
                cleaned = self._clean_filthiest(cleaner)
            except Exception:
                log.exception("log cleaner failed")
                cleaned = False
            if not cleaned:
                self._stop.wait(self.backoff_s)

    def clean_once(self, now: int | None = None) -> bool:
        """One round on the filthiest log, on the calling thread (tests, benchmarks, and a broker
        with `log.cleaner.threads=0` driven by hand); whether a log was cleaned."""
        if self._foreground is None:
            self._foreground = self._new_cleaner()
        return self._clean_filthiest(self._foreground, now)

    def _clean_filthiest(self, cleaner: Cleaner, now: int | None = None) -> bool:
        now = self.store.clock() if now is None else now
        ltc = self.grab_filthiest(now)
        if ltc is None:
            return False
        plog, end = ltc.log, ltc.first_dirty_offset
        log.info(
            "cleaning log %s (dirty section from %d, ratio %.2f)",
            plog.name, end, ltc.cleanable_ratio,
        )  # fmt: skip
        try:
            end, stats = cleaner.clean(
                plog, ltc.first_dirty_offset, ltc.first_uncleanable_offset, now
            )
            self.last_stats = stats
            _log_stats(plog, ltc.first_dirty_offset, end, stats)
        except LogCleaningAborted as e:
            log.debug("%s: cleaning stopped: %s", plog.name, e)
        except OSError as e:  # a full disk, the log deleted under it: try again after the backoff
            log.warning("%s: cleaning failed: %s", plog.name, e)
        except Exception:
            log.exception(
                "%s: unexpected error while cleaning; not cleaned until restart", plog.name
            )
            with self._cond:
                self._uncleanable.add(plog)
        finally:
            self._done_cleaning(plog, end)
        return True

    def _check_done(self, plog: PartitionLog) -> None:
        if self._stop.is_set() or self._state.get(plog) == _ABORTED:
            raise LogCleaningAborted(f"{plog.name}: cleaning aborted")

    # --- choosing a log ------------------------------------------------------------------------

    def grab_filthiest(self, now: int) -> LogToClean | None:
        """The compacted log to clean next, marked in progress; None when none is dirty enough
        (Kafka's grabFilthiestCompactedLog)."""
        logs = self.store.logs()
        with self._cond:
            dirty = []
            for plog in logs:
                if (
                    plog.closed
                    or "compact" not in plog.config.cleanup_policy
                    or plog in self._state
                    or plog in self._uncleanable
                    or plog.deletion_suspended  # adopted without its configs
                ):
                    continue
                key = (plog.topic, plog.partition)
                try:
                    first_dirty, uncleanable, force = cleanable_offsets(
                        plog, self._checkpoints.get(key), now
                    )
                    delay = max_compaction_delay(plog, first_dirty, now)
                    ltc = log_to_clean(plog, first_dirty, uncleanable, delay > 0)
                except (IndexError, OSError) as e:  # closed or deleted meanwhile
                    log.debug("%s: not looked at for cleaning: %s", plog.name, e)
                    continue
                if force:
                    self._checkpoints[key] = first_dirty
                if ltc.total_bytes > 0:
                    dirty.append(ltc)
            self.dirtiest_ratio = max((c.cleanable_ratio for c in dirty), default=0.0)
            ready = [
                c
                for c in dirty
                if (c.need_compaction_now and c.cleanable_bytes > 0)
                or c.cleanable_ratio > c.log.config.get("min.cleanable.dirty.ratio")
            ]
            if not ready:
                return None
            best = max(ready, key=lambda c: c.cleanable_ratio)
            self._state[best.log] = _CLEANING
            return best

    def _done_cleaning(self, plog: PartitionLog, end: int) -> None:
        """The round ended: the checkpoint moves to `end` (unless it was aborted), the log is
        free again (or paused, if its cleaning was aborted)."""
        with self._cond:
            state = self._state.get(plog)
            if state == _ABORTED:
                self._state[plog] = 1
                self._cond.notify_all()
                return
            if state != _CLEANING:  # forgotten meanwhile (its topic was deleted)
                return
            del self._state[plog]
            self._checkpoints[(plog.topic, plog.partition)] = end
            snapshot = dict(self._checkpoints)
        self._write_checkpoints(snapshot)

    def _write_checkpoints(self, entries: dict[tuple[str, int], int]) -> None:
        with self._file_lock:
            try:
                ck.write_offset_checkpoint(self.checkpoint_path, entries)
            except OSError as e:
                log.warning("cannot write %s: %s", self.checkpoint_path, e)

    # --- pausing and forgetting ----------------------------------------------------------------

    def busy(self, plog: PartitionLog) -> bool:
        """Whether `plog` is being cleaned (retention then waits its turn, as Kafka's does)."""
        return self._state.get(plog) in (_CLEANING, _ABORTED)

    def abort_and_pause(self, plog: PartitionLog) -> None:
        """Stop a round on `plog` at its next check and keep the cleaner off it until `resume`;
        returns once no round runs on it."""
        with self._cond:
            state = self._state.get(plog)
            if state is None:
                self._state[plog] = 1
            elif isinstance(state, int):
                self._state[plog] = state + 1
            elif state == _CLEANING:
                self._state[plog] = _ABORTED
            while not isinstance(self._state.get(plog), int):
                self._cond.wait(0.1)

    def resume(self, plog: PartitionLog) -> None:
        """Undo one `abort_and_pause`."""
        with self._cond:
            state = self._state.get(plog)
            if isinstance(state, int):
                if state > 1:
                    self._state[plog] = state - 1
                else:
                    del self._state[plog]

    def forget(self, logs: Iterable[PartitionLog]) -> None:
        """The logs were deleted: drop their state and checkpoint entries."""
        with self._cond:
            for plog in logs:
                self._state.pop(plog, None)
                self._uncleanable.discard(plog)
                self._checkpoints.pop((plog.topic, plog.partition), None)
            snapshot = dict(self._checkpoints)
        self._write_checkpoints(snapshot)

    def checkpoints(self) -> dict[tuple[str, int], int]:
        with self._cond:
            return dict(self._checkpoints)


def _log_stats(plog: PartitionLog, start: int, end: int, stats: CleanerStats) -> None:
    mb = 1 << 20
    log.info(
        "cleaned log %s (dirty section = [%d, %d]): %.1f MB of log processed in %.1f s "
        "(%.1f MB/s), map %.1f s; %.1f MB -> %.1f MB (%d -> %d messages), buffer %.1f%% used",
        plog.name, start, end, stats.bytes_read / mb, stats.elapsed,
        stats.bytes_read / mb / stats.elapsed, stats.map_done - stats.start,
        stats.bytes_read / mb, stats.bytes_written / mb, stats.messages_read,
        stats.messages_written, 100 * stats.buffer_utilization,
    )  # fmt: skip
    if stats.invalid_messages:
        log.warning("%s: %d records without a key removed", plog.name, stats.invalid_messages)
