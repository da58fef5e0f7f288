"""Checks of Kafka log files as they lie on disk, without opening them as a log: every batch's length,
magic and CRC-32C in a segment (`check_segment`), offset and time index entries against their
segment (`check_offset_index`, `check_time_index`), and a partition directory's segments in order
(`check_partition`). `rdmalog dump-log` prints them; `rdmalog import` and `export` verify with them.

A segment may end in zeros (a preallocated or sparsely extended head file): they are not counted as
invalid bytes. Anything else after the last whole batch is.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rdmalog.store.records import (
    BATCH_OVERHEAD,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    RecordBatch,
    batch_is_valid,
)

_LENGTH = struct.Struct(">i")
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
SEGMENT_NAME = re.compile(r"(\d{20})\.log")


@dataclass
class BatchCheck:
    """One batch of a segment: its header and whether its length, magic and CRC are right."""

    position: int
    batch: RecordBatch
    valid: bool


@dataclass
class SegmentCheck:
    """What a segment file holds: batch and record counts, its offsets, what is wrong."""

    path: Path
    base_offset: int
    batches: int = 0
    records: int = 0
    first_offset: int | None = None
    next_offset: int | None = None
    bytes: int = 0  # of whole batches
    invalid_batches: list[int] = field(default_factory=list)  # their positions
    trailing_bytes: int = 0  # after the last whole batch, not zeros
    out_of_order: list[int] = field(default_factory=list)  # positions of batches going back

    @property
    def ok(self) -> bool:
        return not (self.invalid_batches or self.trailing_bytes or self.out_of_order)


def base_offset_of(path: Path) -> int:
    try:
        return int(path.name.split(".", 1)[0])
    except ValueError:
        return 0


def iter_checked_batches(path: Path, check: SegmentCheck | None = None) -> Iterator[BatchCheck]:
    """Each whole batch of a segment file with its validity (read a batch at a time, each its own
    buffer, so a caller may keep them); fills `check` as it goes."""
    check = check or SegmentCheck(Path(path), base_offset_of(Path(path)))
    with open(path, "rb", buffering=1 << 20) as f:
        size = os.fstat(f.fileno()).st_size
        pos = 0
        while size - pos >= BATCH_OVERHEAD:
            head = f.read(LOG_OVERHEAD)
            length = _LENGTH.unpack_from(head, 8)[0]
            if length < MIN_BATCH_LENGTH or pos + length + LOG_OVERHEAD > size:
                f.seek(pos)
                break
            data = head + f.read(length)
            batch = RecordBatch(data, 0)
            valid = batch_is_valid(data, 0, len(data)) == batch.size
            check.batches += 1
            check.bytes += batch.size
            if valid:
                check.records += batch.count
            else:
                check.invalid_batches.append(pos)
            if check.next_offset is not None and batch.base_offset < check.next_offset:
                check.out_of_order.append(pos)
            if check.first_offset is None:
                check.first_offset = batch.base_offset
            check.next_offset = batch.last_offset + 1
            yield BatchCheck(pos, batch, valid)
            pos += len(data)
        f.seek(pos)
        while chunk := f.read(1 << 20):
            if any(chunk):  # zeros are preallocated space
                check.trailing_bytes = size - pos
                break


def check_segment(path: Path, on_batch: Callable[[int], None] | None = None) -> SegmentCheck:
    """Walk a segment file; `on_batch(bytes)` after each batch (progress)."""
    check = SegmentCheck(Path(path), base_offset_of(Path(path)))
    for b in iter_checked_batches(path, check):
        if on_batch is not None:
            on_batch(b.batch.size)
    return check


def _batch_at(log, position: int) -> RecordBatch | None:
    if position < 0 or position + BATCH_OVERHEAD > len(log):
        return None
    return RecordBatch(bytes(log[position : position + BATCH_OVERHEAD]), 0)


def _entries(path: Path, entry: struct.Struct) -> Iterator[tuple[int, ...]]:
    data = Path(path).read_bytes()
    for i in range(len(data) // entry.size):
        yield entry.unpack_from(data, i * entry.size)


def offset_index_entries(path: Path) -> list[tuple[int, int]]:
    """(absolute offset, position) entries of a `.index` file, stopping at the zero padding a
    preallocated file has (an entry with relative offset 0 after the first)."""
    base = base_offset_of(Path(path))
    out = []
    for i, (rel, pos) in enumerate(_entries(path, _OFFSET_ENTRY)):
        if i and rel == 0 and pos == 0:
            break
        out.append((base + rel, pos))
    return out


def time_index_entries(path: Path) -> list[tuple[int, int]]:
    """(timestamp, absolute offset) entries of a `.timeindex` file, up to its zero padding."""
    base = base_offset_of(Path(path))
    out = []
    for i, (ts, rel) in enumerate(_entries(path, _TIME_ENTRY)):
        if i and ts == 0 and rel == 0:
            break
        out.append((ts, base + rel))
    return out


def check_offset_index(path: Path) -> list[str]:
    """What is wrong with an offset index against its segment (empty: nothing)."""
    log_path = Path(path).with_suffix(".log")
    problems = []
    last = -1
    with open(log_path, "rb") if log_path.exists() else open(os.devnull, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        log = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) if size else b""
        for offset, position in offset_index_entries(path):
            if offset <= last:
                problems.append(f"offset {offset} does not increase (previous {last})")
            last = offset
            batch = _batch_at(log, position)
            if batch is None:
                problems.append(f"offset {offset}: position {position} is past the segment")
            elif not batch.base_offset <= offset <= batch.last_offset:
                problems.append(
                    f"Index offset {offset} mismatch: the batch at position {position} holds "
                    f"offsets {batch.base_offset}-{batch.last_offset}"
                )
        if size:
            log.close()
    return problems


def check_time_index(path: Path) -> list[str]:
    """What is wrong with a time index against its segment (empty: nothing)."""
    log_path = Path(path).with_suffix(".log")
    max_ts: dict[int, int] = {}  # last offset of each batch -> the largest timestamp so far
    running = -1
    if log_path.exists():
        for b in iter_checked_batches(log_path):
            running = max(running, b.batch.max_timestamp)
            max_ts[b.batch.last_offset] = running
    problems = []
    last_ts = -1
    for ts, offset in time_index_entries(path):
        if ts <= last_ts:
            problems.append(f"timestamp {ts} does not increase (previous {last_ts})")
        last_ts = ts
        if offset not in max_ts:
            problems.append(f"timestamp {ts}: offset {offset} is not a batch's last offset")
        elif max_ts[offset] != ts:
            problems.append(
                f"timestamp {ts}: the largest timestamp up to offset {offset} is {max_ts[offset]}"
            )
    return problems


@dataclass
class PartitionCheck:
    """A partition directory's segments, checked in offset order."""

    directory: Path
    segments: list[SegmentCheck] = field(default_factory=list)
    gaps: list[tuple[int, int]] = field(default_factory=list)  # (expected, found) offsets

    @property
    def records(self) -> int:
        return sum(s.records for s in self.segments)

    @property
    def batches(self) -> int:
        return sum(s.batches for s in self.segments)

    @property
    def start_offset(self) -> int | None:
        firsts = [s.first_offset for s in self.segments if s.first_offset is not None]
        return firsts[0] if firsts else None

    @property
    def end_offset(self) -> int:
        nexts = [s.next_offset for s in self.segments if s.next_offset is not None]
        if nexts:
            return nexts[-1]
        return self.segments[-1].base_offset if self.segments else 0

    @property
    def invalid_batches(self) -> int:
        return sum(len(s.invalid_batches) for s in self.segments)

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.segments)


def segment_files(directory: Path) -> list[Path]:
    """The `.log` files of a partition directory in offset order."""
    found = [p for p in Path(directory).iterdir() if SEGMENT_NAME.fullmatch(p.name)]
    return sorted(found, key=base_offset_of)


def data_bytes(directory: Path) -> int:
    """Bytes of the segment files of a partition directory (for progress totals)."""
    return sum(p.stat().st_size for p in segment_files(directory))


def check_partition(
    directory: Path, on_batch: Callable[[int], None] | None = None
) -> PartitionCheck:
    """Check every segment of a partition directory, and that offsets follow from one to the next
    (a gap is legal after compaction; it is reported, not counted as an error)."""
    result = PartitionCheck(Path(directory))
    expected = None
    for path in segment_files(directory):
        seg = check_segment(path, on_batch)
        result.segments.append(seg)
        if expected is not None and seg.first_offset is not None and seg.first_offset > expected:
            result.gaps.append((expected, seg.first_offset))
        if seg.next_offset is not None:
            expected = seg.next_offset
    return result
