"""Cleaning one compacted log, as Kafka's Cleaner does it (`cleaner_manager.py` decides which log
and when).

A round (`Cleaner.clean`) has two passes over sealed segments, read through the cleaner's own
descriptors without the log's lock:

1. The offset map: every keyed record of the dirty section [first dirty offset, first uncleanable
   offset) puts key -> offset into Kafka's SkimpyOffsetMap (`_cleaner.OffsetMap`: MD5 of the key,
   fixed memory, `log.cleaner.dedupe.buffer.size` / threads). A full map ends the section early;
   the next round goes on from there. Records of aborted transactions are not mapped.
2. The clean: every segment from the log start to where the map ends, in groups that fit one
   segment (`segment.bytes`, `segment.index.bytes`, relative offsets in an int), is filtered into
   one new segment (`<base>.log.cleaned` ...) which then replaces the group (`replace_segments`).

The filter keeps a record when no later record of the dirty section has its key, it has a value
or its batch's delete horizon has not passed, and it is not in an aborted transaction. Batches keep
Kafka's form: one whose records all stay is copied byte for byte; one that loses records is
re-built with its base offset, last offset delta, producer id/epoch/base sequence, leader epoch and
codec, as Kafka's MemoryRecordsBuilder re-builds it; one that loses them all is dropped, unless it
is the last batch of an active producer (kept empty, so producer state survives) or the last of the
round. A retained tombstone (or the marker of a transaction with nothing left) gets a delete
horizon (now + `delete.retention.ms`, stored as the base timestamp with attribute bit 6) the first
time; a round after that horizon removes it (Kafka's two-pass rule, KIP-534). Control batches go
once their transaction's data is gone and their horizon passed.

Plain non-transactional batches are filtered in C (`OffsetMap.filter_batches`, without the GIL);
compressed, transactional and control batches one at a time here, their records in C too.
"""

from __future__ import annotations

import bisect
import logging
import os
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rdmalog.config import LONG_MAX
from rdmalog.errors import CorruptRecordError
from rdmalog.store._cleaner import (
    FIXED_TIMESTAMP,
    FORCE_HORIZON,
    RETAIN_ALL,
    STATUS_FULL,
    STATUS_OUT_FULL,
    STATUS_PYTHON,
    OffsetMap,
)
from rdmalog.store.compression import compress_as_kafka, decompress
from rdmalog.store.records import (
    BATCH_OVERHEAD,
    CODEC_MASK,
    CONTROL_BIT,
    DELETE_HORIZON_BIT,
    HEADER,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    RecordBatch,
    decode_records,
    set_crc,
)
from rdmalog.store.segment import LogSegment, log_file_name
from rdmalog.store.segment_swap import CLEANED_SUFFIX
from rdmalog.store.transaction_index import (
    CleanedTransactions,
    collect_aborted,
    control_type,
    write_aborted,
)

if TYPE_CHECKING:
    from rdmalog.store.log import PartitionLog

log = logging.getLogger(__name__)

INT_MAX = 2**31 - 1
_KEPT_ATTRIBUTES = TIMESTAMP_TYPE_BIT | TRANSACTIONAL_BIT | CONTROL_BIT


class LogCleaningAborted(Exception):
    """The round stopped: the cleaner is stopping, the log's cleaning was aborted (topic deleted,
    paused), or the log moved on under it (segments deleted or truncated). Nothing was swapped."""


class _MapFull(Exception):
    pass


@dataclass
class CleanerStats:
    """What a round read and wrote (Kafka's CleanerStats)."""

    start: float = field(default_factory=time.monotonic)
    map_done: float = 0.0
    end: float = 0.0
    map_bytes_read: int = 0
    map_messages_read: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    messages_read: int = 0
    messages_written: int = 0
    invalid_messages: int = 0
    buffer_utilization: float = 0.0

    def add_filtered(self, read: int, kept: int, bytes_read: int, bytes_kept: int, invalid: int):
        self.messages_read += read
        self.messages_written += kept
        self.bytes_read += bytes_read
        self.bytes_written += bytes_kept
        self.invalid_messages += invalid

    @property
    def elapsed(self) -> float:
        return max(self.end - self.start, 1e-9)


def segments_between(segments: list[LogSegment], start: int, end: int) -> list[LogSegment]:
    """Kafka's logSegments(from, to): the segment holding `start` (the last one based at or below
    it) and every later one based below `end`; none when start == end."""
    if start >= end:
        return []
    bases = [s.base_offset for s in segments]
    first = max(bisect.bisect_right(bases, start) - 1, 0)
    return [s for s in segments[first:] if s.base_offset < end]


