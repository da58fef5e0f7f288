"""Native RDMA consumer: one-sided READs of segment files, metadata slots for the head files.

Per assigned partition the consumer holds read access to one file: its region, the next byte to
read, and the last readable byte (LRB: committed and below the high watermark). Records are read
with READs of `fetch_size` bytes (larger when a batch header says the batch is bigger); a partial
batch at the end of a read is kept and completed by the next READ. While the file is mutable the
LRB comes from the session's metadata slots, all refreshed by one READ of the smallest range that
covers the active slots; on shm that READ is a load from the live shared mapping. A sealed file is
read to its end, then the next file is requested and the old one released. The broker's CPU is not
involved in any of this except at file boundaries.
"""

from __future__ import annotations

import functools
import struct
import time
from collections import deque
from collections.abc import Callable

from rdmalog.errors import CorruptRecordError, KafkaError
from rdmalog.rdma import commit_words
from rdmalog.rdma.client.assignments import ConsumerBatch, ConsumerRecord, _Assignment
from rdmalog.rdma.client.commit_results import PendingCommits
from rdmalog.rdma.client.committed_reads import TXN_FLAGS, AbortedTransactions
from rdmalog.rdma.client.endpoint import Endpoint, SaslCredentials
from rdmalog.rdma.client.offsets import OffsetCommitError
from rdmalog.rdma.commit_words import MAX_OFFSET, SLOT_BYTES, add_for, next_word
from rdmalog.rdma.control import ControlError
from rdmalog.rdma.transport._atomic64 import sync_words
from rdmalog.rdma.transport.interface import Access, Opcode, RemoteRegion, Status, TransportError
from rdmalog.rdma.wire import LRB_MASK, SLOT_MUTABLE, SLOT_SIZE, SLOT_VALID
from rdmalog.store.records import (
    BATCH_OVERHEAD,
    CODEC_MASK,
    CONTROL_BIT,
    HEADER,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_BIT,
    RecordBatch,
    batch_is_valid,
    decode_records,
)

# Enum members read on hot paths, as module constants: attribute access on an Enum class
# costs ~10x a global lookup on Python 3.11.
_SUCCESS = Status.SUCCESS

try:  # the C decoder of uncompressed batches (setup.py builds it; optional)
    from rdmalog.rdma.client._batch import decode_plain as _c_decode_plain
    from rdmalog.rdma.client._batch import read_take as _c_read_take
    from rdmalog.rdma.client._batch import take as _c_take
except ImportError:  # pragma: no cover - a source tree without the extension built
    _c_decode_plain = _c_read_take = _c_take = None

EARLIEST, LATEST = -2, -1
_RESETS = {"earliest": EARLIEST, "latest": LATEST, "none": None}  # auto_offset_reset
IDLE_CHECK = 4096  # empty polls between two looks at the control connection (broker alive?)
# poll(timeout) with nothing to return naps between looks: 20 us, and where a look is a READ
# someone serves (tcp: the broker's engine thread), doubling up to 200 us while nothing comes -
# an idle tcp consumer cost the broker 0.47 s of CPU per 2 s, now 0.23, with no measurable
# change in how soon a new record is returned (larger caps cost latency: 500 us, +0.1 ms)
IDLE_NAP, IDLE_NAP_MAX = 20e-6, 200e-6
_LEN = struct.Struct(">i")


CommitCallback = Callable[[dict[tuple[str, int], int], Exception | None], None]


def _commit_error(group: str | None, codes: dict[int, int]) -> OffsetCommitError | None:
    """None when every slot's fold was committed, else the first Kafka error code's error."""
    code = next((c for c in codes.values() if c), 0)
    if not code:
        return None
    return OffsetCommitError(f"group {group!r}: commit refused (Kafka error {code})", code)


