"""One log segment: a `.log` file plus its `.index` and `.timeindex`.

Files are named as Kafka names them (`<20-digit base offset>.log` ...). Appends to the head segment
are one `os.pwrite` each at the committed end (`segment.size`: everything below it is whole, validated
batches). The file is extended ahead of them in sparse steps (1 MiB, doubling up to `segment.bytes`),
so most writes leave the file's size, and the file system's journal, alone; with the topic config
`preallocate` its blocks are allocated to `segment.bytes` up front. On roll and close it is trimmed
to its data, as Kafka trims preallocated files. Reads walk batch headers from the
offset index entry at or below the wanted offset through `os.pread` windows, and hand out FileSlices
for sendfile.

Descriptors: the head segment holds its log file open (one descriptor, shared by its FileSlices); its
indexes are kept in memory and written at flush, roll and close (`index.py`). A sealed segment holds
nothing open: a read opens the file and the descriptor lives as long as the slices that use it.

RDMA: `segment.mmap` is the file's shared, writable mapping, made on first use (a grant or a reader
registration). For the head it first extends the file to `segment.bytes`, so a transport can register
it and write into it past the committed end; `segment.capacity` is the file's length then. On roll and
close the file is trimmed to its data, as Kafka trims preallocated files.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import struct
import time
import weakref
import zlib
from collections.abc import Iterator
from contextlib import nullcontext
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

# baseOffset, batchLength, (skip the leader epoch) magic, (skip crc, attributes) lastOffsetDelta,
# baseTimestamp, maxTimestamp: the header fields a read or a reload walk needs.
_WALK = struct.Struct(">qi4xb6xiqq")
_LENGTH = struct.Struct(">i")
_CRC = struct.Struct(">I")
_MAGIC_AT = 16
INT_MAX = 2**31 - 1
READ_WINDOW = 65536  # bytes read per pread while walking batch headers
_SLICE_ENDS = 16  # slice ends remembered per segment (see LogSegment.slice)
EXTEND_STEP = 1 << 20  # the first step a head file is extended by; then it doubles


def _data_end(fd: int, size: int) -> int:
    """Where the file's first hole begins: its size when it has none (or the file system cannot
    say)."""
    try:
        return min(size, os.lseek(fd, 0, os.SEEK_HOLE))
    except OSError:
        return size


def log_file_name(base_offset: int, suffix: str = ".log") -> str:
    """Kafka's file name for a segment file: 20-digit zero-padded base offset + suffix."""
    return f"{base_offset:020d}{suffix}"


class FileHandle:
    """An open segment file (read-write) shared by its segment and FileSlices; closed when the last
    reference goes, so a retention deletion never closes a file under a pending sendfile."""

    __slots__ = ("file", "fd", "__weakref__")

    def __init__(self, path: Path, create: bool = False) -> None:
        fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
        # "rb": what loop.sock_sendfile wants; the descriptor is read-write for the segment's pwrites
        self.file = open(fd, "rb", buffering=0)  # closed in __del__: lifetime is this object's
        self.fd = fd  # valid while this object lives (the append path reads it once a write)

    def fileno(self) -> int:
        return self.fd

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
        return self.handle.fileno()

    def read(self) -> bytes:
        """The slice's bytes (a copy; for tests and non-sendfile paths)."""
        return os.pread(self.fileno(), self.length, self.position)