def group_segments(
    segments: list[LogSegment], max_size: int, max_index_size: int, first_uncleanable: int
) -> list[list[LogSegment]]:
    """Kafka's groupSegmentsBySize: consecutive segments whose log data, offset index and time
    index each fit one segment and whose offsets stay within an int of the group's base."""
    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        size = segments[i].size
        index = segments[i].offset_index.entries * 8
        time_index = segments[i].time_index.entries * 12
        i += 1
        while i < len(segments):
            seg = segments[i]
            # the last offset the next segment may hold: the following base, or the round's end
            last = (
                segments[i + 1].base_offset - 1 if i + 1 < len(segments) else first_uncleanable - 1
            )
            if (
                size + seg.size > max_size
                or index + seg.offset_index.entries * 8 > max_index_size
                or time_index + seg.time_index.entries * 12 > max_index_size
                or (seg.size and last - group[0].base_offset > INT_MAX)
            ):
                break
            group.append(seg)
            size += seg.size
            index += seg.offset_index.entries * 8
            time_index += seg.time_index.entries * 12
            i += 1
        groups.append(group)
    return groups


@dataclass
class _Round:
    """What filtering one group needs beyond the map."""

    txn: CleanedTransactions
    last_records: dict[int, tuple[int | None, int]]
    protected: bytes  # sorted int64 last offsets of active producers' last batches
    upper: int  # the round's first uncleanable offset: the batch ending there stays
    now: int
    new_horizon: int


