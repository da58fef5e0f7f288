"""Offset and time index files in Kafka's layouts, memory-mapped.

Offset index (`.index`): 8-byte entries (int32 offset relative to the segment base, int32 byte position
of a batch), big-endian; an entry names a batch by its *last* offset, as Kafka does. Time index
(`.timeindex`): 12-byte entries (int64 max timestamp so far, int32 relative offset of the batch that
holds it); timestamps strictly increase. Both are sparse (an entry per `index.interval.bytes` of log),
preallocated to `segment.index.bytes` while their segment is active and trimmed to their entries on roll
and close. A loaded file's entry count is its size / entry size, as in Kafka; a file that fails the sanity
check is rebuilt from the log by the segment.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class IndexCorruptError(Exception):
    """The index file fails its sanity check; the caller rebuilds it."""


class _Index:
    ENTRY: struct.Struct

    def __init__(self, path: Path, base_offset: int, max_bytes: int) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self.entry_size = self.ENTRY.size
        self.max_entries = max(max_bytes // self.entry_size, 1)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        size = os.fstat(self._fd).st_size
        if size % self.entry_size:
            size -= size % self.entry_size  # torn tail: drop the partial entry
        self.entries = size // self.entry_size
        self.max_entries = max(
            self.max_entries, self.entries
        )  # an imported, larger index stays whole
        self._mm: mmap.mmap | None = None
        self._map(self.entries * self.entry_size)

    def _map(self, length: int) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        os.ftruncate(self._fd, length)  # sparse: preallocation costs no disk
        if length:
            self._mm = mmap.mmap(self._fd, length)

    # --- life cycle ---
    def preallocate(self) -> None:
        """Grow the file to its maximum size so entries can be appended (active segment)."""
        self._map(self.max_entries * self.entry_size)

    def trim(self) -> None:
        """Shrink the file to its entries (on roll and close)."""
        self._map(self.entries * self.entry_size)

    @property
    def fd(self) -> int:
        return self._fd

    @property
    def writable(self) -> bool:
        return self._mm is not None and len(self._mm) >= self.max_entries * self.entry_size

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def flush(self) -> None:
        if self._mm is not None:
            self._mm.flush()

    def close(self) -> None:
        if self._fd < 0:
            return
        self.trim()
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        os.close(self._fd)
        self._fd = -1

    def reset(self) -> None:
        """Drop every entry (the segment rebuilds the index)."""
        self.entries = 0
        self._map(0)
        self.preallocate()

    def truncate_entries(self, n: int) -> None:
        self.entries = min(n, self.entries)

    def rename(self, path: Path) -> None:
        os.rename(self.path, path)
        self.path = Path(path)

    def _entry(self, i: int) -> tuple[int, int]:
        assert self._mm is not None
        return self.ENTRY.unpack_from(self._mm, i * self.entry_size)

    def _append(self, a: int, b: int) -> None:
        if self.entries >= self.max_entries:
            return  # full: the log rolls before this; a missing sparse entry only costs a longer walk
        if not self.writable:
            self.preallocate()
        assert self._mm is not None
        self.ENTRY.pack_into(self._mm, self.entries * self.entry_size, a, b)
        self.entries += 1


class OffsetIndex(_Index):
    """Sparse map from offsets to byte positions in the segment's log file."""

    ENTRY = _OFFSET_ENTRY

    def append(self, offset: int, position: int) -> None:
        """Add (batch last offset, batch position); offsets must increase."""
        rel = offset - self.base_offset
        if self.entries and rel <= self._entry(self.entries - 1)[0]:
            return
        self._append(rel, position)

    def last_entry(self) -> tuple[int, int]:
        """(offset, position) of the last entry, or (base_offset, 0) if empty."""
        if not self.entries:
            return self.base_offset, 0
        rel, pos = self._entry(self.entries - 1)
        return self.base_offset + rel, pos

    def lookup(self, offset: int) -> tuple[int, int]:
        """Largest entry with offset <= `offset` as (offset, position); (base_offset, 0) if none."""
        rel = offset - self.base_offset
        lo, hi = 0, self.entries - 1
        found = -1
        while lo <= hi:
            mid = (lo + hi) >> 1
            if self._entry(mid)[0] <= rel:
                found, lo = mid, mid + 1
            else:
                hi = mid - 1
        if found < 0:
            return self.base_offset, 0
        r, pos = self._entry(found)
        return self.base_offset + r, pos

    def truncate_to(self, offset: int) -> None:
        """Drop entries for offsets >= `offset`."""
        rel = offset - self.base_offset
        n = self.entries
        while n and self._entry(n - 1)[0] >= rel:
            n -= 1
        self.entries = n

    def sanity_check(self, log_size: int) -> None:
        """Kafka's check: first and last entries in range and ordered (not a full scan)."""
        if not self.entries:
            return
        first, last = self._entry(0), self._entry(self.entries - 1)
        for rel, pos in (first, last):
            if rel < 0 or pos < 0 or pos >= max(log_size, 1):
                raise IndexCorruptError(f"{self.path}: entry ({rel}, {pos}) out of range")
        if self.entries > 1 and (last[0] <= first[0] or last[1] <= first[1]):
            raise IndexCorruptError(f"{self.path}: entries out of order")


class TimeIndex(_Index):
    """Sparse map from max-timestamp-so-far to the offset of the batch that holds it."""

    ENTRY = _TIME_ENTRY

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add (timestamp, offset) when the timestamp grows past the last entry's."""
        if timestamp < 0:
            return
        if self.entries:
            last_ts, last_rel = self._entry(self.entries - 1)
            if timestamp <= last_ts or offset - self.base_offset < last_rel:
                return
        self._append(timestamp, offset - self.base_offset)

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base_offset) if empty."""
        if not self.entries:
            return -1, self.base_offset
        ts, rel = self._entry(self.entries - 1)
        return ts, self.base_offset + rel

    def lookup_before(self, timestamp: int) -> tuple[int, int] | None:
        """Last entry with timestamp < `timestamp` as (timestamp, offset): every record up to that
        offset is older than `timestamp`. None if there is no such entry."""
        lo, hi = 0, self.entries - 1
        found = -1
        while lo <= hi:
            mid = (lo + hi) >> 1
            if self._entry(mid)[0] < timestamp:
                found, lo = mid, mid + 1
            else:
                hi = mid - 1
        if found < 0:
            return None
        ts, rel = self._entry(found)
        return ts, self.base_offset + rel

    def truncate_to(self, offset: int) -> None:
        """Drop entries pointing at offsets >= `offset`."""
        rel = offset - self.base_offset
        n = self.entries
        while n and self._entry(n - 1)[1] >= rel:
            n -= 1
        self.entries = n

    def sanity_check(self, max_relative_offset: int) -> None:
        """First and last entries in range and ordered (not a full scan)."""
        if not self.entries:
            return
        first, last = self._entry(0), self._entry(self.entries - 1)
        for ts, rel in (first, last):
            if ts < 0 or rel < 0 or rel > max_relative_offset:
                raise IndexCorruptError(f"{self.path}: entry ({ts}, {rel}) out of range")
        if self.entries > 1 and (last[0] <= first[0] or last[1] < first[1]):
            raise IndexCorruptError(f"{self.path}: entries out of order")
