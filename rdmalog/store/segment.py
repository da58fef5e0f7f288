"""One log segment: a preallocated, memory-mapped `.log` file plus its `.index` and `.timeindex`.

Files are named as Kafka names them (`<20-digit base offset>.log` ...). The active segment's log file is
preallocated to `segment.bytes` (a sparse ftruncate, or allocated blocks with the topic config
`preallocate`) and mapped shared, so an RDMA transport can register `segment.mmap` and write into it;
`segment.size` is the committed byte position (everything below it is whole, validated batches).
Appends use one `os.pwrite`; on roll and close the files are trimmed to their data, as Kafka does
with `preallocate`. Reads walk batch headers in the mapping from the offset index entry at or
below the wanted offset.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import struct
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rdmalog.errors import KafkaStorageError
from rdmalog.store.index import IndexCorruptError, OffsetIndex, TimeIndex
from rdmalog.store.records import (
    BATCH_OVERHEAD,
    HEADER,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    RecordBatch,
    batch_is_valid,
    decode_records,
)

log = logging.getLogger(__name__)

# baseOffset, batchLength, (skip 11: leader epoch, magic, crc, attributes), lastOffsetDelta,
# baseTimestamp, maxTimestamp: the header fields a read or a reload walk needs.
_WALK = struct.Struct(">qi11xiqq")
_MAGIC_AT = 16
_LENGTH = struct.Struct(">i")
_CRC = struct.Struct(">I")
INT_MAX = 2**31 - 1


def log_file_name(base_offset: int, suffix: str = ".log") -> str:
    """Kafka's file name for a segment file: 20-digit zero-padded base offset + suffix."""
    return f"{base_offset:020d}{suffix}"


class FileHandle:
    """A read-only open segment file shared by FileSlices; closed when the last reference goes, so a
    retention deletion never closes a file under a pending sendfile."""

    __slots__ = ("file", "__weakref__")

    def __init__(self, path: Path) -> None:
        self.file = open(path, "rb", buffering=0)  # closed in __del__: lifetime is this object's

    def __del__(self) -> None:
        f = getattr(self, "file", None)
        if f is not None:
            f.close()


@dataclass(frozen=True, slots=True)
class FileSlice:
    """Whole batches in a segment file: `length` bytes at `position`, ready for sendfile."""

    handle: FileHandle
    position: int
    length: int

    @property
    def file(self):  # io.FileIO opened "rb": what loop.sock_sendfile wants
        return self.handle.file

    def fileno(self) -> int:
        return self.handle.file.fileno()

    def read(self) -> bytes:
        """The slice's bytes (a copy; for tests and non-sendfile paths)."""
        return os.pread(self.fileno(), self.length, self.position)