class Cleaner:
    """One cleaner thread's state: its offset map and I/O buffers. Not thread-safe."""

    def __init__(
        self,
        offset_map: OffsetMap,
        *,
        io_buffer_size: int = 262144,
        load_factor: float = 0.9,
        throttle: Callable[[int], None] = lambda n: None,
        check_done: Callable[[PartitionLog], None] = lambda plog: None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        if offset_map.slots * load_factor < 1:
            raise ValueError(
                "the offset map is too small for even one record: raise "
                "log.cleaner.dedupe.buffer.size or lower log.cleaner.threads"
            )
        self.map = offset_map
        self.io_buffer_size = max(io_buffer_size, BATCH_OVERHEAD)
        self.load_factor = load_factor
        self.throttle = throttle
        self.check_done = check_done
        self.clock = clock or (lambda: int(time.time() * 1000))
        self._read_buf = bytearray(self.io_buffer_size)
        self._write_buf = bytearray(self.io_buffer_size)

    # --- a round -------------------------------------------------------------------------------

    def clean(
        self, plog: PartitionLog, first_dirty: int, first_uncleanable: int, now: int | None = None
    ) -> tuple[int, CleanerStats]:
        """Clean `plog` from its dirty section [first_dirty, first_uncleanable) (Kafka's doClean).
        Returns the first offset not cleaned (the next round's first dirty offset) and the
        round's statistics. Raises LogCleaningAborted when stopped part-way (what was swapped in
        before stays: each swap is complete on its own)."""
        now = self.clock() if now is None else now
        stats = CleanerStats()
        txn_bases = _txn_index_bases(plog)
        self.build_offset_map(plog, first_dirty, first_uncleanable, stats, txn_bases)
        end = self.map.latest_offset + 1
        stats.map_done = time.monotonic()
        with plog.lock:
            segments = segments_between(plog.segments[:-1], 0, end)
            cfg = plog.config
        groups = group_segments(
            segments, cfg.segment_bytes, cfg.segment_index_bytes, first_uncleanable
        )
        txn = CleanedTransactions()
        for group in groups:
            self.clean_segments(plog, group, now, stats, txn, first_uncleanable, txn_bases)
        stats.buffer_utilization = self.map.utilization
        self.map.clear()  # its pages go back until the next round
        stats.end = time.monotonic()
        return end, stats

    # --- the offset map ------------------------------------------------------------------------

    def build_offset_map(
        self,
        plog: PartitionLog,
        start: int,
        end: int,
        stats: CleanerStats,
        txn_bases: list[int] | None = None,
    ) -> None:
        """Map the keys of [start, end) to their latest offsets, segment by segment, until the map
        holds `load factor` of its slots (Kafka's buildOffsetMap)."""
        m = self.map
        m.clear()
        with plog.lock:
            dirty = segments_between(plog.segments[:-1], start, end)
            bases = [s.base_offset for s in plog.segments]
        txn = CleanedTransactions()
        if txn_bases:
            txn.add_aborted(collect_aborted(plog.dir, txn_bases, bases, start, end))
        nexts = [s.base_offset for s in dirty[1:]] + [end] if dirty else []
        max_entries = int(m.slots * self.load_factor)
        for seg, nxt in zip(dirty, nexts, strict=True):
            self.check_done(plog)
            if self._map_segment(plog, seg, start, nxt, max_entries, txn, stats):
                log.debug("%s: offset map full in segment %d", plog.name, seg.base_offset)
                break

    def _map_segment(
        self,
        plog: PartitionLog,
        seg: LogSegment,
        start: int,
        next_start: int,
        max_entries: int,
        txn: CleanedTransactions,
        stats: CleanerStats,
    ) -> bool:
        """Map one segment's records at or after `start`; True when the map filled up."""
        m = self.map

        def consume(chunk: memoryview) -> int:
            i, end = 0, len(chunk)
            while True:
                i, status, n = m.add_batches(chunk, i, end, start, max_entries)
                stats.map_messages_read += n
                if status == STATUS_FULL:
                    raise _MapFull
                if status != STATUS_PYTHON:
                    return i
                i += self._map_one(chunk, i, start, max_entries, txn, stats)

        try:
            fd, size, _ = _open_sealed(plog, seg)
            try:
                with plog.lock:
                    position = seg.offset_index.lookup(start)[1] if start > seg.base_offset else 0
                stats.map_bytes_read += self._read_all(plog, fd, position, size, consume)
            finally:
                os.close(fd)
        except _MapFull:
            return True
        m.latest_offset = next_start - 1  # past any gap at the segment's end
        return False

    def _map_one(
        self,
        chunk: memoryview,
        i: int,
        start: int,
        max_entries: int,
        txn: CleanedTransactions,
        stats: CleanerStats,
    ) -> int:
        """Map the control, transactional or compressed batch at `i`; returns its size."""
        (base, length, _, _, _, attrs, lod, _, _, pid, _, _, count) = HEADER.unpack_from(chunk, i)
        size, last = length + LOG_OVERHEAD, base + lod
        if attrs & CONTROL_BIT:
            txn.on_control_batch(last, pid, _control_kind(chunk, i, size))
            stats.map_messages_read += 1
        elif txn.on_batch(last, bool(attrs & TRANSACTIONAL_BIT), pid):
            stats.map_messages_read += count  # aborted: not mapped
        else:
            full, n = self.map.add_records(
                _records(chunk, i, size, attrs), base, count, start, max_entries
            )
            stats.map_messages_read += n
            if full:
                raise _MapFull
        if last >= start:
            self.map.latest_offset = last
        return size

    # --- the clean -----------------------------------------------------------------------------

    def clean_segments(
        self,
        plog: PartitionLog,
        group: list[LogSegment],
        now: int,
        stats: CleanerStats,
        txn: CleanedTransactions,
        upper: int,
        txn_bases: list[int] | None = None,
    ) -> None:
        """Filter `group` into one `.cleaned` segment and swap it in (Kafka's cleanSegments)."""
        cfg = plog.config
        dest = _new_cleaned_segment(plog, group[0].base_offset)
        try:
            with plog.lock:
                last_records = plog.producer_state.last_records()
                bases = [s.base_offset for s in plog.segments]
            protected = sorted(off for off, _ in last_records.values() if off is not None)
            horizon = min(now + cfg.get("delete.retention.ms"), LONG_MAX)
            rnd = _Round(txn, last_records, array("q", protected).tobytes(), upper, now, horizon)
            mtime_ns = 0
            for k, seg in enumerate(group):
                nxt = group[k + 1].base_offset if k + 1 < len(group) else seg.next_offset
                if txn_bases:
                    txn.add_aborted(
                        collect_aborted(plog.dir, txn_bases, bases, seg.base_offset, nxt)
                    )
                fd, size, mtime_ns = _open_sealed(plog, seg)
                try:
                    self._read_all(
                        plog, fd, 0, size, lambda c: self._filter_chunk(c, dest, rnd, stats)
                    )
                finally:
                    os.close(fd)
            dest.seal()
            write_aborted(dest.txn_index_path, txn.kept)
            txn.kept = []
            for fd in dest.dup_fds():  # durable before the swap
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            dest.set_last_modified(mtime_ns)
            self.check_done(plog)
            if not plog.replace_segments(dest, group):
                raise LogCleaningAborted(f"{plog.name} changed while it was cleaned")
        except BaseException:
            if dest.file_suffix == CLEANED_SUFFIX:  # the swap never began: drop the copy
                dest.delete()
            else:  # it failed part-way (a storage error): recovery finishes it at the next start
                log.error("%s: swapping in a cleaned segment failed part-way", plog.name)
            raise
        log.debug(
            "%s: cleaned %d segment(s) from offset %d into %d bytes",
            plog.name, len(group), dest.base_offset, dest.size,
        )  # fmt: skip

    def _filter_chunk(
        self, chunk: memoryview, dest: LogSegment, rnd: _Round, stats: CleanerStats
    ) -> int:
        """Filter the whole batches of `chunk` into `dest`; returns the bytes consumed."""
        m, out = self.map, self._write_buf
        written: list[tuple] = []
        i, end, n = 0, len(chunk), 0
        while i < end:
            i, n, status, more, st = m.filter_batches(
                chunk, i, end, out, n, rnd.protected, rnd.upper, rnd.now, rnd.new_horizon
            )
            written += more
            stats.add_filtered(*st)
            if status == STATUS_OUT_FULL:
                if n:
                    self._write(dest, out, n, written)
                    n, written = 0, []
                else:  # one re-built batch larger than the buffer
                    out = self._write_buf = bytearray(2 * len(out))
                continue
            if status != STATUS_PYTHON:
                break
            size, kept = self._filter_one(chunk, i, rnd, stats)
            i += size
            if kept is not None:
                data, last, max_ts = kept
                if len(data) > len(out) - n:
                    if n:
                        self._write(dest, out, n, written)
                        n, written = 0, []
                    if len(data) > len(out):
                        out = self._write_buf = bytearray(len(data))
                out[n : n + len(data)] = data
                written.append((n, len(data), last, max_ts, False))
                n += len(data)
        if n:
            self._write(dest, out, n, written)
        return i

    def _write(self, dest: LogSegment, out: bytearray, n: int, written: list[tuple]) -> None:
        """Append the batches filtered into `out[:n]` to the cleaned segment (re-built ones get
        their CRC here)."""
        for pos, size, _, _, crc_due in written:
            if crc_due:
                set_crc(out, pos, size)
        with memoryview(out)[:n] as mv:
            dest.append(mv, [(pos, size, last, max_ts) for pos, size, last, max_ts, _ in written])
        self.throttle(n)

    def _filter_one(
        self, chunk: memoryview, i: int, rnd: _Round, stats: CleanerStats
    ) -> tuple[int, tuple[bytes | bytearray, int, int] | None]:
        """Filter the control, transactional or compressed batch at `i` (Kafka's
        checkBatchRetention and filterTo for one batch). Returns its size and what stays of it:
        (bytes, last offset, max timestamp), or None."""
        h = HEADER.unpack_from(chunk, i)
        (base, length, epoch_ple, _, _, attrs, lod, base_ts, max_ts, pid, epoch, seq, count) = h
        size, last, control = length + LOG_OVERHEAD, base + lod, bool(attrs & CONTROL_BIT)
        if control:
            can_discard = rnd.txn.on_control_batch(last, pid, _control_kind(chunk, i, size))
        else:
            can_discard = rnd.txn.on_batch(last, bool(attrs & TRANSACTIONAL_BIT), pid)
        has_horizon = bool(attrs & DELETE_HORIZON_BIT)
        discard = can_discard and (not control or (has_horizon and base_ts <= rnd.now))
        producer = rnd.last_records.get(pid)
        last_of_producer = producer is not None and (
            last == producer[0] if producer[0] is not None else control and epoch == producer[1]
        )
        retain_empty = (pid >= 0 and last_of_producer) or last + 1 == rnd.upper
        stats.bytes_read += size
        if discard and not retain_empty:
            return size, None
        codec = attrs & CODEC_MASK
        kept, records, records_max, new_base, horizon = 0, b"", -1, -1, False
        if discard:
            stats.messages_read += count
        else:
            flags = FIXED_TIMESTAMP if attrs & TIMESTAMP_TYPE_BIT else 0
            if control:  # markers stay whole; one of a transaction with nothing left gets a horizon
                flags |= RETAIN_ALL | (FORCE_HORIZON if can_discard else 0)
            kept, records, records_max, new_base, horizon, _, invalid = self.map.filter_records(
                _records(chunk, i, size, attrs), count, base, base_ts, max_ts, flags,
                base_ts if has_horizon else -1, rnd.new_horizon, rnd.now,
            )  # fmt: skip
            stats.add_filtered(count, kept, 0, 0, invalid)
        if kept == 0:
            if not retain_empty:
                return size, None
            empty = bytearray(BATCH_OVERHEAD)  # DefaultRecordBatch.writeEmptyHeader: no base time
            HEADER.pack_into(
                empty, 0, base, BATCH_OVERHEAD - LOG_OVERHEAD, epoch_ple, MAGIC, 0,
                attrs & _KEPT_ATTRIBUTES, lod, -1, max_ts, pid, epoch, seq, 0,
            )  # fmt: skip
            set_crc(empty, 0, BATCH_OVERHEAD)
            stats.bytes_written += BATCH_OVERHEAD
            return size, (empty, last, max_ts)
        if records is None:  # every record stays: the batch as it is
            stats.bytes_written += size
            return size, (chunk[i : i + size], last, max_ts)
        body = compress_as_kafka(codec, records) if codec else records
        new_attrs = codec | attrs & _KEPT_ATTRIBUTES | (DELETE_HORIZON_BIT if horizon else 0)
        new_max = max_ts if attrs & TIMESTAMP_TYPE_BIT else records_max
        batch = bytearray(BATCH_OVERHEAD + len(body))
        HEADER.pack_into(
            batch, 0, base, len(batch) - LOG_OVERHEAD, epoch_ple, MAGIC, 0, new_attrs, lod,
            new_base, new_max, pid, epoch, seq, kept,
        )  # fmt: skip
        batch[BATCH_OVERHEAD:] = body
        set_crc(batch, 0, len(batch))
        stats.bytes_written += len(batch)
        return size, (batch, last, new_max)

    # --- reading -------------------------------------------------------------------------------

    def _read_all(
        self,
        plog: PartitionLog,
        fd: int,
        position: int,
        size: int,
        consume: Callable[[memoryview], int],
    ) -> int:
        """Feed `consume` windows of the file from `position` to `size` (it returns the bytes of
        whole batches it took); a batch larger than the buffer grows it (Kafka's
        growBuffersOrFail). Returns the bytes read."""
        pos, want = position, self.io_buffer_size
        while pos < size:
            self.check_done(plog)
            n = min(want, size - pos)
            if len(self._read_buf) < n:
                self._read_buf = bytearray(n)
            with memoryview(self._read_buf)[:n] as window:
                got = os.preadv(fd, [window], pos)
                self.throttle(got)
                used = consume(window[:got]) if got == n else 0
            if used:
                pos += used
                want = self.io_buffer_size
                continue
            if got < n:
                raise CorruptRecordError(f"{plog.name}: segment file shorter than its data")
            head = self._read_buf[:LOG_OVERHEAD]
            need = int.from_bytes(head[8:12], "big", signed=True) + LOG_OVERHEAD
            if need <= n or need > size - pos:
                raise CorruptRecordError(
                    f"{plog.name}: batch of {need} bytes at byte {pos} does not fit its segment"
                )
            want = need
        return pos - position


# --- helpers --------------------------------------------------------------------------------------


def _open_sealed(plog: PartitionLog, seg: LogSegment) -> tuple[int, int, int]:
    """(a new read-only descriptor, committed size, modification time in ns) of a sealed segment
    of `plog`; LogCleaningAborted when it is gone or became the head."""
    with plog.lock:
        if seg.deleted or seg.active or plog.closed:
            raise LogCleaningAborted(f"{plog.name}: segment {seg.base_offset} is gone")
        fd = os.open(seg.path, os.O_RDONLY)
        return fd, seg.size, os.fstat(fd).st_mtime_ns


def _new_cleaned_segment(plog: PartitionLog, base_offset: int) -> LogSegment:
    """An empty `<base>.log.cleaned` segment (leftovers of an earlier attempt removed first)."""
    for suffix in (".log", ".index", ".timeindex", ".txnindex"):
        (plog.dir / log_file_name(base_offset, suffix + CLEANED_SUFFIX)).unlink(missing_ok=True)
    cfg = plog.config
    return LogSegment(
        plog.dir,
        base_offset,
        segment_bytes=cfg.segment_bytes,
        index_bytes=cfg.segment_index_bytes,
        index_interval=cfg.index_interval_bytes,
        file_suffix=CLEANED_SUFFIX,
        new=True,
    )


def _records(chunk: memoryview, i: int, size: int, attrs: int) -> bytes | memoryview:
    """The records section of the batch at `i`, decompressed."""
    body = chunk[i + BATCH_OVERHEAD : i + size]
    codec = attrs & CODEC_MASK
    return decompress(codec, body) if codec else body


def _control_kind(chunk: memoryview, i: int, size: int) -> int | None:
    """The control type of the control batch at `i`; None when it holds no record."""
    records = decode_records(RecordBatch(chunk[i : i + size]))
    return control_type(records[0].key) if records else None


def _txn_index_bases(plog: PartitionLog) -> list[int]:
    """Base offsets of the log's segments that have a `.txnindex` (an imported Kafka log's)."""
    return sorted(
        int(n[:20]) for n in os.listdir(plog.dir) if n.endswith(".txnindex") and n[:20].isdigit()
    )
