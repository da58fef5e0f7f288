"""The shm transport's files: device directories (private to their user, removed by their owner,
swept once it is gone), shared file mappings, and the completion ring peers push into.

A device's directory is created 0700 and its files 0600; `check_private_dir` refuses a directory
another user could have planted or can read, and `inside` a path that is not an entry of one.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import shutil
import stat
import time

from rdmalog.rdma.transport._atomic64 import load, ring_pop, ring_push, ring_take, ring_wait, store
from rdmalog.rdma.transport.interface import TransportError

PAGE = mmap.ALLOCATIONGRANULARITY
RING_HDR = 256  # reserve @0, head @64, waiting @128: separate cache lines
SLOT_HDR = 24  # seq u64, kind u32, qp_num u32, imm u32, byte_len u32
KIND_SEND, KIND_WRITE_IMM, KIND_DISCONNECT = 1, 2, 3
# A slot claimed but unpublished this long was claimed by a producer that died mid-push: the owner
# skips it (before pushers waiting on a full ring give up, `Ring.push`'s 1 s).
RING_STALL_S = 0.5


def make_file(path: str, size: int) -> None:
    """Create a file of `size` bytes with its blocks allocated: a sparse file on a full tmpfs
    (Docker's /dev/shm is 64 MiB) maps fine, and its first touched page that cannot be backed
    kills the toucher with SIGBUS - a peer pushing into a ring, not just its owner."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        os.unlink(path)
        raise TransportError(f"cannot allocate {size} bytes for {path}: {e}") from e
    finally:
        os.close(fd)


def check_private_dir(path: str) -> None:
    """Refuse a device directory that is not this user's own private directory (a real directory,
    not a link, owned by us, no group or other permissions): another user could have planted or
    could read what is in it."""
    try:
        st = os.lstat(path)
    except OSError as e:
        raise TransportError(f"shm device directory {path}: {e}") from e
    if not stat.S_ISDIR(st.st_mode):
        raise TransportError(f"shm device directory {path} is not a directory")
    if st.st_uid != os.geteuid():
        raise TransportError(f"shm device directory {path} belongs to uid {st.st_uid}, not us")
    if st.st_mode & 0o077:
        raise TransportError(
            f"shm device directory {path} has group/other permissions "
            f"({stat.filemode(st.st_mode)}); it must be 0700"
        )


def inside(dir_: str, path: str) -> str:
    """`path`, when it names an entry of `dir_` that is not a link; TransportError otherwise."""
    if os.path.dirname(path) != dir_ or os.path.islink(path):
        raise TransportError(f"{path!r:.200} is not a file of the peer's device directory")
    return path


def map_file(
    path: str, offset: int, length: int, write: bool, clamp: bool = False
) -> tuple[mmap.mmap, memoryview]:
    """Map [offset, offset+length) of a file shared; returns the mapping and a view of the range.
    `clamp`: map only what the file still holds (a sealed segment is trimmed to its data)."""
    start = offset - offset % PAGE
    fd = os.open(path, os.O_RDWR if write else os.O_RDONLY)
    try:
        if clamp:
            length = max(0, min(length, os.fstat(fd).st_size - offset))
            if length == 0:
                raise ValueError("nothing left of the region's file")
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if write else 0)
        m = mmap.mmap(fd, length + offset - start, mmap.MAP_SHARED, prot, offset=start)
    finally:
        os.close(fd)
    return m, memoryview(m)[offset - start : offset - start + length]