class LogSegment:
    """A segment of a partition log. Not thread-safe: the PartitionLog serialises access."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        segment_bytes: int,
        index_bytes: int = 10485760,
        index_interval: int = 4096,
        file_suffix: str = "",
        allocate_storage: bool = False,
    ) -> None:
        self.dir = Path(directory)
        self.base_offset = base_offset
        self.segment_bytes = segment_bytes
        self.allocate_storage = allocate_storage  # Kafka's `preallocate`: blocks, not a sparse hole
        self.index_interval = index_interval
        self.path = self.dir / log_file_name(base_offset, ".log" + file_suffix)
        idx_paths = [
            self.dir / log_file_name(base_offset, s + file_suffix) for s in (".index", ".timeindex")
        ]
        self.indexes_missing = not all(p.exists() for p in idx_paths)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self.handle = FileHandle(self.path)
        self.offset_index = OffsetIndex(
            self.dir / log_file_name(base_offset, ".index" + file_suffix), base_offset, index_bytes
        )
        self.time_index = TimeIndex(
            self.dir / log_file_name(base_offset, ".timeindex" + file_suffix),
            base_offset,
            index_bytes,
        )
        self.size = 0  # committed bytes
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset - 1
        self.first_batch_timestamp = -1  # Kafka's rollingBasedTimestamp
        self.created_ms = int(time.time() * 1000)
        self.bytes_since_index = 0
        self.flushed_size = 0
        self.mmap: mmap.mmap | None = None
        self.capacity = 0
        self.deleted = False
        self.trim_pending = False

    # --- mapping and capacity ---
    def _remap(self, length: int) -> None:
        old = self.mmap
        self.mmap = mmap.mmap(self.fd, length) if length else None
        self.capacity = length
        if old is not None:
            try:
                old.close()
            except BufferError:  # exported (e.g. registered by a transport): the GC closes it later
                pass

    def preallocate(self, capacity: int | None = None) -> None:
        """Make the segment active: grow the file to `capacity` and map it. Sparse by default;
        with `allocate_storage` (topic config `preallocate`) the blocks are allocated now, so a
        full disk is an error here rather than a SIGBUS on a later write through the mapping."""
        capacity = max(capacity or self.segment_bytes, self.size)
        if capacity != self.capacity:
            os.ftruncate(self.fd, capacity)
            if self.allocate_storage and capacity > self.size:
                try:
                    os.posix_fallocate(self.fd, self.size, capacity - self.size)
                except OSError as e:
                    os.ftruncate(self.fd, max(self.size, self.capacity))
                    raise KafkaStorageError(f"cannot preallocate {self.path}: {e}") from e
            self._remap(capacity)
        self.offset_index.preallocate()
        self.time_index.preallocate()

    def ensure_capacity(self, nbytes: int) -> None:
        """Grow the mapping for an append larger than the preallocated space (a lone huge batch)."""
        if self.size + nbytes > self.capacity:
            self.preallocate(self.size + nbytes)

    def seal(self) -> None:
        """Trim files to their data (on roll and close); record the final time index entry."""
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.offset_index.trim()
        self.time_index.trim()
        self.try_trim()

    def try_trim(self) -> bool:
        """Shrink the log file to its data unless its mapping is still exported (registered by a
        transport): cutting a file under a live mapping would fault on the next touch past the end.
        Then `trim_pending` stays set and the log retries from maintenance and at close."""
        if self.capacity == self.size or self.fd < 0:
            self.trim_pending = False
            return True
        if self.mmap is not None:
            try:
                self.mmap.close()
            except BufferError:
                self.trim_pending = True
                return False
            self.mmap = None
        os.ftruncate(self.fd, self.size)
        self._remap(self.size)
        self.trim_pending = False
        return True

    @property
    def is_full(self) -> bool:
        return self.offset_index.is_full or self.time_index.is_full

    # --- append ---
    def append(self, buf: memoryview | bytes, batches: list[tuple[int, int, int, int]]) -> None:
        """Write `buf` at the committed end; `batches` are (position in buf, size, last offset, max
        timestamp) of its batches, already validated and patched. One pwrite, sparse index updates."""
        pos0 = self.size
        n = len(buf)
        if pos0 + n > self.capacity:
            self.ensure_capacity(n)
        written = os.pwrite(self.fd, buf, pos0)
        if written != n:
            # a regular file takes less than asked only when its file system is full
            raise OSError(errno.ENOSPC, f"short write: {written} of {n} bytes", str(self.path))
        self._index_batches(pos0, batches)
        self.size = pos0 + n

    def _index_batches(self, pos0: int, batches: list[tuple[int, int, int, int]]) -> None:
        for p, size, last_offset, max_ts in batches:
            if self.first_batch_timestamp < 0 and self.size == 0 and p == 0:
                self.first_batch_timestamp = max_ts
            if max_ts > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = max_ts, last_offset
            if self.bytes_since_index > self.index_interval:
                self.offset_index.append(last_offset, pos0 + p)
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                self.bytes_since_index = 0
            self.bytes_since_index += size
            self.next_offset = last_offset + 1

    def commit_written(self, batches: list[tuple[int, int, int, int]], length: int) -> None:
        """Commit `length` bytes already written into the mapping at `size` (RDMA writes)."""
        self._index_batches(self.size, batches)
        self.size += length

    # --- load and recovery ---
    def load(self) -> None:
        """Open a cleanly closed segment: size from the file, end offset from a header walk that starts
        at the last index entry. Raises IndexCorruptError when an index fails its sanity check."""
        file_size = os.fstat(self.fd).st_size
        self._remap(file_size)
        if self.indexes_missing and file_size:
            raise IndexCorruptError(f"{self.path}: index files are missing")
        self.offset_index.sanity_check(file_size)
        self.time_index.sanity_check(INT_MAX)
        last_off, pos = self.offset_index.last_entry()
        self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry()
        if self.max_timestamp < 0:
            self.offset_of_max_timestamp = self.base_offset - 1
        self.next_offset = self.base_offset
        end = pos
        while file_size - end >= BATCH_OVERHEAD:
            base, length, lod, _, max_ts = _WALK.unpack_from(self.mmap, end)
            if (
                length < MIN_BATCH_LENGTH
                or end + length + LOG_OVERHEAD > file_size
                or base < self.next_offset
            ):
                break
            if self.mmap[end + _MAGIC_AT] != 2:
                break
            if max_ts > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = max_ts, base + lod
            self.next_offset = base + lod + 1
            end += length + LOG_OVERHEAD
        if end != file_size and any(self.mmap[end : min(file_size, end + LOG_OVERHEAD)]):
            raise IndexCorruptError(f"{self.path}: data after byte {end} is not a batch")
        self.size = self.flushed_size = end
        self.bytes_since_index = end - pos
        self._load_first_timestamp()

    def _load_first_timestamp(self) -> None:
        if self.size >= BATCH_OVERHEAD:
            self.first_batch_timestamp = _WALK.unpack_from(self.mmap, 0)[4]

    def recover(self, min_offset: int | None = None) -> tuple[int, bool]:
        """Validate every batch (length, magic, CRC, increasing offsets), rebuild both indexes and cut the
        file after the last valid batch, zeroing the tail. Returns (valid bytes, whether something that
        was not a clean zero tail had to be cut)."""
        file_size = os.fstat(self.fd).st_size
        self._remap(file_size)
        mm = self.mmap
        self.offset_index.reset()
        self.time_index.reset()
        self.size = self.bytes_since_index = 0
        self.max_timestamp, self.offset_of_max_timestamp = -1, self.base_offset - 1
        self.first_batch_timestamp = -1
        expected = self.base_offset if min_offset is None else max(min_offset, self.base_offset)
        self.next_offset = expected
        pos = 0
        batches = []
        while mm is not None:
            size = batch_is_valid(mm, pos, file_size)
            if not size:
                break
            base, _, lod, _, max_ts = _WALK.unpack_from(mm, pos)
            if base < expected or base + lod - self.base_offset > INT_MAX:
                break
            batches.append((pos, size, base + lod, max_ts))
            expected = base + lod + 1
            pos += size
        self._check_not_legacy_format(mm, pos, file_size)
        self._index_batches(0, batches)
        self.size = pos
        corrupt = pos < file_size and any(mm[pos : min(file_size, pos + LOG_OVERHEAD)])  # type: ignore[index]
        if pos < file_size:
            if corrupt:
                log.warning("%s: invalid or torn data at byte %d; truncating", self.path, pos)
            self._cut(pos)
        self.flushed_size = 0
        self._load_first_timestamp()
        return pos, corrupt

    def _check_not_legacy_format(self, mm: mmap.mmap | None, pos: int, file_size: int) -> None:
        """Refuse, rather than truncate, a message set in the v0/v1 formats (an old Kafka log).

        Those records are whole and valid, only older than magic v2; cutting them as a torn tail would
        lose acknowledged data. Kafka 4 does not read them either: convert the log with a Kafka 3.x
        broker (or re-produce it) before importing.
        """
        if mm is None or file_size - pos < LOG_OVERHEAD + 5:
            return
        length = _LENGTH.unpack_from(mm, pos + 8)[0]
        magic = mm[pos + _MAGIC_AT]
        end = pos + LOG_OVERHEAD + length
        if (
            magic in (0, 1)
            and 14 <= length <= file_size - pos - LOG_OVERHEAD
            and zlib.crc32(mm[pos + _MAGIC_AT : end]) == _CRC.unpack_from(mm, pos + 12)[0]
        ):
            raise KafkaStorageError(
                f"{self.path} holds messages in the v{magic} format at byte {pos}; "
                "rdmalog reads magic v2 record batches only (as Kafka 4 does). Convert the log "
                "with a Kafka 3.x broker before importing it; nothing was truncated."
            )

    def _cut(self, size: int) -> None:
        # Truncate then re-grow: stale bytes past the end become zeros, never an old batch.
        cap = self.capacity
        self._remap(0)
        os.ftruncate(self.fd, size)
        if cap > size:
            os.ftruncate(self.fd, cap)
        self._remap(max(cap, size))

    def truncate_to(self, offset: int) -> int:
        """Drop batches at or after `offset` (whole batches). Returns the bytes removed."""
        pos = self.find_position(offset)
        if pos is None:
            return 0
        start = pos[0]
        if start >= self.size:
            return 0
        removed = self.size - start
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        cap = self.capacity
        self.size = start
        self._cut(start)
        if cap > start:
            self.preallocate(cap)
        self.recover()  # recompute max timestamp / next offset from what is left
        return removed

    # --- reads ---
    def find_position(self, offset: int) -> tuple[int, int, int] | None:
        """(position, base offset, size) of the first batch whose last offset >= `offset`, or None."""
        if self.mmap is None:
            return None
        _, pos = self.offset_index.lookup(offset)
        mm, end = self.mmap, self.size
        while end - pos >= BATCH_OVERHEAD:
            base, length, lod, _, _ = _WALK.unpack_from(mm, pos)
            if base + lod >= offset:
                return pos, base, length + LOG_OVERHEAD
            pos += length + LOG_OVERHEAD
        return None

    def slice_length(self, pos: int, max_bytes: int, upper_offset: int) -> int:
        """Bytes of whole batches from `pos` with base offset < `upper_offset`, within `max_bytes` but at
        least one batch."""
        mm, end = self.mmap, self.size
        total = 0
        while end - (pos + total) >= BATCH_OVERHEAD:
            base, length = _WALK.unpack_from(mm, pos + total)[:2]
            size = length + LOG_OVERHEAD
            if base >= upper_offset or (total and total + size > max_bytes):
                break
            total += size
        return total

    def headers(self, start: int = 0) -> Iterator[tuple[int, tuple]]:
        """(position, HEADER fields) of every committed batch from byte `start`: a walk over the
        mapping without copying or decoding (rebuilding producer state and leader epochs)."""
        pos = start
        while self.size - pos >= BATCH_OVERHEAD:
            h = HEADER.unpack_from(self.mmap, pos)  # type: ignore[arg-type]
            yield pos, h
            pos += h[1] + LOG_OVERHEAD

    def batch_at(self, pos: int) -> RecordBatch:
        """A copy of the batch at `pos` (no view into the mapping outlives the call)."""
        assert self.mmap is not None
        length = _WALK.unpack_from(self.mmap, pos)[1]
        return RecordBatch(self.mmap[pos : pos + length + LOG_OVERHEAD])

    def batches(self, start: int = 0):
        """Walk batches from byte `start` (copies each batch: safe against later remaps)."""
        pos = start
        while self.size - pos >= BATCH_OVERHEAD:
            base, length = _WALK.unpack_from(self.mmap, pos)[:2]
            size = length + LOG_OVERHEAD
            yield pos, RecordBatch(bytes(self.mmap[pos : pos + size]))  # type: ignore[index]
            pos += size

    def find_offset_by_timestamp(self, timestamp: int, min_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after `min_offset` whose timestamp is >=
        `timestamp`, exact to the record; None if this segment has none."""
        if self.max_timestamp < timestamp:
            return None
        start = min_offset
        before = self.time_index.lookup_before(timestamp)
        if before is not None:
            start = max(start, before[1] + 1)
        found = self.find_position(start)
        if found is None:
            return None
        for _, batch in self.batches(found[0]):
            if batch.last_offset < start or batch.max_timestamp < timestamp:
                continue
            if batch.timestamp_type == LOG_APPEND_TIME:
                return max(batch.base_offset, start), batch.max_timestamp
            for rec in decode_records(batch):
                if rec.offset >= start and rec.timestamp is not None and rec.timestamp >= timestamp:
                    return rec.offset, rec.timestamp
        return None

    def largest_timestamp(self) -> int:
        """Kafka's segment.largestTimestamp: max timestamp, else the file's modification time."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return int(os.stat(self.path).st_mtime * 1000) if not self.deleted else -1

    # --- durability and life cycle ---
    def dup_fds(self) -> list[int]:
        """Duplicated descriptors of the log and index files: the caller fsyncs and closes them
        without holding the log lock (a concurrent deletion cannot close them underneath)."""
        if self.fd < 0:
            return []
        fds = [os.dup(self.fd)]
        for idx in (self.offset_index, self.time_index):
            if idx.fd >= 0:
                fds.append(os.dup(idx.fd))
        return fds

    def close(self) -> None:
        if self.fd < 0:
            return
        self.seal()
        self.offset_index.close()
        self.time_index.close()
        self._remap(0)
        os.close(self.fd)
        self.fd = -1

    def delete(self) -> None:
        """Rename files to `.deleted`, then unlink; open FileSlices keep reading the unlinked file."""
        self.deleted = True
        paths = [self.path, self.offset_index.path, self.time_index.path]
        if self.fd >= 0:
            self.offset_index.close()
            self.time_index.close()
            self._remap(0)
            os.close(self.fd)
            self.fd = -1
        for p in paths:
            try:
                os.rename(p, str(p) + ".deleted")
                os.unlink(str(p) + ".deleted")
            except FileNotFoundError:
                pass
