"""What the RDMA service tracks per partition: the grant of its head file to producers, the files
registered for consumers' READs and their metadata slots (KafkaDirect Figure 9), and `Partitions`,
which finds (or starts) a partition's state.

The log's listeners keep these current: a high watermark advance rewrites the slots of the files
being read; a roll revokes the grant of the old head; retention and the cleaner's swaps withdraw
the registrations of files that left the log. They run under the log's lock (or none), so
they only set flags, deregister and write slot words.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

from rdmalog.errors import NotLeaderOrFollowerError
from rdmalog.rdma.control import ControlError
from rdmalog.rdma.transport._atomic64 import load, store
from rdmalog.rdma.transport.interface import Access
from rdmalog.rdma.wire import SLOT_SIZE, slot_word, word_decode
from rdmalog.store.in_place import SegmentFile

# What the datapaths count for the broker's metrics (gateway/metrics.py names and exports them)
DATAPATH_COUNTERS = (
    "produce_grants",
    "read_grants",
    "writes_committed",
    "bytes_committed",
    "revocations",
)


def datapath_counters() -> dict[str, int]:
    """The counters, all at zero: a plain dict with its keys present, as `+=` on an exact dict is
    what the commit path can afford (a Counter, a dict subclass, costs it about twice as much)."""
    return dict.fromkeys(DATAPATH_COUNTERS, 0)


# (order, status, base offset, last offset, next position[, log append time]): the time, -1
# unless the topic uses LogAppendTime, only for the gateway's appends (no ack field holds it)
Reply = Callable[..., None]


class ProduceFile:
    """One grant of a head file for RDMA produce (exclusive, or shared through the word), or
    for push replication (mode "replica": the partition's leader writes its own batches here;
    `replica_of` is its (broker id, leader epoch) and `current()` says whether it still leads
    in that epoch as this follower sees it: a write is committed only while it does)."""

    def __init__(
        self,
        file_id: int,
        part: PartState,
        head: SegmentFile,
        position: int,
        mode: str,
        mr,
        word_mr,
        counters: dict[str, int] | None = None,
    ):
        self.file_id, self.part, self.segment, self.mode = file_id, part, head, mode
        self.counters = counters  # the service's datapath counters: a revocation is counted here
        self.mapping, self.capacity = head.mmap, head.capacity  # what was registered
        self.mr, self.word_mr = mr, word_mr
        self.lock = threading.Lock()
        self.next_order = 0
        self.expect_pos = position  # where the next order's bytes start (the committed position)
        self.pending: dict[int, tuple[int, Reply, float]] = {}
        self.sessions: set[int] = set()
        self.revoked = False
        self.full = False
        self.standby_asked = False  # the next head file was asked for (preallocate)
        self.orphaned_below: int | None = None  # orders reserved before a holder's session ended
        self.resident = False  # made resident at the grant (preallocate; see grants.py)
        self.check_at = 0  # a commit ending here or later calls OrderedCommits._committed
        # session id -> (window over the file, window over the word or None): what each holder
        # was handed, bound to its queue pair; the file's own region key is never handed out
        self.windows: dict[int, tuple] = {}
        self.replica_of: tuple[int, int] | None = None
        self.current: Callable[[], bool] | None = None
        self.on_revoke: Callable[[], None] | None = None  # called once, under any lock

    def window_for(self, session: int, qp) -> tuple:
        """The holder's windows, bound on its queue pair at its first grant: [committed
        position, end of file) of the head (moved up with every commit, see `narrow`) and the
        reservation word."""
        w = self.windows.get(session)
        if w is None:
            acc = Access.REMOTE_WRITE
            data = qp.bind_window(self.mr, self.expect_pos, self.capacity, acc)
            word = None
            if self.word_mr is not None and self.replica_of is not None:
                # push replication: the leader WRITEs its high watermark here (no completion on
                # this side); read when this replica's role changes (`replica_hw`)
                word = qp.bind_window(self.word_mr, 0, 8, Access.REMOTE_WRITE)
            elif self.word_mr is not None:
                word = qp.bind_window(self.word_mr, 0, 8, Access.REMOTE_ATOMIC)
                if hasattr(word, "on_atomic"):  # tcp: the engine executes the holder's
                    # FETCH_AND_ADDs, so it can admit its WRITEs to what they reserved only
                    data.reservations = []
                    word.on_atomic = functools.partial(_reserved, data)
            w = self.windows[session] = (data, word)
        return w

    def replica_hw(self) -> int:
        """Push replication: the last high watermark the leader wrote into the word (0: none),
        while the grant stands (a revoked one left it in `PartState.replica_hw`)."""
        if self.replica_of is None or self.word_mr is None or self.revoked:
            return 0
        return load(self.word_mr.buf, 0)

    def narrow(self, position: int) -> None:
        """Bytes below `position` are being validated and committed: nobody's to write from now
        on, so every holder's window starts there (before the broker looks at them, so what it
        validated is what it commits)."""
        for data, _ in list(self.windows.values()):
            data.narrow(position)

    def drop_holder(self, session: int) -> None:
        """Withdraw one holder's windows (its session ended, or it may no longer write here)."""
        w = self.windows.pop(session, None)
        for window in w or ():
            if window is not None:
                window.invalidate()

    def revoke(self) -> None:
        """Withdraw remote access now (flags and deregistration only: safe under the log lock)."""
        first = not self.revoked
        if not self.revoked and self.counters is not None:
            self.counters["revocations"] += 1  # whatever withdrew it: roll, timeout, deletion...
        if first and self.replica_of is not None:  # keep the leader's last word (see
            self.part.replica_hw = max(self.part.replica_hw, self.replica_hw())  # replica_hw)
        self.revoked = True
        if first and self.on_revoke is not None:
            self.on_revoke()
        for session in list(self.windows):
            self.drop_holder(session)
        for mr in (self.mr, self.word_mr):
            if mr is not None and mr.rkey:
                mr.deregister()