class Ring:
    """A multi-producer, single-consumer ring of fixed slots in a shared file."""

    def __init__(self, path: str, nslots: int, slot_size: int, create: bool):
        self.path, self.nslots, self.slot_size = path, nslots, slot_size
        size = RING_HDR + nslots * slot_size
        if create:
            make_file(path, size)
        self._map, self.buf = map_file(path, 0, size, True)
        self.head = load(self.buf, 64)  # consumer-local copy of the head index
        self._stall = (-1, 0.0)  # (head, since when) of an unpublished claimed slot

    def slot_off(self, seq: int) -> int:
        return RING_HDR + (seq % self.nslots) * self.slot_size

    def push(self, kind: int, qp_num: int, imm: int, byte_len: int, payload=None, wait=1.0) -> int:
        """Claim a slot, fill it, publish it (one C call): 1 if the owner sleeps and its doorbell
        must be rung, 0 if not, -1 if the ring stayed full for `wait` seconds."""
        r = ring_push(self.buf, self.nslots, self.slot_size, kind, qp_num, imm, byte_len, payload)
        if r >= 0:
            return r
        deadline = time.monotonic() + wait
        while r < 0 and time.monotonic() < deadline:  # full: the consumer is behind (CQ overrun)
            time.sleep(0)
            r = ring_push(
                self.buf, self.nslots, self.slot_size, kind, qp_num, imm, byte_len, payload
            )
        return r

    def pop(self):
        """(kind, qp_num, imm, byte_len, payload bytes or None) of the next published slot, or
        None."""
        e = ring_pop(self.buf, self.nslots, self.slot_size, self.head)
        if e:
            self.head += 1
            return e
        if e is False and self._skip_stalled():
            return self.pop()
        return None

    def take(self, room: int) -> list | tuple:
        """Up to `room` published slots' entries (as `pop`), oldest first: one C call."""
        es = ring_take(self.buf, self.nslots, self.slot_size, self.head, room)
        if es:
            self.head += len(es)
            return es
        if es is False and self._skip_stalled():
            return self.take(room)
        return ()

    def _skip_stalled(self) -> bool:
        """The slot at the head is claimed but not published: a push under way, or its producer
        was killed mid-push. True once it has been so for RING_STALL_S and was skipped (it would
        block the ring)."""
        now = time.monotonic()
        if self._stall[0] != self.head:
            self._stall = (self.head, now)
        elif now - self._stall[1] >= RING_STALL_S:
            self.head += 1
            store(self.buf, 64, self.head)
            return True
        return False

    def stalled(self) -> bool:
        """Whether a slot is claimed at the head but not published (yet)."""
        return load(self.buf, 0) != self.head

    def ready(self) -> bool:
        return load(self.buf, self.slot_off(self.head)) == self.head + 1

    def spin(self, spin_ns: int) -> bool:
        """Spin without the GIL until the next slot is published or spin_ns pass."""
        return ring_wait(self.buf, self.nslots, self.slot_size, self.head, spin_ns)

    def close(self) -> None:
        self.buf.release()
        try:
            self._map.close()
        except BufferError:  # a view handed out is still alive; the GC closes it later
            pass


def remove_dir(path: str, owner: int, lock_fd: int) -> None:
    """A device's directory, removed by the process that made it: a forked child inherits the
    device (and its exit handlers) but must not take it from its parent. Then its owner lock."""
    if os.getpid() == owner:
        shutil.rmtree(path, ignore_errors=True)
    os.close(lock_fd)


def lock_owner(dir_: str) -> int:
    """Take the directory's owner lock, held for the device's life (and by forked children): the
    sweep's liveness test. Locked before it is named `owner`, so no sweep sees it unlocked."""
    tmp = os.path.join(dir_, "owner.tmp")
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(tmp, os.path.join(dir_, "owner"))
    return fd


def owner_gone(path: str, pid: int) -> bool:
    """Whether a device directory's owner is gone: its lock is free. Not by its pid: a live
    owner in another pid namespace sharing /dev/shm looks dead, and a dead one's pid is reused.
    A directory not locked yet (being made) is judged by its pid."""
    try:
        fd = os.open(os.path.join(path, "owner"), os.O_RDONLY)
    except FileNotFoundError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass  # alive, someone else's
        return False
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def sweep(base: str) -> None:
    """Remove device directories left by processes that died without closing them."""
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        parts = name.split("-")
        if len(parts) < 3 or parts[0] != "rdmalog" or not parts[1].isdigit():
            continue
        path = os.path.join(base, name)
        try:
            if os.lstat(path).st_uid != os.geteuid():  # another user's: not ours to judge
                continue
        except OSError:
            continue
        if owner_gone(path, int(parts[1])):
            shutil.rmtree(path, ignore_errors=True)
