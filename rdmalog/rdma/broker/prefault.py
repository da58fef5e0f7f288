"""Keep the pages ahead of a head file's write position allocated and writable, off the datapath.

A segment is preallocated sparse, so the first write to each page allocates it (page cache and,
on ext4, a block): on this kind of host that costs more than the copy itself and would land on
the producer's RDMA write. A background thread populates the broker's mapping ahead of the
committed position with MADV_POPULATE_WRITE (contents unchanged, no memory touched): a *lead*.
The lead grows with what was written since the grant (256 KiB up to 8 MiB), so a trickle of
small records does not pay for megabytes of allocation it will not use soon. libc's madvise is
called through ctypes so the GIL is released while the kernel works. Without the flag (kernel <
5.14) it switches itself off.

With the topic config `preallocate` the service also makes the whole head file resident when it
grants access (`populate`), as KafkaDirect's registered, preallocated files are: nothing is left
to allocate on the datapath. That *fill* is populated for reading, so the pages stay clean and
no zeros are written back. Only the first GRANT_RESIDENT bytes are made resident before the
grant is answered, the rest by the same thread, front to back: fresh memory costs what the host
makes it cost (0.4-1.7 GiB/s on these VMs, where first-touched pages fault in the hypervisor),
and a producer should not wait seconds for a 1 GiB file. Resident heads get the lead too: a
clean page's first write still costs ext4 its page_mkwrite (buffer heads allocated, blocks
looked up, per 4 KiB) in whichever mapping writes it first - the producer's copy, then the
broker's header stamp in its own mapping - and the lead does both ahead, in this thread, so
the producer's write fault finds the work done and the stamp does not fault (measured: a
writer 5.1-5.7 -> 7.4-7.9 GiB/s, the stamp 2.1-2.7 -> 0.1-0.2 us per 64 KiB batch, for 0.1
s/GiB here). At most a lead's worth of zeros is dirtied past the data. Leads go before fills.
The next head file is prepared the same way in the background (`standby`), so a roll does not
allocate either.
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
STEP = 256 << 10  # populate a lead in chunks of this size
RESIDENT_STEP = 2 << 20  # the rest of a resident head in chunks of this size (a huge folio)
GRANT_RESIDENT = 8 << 20  # resident before a grant is answered; the rest in the background
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
    """`want(key, mm, position, capacity)` as commits advance; `forget(key)` when the grant ends;
    `populate` (at the grant) and `standby` (the next head file) for preallocated files."""

    def __init__(self, ahead: int = AHEAD, grant_resident: int = GRANT_RESIDENT):
        self.ahead = ahead
        self.grant_resident = grant_resident
        self.enabled = True
        self._cv = threading.Condition()
        # key -> [address, done, target, first position]: the writable lead (offsets)
        self._leads: dict[int, list[int]] = {}
        # key -> [address, done, end]: the rest of a resident head, populated for reading
        self._fills: dict[int, list[int]] = {}
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="rdma-prefault", daemon=True)
        self._thread.start()

    def want(self, key: int, mm: mmap.mmap, position: int, capacity: int) -> None:
        if not self.enabled:
            return
        with self._cv:
            f = self._leads.get(key)
            if f is None:
                try:
                    addr = address_of(mm)
                except (ValueError, TypeError):  # closed (rolled) or not a mapping: nothing to do
                    return
                start = position - position % PAGE
                f = self._leads[key] = [addr, start, start, position]
            lead = min(self.ahead, max(MIN_AHEAD, position - f[3]))
            end = -(-capacity // PAGE) * PAGE  # madvise works on whole pages
            target = min(end, -(-(position + lead) // PAGE) * PAGE)
            if target - f[1] >= STEP or (target == end and f[1] < end):
                f[2] = max(f[2], target)
                self._cv.notify()

    def populate(self, key: int, mm: mmap.mmap, position: int, capacity: int) -> bool:
        """Make [position, capacity) of a granted head resident, as ibv_reg_mr pins a registered
        region: the first `grant_resident` bytes now, in the caller's thread (GIL released), the
        rest in the background until `forget(key)`. Populated for reading: the pages exist (no
        allocation is left for the datapath) but stay clean, so no zeros are written back to
        disk. False when the kernel cannot."""
        if not self.enabled:
            return False
        try:
            addr = address_of(mm)
        except (ValueError, TypeError):
            return False
        start = position - position % PAGE
        end = -(-capacity // PAGE) * PAGE
        now = min(end, start + self.grant_resident)
        if not _make_resident(addr, start, end, now):
            return False
        if now < end:
            with self._cv:
                self._fills[key] = [addr, now, end]
                self._cv.notify()
        return True

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
                _make_resident(address_of(mm), 0, len(mm), len(mm))
        except (OSError, ValueError) as e:  # rolled or deleted meanwhile: the roll allocates
            log.info("%s: next head file not made resident: %s", plog.name, e)

    def forget(self, key: int) -> None:
        with self._cv:
            self._leads.pop(key, None)
            self._fills.pop(key, None)

    def stop(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify()
        self._thread.join(5)

    def _next(self) -> tuple[dict, int, int, int, int] | None:
        """(leads or fills, key, address, length, advice) of the next chunk: leads first (a
        producer is about to write there), files take turns (see _run)."""
        for key, (addr, done, target, _) in self._leads.items():
            if done < target:
                return self._leads, key, addr + done, min(STEP, target - done), MADV_POPULATE_WRITE
        for key, (addr, done, end) in self._fills.items():
            if done < end:
                return (
                    self._fills,
                    key,
                    addr + done,
                    min(RESIDENT_STEP, end - done),
                    MADV_POPULATE_READ,
                )
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
            files, key, addr, n, advice = job
            # The mapping may be unmapped meanwhile (a roll trimmed and closed it): madvise then
            # fails with ENOMEM/EFAULT and touches nothing; populating never changes contents.
            rc = _madvise(addr, n, advice)
            err = ctypes.get_errno() if rc else 0
            with self._cv:
                f = files.pop(key, None)
                if rc == 0 and f is not None:
                    f[1] += n
                    files[key] = f  # re-inserted last: the next chunk is another file's
            if err == errno.EINVAL:  # the kernel has no MADV_POPULATE_*
                log.info("MADV_POPULATE_* unsupported: head files are not prefaulted")
                self.enabled = False
                return


def _make_resident(addr: int, start: int, end: int, now: int) -> bool:
    """Advise large folios for [start, end) of the mapping at addr and populate [start, now)."""
    # Large page-cache folios from the first byte on (the kernel ramps them up otherwise): a
    # producer's mapping then takes one fault per folio, not per page. Best effort.
    _madvise(addr + start, end - start, MADV_HUGEPAGE)
    return now <= start or _madvise(addr + start, now - start, MADV_POPULATE_READ) == 0
