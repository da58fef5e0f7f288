"""The leader's side of ISR replication (Kafka's Partition): each follower's progress (from its
fetches or its push acknowledgements), Kafka's caught-up rule, ISR changes written to ZooKeeper,
the high watermark, and the acks=all waits it answers. A mixin of ReplicaManager, on its loop
(except where a method says otherwise).

High watermark = the minimum log end offset over the ISR (a member whose offset is not known yet
holds it back); an ISR change is a conditional write of the state znode (its version), applied
only once ZooKeeper took it: a follower not caught up for `replica.lag.time.max.ms` is removed,
one that reached the high watermark (and the start of the current leader epoch) is added back;
while an addition is being written the high watermark counts it already (Kafka's maximal ISR).

acks=all: a produce is answered once the high watermark passes its last offset; with fewer than
`min.insync.replicas` in the ISR it is refused before the append (NOT_ENOUGH_REPLICAS) or answered
NOT_ENOUGH_REPLICAS_AFTER_APPEND.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from rdmalog.cluster import znodes as Z
from rdmalog.cluster.registry import StaleStateError
from rdmalog.cluster.replica import (
    FOLLOWER,
    LEADER,
    NONE,
    NOT_ENOUGH_REPLICAS,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    NOT_LEADER_OR_FOLLOWER,
    OFFSET_OUT_OF_RANGE,
    REQUEST_TIMED_OUT,
    FollowerProgress,
    Replica,
    monotonic_ms,
)
from rdmalog.cluster.view import Event

log = logging.getLogger(__name__)

WAIT_CHECK_S = 0.1  # how often acks=all waits are checked for their deadline


class IsrMixin:
    """Followers' progress, ISR, high watermark and acks=all waits (ReplicaManager's part)."""

    broker_id: int
    replicas: dict[tuple[str, int], Replica]
    fenced: bool
    push: Any
    fetchers: Any
    loop: asyncio.AbstractEventLoop
    _loop_thread: int  # the loop's thread id

    # --- acks=all ---------------------------------------------------------------------------------

    def check_produce(self, topic: str, p: int, acks: int) -> int:
        """Whether a produce to topic-p may be appended here (acks=-1: enough replicas in sync)."""
        code = self.leader_error(topic, p)
        if code or acks != -1:
            return code
        rep = self.replicas[(topic, p)]
        # the smaller of what this leader applied and what its watch saw last (a shrink the
        # controller wrote may not be reconciled yet): a refusal errs on the safe side
        state = self.view.state(topic, p)
        in_sync = len(rep.isr) if state is None else min(len(rep.isr), len(state.isr))
        return NOT_ENOUGH_REPLICAS if in_sync < rep.min_isr() else NONE

    async def wait_replicated(self, topic: str, p: int, last_offset: int, timeout_s: float) -> int:
        """acks=all: wait until the high watermark passes `last_offset`; the produce's error code."""
        return (await self.wait_all_replicated([(topic, p, last_offset)], timeout_s))[0]

    def wait_all_replicated(
        self, batches: list[tuple[str, int, int]], timeout_s: float
    ) -> asyncio.Future[list[int]]:
        """acks=all for (topic, partition, last offset) batches: a future of their error codes (as
        `when_replicated`'s; REQUEST_TIMED_OUT for those undecided after `timeout_s`). One future
        and one timer for them all, set on the loop: the waiting task wakes once, not through a
        task, a wait_for and a gather per partition (an event-loop iteration each)."""
        fut: asyncio.Future[list[int]] = self.loop.create_future()
        codes: list[int | None] = [None] * len(batches)
        left = [len(batches)]

        def settle(i: int, code: int) -> None:
            if codes[i] is not None or fut.done():
                return
            codes[i] = code
            left[0] -= 1
            if not left[0]:
                fut.set_result(codes)

        def expire() -> None:
            if not fut.done():
                fut.set_result([REQUEST_TIMED_OUT if c is None else c for c in codes])

        timer = self.loop.call_later(timeout_s, expire)
        fut.add_done_callback(lambda _: timer.cancel())  # answered, or its request cancelled
        for i, (topic, p, last_offset) in enumerate(batches):
            # on any thread (a push link's acknowledgement): settled on the loop
            self.when_replicated(
                topic, p, last_offset, math.inf, lambda code, i=i: self.call_soon(settle, i, code)
            )
        if not batches:
            fut.set_result([])
        return fut

    def when_replicated(
        self, topic: str, p: int, last_offset: int, timeout_s: float, done: Callable[[int], None]
    ) -> None:
        """acks=all, from any thread (a native producer's commit on the RDMA service's): `done(code)`
        once the high watermark passes `last_offset` (NONE, or NOT_ENOUGH_REPLICAS_AFTER_APPEND
        with fewer than min.insync.replicas in the ISR), REQUEST_TIMED_OUT after `timeout_s`,
        NOT_LEADER_OR_FOLLOWER when leadership goes. Called at once on the calling thread when
        already decided, else on the loop."""
        rep = self.replicas.get((topic, p))
        if rep is None:
            done(NOT_LEADER_OR_FOLLOWER)
            return
        need = last_offset + 1
        if rep.role == LEADER and rep.log.high_watermark < need and self._alone(rep):
            self._maybe_advance_hw(rep)  # no follower to wait for: not via the loop either
        with rep.wait_lock:  # the high watermark read under it: an advance cannot slip between
            if rep.role != LEADER or self.fenced:
                code = NOT_LEADER_OR_FOLLOWER
            elif rep.log.high_watermark >= need:
                code = NONE if len(rep.isr) >= rep.min_isr() else NOT_ENOUGH_REPLICAS_AFTER_APPEND
            else:
                rep.waiters.append((need, time.monotonic() + timeout_s, done))
                return
        done(code)

    def _complete_waiters(self, rep: Replica) -> None:
        if not rep.waiters:
            return
        hw = rep.log.high_watermark
        code = NONE if len(rep.isr) >= rep.min_isr() else NOT_ENOUGH_REPLICAS_AFTER_APPEND
        with rep.wait_lock:
            ready = [w for w in rep.waiters if hw >= w[0]]
            if ready:
                rep.waiters = [w for w in rep.waiters if hw < w[0]]
        for _, _, done in ready:
            done(code)

    def _fail_waiters(self, rep: Replica, code: int) -> None:
        with rep.wait_lock:
            waiters, rep.waiters = rep.waiters, []
        for _, _, done in waiters:
            done(code)

    async def _expire_waiters(self) -> None:
        """Answer REQUEST_TIMED_OUT to acks=all waits past their deadline (native producers' and
        the coordinator's; the gateway's produces time out on their own), and waits that a
        leadership change raced with NOT_LEADER_OR_FOLLOWER."""
        while True:
            await asyncio.sleep(WAIT_CHECK_S)
            now = time.monotonic()
            for rep in list(self.replicas.values()):
                if not rep.waiters:
                    continue
                if rep.role != LEADER or self.fenced:
                    self._fail_waiters(rep, NOT_LEADER_OR_FOLLOWER)
                    continue
                with rep.wait_lock:
                    late = [w for w in rep.waiters if w[1] <= now]
                    if late:
                        rep.waiters = [w for w in rep.waiters if w[1] > now]
                for _, _, done in late:
                    done(REQUEST_TIMED_OUT)

    # --- followers' fetches (on the leader) -------------------------------------------------------

    def follower_fetch(
        self, topic: str, p: int, replica_id: int, fetch_offset: int, current_epoch: int
    ) -> int:
        """A follower fetched from `fetch_offset`: record its progress, maybe grow the ISR and move
        the high watermark. Returns the partition's error code (0: read on from fetch_offset)."""
        code = self.leader_error(topic, p, current_epoch)
        if code:
            return code
        rep = self.replicas[(topic, p)]
        prog = rep.followers.get(replica_id)
        if prog is None:
            if replica_id not in rep.replicas:
                return NOT_LEADER_OR_FOLLOWER
            prog = rep.followers[replica_id] = FollowerProgress()
        leo = rep.log.log_end_offset
        if fetch_offset > leo:
            return OFFSET_OUT_OF_RANGE  # it holds what this leader has not: it must truncate
        if replica_id in rep.pushed:  # its fetches only fetch the high watermark: its offset
            fetch_offset = max(fetch_offset, prog.leo)  # may be older than its last push ack
        elif fetch_offset >= leo and self.push is not None and not self.fenced:
            if self.push.caught_up(rep.log, rep.leader_epoch, replica_id):
                rep.pushed.add(replica_id)  # caught up: pushed from now on
        self._progress(rep, replica_id, prog, fetch_offset)
        return NONE

    def _progress(self, rep: Replica, replica_id: int, prog: FollowerProgress, fetch_offset: int):
        """A follower's log end offset, from its fetch or its acknowledgement of a push: Kafka's
        caught-up rule, the ISR and the high watermark."""
        with rep.hw_lock:
            leo = rep.log.log_end_offset
            now = monotonic_ms()
            if fetch_offset >= leo:
                prog.last_caught_up_ms = now
            elif fetch_offset >= prog.leader_leo_at_last_fetch:
                prog.last_caught_up_ms = max(prog.last_caught_up_ms, prog.last_fetch_ms)
            prog.leader_leo_at_last_fetch = leo
            prog.last_fetch_ms = now
            prog.leo = max(prog.leo, fetch_offset) if replica_id in rep.pushed else fetch_offset
        if replica_id not in rep.isr and rep.isr_pending is None:
            self.call_soon(self._maybe_expand_isr, rep, replica_id)  # writes ZooKeeper: the loop's
        self._maybe_advance_hw(rep)

    # --- push replication (push.py) ---------------------------------------------------------------

    def pushing(self, topic: str, p: int, replica_id: int) -> bool:
        """Leader: whether topic-p is pushed to `replica_id` (its fetches then carry no records)."""
        rep = self.replicas.get((topic, p))
        return rep is not None and replica_id in rep.pushed

    def push_acked(self, topic: str, p: int, replica_id: int, epoch: int, leo: int) -> None:
        """A follower committed pushed writes up to `leo` (on the loop, which reads the push links'
        acknowledgements, or a link's thread: the high watermark advances and acks=all producers
        are answered from there): as a fetch from there."""
        rep = self.replicas.get((topic, p))
        if rep is None or rep.role != LEADER or rep.leader_epoch != epoch or self.fenced:
            return
        if replica_id not in rep.pushed or leo > rep.log.log_end_offset:
            return
        prog = rep.followers.setdefault(replica_id, FollowerProgress())
        self._progress(rep, replica_id, prog, max(leo, prog.leo))

    def push_pulled(self, topic: str, p: int, replica_id: int) -> None:
        """Pushing topic-p (p -1: every partition) to `replica_id` stopped (on the loop): the
        follower's fetches carry records again."""
        for rep in self.replicas.values():
            if p < 0 or rep.key == (topic, p):
                rep.pushed.discard(replica_id)

    def accept_push(self, topic: str, p: int, leader: int, epoch: int) -> bool:
        """Follower (the RDMA service's thread): whether `leader` may write this replica's head
        in `epoch`: this broker follows it in that epoch and has truncated for it (KIP-101)."""
        rep = self.replicas.get((topic, p))
        if rep is None or self.fenced or rep.role != FOLLOWER or rep.leader_id != leader:
            return False
        truncated = self.fetchers is None or self.fetchers.truncated(rep, leader, epoch)
        return rep.leader_epoch == epoch and truncated

    def replica_pushed(self, topic: str, p: int, held: bool) -> None:
        """Follower (any thread, maybe under the log's lock): its leader's grant of the replica's
        head started or ended; the fetcher pulls only while none is held."""
        rep = self.replicas.get((topic, p))
        if rep is None:
            return
        rep.push_grant = held
        if not held and self.fetchers is not None:
            self.call_soon(self.fetchers.wake, rep)

    # --- high watermark and ISR ----------------------------------------------------------------------

    def _maybe_advance_hw(self, rep: Replica) -> None:
        if rep.role != LEADER:
            return
        plog = rep.log
        with rep.hw_lock:  # (any thread: see Replica.hw_lock)
            hw = plog.log_end_offset
            for r in set(rep.isr) | set(rep.isr_pending or ()):
                if r == self.broker_id:
                    continue
                prog = rep.followers.get(r)
                if prog is None or prog.leo < 0:
                    hw = -1
                    break
                hw = min(hw, prog.leo)
            advanced = hw > plog.high_watermark and plog.set_high_watermark(hw)
        self._complete_waiters(rep)  # first: producers wait for it, followers' HW can follow
        if advanced and rep.pushed and self.push is not None:  # pushed followers learn it now
            if threading.get_ident() == self._loop_thread:  # after the answers just settled
                self.loop.call_soon(self.push.high_watermark, plog, hw)  # (their tasks go first)
            else:
                self.push.high_watermark(plog, hw)

    def _alone(self, rep: Replica) -> bool:
        """No member but this broker in the ISR (nor in an addition being written): the high
        watermark is the log end offset."""
        me = self.broker_id
        return all(r == me for r in rep.isr) and all(r == me for r in rep.isr_pending or ())

    def _maybe_expand_isr(self, rep: Replica, r: int) -> None:
        if r in rep.isr or rep.isr_pending is not None:
            return
        if r not in self.view.brokers or r in self.view.shutting_down:
            return
        prog = rep.followers[r]
        plog = rep.log
        epoch_start = plog.leader_epochs.entries[-1][1] if plog.leader_epochs.entries else 0
        if prog.leo >= plog.high_watermark and prog.leo >= epoch_start:
            self._change_isr(rep, (*rep.isr, r))

    async def _isr_maintenance(self) -> None:
        period = max(self.lag_time_max_ms / 2, 50) / 1000
        while True:
            await asyncio.sleep(period)
            if self.fenced:
                continue
            now = monotonic_ms()
            for rep in list(self.replicas.values()):
                if rep.role != LEADER or rep.isr_pending is not None:
                    continue
                lagging = [
                    r
                    for r in rep.isr
                    if r != self.broker_id
                    and now
                    - rep.followers.setdefault(
                        r, FollowerProgress(last_caught_up_ms=now)
                    ).last_caught_up_ms
                    > self.lag_time_max_ms
                ]
                if lagging:
                    log.info(
                        "%s-%d: followers %s have not caught up for %d ms: leaving the ISR",
                        rep.topic, rep.partition, lagging, self.lag_time_max_ms,
                    )  # fmt: skip
                    self._change_isr(rep, tuple(r for r in rep.isr if r not in lagging))

    def replication_state(self) -> tuple[int, int, int]:
        """(under-replicated partitions led here, partitions of the cluster without a live
        leader, partitions led here): what Kafka's ReplicaManager and controller gauges report;
        the offline count only on the controller (as Kafka's, so a sum over brokers is right)."""
        under = leaders = 0
        for rep in list(self.replicas.values()):
            if rep.role == LEADER:
                leaders += 1
                if len(rep.isr) < len(rep.replicas):
                    under += 1
        with self.view.lock:
            if self.view.controller_id != self.broker_id:
                return under, 0, leaders
            live = self.view.brokers
            offline = sum(
                1
                for topic in self.view.topics.values()
                for state in topic.states.values()
                if state.leader < 0 or state.leader not in live
            )
        return under, offline, leaders

    def _change_isr(self, rep: Replica, isr: tuple[int, ...]) -> None:
        """Write a new ISR with the state's version; apply it once ZooKeeper has it."""
        if rep.state is None:
            return
        with rep.hw_lock:
            rep.isr_pending = isr
        s = rep.state
        new = Z.PartitionState(self.broker_id, rep.leader_epoch, isr, s.controller_epoch, s.version)
        fut = self.loop.run_in_executor(
            self._zk, self.registry.set_isr, rep.topic, rep.partition, new
        )
        fut.add_done_callback(lambda f: self._isr_written(rep, new, f))

    def _isr_written(self, rep: Replica, new: Z.PartitionState, fut: asyncio.Future) -> None:
        exc = fut.exception()
        written = None if exc is not None else fut.result()
        applied = (
            written is not None and rep.role == LEADER and rep.leader_epoch == written.leader_epoch
        )
        with rep.hw_lock:  # the new ISR in place before the pending one goes (an addition
            before = rep.isr  # counts all along for the high watermark on any thread)
            if applied:
                rep.isr = written.isr
            if rep.isr_pending == new.isr:
                rep.isr_pending = None
        if isinstance(exc, StaleStateError):
            log.info("%s-%d: ISR change refused (the state moved on); rereading", *rep.key)
            self._refresh_state(rep)
            return
        if exc is not None:
            log.warning(
                "%s-%d: ISR change not written (%r); will retry", rep.topic, rep.partition, exc
            )
            self._maybe_advance_hw(rep)
            return
        if applied:
            if rep.state is None or rep.state.version < written.version:
                rep.state = written
            log.info("%s-%d: ISR now %s", rep.topic, rep.partition, list(written.isr))
            if self.on_isr_change is not None and set(before) != set(written.isr):
                shrunk = len(written.isr) < len(before)
                self.on_isr_change(int(shrunk), int(not shrunk))
            self._maybe_advance_hw(rep)

    def _refresh_state(self, rep: Replica) -> None:
        def read() -> None:
            state = self.registry.partition_state(rep.topic, rep.partition)
            if state is None:
                return
            with self.view.lock:
                tv = self.view.topics.get(rep.topic)
                if tv is not None:
                    current = tv.states.get(rep.partition)
                    if current is None or current.version < state.version:
                        tv.states[rep.partition] = state
            self._on_event(Event("state", rep.topic, rep.partition))

        self._zk.submit(read)
