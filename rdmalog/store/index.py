"""Offset and time index files in Kafka's layouts.

Offset index (`.index`): 8-byte entries (int32 offset relative to the segment base, int32 byte position
of a batch), big-endian; an entry names a batch by its *last* offset, as Kafka does. Time index
(`.timeindex`): 12-byte entries (int64 max timestamp so far, int32 relative offset of the batch that
holds it); timestamps strictly increase. Both are sparse (an entry per `index.interval.bytes` of log)
and hold at most `segment.index.bytes`; a loaded file's entry count is its size / entry size, as in
Kafka; a file that fails the sanity check is rebuilt from the log by the segment.

The head segment's index lives in memory (`activate()`): an append packs an entry into a bytearray,
and `persist()` writes the new entries to the file (one pwrite) at flush, roll and close. Kafka
preallocates the file and writes through a mapping; here a fresh sparse mapping would cost a page
fault per new page, and each such fault reads ahead through the hole (8 MiB on a disk with a large
`read_ahead_kb`), milliseconds per partition. A sealed index is not kept open or in memory: its
lookups read the entries they probe from the file. On disk the file always holds exactly its
entries, which is what Kafka leaves after trimming on roll and close. Crash safety is unchanged:
entries reach the file before the flush that makes their log data durable, and a segment past the
recovery point is rebuilt from its log anyway.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class IndexCorruptError(Exception):
    """The index file fails its sanity check; the caller rebuilds it."""


class _Index:
    ENTRY: struct.Struct

    def __init__(self, path: Path, base_offset: int, max_bytes: int, *, new: bool = False) -> None:
        """`new`: the file does not exist yet (a segment being created), so it is not looked at."""
        self.path = path if isinstance(path, Path) else Path(path)
        self.base_offset = base_offset
        self.entry_size = self.ENTRY.size
        self.max_entries = max(max_bytes // self.entry_size, 1)
        size, self._on_disk = 0, False
        if not new:
            try:
                size, self._on_disk = os.stat(self.path).st_size, True
            except FileNotFoundError:
                pass
        self.entries = size // self.entry_size  # a torn tail (a partial entry) is dropped
        self.max_entries = max(
            self.max_entries, self.entries
        )  # an imported, larger index stays whole
        self._file_bytes = size  # the file's length
        self._synced = self.entries  # entries the file holds as they are in memory
        self._mem: bytearray | None = None  # the entries, while the segment is the head
        self._last: tuple[int, int] | None = None  # the last entry, once read

    # --- life cycle ---
    @property
    def on_disk(self) -> bool:
        """Whether the file exists (a new segment's indexes are written at its first flush)."""
        return self._on_disk

    @property
    def active(self) -> bool:
        return self._mem is not None

    def activate(self) -> None:
        """Hold the entries in memory so entries can be appended (the head segment)."""
        if self._mem is None:
            n = self.entries * self.entry_size
            self._mem = bytearray(self._read(0, n)) if n else bytearray()
            self.entries = len(self._mem) // self.entry_size

    def persist(self) -> bool:
        """Write the entries appended since the last call (and cut what was truncated) to the file.
        Returns whether the file was touched. The file is created when missing."""
        n = self.entries * self.entry_size
        if self._synced == self.entries and self._file_bytes == n and self._on_disk:
            return False
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            if self._synced < self.entries:
                start = self._synced * self.entry_size
                assert self._mem is not None
                with memoryview(self._mem)[start:n] as new:
                    os.pwrite(fd, new, start)
            if self._file_bytes > n:
                os.ftruncate(fd, n)
        finally:
            os.close(fd)
        self._synced, self._file_bytes, self._on_disk = self.entries, n, True
        return True

    def seal(self) -> None:
        """Write everything and drop the in-memory entries (on roll and close)."""
        self.persist()
        self._mem = None

    close = seal

    def open_for_sync(self) -> int:
        """Write pending entries, then return a new descriptor of the file for the caller to fsync
        and close (PartitionLog.flush syncs without holding the log lock)."""
        self.persist()
        return os.open(self.path, os.O_RDONLY)

    def reset(self) -> None:
        """Drop every entry (the segment rebuilds the index); the index becomes active."""
        self._mem = bytearray()
        self.entries = self._synced = 0
        self._last = None

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    # --- entries ---
    def _read(self, start: int, n: int) -> bytes:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return b""
        try:
            return os.pread(fd, n, start)
        finally:
            os.close(fd)

    @contextmanager
    def _reader(self) -> Iterator[Callable[[int], tuple]]:
        """A function from entry number to entry: from memory, or from the file (one descriptor for
        the whole search, one small pread per probe)."""
        mem, entry, size = self._mem, self.ENTRY, self.entry_size
        if mem is not None:
            yield lambda i: entry.unpack_from(mem, i * size)
            return
        fd = os.open(self.path, os.O_RDONLY)
        try:

            def from_file(i: int) -> tuple:
                raw = os.pread(fd, size, i * size)
                if len(raw) < size:
                    raise IndexCorruptError(f"{self.path}: entry {i} is past the end of the file")
                return entry.unpack(raw)

            yield from_file
        finally:
            os.close(fd)

    def _entry(self, i: int) -> tuple:
        with self._reader() as entry:
            return entry(i)

    def _last_entry(self) -> tuple:
        if self._last is None:
            self._last = self._entry(self.entries - 1)
        return self._last

    def _search(self, probe: Callable[[tuple], bool]) -> tuple | None:
        """The last entry for which `probe` holds (entries are ordered so that it holds for a
        prefix), or None."""
        if not self.entries:
            return None
        with self._reader() as entry:
            lo, hi, found = 0, self.entries - 1, None
            while lo <= hi:
                mid = (lo + hi) >> 1
                e = entry(mid)
                if probe(e):
                    found, lo = e, mid + 1
                else:
                    hi = mid - 1
            return found

    def _cut(self, keep: Callable[[tuple], bool]) -> None:
        """Drop entries from the end while `keep` does not hold for them."""
        self.activate()
        n = self.entries
        with self._reader() as entry:
            while n and not keep(entry(n - 1)):
                n -= 1
        self.entries = n
        assert self._mem is not None
        del self._mem[n * self.entry_size :]
        self._synced = min(self._synced, n)
        self._last = None

    def _append(self, a: int, b: int) -> None:
        if self.entries >= self.max_entries:
            return  # full: the log rolls before this; a missing sparse entry only costs a longer walk
        if self._mem is None:
            self.activate()
        assert self._mem is not None
        self._mem += self.ENTRY.pack(a, b)
        self.entries += 1
        self._last = (a, b)

    def _check_range(self, check: Callable[[tuple, tuple], str | None]) -> None:
        if not self.entries:
            return
        with self._reader() as entry:
            problem = check(entry(0), entry(self.entries - 1))
        if problem:
            raise IndexCorruptError(f"{self.path}: {problem}")


class OffsetIndex(_Index):
    """Sparse map from offsets to byte positions in the segment's log file."""

    ENTRY = _OFFSET_ENTRY

    def append(self, offset: int, position: int) -> None:
        """Add (batch last offset, batch position); offsets must increase."""
        rel = offset - self.base_offset
        if self.entries and rel <= (self._last or self._last_entry())[0]:
            return
        self._append(rel, position)

    def last_entry(self) -> tuple[int, int]:
        """(offset, position) of the last entry, or (base_offset, 0) if empty."""
        if not self.entries:
            return self.base_offset, 0
        rel, pos = self._last_entry()
        return self.base_offset + rel, pos

    def lookup(self, offset: int) -> tuple[int, int]:
        """Largest entry with offset <= `offset` as (offset, position); (base_offset, 0) if none."""
        rel = offset - self.base_offset
        found = self._search(lambda e: e[0] <= rel)
        if found is None:
            return self.base_offset, 0
        return self.base_offset + found[0], found[1]

    def truncate_to(self, offset: int) -> None:
        """Drop entries for offsets >= `offset`."""
        rel = offset - self.base_offset
        self._cut(lambda e: e[0] < rel)

    def sanity_check(self, log_size: int) -> None:
        """Kafka's check: first and last entries in range and ordered (not a full scan)."""

        def check(first: tuple, last: tuple) -> str | None:
            for rel, pos in (first, last):
                if rel < 0 or pos < 0 or pos >= max(log_size, 1):
                    return f"entry ({rel}, {pos}) out of range"
            if self.entries > 1 and (last[0] <= first[0] or last[1] <= first[1]):
                return "entries out of order"
            return None

        self._check_range(check)


class TimeIndex(_Index):
    """Sparse map from max-timestamp-so-far to the offset of the batch that holds it."""

    ENTRY = _TIME_ENTRY

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add (timestamp, offset) when the timestamp grows past the last entry's."""
        if timestamp < 0:
            return
        if self.entries:
            last_ts, last_rel = self._last or self._last_entry()
            if timestamp <= last_ts or offset - self.base_offset < last_rel:
                return
        self._append(timestamp, offset - self.base_offset)

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base_offset) if empty."""
        if not self.entries:
            return -1, self.base_offset
        ts, rel = self._last_entry()
        return ts, self.base_offset + rel

    def lookup_before(self, timestamp: int) -> tuple[int, int] | None:
        """Last entry with timestamp < `timestamp` as (timestamp, offset): every record up to that
        offset is older than `timestamp`. None if there is no such entry."""
        found = self._search(lambda e: e[0] < timestamp)
        if found is None:
            return None
        return found[0], self.base_offset + found[1]

    def truncate_to(self, offset: int) -> None:
        """Drop entries pointing at offsets >= `offset`."""
        rel = offset - self.base_offset
        self._cut(lambda e: e[1] < rel)

    def sanity_check(self, max_relative_offset: int) -> None:
        """First and last entries in range and ordered (not a full scan)."""

        def check(first: tuple, last: tuple) -> str | None:
            for ts, rel in (first, last):
                if ts < 0 or rel < 0 or rel > max_relative_offset:
                    return f"entry ({ts}, {rel}) out of range"
            if self.entries > 1 and (last[0] <= first[0] or last[1] < first[1]):
                return "entries out of order"
            return None

        self._check_range(check)
