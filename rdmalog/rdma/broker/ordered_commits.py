"""The ordered-commit engine: writes that landed in granted head files, committed strictly in order.

Produce notifications of one file are processed in their 16-bit order (the immediate of the
WRITE_WITH_IMM, or the order a gateway append reserved). Each is validated and committed in place
by `PartitionLog.commit_written`, then acknowledged with a SEND; a run of consecutive orders that
arrived together is committed with one call. A missing predecessor times out (at once when a
producer's session ended with it reserved), aborts what waits behind it and revokes the grant, so
no hole is ever committed.

The gateway's appends meet the RDMA writes here too (`try_append`, `append`): with no grant they
are plain appends; with a shared grant they reserve through the same word and commit in order.

Lock order: a file's lock, then the service's lock, then the log's lock.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable

from rdmalog.errors import KafkaError, PolicyViolationError, error_for_code
from rdmalog.rdma.broker.partitions import PartState, ProduceFile, Reply, datapath_counters
from rdmalog.rdma.broker.prefault import STEP, Prefaulter
from rdmalog.rdma.transport._atomic64 import copy, fetch_add, load
from rdmalog.rdma.wire import ORDER_MASK, AckStatus, reservation_add, word_decode
from rdmalog.store.in_place import HeadMovedError
from rdmalog.store.log import AppendResult

# Enum members read on hot paths, as module constants: attribute access on an Enum class
# costs ~10x a global lookup on Python 3.11.
_ACK_OK = AckStatus.OK
_REVOKED = AckStatus.REVOKED
_monotonic = time.monotonic

log = logging.getLogger(__name__)

Arrival = tuple[ProduceFile, int, int, Reply]  # (file, order, byte length, reply)
# Writes committed together at most: a quarter of a producer's window (producer.MAX_IN_FLIGHT,
# 64), so it keeps writing while a run is validated. A run as large as the window (64 before)
# took all a bandwidth producer had in flight: 4 MiB of 64 KiB batches checked before the first
# acknowledgement, the producer spinning meanwhile (its waits fell 3-4x at 16, see
# docs/performance.md).
MAX_RUN = 16
# A write missing behind which others wait, whose order was reserved before a session holding the
# file ended, is given up this long after they started waiting instead of rdma.order.timeout.ms:
# its producer is likely the one that went (a live one writes microseconds after reserving).
ORPHAN_GRACE = 0.05


class OrderedCommits:
    """Commits the writes of the service's granted files in order and answers them.

    `files` (id -> ProduceFile) and `lock` are the service's; `acks_due` is the set of queue
    pairs with acknowledgements queued (each has `send_acks()`); `part(topic, partition)` finds
    the PartState of a partition (the gateway's appends need it)."""

    def __init__(
        self,
        lock: threading.RLock,
        files: dict[int, ProduceFile],
        acks_due: set,
        prefault: Prefaulter,
        part: Callable[[str, int], PartState],
        order_timeout: float,
        counters: dict[str, int] | None = None,
    ):
        self.lock = lock
        self.files = files
        self.acks_due = acks_due
        self.prefault = prefault
        self.part = part
        self.order_timeout = order_timeout
        self.counters = (
            datapath_counters() if counters is None else counters
        )  # the service's, for metrics

    # -- writes that landed ------------------------------------------------------------------------
    def arrive(self, f: ProduceFile, order: int, byte_len: int, reply: Reply) -> None:
        """A write of `byte_len` bytes with `order` landed in f: process it and all it unblocks."""
        self.arrive_many([(f, order, byte_len, reply)])

    def arrive_many(self, arrivals: list[Arrival]) -> None:
        """Writes that landed (from one poll of the completion queue): each file's run of
        consecutive orders is validated and committed with one `commit_written`, so a producer
        that is ahead of the broker costs one commit per poll rather than one per batch."""
        try:
            if len(arrivals) == 1:  # the usual poll: one write
                self._arrive(arrivals[0][0], arrivals)
                return
            by_file: dict[ProduceFile, list[Arrival]] = {}
            for a in arrivals:
                by_file.setdefault(a[0], []).append(a)
            for f, mine in by_file.items():
                self._arrive(f, mine)
        finally:
            if self.acks_due:
                self.send_acks()

    def _arrive(self, f: ProduceFile, mine: list[Arrival]) -> None:
        """f's writes that landed: wait for their predecessors, or commit them and every write
        they unblock, in order."""
        with f.lock:
            pending = f.pending
            if not pending and len(mine) == 1 and mine[0][1] == f.next_order and not f.revoked:
                self._process(f, *mine[0][1:])  # the usual write: in order, nothing waits
                return
            now = _monotonic()
            for _, order, byte_len, reply in mine:
                pending[order] = (byte_len, reply, now)
            if f.revoked:
                # Nothing commits into it any more, and it may be forgotten already, so no
                # timeout would answer a write waiting for a predecessor (the gateway's
                # appends hold the file itself, not its id): answer all now.
                for o, (_, reply, _) in sorted(pending.items()):
                    reply(o, _REVOKED, -1, -1, 0)
                pending.clear()
                return
            order = f.next_order
            while order in pending:
                byte_len, reply, _ = pending.pop(order)
                if not (pending and byte_len):
                    self._process(f, order, byte_len, reply)
                else:  # more wait behind it: the consecutive run commits in one pass
                    run = [(order, byte_len, reply)]
                    o = (order + 1) & ORDER_MASK
                    while len(run) < MAX_RUN and o in pending and pending[o][0]:
                        run.append((o, *pending.pop(o)[:2]))
                        o = (o + 1) & ORDER_MASK
                    if len(run) == 1 or not self._process_run(f, run):
                        for o, n, r in run:
                            self._process(f, o, n, r)
                order = f.next_order

    def send_acks(self) -> None:
        """Send every queued acknowledgement (a SEND per queue pair and up to ACKS_PER_SEND)."""
        while self.acks_due:
            try:
                cqp = self.acks_due.pop()
            except KeyError:  # another thread took the last one
                return
            cqp.send_acks()

    def _process_run(self, f: ProduceFile, run: list[tuple[int, int, Reply]]) -> bool:
        """Commit consecutive writes together (`PartitionLog.commit_run`); False (nothing done)
        when any needs the one-by-one path: a revoked or full file, a head that moved, a write
        not holding whole batches, a retry of an idempotent producer's batch the log already
        holds (answered with its original offsets, per write), a sequence or epoch error, or
        bytes that do not validate (the good ones before them still commit)."""
        plog = f.part.log
        if f.revoked or f.full or f.replica_of is not None:
            return False  # a leader's pushed writes: one by one (`_process`), already coalesced
        start = f.expect_pos
        ends, pos = [], 0  # the writes' ends, relative to start
        for _, n, _ in run:
            pos += n
            ends.append(pos)
        end = start + pos
        f.narrow(end)  # before validating: from here on no holder can change these bytes
        try:  # plain batches: one C call checks, patches and commits the whole run
            done = plog.commit_run(f.segment, start, ends)
        except (HeadMovedError, KafkaError):
            return False
        if done is None:
            return False
        res, counts = done
        f.expect_pos = end
        self.counters["writes_committed"] += len(run)
        self.counters["bytes_committed"] += end - start
        if res.flush_needed:  # the flush policy: durable before acknowledged, as Kafka
            plog.flush()
        base = res.base_offset
        for (o, _, reply), count, write_end in zip(run, counts, ends, strict=True):
            f.next_order = (o + 1) & ORDER_MASK
            reply(o, _ACK_OK, base, base + count - 1, start + write_end, res.log_append_time)
            base += count
        self.send_acks()  # before anything else: the producer waits for them
        if end >= f.check_at:
            self._committed(f)
        return True

    def _process(self, f: ProduceFile, order: int, byte_len: int, reply: Reply) -> None:
        f.next_order = (order + 1) & ORDER_MASK
        plog = f.part.log
        if f.current is not None and not f.revoked and not f.current():
            self.revoke(f)  # its leader was deposed: nothing of it is committed from now on
        if f.revoked:
            reply(order, _REVOKED, -1, -1, 0)
            return
        if byte_len == 0 or f.full:  # a reservation overflowed the file: roll it
            f.full = True
            self.revoke(f)
            plog.roll_head(f.segment)
            reply(order, AckStatus.FULL, -1, -1, 0)
            return
        start = f.expect_pos
        end = start + byte_len
        f.narrow(end)  # before validating: no holder can change these bytes now
        try:
            res = plog.commit_written(f.segment, start, end, replicated=f.replica_of is not None)
        except HeadMovedError:
            answer = (AckStatus.REVOKED, -1, -1, 0)
        except KafkaError as e:
            log.info("%s: refused RDMA write of %d bytes: %s", plog.name, byte_len, e)
            answer = (AckStatus.CORRUPT, e.error_code, -1, 0)  # the reason's Kafka code
        else:
            if not res.duplicate:
                f.expect_pos = end
                self.counters["writes_committed"] += 1
                self.counters["bytes_committed"] += byte_len
                if res.flush_needed:  # durable before acknowledged
                    plog.flush()
                reply(order, _ACK_OK, res.base_offset, res.last_offset, end, res.log_append_time)
                self.send_acks()  # before anything else: the producer waits for them
                if end >= f.check_at:
                    self._committed(f)
                return
            # Nothing appended: a duplicate of an idempotent producer's committed batch, answered
            # with the original's offsets, as Kafka does. Its bytes stay where they were written,
            # uncommitted, and later writes sit behind them: revoke (below), so those come back
            # REVOKED and are resent under a new grant.
            t = res.log_append_time
            answer = (_ACK_OK, res.base_offset, res.last_offset, start, t)
        reply(order, *answer)
        self.revoke(f)  # later writes sit behind bytes that were not committed

    def _committed(self, f: ProduceFile) -> None:
        """After a commit into f that reached `f.check_at`: keep the prefault lead (asked again
        a STEP further on: not per commit); a quarter into a preallocated file, have the next
        head file made resident in the background (early: that can take longer than filling
        this one), so the roll and its grant do not allocate. Files that never fill that far (a
        trickle of records) cost no second segment of memory."""
        pos = f.expect_pos
        self.prefault.want(f.file_id, f.mapping, pos, f.capacity)
        check_at = pos + STEP
        if not f.standby_asked and f.part.log.config.preallocate:
            if 4 * pos >= f.capacity:
                f.standby_asked = True
                self.prefault.standby(f.part.log)
            else:
                check_at = min(check_at, -(-f.capacity // 4))
        f.check_at = check_at

    def revoke(self, f: ProduceFile) -> None:
        """Withdraw f's access now. f stays in `files` until nothing waits in it: writes already
        pending (a successor that arrived before its predecessor) or still arriving are answered
        REVOKED by `_process` and `check_timeouts`, which then forgets f (freeing its id)."""
        f.revoke()
        self.prefault.forget(f.file_id)
        with self.lock:
            if f.part.produce is f:
                f.part.produce = None

    # -- waits that end ----------------------------------------------------------------------------
    def check_timeouts(self, now: float) -> None:
        """Give up writes that waited too long for a predecessor; forget revoked files that
        nothing waits in any more."""
        for f in list(self.files.values()):
            if not f.pending:
                if f.revoked:  # nothing waits in it any more: forget it (frees its file id)
                    self.revoke(f)  # (a roll listener only sets the flag)
                    with self.lock:
                        if self.files.get(f.file_id) is f:
                            del self.files[f.file_id]
                elif f.orphaned_below is not None:
                    self._still_orphaned(f)  # drops the mark once its orders have passed
                continue
            with f.lock:
                if not f.pending:
                    continue
                waited = now - min(t for _, _, t in f.pending.values())
                orphaned = self._still_orphaned(f) and waited >= ORPHAN_GRACE
                if not f.revoked and waited < self.order_timeout and not orphaned:
                    continue
                status = AckStatus.REVOKED if f.revoked else AckStatus.ABORTED
                if not f.revoked:
                    log.warning(
                        "%s: order %d never arrived%s; aborting %d write(s)",
                        f.part.log.name, f.next_order,
                        " (reserved before a producer's session ended)" if orphaned else "",
                        len(f.pending),
                    )  # fmt: skip
                for o, (_, reply, _) in sorted(f.pending.items()):
                    reply(o, status, -1, -1, 0)
                f.pending.clear()
                self.revoke(f)
        self.send_acks()

    @staticmethod
    def _still_orphaned(f: ProduceFile) -> bool:
        """Whether f's missing order was reserved before a session holding f ended. The mark is
        dropped once every such order arrived (checked every pass, also with nothing waiting:
        16-bit orders wrap)."""
        below = f.orphaned_below
        if below is not None and not 0 < (below - f.next_order) & ORDER_MASK <= ORDER_MASK // 2:
            f.orphaned_below = below = None
        return below is not None

    @staticmethod
    def holder_left(f: ProduceFile) -> None:
        """A session holding the shared file f ended while others still hold it. It may have died
        between a reservation and its write: the orders reserved so far are marked, so the others
        wait ORPHAN_GRACE for a missing one, not the order timeout."""
        # A roll revokes grants under the log's lock, not the service's: the word may have been
        # released meanwhile.
        with contextlib.suppress(ValueError):
            f.orphaned_below = word_decode(load(f.word_mr.buf, 0))[0]

    # -- the gateway's appends ---------------------------------------------------------------------
    def try_append(self, topic: str, partition: int, buf, leader_epoch: int | None = None):
        """The gateway's append when no RDMA producer holds the partition's head file: a plain
        append under the service lock (so no grant appears half-way), returning its AppendResult.
        Returns None when a shared grant is active: then `append` must order it with the RDMA
        writes, which can wait, so the caller runs that off its event loop. Exclusive: refused."""
        ps = self.part(topic, partition)
        with self.lock:
            f = ps.produce
            if f is None or f.revoked:
                return ps.log.append(buf, leader_epoch)
            if f.mode == "exclusive":
                raise PolicyViolationError("partition is held by an exclusive RDMA producer")
            return None

    def append(self, topic: str, partition: int, buf, leader_epoch: int | None = None):
        """The gateway's append to a partition that may have RDMA producers (TCP produce path).

        No grant: a plain append. Shared grant: reserve through the same word (an atomic on our own
        mapping, as KafkaDirect's broker issues an RDMA atomic to itself), copy into the reserved
        place, and commit in order with the RDMA writes. Exclusive grant: refused.
        """
        ps = self.part(topic, partition)
        with self.lock:  # no grant may appear between this look and a plain append
            f = ps.produce
            if f is None or f.revoked:
                return ps.log.append(buf, leader_epoch)
        if f.mode == "exclusive":
            raise PolicyViolationError("partition is held by an exclusive RDMA producer")
        data = memoryview(buf)
        n = len(data)
        floor = f.expect_pos  # every reservation from now on starts at or above it
        try:
            order, pos = word_decode(fetch_add(f.word_mr.buf, 0, reservation_add(n)))
        except ValueError:  # the word was just revoked (its buffer released): the head changed
            return self.append(topic, partition, buf, leader_epoch)
        if pos < floor:  # the word was moved back (a holder's FETCH_AND_ADD can add anything):
            # never copy over committed bytes; the grant is unusable, its holders get new ones
            log.warning("%s: reservation word moved below the committed position", ps.log.name)
            with f.lock:
                self.revoke(f)
            return self.append(topic, partition, buf, leader_epoch)
        done = threading.Event()
        result: list = []

        def reply(o, status, base, last, nxt, append_time=-1):
            result.append((status, base, last, append_time))
            done.set()

        fits = pos + n <= f.capacity and copy(f.mapping, pos, data, 0, n)
        self.arrive(f, order, n if fits else 0, reply)
        if not done.wait(self.order_timeout * 2 + 5):
            raise PolicyViolationError("RDMA ordering did not complete")
        status, base, last, append_time = result[0]
        if status == _ACK_OK:
            return AppendResult(base, last, append_time, ps.log.log_start_offset, False)
        if status in (AckStatus.FULL, AckStatus.REVOKED, AckStatus.ABORTED):
            return self.append(topic, partition, buf, leader_epoch)  # the head changed: retry
        raise error_for_code(base)(f"append refused: Kafka error {base}")  # CORRUPT: the reason