class Consumer(Endpoint):
    """`assign([(topic, partition)])`, `seek(...)`, `poll(timeout)` -> [ConsumerRecord] (on shm,
    uncompressed batches' records are `_batch.LazyRecord`s, which read as ConsumerRecords and make
    their fields when first read: docs/rdma.md); `pause`/`resume` partitions; a context manager
    that closes.

    With `group_id` (and the gateway's Kafka `bootstrap` address) positions can be committed to
    the group coordinator (`commit()`, `committed()`), and `assign` starts from them;
    `commit_async()` commits with one FETCH_AND_ADD per partition (commit slots).
    `check_crcs=True` is Kafka's check.crcs: each batch's CRC-32C is verified before its records
    are returned (a corrupt one raises CorruptRecordError and stays the position until a seek
    past it); off by default, as in librdkafka, since the broker verified each batch when it was
    written. `isolation_level="read_committed"` reads up to the last stable offset and skips
    aborted transactions (committed_reads.py), as a Kafka consumer does.
    """

    def __init__(
        self,
        control_address: str,
        transport: str | None = None,
        fetch_size: int = 2048,
        timeout: float = 10.0,
        group_id: str | None = None,
        bootstrap: str | None = None,
        auto_offset_reset: str = "earliest",
        check_crcs: bool = False,
        sasl: SaslCredentials | None = None,
        isolation_level: str = "read_uncommitted",
    ):
        if group_id is not None and not bootstrap:
            raise ValueError("group_id needs bootstrap: offsets live in the group coordinator")
        if fetch_size < 1:
            raise ValueError(f"fetch_size must be at least 1 byte, not {fetch_size}")
        if auto_offset_reset not in _RESETS:
            raise ValueError(
                f"auto_offset_reset must be earliest, latest or none, not {auto_offset_reset!r}"
            )
        if isolation_level not in ("read_uncommitted", "read_committed"):
            raise ValueError(f"isolation_level {isolation_level!r}: read_(un)committed")
        super().__init__(control_address, transport, timeout, sasl)
        # read_committed: the slots stop at the last stable offset, aborted batches are skipped
        self._committed = {"isolation_level": 1} if isolation_level == "read_committed" else {}
        self.fetch_size = fetch_size
        self.reset = _RESETS[auto_offset_reset]  # None: an offset outside the log is an error
        self.check_crcs = check_crcs
        # raised by the next poll: found after records the poll returned (a corrupt batch, a
        # refused seek)
        self._deferred: Exception | None = None
        self.parts: dict[tuple[str, int], _Assignment] = {}
        self._reading: list[_Assignment] | None = None  # assignments not paused (cached)
        # (callback, offsets, error) of answered commits not run yet: one that raised left them
        self._answered: deque[tuple] = deque()
        self._register()
        self._idle = 0
        self.group_id = group_id
        self.offsets = None
        if group_id is not None:
            from rdmalog.rdma.client.offsets import GroupOffsets

            try:
                self.offsets = GroupOffsets(bootstrap, group_id, timeout)
            except Exception:
                super().close()
                raise

    def _register(self) -> None:
        self._commit_slots: dict[tuple[str, int], list[int]] = {}  # tp -> [addr, rkey, word, index]
        self._atom = None  # FETCH_AND_ADD result word, registered by the first commit_async()
        self._results: tuple[int, int] | None = None  # (addr, rkey) of our slots' result words
        self._results_q = None  # shm: a live view of them
        self._results_mr = None  # tcp: where they are READ to
        self._results_look = 0.0
        self._pending = PendingCommits()
        self._commits_waiting = self._pending.waiting  # a list, not a call: see _attend
        # Something a poll must do before reading, which the path where nothing went wrong never
        # pays for: a broken session to raise, commit answers to look at or callbacks to run, an
        # error found after the records a poll returned. Set where each of those arises.
        self._due = True
        self.slots: RemoteRegion | None = None
        # The slot words are applied from a local copy (registered: a READ lands in it), made
        # when the first file with a slot is opened; on shm it is synced from a live view of the
        # slot region instead of READ.
        self._slot_mr = self._slot_words = None
        self._slot_view = None  # shm: live view of our slot region
        self._active: list[_Assignment] | None = None  # assignments with a slot (cached)
        # (live view or None, local copy, first byte, end byte) of the slots of _active
        self._look: tuple | None = None
        # shm, while every readable partition has been read up to what the slots showed and
        # nothing is due: that look, and an empty poll is one C compare of it (sync_words).
        # Anything that changes what a poll would do clears it (None: the next poll reads).
        self._quiet: tuple | None = None

    def disconnected(self, why: str):
        self._due, self._quiet = True, None  # every poll raises from now on (_attend)
        return super().disconnected(why)

    def _reconnected(self) -> None:
        """Re-register and re-request every assignment from the next offset to deliver."""
        lost = self._pending.drop()
        self._register()  # first: a callback may commit again, through the new session
        self._fail_commits(lost, "the broker restarted before confirming the commit")
        for a in self.parts.values():
            a.active, a.mr, a.head, a.have = False, None, 0, 0
        for (topic, partition), a in self.parts.items():
            self.seek(topic, partition, a.offset)

    # -- assignment ----------------------------------------------------------------------------------
    def assign(self, partitions: list[tuple[str, int]], offset: int | None = None) -> None:
        """Read these partitions from `offset` (EARLIEST = -2: log start, LATEST = -1: the end).

        None: the group's committed offset when there is one (and it is still in the log), else
        `auto_offset_reset`.
        """
        self._reading = self._quiet = None
        for tp in list(self.parts):
            if tp not in partitions:
                a = self.parts.pop(tp)
                self._release(a)
                if a.mr is not None:  # its buffer too: a region each, and the device has few
                    a.mr.deregister()
        for topic, partition in partitions:
            if (topic, partition) in self.parts:
                continue
            start = offset
            if start is None:
                start = self.committed(topic, partition) if self.offsets else None
                if start is None and self.reset is None:
                    raise ValueError(
                        f"{topic}-{partition}: no committed offset, and no reset policy"
                    )
                start = self.reset if start is None else start
            self.parts[(topic, partition)] = _Assignment(topic, partition)
            # A refused seek (e.g. the topic does not exist yet) raises here, and the partition
            # stays assigned: poll() seeks it again (see _poll).
            self.seek(topic, partition, start)

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """Read `offset` next (EARLIEST = -2: the log start, LATEST = -1: its end). An offset the
        log does not hold (past its end, or deleted by retention) is reset by `auto_offset_reset`,
        as a Kafka consumer resets on OFFSET_OUT_OF_RANGE; with "none" it raises ControlError
        offset_out_of_range. A refused seek (that, or an unknown topic) is tried again by every
        poll(), which raises the same until it succeeds."""
        a = self.parts.get((topic, partition))
        if a is None:
            raise ValueError(f"{topic}-{partition} is not assigned")
        if offset < 0 and offset not in (EARLIEST, LATEST):
            raise ValueError(f"offset {offset}: offsets are >= 0 (or -2 earliest, -1 latest)")
        self._release(a)
        a.offset = offset
        a.txns = AbortedTransactions() if self._committed else None
        self._deferred = None  # a batch found corrupt is found again when read again
        iso = self._committed
        try:
            r = self.control("read_access", topic=topic, partition=partition, offset=offset, **iso)
        except ControlError as e:
            if e.code != "offset_out_of_range" or offset < 0 or self.reset is None:
                raise
            r = self.control(
                "read_access", topic=topic, partition=partition, offset=self.reset, **iso
            )
        a.offset = r["offset"]
        self._open(a, r)

    def position(self, topic: str, partition: int) -> int:
        return self.parts[(topic, partition)].offset

    def assignment(self) -> list[tuple[str, int]]:
        return list(self.parts)

    def pause(self, partitions: list[tuple[str, int]]) -> None:
        """Return no records of these assigned partitions until `resume` (Kafka's pause, for
        back-pressure): their positions, and what was already read, stay."""
        for a in self._assigned(partitions):
            a.paused = True
        self._reading = self._quiet = None

    def resume(self, partitions: list[tuple[str, int]]) -> None:
        for a in self._assigned(partitions):
            a.paused = False
        self._reading = self._quiet = None

    def paused(self) -> list[tuple[str, int]]:
        return [tp for tp, a in self.parts.items() if a.paused]

    def _assigned(self, partitions: list[tuple[str, int]]) -> list[_Assignment]:
        missing = [tp for tp in partitions if tp not in self.parts]
        if missing:
            raise ValueError(f"not assigned: {missing}")
        return [self.parts[tp] for tp in partitions]

    # -- group offsets -------------------------------------------------------------------------------
    def commit(self, offsets: dict[tuple[str, int], int] | None = None) -> None:
        """Commit `offsets` (default: the position of every assigned partition) for the group."""
        if self.offsets is None:
            raise ValueError("commit() needs a group_id (and bootstrap)")
        self.offsets.commit(self._to_commit(offsets))

    def _to_commit(self, offsets: dict[tuple[str, int], int] | None) -> dict[tuple[str, int], int]:
        """`offsets`, checked; None: every assigned partition's position that is known (one
        whose seek is still refused holds the -2/-1 it was asked for, not a position)."""
        if offsets is None:
            return {tp: a.offset for tp, a in self.parts.items() if a.offset >= 0}
        bad = {tp: o for tp, o in offsets.items() if o < 0}
        if bad:
            raise ValueError(f"cannot commit negative offsets: {bad}")
        return offsets

    def commit_async(
        self,
        offsets: dict[tuple[str, int], int] | None = None,
        callback: CommitCallback | None = None,
    ) -> None:
        """Commit `offsets` (default: every assigned partition's position) through commit slots:
        one FETCH_AND_ADD per partition, no request and no broker CPU. The broker hands them to
        the group coordinator within `rdma.commit.interval.ms` and when this consumer closes;
        until then they are not durable (a broker crash in between makes the group re-read those
        records, as a lost asynchronous commit of a Kafka consumer would).
        `callback(offsets, error)` runs in a later poll() (or close()) once the coordinator has
        answered: error None, or an OffsetCommitError with the Kafka error code (a group with
        active members refuses these commits: UNKNOWN_MEMBER_ID)."""
        if self.group_id is None:
            raise ValueError("commit_async() needs a group_id")
        if self.broken is not None:
            raise self.disconnected(self.broken)
        offsets = self._to_commit(offsets)
        too_big = {tp: o for tp, o in offsets.items() if o > MAX_OFFSET}
        if too_big:  # checked before any slot moves
            raise ValueError(f"a commit slot holds offsets up to {MAX_OFFSET}: {too_big}")
        # every slot first: a partition refused one (e.g. an unknown topic) moves none of them
        slots = [(tp, self._commit_slot(*tp), offset) for tp, offset in offsets.items()]
        words = {}
        for (topic, partition), slot, offset in slots:
            word = next_word(slot[2], offset)
            if self._atom is None:
                self._atom = self.device.alloc_mr(8, Access.LOCAL_WRITE)
            self.qp.post_fetch_add(1, self._atom, 0, slot[0], slot[1], add_for(slot[2], word))
            self._wait_atomic(f"commit of {topic}-{partition}")
            slot[2] = words[slot[3]] = word
        if callback is not None and words:
            self._pending.add(callback, dict(offsets), words)
            self._due, self._quiet = True, None
        elif callback is not None:  # nothing to commit: answered by the next poll(), as Kafka's
            self._answered.append((callback, dict(offsets), None))
            self._due, self._quiet = True, None

    def _commit_slot(self, topic: str, partition: int) -> list[int]:
        """[addr, rkey, word, index] of the partition's commit slot, asked for the first time."""
        slot = self._commit_slots.get((topic, partition))
        if slot is None:
            r = self.control("commit_slot", group=self.group_id, topic=topic, partition=partition)
            region = RemoteRegion.from_dict(r["region"])
            slot = [region.addr + r["index"] * SLOT_BYTES, region.rkey, r["word"], r["index"]]
            self._commit_slots[(topic, partition)] = slot
            if self._results is None:
                self._results = (region.addr + r["results_at"], region.rkey)
        return slot

    def _look_at_commits(self, wait: bool = False) -> None:
        """Run the callbacks of commits the coordinator answered (their slots' result words)."""
        if not self._pending or self._results is None:
            self._call_back(())  # those answered before
            return
        addr, rkey = self._results
        if self._results_q is None and self._results_mr is None:
            view = self.qp.map_remote(addr, rkey, commit_words.MAX_SLOTS * SLOT_BYTES)
            if view is not None:
                self._results_q = view.cast("Q")
            else:
                self._results_mr = self.device.alloc_mr(
                    commit_words.MAX_SLOTS * SLOT_BYTES, Access.LOCAL_WRITE
                )
        if self._results_q is not None:
            result = self._results_q.__getitem__
        else:  # a READ per look, so at most every 10 ms unless asked to wait
            now = time.monotonic()
            if not wait and now - self._results_look < 0.01:
                return
            self._results_look = now
            lo, hi = self._pending.indexes()
            off = lo * SLOT_BYTES
            n = (hi - lo) * SLOT_BYTES
            self._read(self._results_mr, off, n, addr + off, rkey, "commit result READ")
            words = self._results_mr.buf.cast("Q")
            result = words.__getitem__
        answered = self._pending.settle(result)
        self._call_back(
            (cb, offsets, _commit_error(self.group_id, codes)) for cb, offsets, codes in answered
        )

    def _read(self, mr, offset: int, length: int, remote_addr: int, rkey: int, what: str) -> None:
        """A READ that must succeed: BrokerDisconnected when the broker is gone, else
        TransportError."""
        st = self.qp.read_now(mr, offset, length, remote_addr, rkey)
        if st != _SUCCESS:
            if st == Status.WR_FLUSH_ERR or not self.ctl.alive():
                raise self.disconnected(f"{what} failed: {st.name}")
            raise TransportError(f"{what} failed: {st.name}")

    def _call_back(self, calls) -> None:
        """Run commit callbacks in order; one that raises leaves the rest for the next poll()."""
        self._answered.extend(calls)
        self._due, self._quiet = True, None  # one that raises leaves the rest to the next poll
        while self._answered:
            cb, offsets, error = self._answered.popleft()
            cb(offsets, error)

    def _fail_commits(self, lost: list[tuple], why: str) -> None:
        """Run the callbacks of commits whose answer will not come (`PendingCommits.drop()`)."""
        self._call_back((cb, offsets, OffsetCommitError(why)) for cb, offsets in lost)

    def _wait_atomic(self, what: str) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            for wc in self.cq.wait(max(0.0, deadline - time.monotonic())):
                if wc.opcode != Opcode.FETCH_AND_ADD:
                    continue
                if wc.status == _SUCCESS:
                    return
                if wc.status == Status.WR_FLUSH_ERR or not self.ctl.alive():
                    raise self.disconnected(f"{what} failed: {wc.status.name}")
                raise TransportError(f"{what} failed: {wc.status.name}")
        raise TimeoutError(f"{what} was not completed in {self.timeout}s")

    def committed(self, topic: str, partition: int) -> int | None:
        """The group's committed offset of a partition (None: nothing committed yet)."""
        if self.offsets is None:
            raise ValueError("committed() needs a group_id (and bootstrap)")
        return self.offsets.committed(topic, partition)

    def _open(self, a: _Assignment, r: dict) -> None:
        a.region = RemoteRegion.from_dict(r["region"])
        a.base, a.pos, a.lrb = r["base_offset"], r["start"], r["lrb"]
        a.mutable, a.slot, a.more = r["mutable"], r["slot"], False
        a.head = a.have = 0
        a.active, a.plan = True, None
        self._active = self._quiet = None
        if a.mr is None:
            a.mr = self.device.alloc_mr(max(4 * self.fetch_size, 1 << 16), Access.LOCAL_WRITE)
        if r.get("slots") and self.slots is None:
            self.slots = RemoteRegion.from_dict(r["slots"])
            self._slot_mr = self.device.alloc_mr(self.slots.length, Access.LOCAL_WRITE)
            self._slot_words = self._slot_mr.buf.cast("Q")
            self._slot_view = self.qp.map_remote(
                self.slots.addr, self.slots.rkey, self.slots.length
            )

    def _release(self, a: _Assignment) -> None:
        if a.active:
            a.active = False
            self._active = self._quiet = None
            try:
                self.control("release", topic=a.topic, partition=a.partition, base_offset=a.base)
            except (ControlError, TransportError):
                pass

    # -- polling ---------------------------------------------------------------------------------------
    def poll(self, timeout: float = 0.0, max_records: int = 500) -> list[ConsumerRecord]:
        """Committed records from every assigned partition; waits up to `timeout` for some."""
        return self._poll(timeout, max_records, False)

    def poll_batches(self, timeout: float = 0.0, max_batches: int = 500) -> list[ConsumerBatch]:
        """Committed record batches, undecoded (one copy each; control batches included): for
        consumers that move data rather than look at records (`records.decode_all` decodes)."""
        return self._poll(timeout, max_batches, True)

    def _poll(self, timeout: float, max_records: int, raw: bool) -> list:
        deadline = None
        spins = 0
        nap = IDLE_NAP
        while True:
            quiet = self._quiet
            if quiet is None or sync_words(*quiet):  # shm, caught up: nothing new, nothing to do
                out = self._read_all(max_records, raw)
                if out:
                    self._idle = 0
                    return out
            self._idle += 1
            if self._idle >= IDLE_CHECK:  # quiet for a while: make sure the broker is still there
                self._idle = 0
                self.check()
            if timeout <= 0:
                return []
            if deadline is None:
                deadline = time.monotonic() + timeout
            elif time.monotonic() >= deadline:
                return []
            spins += 1
            if spins > 64:  # busy-poll briefly (latency), then let the core go
                time.sleep(nap)
                if self._slot_view is None:  # each look is a READ someone serves (tcp: the
                    nap = min(2 * nap, IDLE_NAP_MAX)  # broker's engine): back off while idle

    def _read_all(self, max_records: int, raw: bool) -> list:
        """One pass over the unpaused partitions: what they have, at most `max_records`. A pass
        that finds nothing on shm, with nothing due, leaves `_quiet` set to the look it made."""
        self._quiet = None
        if self._due:
            self._attend()
        reading = self._reading
        if reading is None:
            reading = self._reading = [a for a in self.parts.values() if not a.paused]
        out: list = []
        look = None  # the slot look of this pass, once made
        for a in reading:
            try:
                if not a.active:  # its last seek was refused: again (raises while it lasts)
                    self.seek(a.topic, a.partition, a.offset)
                if not a.more:
                    if a.pos >= a.lrb and a.slot >= 0 and look is None:
                        look = self._refresh_slots()
                    if a.pos >= a.lrb and not a.mutable:
                        self._next_file(a)  # sealed and read to its end
                if a.more or a.pos < a.lrb:
                    self._fetch(a, out, raw, max_records - len(out))
                    if len(out) >= max_records:
                        return out
            except Exception as e:
                if not out:
                    raise
                # Other partitions' records are taken (their positions moved): they come
                # now, the error with the next poll.
                self._deferred = e
                self._due = True
                return out
        if out:
            return out
        if self._due:  # e.g. a corrupt batch found with nothing before it to return
            self._attend()
        if (
            look is not None
            and look[0] is not None  # a live view: looking again costs no READ
            and self._active is not None  # no file opened or released since that look
            and not self._due
            and all(
                a.active and not a.more and a.slot >= 0 and a.mutable and a.pos >= a.lrb
                for a in reading
            )
        ):
            self._quiet = look
        return out

    def _attend(self) -> None:
        """What a poll does first once something is due: raise for a broken session, run the
        callbacks of answered commits, raise the error found after the records the last poll
        returned."""
        if self.broken is not None:
            raise self.disconnected(self.broken)
        if self._commits_waiting or self._answered:
            self._look_at_commits()  # a callback that raises leaves _due set
        self._due = bool(self._commits_waiting or self._answered)
        if self._deferred is not None:
            e, self._deferred = self._deferred, None
            raise e

    def _refresh_slots(self) -> tuple | None:
        """Bring the local copy of the active slots up to date (on shm a compare-and-copy of the
        live mapping, elsewhere a READ of their smallest covering range) and apply it; returns
        the look made (`_look`), None when no assignment has a slot."""
        active = self._active
        if active is None:
            active = self._watch()
        look = self._look
        if look is None:
            return None
        if look[0] is not None:
            sync_words(*look)
        else:
            lo, hi = look[2], look[3]
            addr = self.slots.addr + lo
            self._read(self._slot_mr, lo, hi - lo, addr, self.slots.rkey, "metadata slot READ")
        words = self._slot_words
        for a in active:
            i = a.slot * 2
            w0 = words[i]
            if w0 & SLOT_VALID and words[i + 1] == a.base:
                lrb = w0 & LRB_MASK
                if lrb > a.lrb:
                    a.lrb = lrb
                a.mutable = bool(w0 & SLOT_MUTABLE)
        return look

    def _watch(self) -> list[_Assignment]:
        """The active assignments with a slot (`_active`), and the look covering their slots."""
        active = self._active = [a for a in self.parts.values() if a.active and a.slot >= 0]
        self._look = None
        if active and self._slot_mr is not None:
            lo = min(a.slot for a in active) * SLOT_SIZE
            hi = (max(a.slot for a in active) + 1) * SLOT_SIZE
            self._look = (self._slot_view, self._slot_mr.buf, lo, hi)
        return active

    def _next_file(self, a: _Assignment) -> None:
        if a.have:  # the sealed file ends inside a batch: its length is corrupt (it was
            # swapped for the next file, silently skipping the rest of this one)
            first = last = a.offset
            if a.have >= BATCH_OVERHEAD:
                h = HEADER.unpack_from(a.mr.buf, a.head)
                first, last = h[0], h[0] + h[6]
            self._stop_at(a, first, last, "runs past the end of its file")
            return
        try:
            r = self.control("next_file", topic=a.topic, partition=a.partition, base_offset=a.base)
        except ControlError as e:
            if e.code == "no_next_file":
                return  # the roll is not visible yet; try again on a later poll
            if e.code == "file_gone":  # its log was replaced (deleted, created again): find
                self.seek(a.topic, a.partition, a.offset)  # the position again, or reset
                return
            raise
        a.active = False
        self._active = self._quiet = None
        self._open(a, r)

    def _fetch(self, a: _Assignment, out: list, raw: bool, room: int) -> None:
        """READ the next chunk of the file, return its whole batches, keep a partial one; at most
        `room` records (batches if raw): what is left stays for the next poll, and the position
        is the next offset returned, as with Kafka's max.poll.records."""
        if a.more:  # whole batches are kept: no READ until they are returned
            a.more = False
            self._take(a, out, raw, room)
            return
        plan = a.plan
        if plan is not None and not (raw or self.check_crcs or a.txns or self.qp.closed):
            # shm, plain records: the READ and its records in one C call (_batch.read_take)
            r = _c_read_take(
                plan, a.mr.buf, self.fetch_size, a.pos, a.lrb, a.head, a.have, a.offset, room,
                a.topic, a.partition, ConsumerRecord, out, a.chunk,
            )  # fmt: skip
            if type(r) is tuple:
                a.pos, a.head, a.have, a.offset, room, more, a.chunk = r
                if more:  # a batch read_take leaves to the general loop (or no room left)
                    self._take(a, out, raw, room)
                return
            if r is not None:  # the READ failed after the kept bytes moved to the front
                a.head = r
            a.plan = None  # the general path below tells why (and plans again)
        if a.chunk is not None:  # lazy records' bytes: out of the buffer before it is written
            a.chunk.detach()
            a.chunk = None
        buf = a.mr.buf
        want = self.fetch_size
        if a.have >= LOG_OVERHEAD:  # the kept partial batch says how much it still needs
            want = max(want, _LEN.unpack_from(buf, a.head + 8)[0] + LOG_OVERHEAD - a.have)
        n = min(want, a.lrb - a.pos)
        if a.head + a.have + n > len(buf):  # no room behind the kept bytes: move them first
            if a.have + n > len(buf):
                self._grow(a, a.have + n)
            else:
                buf[: a.have] = buf[a.head : a.head + a.have]
                a.head = 0
        st = self.qp.read_now(a.mr, a.head + a.have, n, a.region.addr + a.pos, a.region.rkey)
        if st != _SUCCESS:
            # The file went away under us (retention, a revoked registration): ask again from
            # the next offset; if that offset is gone too, auto_offset_reset decides (seek).
            if st == Status.WR_FLUSH_ERR or not self.ctl.alive():
                raise self.disconnected(f"READ of {a.topic}-{a.partition} failed: {st.name}")
            self.seek(a.topic, a.partition, a.offset)
            return
        a.pos += n
        a.have += n
        if a.plan is None and _c_read_take is not None:  # shm: READs from now on in one call
            a.plan = self.qp.read_plan(a.region.addr, a.region.rkey)
        self._take(a, out, raw, room)

    def _take(self, a: _Assignment, out: list, raw: bool, room: int) -> None:
        """Return the whole batches of the kept bytes (at most `room` records) and keep the rest
        where it is: the next READ lands behind it while the buffer has room (no move per READ)."""
        buf = a.mr.buf
        p, end = a.head, a.head + a.have
        txns = a.txns
        if _c_take is not None and not raw and not self.check_crcs and txns is None:  # plain data
            p, a.offset, room = _c_take(
                buf, p, end, a.offset, room, a.topic, a.partition, ConsumerRecord, out
            )  # the loop below takes what it stopped at, if anything
        while end - p >= BATCH_OVERHEAD:
            size = _LEN.unpack_from(buf, p + 8)[0] + LOG_OVERHEAD
            if size > end - p:
                break
            if room <= 0:
                a.more = True
                break
            h = HEADER.unpack_from(buf, p)
            last = h[0] + h[6]
            if size < BATCH_OVERHEAD:  # a corrupt length: where the next batch starts is lost
                self._stop_at(a, h[0], last, f"has an impossible length {size - LOG_OVERHEAD}")
                break
            if last >= a.offset:
                if self.check_crcs and not batch_is_valid(buf, p, p + size):
                    self._stop_at(a, h[0], last, "fails its CRC-32C check")
                    break
                n0 = len(out)
                try:
                    if (
                        txns is not None
                        and h[5] & TXN_FLAGS
                        and txns.skip(functools.partial(self._aborted, a), buf, p, h, last)
                    ):
                        pass  # a marker, or a batch of an aborted transaction
                    elif raw:
                        out.append(
                            ConsumerBatch(
                                a.topic, a.partition, h[0], last, bytes(buf[p : p + size])
                            )
                        )
                    elif h[5] & CONTROL_BIT:
                        pass  # transaction markers are not records for the application
                    elif h[5] & CODEC_MASK == 0 and _c_decode_plain is not None:
                        _c_decode_plain(
                            buf, p, size, h[0], h[7], h[8], h[5] & TIMESTAMP_TYPE_BIT, h[12],
                            a.offset, a.topic, a.partition, ConsumerRecord, out, room,
                        )  # fmt: skip
                    else:  # compressed, or no C helper built: the store's own decoder
                        ts_type = 1 if h[5] & TIMESTAMP_TYPE_BIT else 0
                        records = decode_records(RecordBatch(buf[p : p + size]))
                        out += [
                            ConsumerRecord(
                                a.topic,
                                a.partition,
                                r.offset,
                                r.timestamp,
                                r.key,
                                r.value,
                                tuple(r.headers),
                                ts_type,
                            )  # fmt: skip
                            for r in records
                            if r.offset >= a.offset
                        ][:room]
                except (ValueError, KafkaError) as e:  # malformed bytes (not CRC-checked)
                    del out[n0:]  # what the C decoder appended before the fault
                    self._stop_at(a, h[0], last, f"cannot be decoded ({e})")
                    break
                room -= len(out) - n0
                if room <= 0 and not raw and len(out) > n0 and out[-1].offset < last:
                    a.offset = out[-1].offset + 1  # the batch's other records: next poll
                    a.more = True
                    break
                a.offset = last + 1
            p += size
        a.head = p if p < end else 0  # nothing kept: the next READ starts at the front
        a.have = end - p

    def _aborted(self, a: _Assignment, start: int) -> tuple[list, int]:
        r = self.control("aborted_transactions", topic=a.topic, partition=a.partition, start=start)
        return r["aborted"], r["upto"]

    def _stop_at(self, a: _Assignment, first: int, last: int, why: str) -> None:
        """A batch found corrupt is kept, and the position stays at it: the error comes once the
        records before it are returned, and again until the application seeks past it."""
        self._deferred = CorruptRecordError(
            f"{a.topic}-{a.partition}: the record batch of offsets {first}-{last} {why}; "
            f"seek to {last + 1} to skip it"
        )
        self._due = True
        a.more = True

    def _grow(self, a: _Assignment, need: int) -> None:
        mr = self.device.alloc_mr(max(need, 2 * len(a.mr.buf)), Access.LOCAL_WRITE)
        mr.buf[: a.have] = a.mr.buf[a.head : a.head + a.have]
        a.mr.deregister()
        a.mr, a.head = mr, 0

    def close(self) -> None:
        """Run the callbacks of commits still waiting (answered, or failed at the timeout), then
        close; the first exception a callback raised is raised once closed."""
        if self.closed:
            return
        deadline = time.monotonic() + self.timeout  # the next fold answers them
        first = None
        while True:  # bounded: each raise pops a callback, and the waiting ends at the deadline
            try:
                self._finish_commits(deadline)
                break
            except Exception as e:  # the other callbacks still run, and the consumer closes
                first = first or e
        if self.broken is None:
            for a in self.parts.values():
                self._release(a)
        if self.offsets is not None:
            self.offsets.close()
        super().close()
        self._due, self._quiet = True, None  # every poll raises ClientClosedError (_attend)
        if first is not None:
            raise first

    def _finish_commits(self, deadline: float) -> None:
        self._call_back(())
        while self.broken is None and self._pending and time.monotonic() < deadline:
            if not self.ctl.alive():  # no fold will answer (shm: a dead broker's words still read)
                self.disconnected("control connection closed by the broker")
                break
            self._look_at_commits(wait=True)
            time.sleep(0.005)
        why = "no answer before close(); folded as the session ends"
        if self.broken is not None:
            why = f"the broker went away before confirming the commit ({self.broken})"
        self._fail_commits(self._pending.drop(), why)
