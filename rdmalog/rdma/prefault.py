"""Keep the pages ahead of a head file's write position allocated, off the produce datapath.

A segment is preallocated sparse, so the first write to each page allocates it (page cache and,
on ext4, a block): on this kind of host that costs more than the copy itself and would land on
the producer's RDMA write. A background thread populates the broker's mapping ahead of the
committed position with MADV_POPULATE_WRITE (contents unchanged, no memory touched); the
producer's own mapping then takes only cheap minor faults. The lead grows with what was written
since the grant (256 KiB up to 8 MiB), so a trickle of small records does not pay for megabytes
of allocation it will not use soon. libc's madvise is called through
ctypes so the GIL is released while the kernel works. Without the flag (kernel < 5.14) it
switches itself off. With the topic config `preallocate` the service also makes the whole head
file resident when it grants access (`populate`), as KafkaDirect's registered, preallocated files
are: nothing is left to allocate on the datapath (populated for reading, so the pages stay clean
and no zeros are written back; such heads get no lead: it would only move each page's first
write fault from the producer into the broker), and has the next head file prepared the same way
in the background (`standby`), so a roll does not allocate either.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import mmap
import threading

log = logging.getLogger(__name__)

MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)
MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", 14)
MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)
AHEAD = 8 << 20  # at most this much populated past the committed position
MIN_AHEAD = 256 << 10  # at least this much (the lead is what was written since the grant)
STEP = 256 << 10  # populate in chunks of this size
PAGE = mmap.PAGESIZE

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_madvise = _libc.madvise
_madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_madvise.restype = ctypes.c_int


def address_of(mm: mmap.mmap) -> int:
    """The mapping's address (the temporary buffer export is released before returning)."""
    c = ctypes.c_char.from_buffer(mm)
    try:
        return ctypes.addressof(c)
    finally:
        del c


class Prefaulter:
    """`want(key, mm, position, capacity)` after each commit; `forget(key)` when the grant ends;
    `populate` (now) and `standby` (the next head file, in the background) for preallocated files."""

    def __init__(self, ahead: int = AHEAD):
        self.ahead = ahead
        self.enabled = True
        self._cv = threading.Condition()
        self._files: dict[int, list[int]] = {}  # key -> [address, done, target, first position]
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="rdma-prefault", daemon=True)
        self._thread.start()

    def want(self, key: int, mm: mmap.mmap, position: int, capacity: int) -> None:
        if not self.enabled:
            return
        with self._cv:
            f = self._files.get(key)
            if f is None:
                try:
                    addr = address_of(mm)
                except (ValueError, TypeError):  # closed (rolled) or not a mapping: nothing to do
                    return
                start = position - position % PAGE
                f = self._files[key] = [addr, start, start, position]
            lead = min(self.ahead, max(MIN_AHEAD, position - f[3]))
            end = -(-capacity // PAGE) * PAGE  # madvise works on whole pages
            target = min(end, -(-(position + lead) // PAGE) * PAGE)
            if target - f[1] >= STEP or (target == end and f[1] < end):
                f[2] = max(f[2], target)
                self._cv.notify()

    def populate(self, mm: mmap.mmap, position: int, capacity: int) -> bool:
        """Make [position, capacity) resident now, in the caller's thread (GIL released), as
        ibv_reg_mr pins a registered region. Populated for reading: the pages exist (no allocation
        is left for the datapath) but stay clean, so no zeros are written back to disk. False
        when the kernel cannot."""
        if not self.enabled:
            return False
        try:
            addr = address_of(mm)
        except (ValueError, TypeError):
            return False
        start = position - position % PAGE
        end = -(-capacity // PAGE) * PAGE
        # Large page-cache folios from the first byte on (the kernel ramps them up otherwise): a
        # producer's mapping then takes one fault per folio, not per page. Best effort.
        _madvise(addr + start, end - start, MADV_HUGEPAGE)
        return _madvise(addr + start, end - start, MADV_POPULATE_READ) == 0

    def standby(self, plog) -> None:
        """Prepare `plog`'s next head file (`PartitionLog.prepare_standby`) and make it resident,
        in a thread of its own (the lead thread stays busy while a producer writes), so the roll
        and the grant that follow cost a rename, not an allocation."""
        if self.enabled:
            threading.Thread(
                target=self._prepare, args=(plog,), name="rdma-standby", daemon=True
            ).start()

    def _prepare(self, plog) -> None:
        try:
            path = plog.prepare_standby()
            if path is None:
                return
            with open(path, "r+b") as fh, mmap.mmap(fh.fileno(), 0) as mm:
                self.populate(mm, 0, len(mm))
        except (OSError, ValueError) as e:  # rolled or deleted meanwhile: the roll allocates
            log.info("%s: next head file not made resident: %s", plog.name, e)

    def forget(self, key: int) -> None:
        with self._cv:
            self._files.pop(key, None)

    def stop(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify()
        self._thread.join(5)

    def _next(self) -> tuple[int, int, int] | None:
        for key, (addr, done, target, _) in self._files.items():
            if done < target:
                return key, addr + done, min(STEP, target - done)
        return None

    def _run(self) -> None:
        while True:
            with self._cv:
                job = self._next()
                while job is None and not self._stop:
                    self._cv.wait()
                    job = self._next()
                if self._stop:
                    return
            key, addr, n = job
            # The mapping may be unmapped meanwhile (a roll trimmed and closed it): madvise then
            # fails with ENOMEM/EFAULT and touches nothing; populating never changes contents.
            rc = _madvise(addr, n, MADV_POPULATE_WRITE)
            err = ctypes.get_errno() if rc else 0
            with self._cv:
                f = self._files.get(key)
                if rc == 0 and f is not None:
                    f[1] += n
                elif f is not None:
                    self._files.pop(key, None)
            if err == errno.EINVAL:  # the kernel has no MADV_POPULATE_WRITE
                log.info("MADV_POPULATE_WRITE unsupported: head files are not prefaulted")
                self.enabled = False
                return