def _reserved(data, old: int, new: int) -> None:
    """A holder's FETCH_AND_ADD on the reservation word took [old position, new position)."""
    data.reserve(word_decode(old)[1], word_decode(new)[1])


class SlotRegion:
    """A consumer session's contiguous metadata slots (KafkaDirect Figure 9)."""

    def __init__(self, device, nslots: int):
        self.mr = device.alloc_mr(nslots * SLOT_SIZE, Access.LOCAL_WRITE | Access.REMOTE_READ)
        self.free = list(range(nslots - 1, -1, -1))  # pop() gives the lowest: keep slots close
        self.retired: dict[tuple[str, int, int], int] = {}  # withdrawn file -> its slot
        self._window = None

    def window_for(self, qp) -> dict:
        """What the session is told of its slots: a READ window bound to its queue pair."""
        if self._window is None:
            self._window = qp.bind_window(self.mr, 0, self.mr.length, Access.REMOTE_READ)
        return self._window.remote().to_dict()

    def close(self) -> None:
        if self._window is not None:
            self._window.invalidate()
        self.mr.deregister()

    def take(self) -> int:
        if not self.free:
            raise ControlError("no_slot", "metadata slot region full")
        self.free.sort(reverse=True)
        return self.free.pop()

    def set(self, idx: int, lrb: int, mutable: bool, base_offset: int) -> None:
        store(self.mr.buf, idx * SLOT_SIZE + 8, base_offset)
        store(self.mr.buf, idx * SLOT_SIZE, slot_word(lrb, mutable))

    def clear(self, idx: int) -> None:
        store(self.mr.buf, idx * SLOT_SIZE, 0)
        self.free.append(idx)

    def retire(self, idx: int, key: tuple[str, int, int], base_offset: int) -> None:
        """The file is withdrawn: sealed, nothing more readable (a consumer never lowers its
        last readable byte), and not handed to another file before `release(key)`."""
        self.set(idx, 0, False, base_offset)
        self.retired[key] = idx

    def release(self, key: tuple[str, int, int]) -> None:
        """Free the slot of the withdrawn file `key`, if there is one."""
        idx = self.retired.pop(key, None)
        if idx is not None:
            self.clear(idx)


class ReadFile:
    """A segment file registered for REMOTE_READ, shared by all consumers reading it."""

    def __init__(self, key: tuple[str, int, int], seg: SegmentFile, mr):
        self.key, self.segment, self.mr = key, seg, mr  # key: (topic, partition, base offset)
        self.slots: dict[int, tuple[SlotRegion, int]] = {}  # session id -> (region, slot index)
        self.committed: set[int] = set()  # sessions reading committed data only (up to the LSO)
        self.refs: set[int] = set()
        self.windows: dict[int, object] = {}  # session id -> its READ window, on its queue pair

    def window_for(self, session: int, qp):
        w = self.windows.get(session)
        if w is None:
            w = self.windows[session] = qp.bind_window(
                self.mr, 0, self.mr.length, Access.REMOTE_READ
            )
        return w

    def drop_reader(self, session: int) -> None:
        w = self.windows.pop(session, None)
        if w is not None:
            w.invalidate()

    def withdraw(self) -> None:
        """Deregister it: READs of it fail from now on. The metadata slots still on it say it is
        sealed, so a consumer that read all it showed asks for the next file, hears it is gone and
        seeks again (a cleared slot it took for 'nothing new', and waited forever); each is kept
        until its session releases the file."""
        for region, idx in self.slots.values():
            region.retire(idx, self.key, self.segment.base_offset)
        self.slots.clear()
        for session in list(self.windows):
            self.drop_reader(session)
        self.mr.deregister()