def walk_headers(
    fd: int, start: int, end: int, fields: struct.Struct = _WALK
) -> Iterator[tuple[int, tuple]]:
    """(position, `fields` of its header) of each batch from byte `start` while a whole batch header
    lies below `end`, read through pread windows (no mapping, no copy beyond one window)."""
    buf, at, pos = b"", start, start
    need = fields.size
    while end - pos >= BATCH_OVERHEAD:
        off = pos - at
        if off + need > len(buf):
            buf, at, off = os.pread(fd, min(READ_WINDOW, end - pos), pos), pos, 0
            if len(buf) < need:
                return
        h = fields.unpack_from(buf, off)
        yield pos, h
        pos += h[1] + LOG_OVERHEAD


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
        new: bool = False,
    ) -> None:
        """`new`: create the segment (its log file is created, or taken as it is when a prepared
        head file was renamed into place); otherwise `load()` or `recover()` an existing one."""
        self.dir = directory if isinstance(directory, Path) else Path(directory)
        self.base_offset = base_offset
        self.segment_bytes = segment_bytes
        self.allocate_storage = allocate_storage  # Kafka's `preallocate`: blocks, not a sparse hole
        self.index_interval = index_interval
        self.file_suffix = (
            file_suffix  # "" once in place; ".cleaned", ".swap" while the cleaner swaps
        )
        self.path = self.dir / log_file_name(base_offset, ".log" + file_suffix)
        self.offset_index = OffsetIndex(
            self.dir / log_file_name(base_offset, ".index" + file_suffix),
            base_offset,
            index_bytes,
            new=new,
        )
        self.time_index = TimeIndex(
            self.dir / log_file_name(base_offset, ".timeindex" + file_suffix),
            base_offset,
            index_bytes,
            new=new,
        )
        self.size = 0  # committed bytes
        self._slice_ends: dict[int, int] = {}  # offset -> where a slice ending there ended
        self.capacity = 0  # the file's length: committed bytes and space made for more
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset - 1
        self.first_batch_timestamp = -1  # Kafka's rollingBasedTimestamp
        self.created_ms = int(time.time() * 1000)
        self.bytes_since_index = 0
        self.flushed_size = 0
        self.active = False  # the head: file held open, indexes in memory
        self.closed = False
        self.deleted = False
        self.trim_pending = False
        self.is_full = False  # an index holds its maximum: the log rolls
        self._mmap: mmap.mmap | None = None
        self._handle: FileHandle | None = None  # held while active
        self._handle_ref: weakref.ref[FileHandle] | None = None  # the last one, while slices use it
        if new:
            h = self._open(create=True)
            self.capacity = os.fstat(h.fileno()).st_size

    @property
    def indexes_missing(self) -> bool:
        return not (self.offset_index.on_disk and self.time_index.on_disk)

    # --- the file, its descriptor and its mapping ---
    def _open(self, create: bool = False) -> FileHandle:
        h = self._handle
        if h is None:
            h = self._handle_ref() if self._handle_ref is not None else None
            if h is None:
                if self.closed:
                    raise KafkaStorageError(f"{self.path} is closed")
                h = FileHandle(self.path, create)
                self._handle_ref = weakref.ref(h)
            if self.active or create:
                self._handle = h
        return h

    @property
    def handle(self) -> FileHandle:
        """The open log file: held by the head; opened on demand for a sealed segment (and closed
        once nothing, such as a pending FileSlice, uses it)."""
        return self._open()

    @property
    def mmap(self) -> mmap.mmap | None:
        """The log file's shared, writable mapping, made on first use (what an RDMA transport
        registers and writes into). The head's file is extended to `segment.bytes` first, so the
        mapping covers the space producers may write; a sealed segment maps its data. None for an
        empty sealed segment, and once the segment is closed."""
        if self._mmap is None and not self.closed:
            if self.active:
                self._extend(max(self.segment_bytes, self.capacity))
            if self.capacity:
                h = self.handle  # held until the mapping (which dups the descriptor) exists
                self._mmap = mmap.mmap(h.fileno(), self.capacity)
        return self._mmap

    def _unmap(self) -> bool:
        """Close the mapping; False (and it stays) while it is exported (registered by a transport)."""
        if self._mmap is not None:
            try:
                self._mmap.close()
            except BufferError:
                return False
            self._mmap = None
        return True

    def _let_go_of_mapping(self) -> None:
        """Unmap, or forget an exported mapping: it stays valid for its users, the GC unmaps it."""
        if not self._unmap():
            self._mmap = None

    def _extend(self, capacity: int) -> None:
        """Grow the file to `capacity` bytes (a sparse ftruncate; blocks allocated with
        `allocate_storage`, so a full disk is an error here rather than a SIGBUS on a later write
        through the mapping) and any mapping with it."""
        if capacity <= self.capacity:
            return
        h = self.handle
        fd = h.fileno()
        os.ftruncate(fd, capacity)
        if self.allocate_storage:
            try:
                os.posix_fallocate(fd, self.size, capacity - self.size)
            except OSError as e:
                os.ftruncate(fd, max(self.size, self.capacity))
                raise KafkaStorageError(f"cannot preallocate {self.path}: {e}") from e
        self.capacity = capacity
        if self._mmap is not None:
            self._let_go_of_mapping()
            self._mmap = mmap.mmap(fd, capacity)

    def preallocate(self, capacity: int | None = None) -> None:
        """Make the segment the head: its file held open and its indexes in memory, ready for
        appends. With `allocate_storage` (topic config `preallocate`), or once mapped, the file is
        extended to `capacity` (default `segment.bytes`)."""
        self.active = True
        self._open(create=True)
        self.offset_index.activate()
        self.time_index.activate()
        if capacity is not None or self.allocate_storage or self._mmap is not None:
            self._extend(max(capacity or self.segment_bytes, self.size))

    def ensure_capacity(self, nbytes: int) -> None:
        """Grow a mapped file for an append larger than the space made for it (a lone huge batch):
        the mapping keeps covering the data. An unmapped file just grows with the write."""
        if self._mmap is not None and self.size + nbytes > self.capacity:
            self._extend(self.size + nbytes)

    def seal(self) -> None:
        """Write the indexes and trim the file to its data (on roll and close), recording the final
        time index entry; the segment then holds no descriptor."""
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.offset_index.seal()
        self.time_index.seal()
        self.try_trim()
        self.active = False
        self._handle = None

    def try_trim(self) -> bool:
        """Shrink the log file to its data unless its mapping is still exported (registered by a
        transport): cutting a file under a live mapping would fault on the next touch past the end.
        Then `trim_pending` stays set and the log retries from maintenance and at close."""
        if self.capacity <= self.size or self.closed:
            self.trim_pending = False
            return True
        if not self._unmap():
            self.trim_pending = True
            return False
        h = self.handle
        os.ftruncate(h.fileno(), self.size)
        self.capacity = self.size
        self.trim_pending = False
        return True

    # --- append ---
    def append(self, buf: memoryview | bytes, batches: list[tuple[int, int, int, int]]) -> None:
        """Write `buf` at the committed end; `batches` are (position in buf, size, last offset, max
        timestamp) of its batches, already validated and patched. One pwrite, sparse index updates."""
        pos0 = self.size
        n = len(buf)
        if pos0 + n > self.capacity:
            if self._mmap is not None:
                self.ensure_capacity(n)
            else:  # sparse steps, doubling: a write inside the file leaves its size alone
                step = max(2 * self.capacity, EXTEND_STEP)
                self._extend(max(pos0 + n, min(step, self.segment_bytes)))
        h = self._handle  # the head's: held open (else _open makes it)
        if h is None:
            h = self._open()
        written = os.pwrite(h.fd, buf, pos0)
        if written != n:
            # a regular file takes less than asked only when its file system is full
            raise OSError(errno.ENOSPC, f"short write: {written} of {n} bytes", str(self.path))
        self._index_batches(pos0, batches)
        self.size = pos0 + n
        if self.size > self.capacity:
            self.capacity = self.size

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
                oi, ti = self.offset_index, self.time_index  # is_full of each, without two calls
                self.is_full = oi.entries >= oi.max_entries or ti.entries >= ti.max_entries
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
        h = self.handle  # a local reference keeps the descriptor open while it is used
        fd = h.fileno()
        file_size = self.capacity = os.fstat(fd).st_size
        if self.indexes_missing and file_size:
            raise IndexCorruptError(f"{self.path}: index files are missing")
        self.offset_index.sanity_check(file_size)
        self.time_index.sanity_check(INT_MAX)
        self.is_full = self.offset_index.is_full or self.time_index.is_full
        _, pos = self.offset_index.last_entry()
        self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry()
        if self.max_timestamp < 0:
            self.offset_of_max_timestamp = self.base_offset - 1
        self.next_offset = self.base_offset
        end = pos
        for at, (base, length, magic, lod, _, max_ts) in walk_headers(fd, pos, file_size):
            if (
                length < MIN_BATCH_LENGTH
                or at + length + LOG_OVERHEAD > file_size
                or base < self.next_offset
                or magic != 2
            ):
                break
            if max_ts > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = max_ts, base + lod
            self.next_offset = base + lod + 1
            end = at + length + LOG_OVERHEAD
        if end != file_size and any(os.pread(fd, min(file_size - end, LOG_OVERHEAD), end)):
            raise IndexCorruptError(f"{self.path}: data after byte {end} is not a batch")
        self.size = self.flushed_size = end
        self.bytes_since_index = end - pos
        self._load_first_timestamp(fd)

    def _load_first_timestamp(self, fd: int) -> None:
        if self.size >= BATCH_OVERHEAD:
            self.first_batch_timestamp = _WALK.unpack(os.pread(fd, _WALK.size, 0))[5]

    def recover(self, min_offset: int | None = None) -> tuple[int, bool]:
        """Validate every batch (length, magic, CRC, increasing offsets), rebuild both indexes and cut the
        file after the last valid batch, zeroing the tail. Returns (valid bytes, whether something that
        was not a clean zero tail had to be cut)."""
        h = self.handle
        fd = h.fileno()
        file_size = self.capacity = os.fstat(fd).st_size
        self.offset_index.reset()
        self.time_index.reset()
        self.is_full = False
        self.size = self.bytes_since_index = 0
        self._slice_ends.clear()
        self.max_timestamp, self.offset_of_max_timestamp = -1, self.base_offset - 1
        self.first_batch_timestamp = -1
        expected = self.base_offset if min_offset is None else max(min_offset, self.base_offset)
        self.next_offset = expected
        pos = 0
        batches = []
        # A scan of the file's data: a read-only mapping (sequential readahead), let go after. Not of
        # its sparse tail: reading a hole through a mapping allocates a page on tmpfs, a SIGBUS when
        # the file system is full; the tail reads as zeros anyway.
        data_end = _data_end(fd, file_size)
        scan = mmap.mmap(fd, data_end, access=mmap.ACCESS_READ) if data_end else nullcontext()
        with scan as mm:
            while mm is not None:
                size = batch_is_valid(mm, pos, data_end)
                if not size:
                    break
                base, _, _, lod, _, max_ts = _WALK.unpack_from(mm, pos)
                if base < expected or base + lod - self.base_offset > INT_MAX:
                    break
                batches.append((pos, size, base + lod, max_ts))
                expected = base + lod + 1
                pos += size
            self._check_not_legacy_format(mm, pos, data_end)
            corrupt = pos < data_end and any(mm[pos : min(data_end, pos + LOG_OVERHEAD)])  # type: ignore[index]
        self._index_batches(0, batches)
        self.size = pos
        if pos < file_size:
            if corrupt:
                log.warning("%s: invalid or torn data at byte %d; truncating", self.path, pos)
            self._cut(pos)
        self.flushed_size = 0
        self._load_first_timestamp(fd)
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
        """Cut the file after `size` bytes: stale bytes past it become zeros, never an old batch. A
        mapped file then grows back to its length, so the mapping stays backed."""
        h = self.handle
        fd = h.fileno()
        os.ftruncate(fd, size)
        if self._mmap is not None and self.capacity > size:
            os.ftruncate(fd, self.capacity)
        else:
            self.capacity = size

    def truncate_to(self, offset: int) -> int:
        """Drop batches at or after `offset` (whole batches). Returns the bytes removed."""
        pos = self.find_position(offset)
        if pos is None:
            return 0
        start = pos[0]
        if start >= self.size:
            return 0
        removed = self.size - start
        self.size = start
        self._cut(start)
        self.recover()  # recompute indexes, max timestamp and next offset from what is left
        return removed

    # --- reads ---
    def find_position(self, offset: int) -> tuple[int, int, int] | None:
        """(position, base offset, size) of the first batch whose last offset >= `offset`, or None."""
        if not self.size:
            return None
        _, start = self.offset_index.lookup(offset)
        h = self.handle
        for pos, (base, length, _, lod, _, _) in walk_headers(h.fileno(), start, self.size):
            if base + lod >= offset:
                return pos, base, length + LOG_OVERHEAD
        return None

    def slice(self, offset: int, max_bytes: int, upper_offset: int) -> FileSlice | None:
        """Whole batches from the one holding `offset` (the first whose last offset >= `offset`) that
        start below `upper_offset`, within `max_bytes` but at least one; None when there is none."""
        if not self.size:
            return None
        # where an earlier slice ended, if it ended at `offset` (a follower's or a consumer's next
        # fetch starts there): no index search and no walk from the index entry; trusted only if
        # a batch based at `offset` lies there (truncation may have moved things)
        start = self._slice_ends.get(offset, -1)
        hinted = 0 <= start < self.size
        if not hinted:
            _, start = self.offset_index.lookup(offset)
        handle = self.handle
        first, total, next_offset = -1, 0, -1
        for pos, (base, length, _, lod, _, _) in walk_headers(handle.fileno(), start, self.size):
            if hinted and first < 0 and base != offset:
                self._slice_ends.pop(offset, None)
                return self.slice(offset, max_bytes, upper_offset)
            if base >= upper_offset:
                break
            size = length + LOG_OVERHEAD
            if first < 0:
                if base + lod >= offset:
                    first, total, next_offset = pos, size, base + lod + 1
            elif total + size > max_bytes:
                break
            else:
                total += size
                next_offset = base + lod + 1
        if first < 0:
            return None
        if len(self._slice_ends) >= _SLICE_ENDS:
            self._slice_ends.clear()
        self._slice_ends[next_offset] = first + total
        return FileSlice(handle, first, total)

    def headers(self, start: int = 0) -> Iterator[tuple[int, tuple]]:
        """(position, HEADER fields) of every committed batch from byte `start` (rebuilding producer
        state and leader epochs)."""
        h = self.handle
        yield from walk_headers(h.fileno(), start, self.size, HEADER)

    def batch_at(self, pos: int) -> RecordBatch:
        """A copy of the batch at `pos`."""
        h = self.handle
        fd = h.fileno()
        length = _LENGTH.unpack(os.pread(fd, 4, pos + 8))[0]
        return RecordBatch(os.pread(fd, length + LOG_OVERHEAD, pos))

    def batches(self, start: int = 0) -> Iterator[tuple[int, RecordBatch]]:
        """Walk batches from byte `start`, each a copy."""
        handle = self.handle
        fd = handle.fileno()
        for pos, header in walk_headers(fd, start, self.size):
            yield pos, RecordBatch(os.pread(fd, header[1] + LOG_OVERHEAD, pos))

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
        """New descriptors of the log and index files (pending index entries written first): the
        caller fsyncs and closes them without holding the log lock (a concurrent deletion cannot
        close them underneath)."""
        if self.closed:
            return []
        h = self.handle
        fds = [os.dup(h.fileno())]
        try:
            for idx in (self.offset_index, self.time_index):
                fds.append(idx.open_for_sync())
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        return fds

    def close(self) -> None:
        if self.closed:
            return
        self.seal()
        self._let_go_of_mapping()
        self.closed = True
        self._handle_ref = None

    @property
    def txn_index_path(self) -> Path:
        """Kafka's aborted-transaction index of this segment (`.txnindex`), when it has one."""
        return self.dir / log_file_name(self.base_offset, ".txnindex" + self.file_suffix)

    def rename_suffix(self, old: str, new: str) -> None:
        """Rename every file of the segment from suffix `old` to `new` (the cleaner's `.cleaned` ->
        `.swap` -> ``), log file first as Kafka's changeFileSuffixes does. Open descriptors (and
        FileSlices) stay valid across the rename."""
        if self.file_suffix != old:
            raise ValueError(f"{self.path} does not end in {old!r}")
        txn = self.txn_index_path
        for holder in (self, self.offset_index, self.time_index):
            target = Path(str(holder.path)[: len(str(holder.path)) - len(old)] + new)
            os.replace(holder.path, target)
            holder.path = target
        self.file_suffix = new
        if txn.exists():
            os.replace(txn, self.txn_index_path)

    def set_last_modified(self, mtime_ns: int) -> None:
        """Kafka's setLastModified: the log and index files' modification time (a cleaned segment
        keeps the time of the segments it replaces, for time retention and ListOffsets v0)."""
        for p in (self.path, self.offset_index.path, self.time_index.path):
            os.utime(p, ns=(mtime_ns, mtime_ns))

    def delete(self) -> None:
        """Rename files to `.deleted`, then unlink; open FileSlices keep reading the unlinked file."""
        for p in self.mark_deleted():
            p.unlink(missing_ok=True)

    def mark_deleted(self) -> list[Path]:
        """Close the segment and rename its files to `.deleted` (what a recovery removes); returns
        those paths for the caller to unlink, which it may do later, outside a lock."""
        self.deleted = self.closed = True
        self._let_go_of_mapping()
        self._handle = self._handle_ref = None
        gone = []
        for p in (self.path, self.offset_index.path, self.time_index.path, self.txn_index_path):
            try:
                os.rename(p, str(p) + ".deleted")
                gone.append(Path(str(p) + ".deleted"))
            except FileNotFoundError:
                pass
        return gone