class PartState:
    """What the service tracks for one partition."""

    def __init__(self, plog):
        self.log = plog
        self.produce: ProduceFile | None = None
        # push replication: the highest high watermark a revoked replica grant's word held (its
        # leader may have gone first: its session's end revokes the grant before the role change)
        self.replica_hw = 0
        self.readers: dict[int, ReadFile] = {}  # segment base offset -> ReadFile
        self.listening = False
        self.on_start = None  # the service's log start listener for this partition
        self.on_swap = None  # and its swap listener (segments replaced by cleaned copies)

    def on_hw(self, plog) -> None:
        f = self.produce
        if plog.closed and f is not None:  # deleted: nothing more can be committed into it
            f.revoke()
        for rf in list(self.readers.values()):
            if rf.slots:
                lrb, mutable, _ = plog.readable_end(rf.segment)
                stable = plog.readable_end(rf.segment, True)[0] if rf.committed else lrb
                for sid, (region, idx) in list(rf.slots.items()):
                    end = stable if sid in rf.committed else lrb
                    region.set(idx, end, mutable, rf.segment.base_offset)

    def on_roll(self, plog, old, new) -> None:
        f = self.produce
        if f is not None and f.segment is old:
            f.revoke()  # its bytes past old.size are gone with the trim
        self.on_hw(plog)


class Partitions:
    """The PartState of every partition the service was asked about, listening to its log.
    `lock` is the service's."""

    def __init__(self, store, lock: threading.RLock):
        self.store = store
        self.lock = lock
        self.by_key: dict[tuple[str, int], PartState] = {}
        # cluster mode: 0 when this broker leads the partition (else a Kafka error code); native
        # producers and consumers are served by the leader only
        self.leader_check: Callable[[str, int], int] | None = None
        # cluster mode, push replication: `replica_check(topic, partition, leader, epoch)` is
        # True while this broker follows `leader` in `epoch` (it may write this replica's head);
        # `replica_pushed(topic, partition, held)` tells the follower's fetcher to stand aside
        self.replica_check: Callable[[str, int, int, int], bool] | None = None
        self.replica_pushed: Callable[[str, int, bool], None] | None = None
        # cluster mode, acks=all native producers (replicated_acks.py): `replicated_wait` calls
        # back once the high watermark covers a batch; `isr_check(topic, partition)` is 0 when
        # enough replicas are in sync to take an acks=all produce (else NOT_ENOUGH_REPLICAS)
        self.replicated_wait: Callable[..., None] | None = None
        self.isr_check: Callable[[str, int], int] | None = None

    def get(self, topic: str, partition: int, replica: bool = False) -> PartState:
        """The partition's state (raises the store's error for an unknown one, and in a cluster
        NotLeaderOrFollowerError where this broker does not lead, unless `replica`: its leader
        asks); a log that was deleted and created again gets a new one."""
        check = self.leader_check
        if not replica and check is not None and check(topic, partition):
            raise NotLeaderOrFollowerError(f"this broker does not lead {topic}-{partition}")
        plog = self.store.partition(topic, partition)
        with self.lock:
            ps = self.by_key.get((topic, partition))
            if ps is None or ps.log is not plog:
                if ps is not None:  # the topic was deleted and created again
                    self._forget_readers(ps)
                ps = self.by_key[(topic, partition)] = PartState(plog)
            if not ps.listening:
                ps.on_start = functools.partial(self._retire_deleted_readers, ps)
                ps.on_swap = functools.partial(self._retire_replaced_readers, ps)
                plog.add_listener(ps.on_hw)
                plog.add_roll_listener(ps.on_roll)
                plog.add_start_listener(ps.on_start)
                plog.add_swap_listener(ps.on_swap)
                ps.listening = True
            return ps

    def stop_listening(self) -> None:
        with self.lock:
            for ps in self.by_key.values():
                if ps.listening:
                    ps.log.remove_listener(ps.on_hw)
                    ps.log.remove_roll_listener(ps.on_roll)
                    ps.log.remove_start_listener(ps.on_start)
                    ps.log.remove_swap_listener(ps.on_swap)

    @staticmethod
    def _forget_readers(ps: PartState) -> None:
        """Give back the read registrations and metadata slots of a log that was replaced: the
        sessions' later releases look at the new log's files, so these would never be freed.
        (Its readers are told by their next next_file: file_gone, and they seek again.)"""
        for rf in ps.readers.values():
            rf.withdraw()
        ps.readers.clear()

    def _retire_deleted_readers(self, ps: PartState, plog) -> None:
        """The log start offset moved (the log's start listener, before retention or DeleteRecords
        returns; no log lock is held, so the service lock can be taken first, in the order every
        path takes them): withdraw the read registrations of segments holding records below it
        (deleted ones, and the one DeleteRecords cut into), where Kafka answers
        OFFSET_OUT_OF_RANGE. A consumer's next READ fails (or its next_file finds the file gone)
        and it seeks again: from its position when the log still holds it (a new registration of
        the same file), else as auto_offset_reset says."""
        with self.lock:
            start = plog.log_start_offset
            for base in [b for b in ps.readers if b < start]:
                ps.readers.pop(base).withdraw()

    def _retire_replaced_readers(self, ps: PartState, plog, replaced) -> None:
        """Segments were replaced by their cleaned copy (the log's swap listener, called with no
        log lock held): withdraw their read registrations. A consumer's next READ of one fails
        (or its next_file looks past it) and it seeks again from its position, which the
        cleaned file holds: it reads on there. Bytes it had already READ stay valid (the old
        file is only unlinked)."""
        with self.lock:
            for base, rf in list(ps.readers.items()):
                if any(rf.segment is seg for seg in replaced):
                    del ps.readers[base]
                    rf.withdraw()
