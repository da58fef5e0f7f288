"""This broker's replicas: their roles, and for the partitions it leads the ISR, the high watermark and
the producers waiting for acks=all (Kafka's ReplicaManager and Partition, ZooKeeper mode).

Runs on the gateway's event loop. Roles come from the partition state znodes (ClusterView events,
reconciled level-triggered): the broker named leader leads in the state's leader epoch, the other
replicas follow it. A broker leads only under a state the controller wrote after this broker
registered (state mzxid > registration czxid): after a restart or a lost session it waits for the
controller to confirm it, as a Kafka broker ignores LeaderAndIsr of an older broker epoch.

As leader, per partition, the followers' progress, the ISR, the high watermark and the acks=all
waits are `isr.py`'s (a mixin of this class). A broker whose ZooKeeper session expired is fenced at once: its
waiting producers get NOT_LEADER_OR_FOLLOWER and it serves nothing until it has registered again
and read the states anew.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import Any

from rdmalog.cluster import znodes as Z
from rdmalog.cluster.isr import IsrMixin
from rdmalog.cluster.registry import Registry
from rdmalog.cluster.replica import (
    FENCED_LEADER_EPOCH,
    FOLLOWER,
    LEADER,
    NONE,
    NOT_LEADER_OR_FOLLOWER,
    OFFLINE,
    UNKNOWN_LEADER_EPOCH,
    UNKNOWN_TOPIC_OR_PARTITION,
    FollowerProgress,
    Replica,
    monotonic_ms,
)
from rdmalog.cluster.view import ClusterWatcher, Event
from rdmalog.config import TOPIC_DEFS

log = logging.getLogger(__name__)


class ReplicaManager(IsrMixin):
    """Roles, ISR, high watermarks and acks=all waits of one broker's replicas."""

    def __init__(
        self,
        broker_id: int,
        store: Any,
        registry: Registry,
        watcher: ClusterWatcher,
        loop: asyncio.AbstractEventLoop,
        *,
        lag_time_max_ms: int = 30000,
        fetchers: Any = None,
    ) -> None:
        self.broker_id = broker_id
        self.store = store
        self.registry = registry
        self.watcher = watcher
        self.view = watcher.view
        self.loop = loop
        self.lag_time_max_ms = lag_time_max_ms
        self.fetchers = fetchers  # FetcherManager (set before start)
        self.replicas: dict[tuple[str, int], Replica] = {}
        self.broker_epoch: int | None = None  # czxid of our registration; None: not registered
        self.fenced = False
        self._zk = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rdmalog-zk")
        self._events: asyncio.Queue = asyncio.Queue()
        self._pending: set[Event] = set()
        self._worker: asyncio.Task | None = None
        self._isr_task: asyncio.Task | None = None
        self._expiry_task: asyncio.Task | None = None
        self._append_waiters: dict[int, set[asyncio.Future]] = {}
        # called with (shrunk, expanded) partition counts when a written ISR change is applied
        self.on_isr_change: Callable[[int, int], None] | None = None
        self._append_listened: set[int] = set()
        self._by_log: dict[int, Replica] = {}  # id(log) -> replica
        self._loop_thread = threading.get_ident()
        self._leadership_listeners: list[Callable[[str, int, bool, int], None]] = []
        self._deleted_listeners: list[Callable[[Any], None]] = []
        self.register: Callable[[], int] | None = None  # registers this broker; returns czxid
        self.stopped = False
        self.push: Any = None  # PushReplication when this broker pushes to its followers
        self._role_listeners: list[Callable[[str, int], None]] = []

    # --- life cycle -----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Take the roles the states give (local replicas created as needed), then keep up."""
        self._loop_thread = threading.get_ident()
        self.watcher.subscribe(self._on_event)
        await self._sync_all()
        self._worker = self.loop.create_task(self._work())
        self._isr_task = self.loop.create_task(self._isr_maintenance())
        self._expiry_task = self.loop.create_task(self._expire_waiters())

    async def registered(self, broker_epoch: int) -> None:
        """This broker's registration exists (epoch = its czxid): roles may now include leading."""
        self.broker_epoch = broker_epoch
        self.fenced = False
        for key in list(self.replicas):
            self._reconcile(*key)

    async def stop(self) -> None:
        self.stopped = True
        self.watcher.unsubscribe(self._on_event)
        for task in (self._worker, self._isr_task, self._expiry_task):
            if task is not None:
                task.cancel()
        for rep in self.replicas.values():
            self._fail_waiters(rep, NOT_LEADER_OR_FOLLOWER)
        if self.fetchers is not None:
            await self.fetchers.stop()
        if self.push is not None:
            await asyncio.to_thread(self.push.close)
        self._zk.shutdown(wait=False)

    def add_leadership_listener(self, cb: Callable[[str, int, bool, int], None]) -> None:
        """`cb(topic, partition, leads, leader_epoch)` when this broker starts or stops leading."""
        self._leadership_listeners.append(cb)

    def add_role_listener(self, cb: Callable[[str, int], None]) -> None:
        """`cb(topic, partition)` first thing when this replica's role or leader epoch changes:
        the RDMA service revokes the grant a (deposed) leader holds of the replica's head."""
        self._role_listeners.append(cb)

    def _role_changes(self, rep: Replica) -> None:
        for cb in list(self._role_listeners):
            try:
                cb(rep.topic, rep.partition)
            except Exception:
                log.exception("role listener failed")
        if rep.pushed and self.push is not None:
            self.push.stop_leading(rep.topic, rep.partition)
        rep.pushed, rep.push_grant = set(), False

    def add_deleted_listener(self, cb: Callable[[Any], None]) -> None:
        """`cb(log)` after a local replica's log was deleted (topic deleted or moved away)."""
        self._deleted_listeners.append(cb)

    # --- events ---------------------------------------------------------------------------------------

    def _on_event(self, event: Event) -> None:
        """From kazoo's threads: queue for the worker on the loop."""
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._enqueue, event)

    def _enqueue(self, event: Event) -> None:
        if event.kind == "session" and event.topic == "LOST":
            self._fence()  # at once, not behind other events
        if event not in self._pending:
            self._pending.add(event)
            self._events.put_nowait(event)

    async def _work(self) -> None:
        while True:
            event = await self._events.get()
            self._pending.discard(event)
            try:
                await self._handle(event)
            except Exception:
                log.exception("replica manager: handling %s failed", event)

    async def _handle(self, event: Event) -> None:
        kind = event.kind
        if kind == "session":
            if event.topic == "CONNECTED" and self.fenced and self.register is not None:
                await self._reregister()
        elif kind == "topic":
            await self._sync_topic(event.topic)
        elif kind == "state":
            self._reconcile(event.topic, event.partition)
        elif kind == "config":
            await self._apply_configs(event.topic)
        elif kind == "brokers":
            for rep in list(self.replicas.values()):
                if rep.role == FOLLOWER:
                    self._reconcile(*rep.key)  # a leader may have come back

    async def _reregister(self) -> None:
        """After an expired session: register again, read every state anew, then serve."""
        try:
            epoch = await self.loop.run_in_executor(self._zk, self.register)
        except Exception as exc:
            log.warning("re-registering in ZooKeeper failed (%s); will retry", exc)
            await asyncio.sleep(0.5)
            self._enqueue(Event("session", "CONNECTED"))
            return
        log.info("registered again in ZooKeeper after the session expired (epoch %d)", epoch)
        await self._sync_all()
        await self.registered(epoch)

    def _fence(self) -> None:
        if self.fenced:
            return
        self.fenced = True
        self.broker_epoch = None
        led = [rep for rep in self.replicas.values() if rep.role == LEADER]
        log.warning(
            "ZooKeeper session expired: fenced (no acks, no reads) until registered again; "
            "%d partition(s) were led here",
            len(led),
        )
        for rep in led:
            self._fail_waiters(rep, NOT_LEADER_OR_FOLLOWER)
            self._wake_appends(rep.log)

    # --- topics and replicas --------------------------------------------------------------------------

    async def _sync_all(self) -> None:
        names = set(self.view.topics) | set(self.store.topics)
        for name in sorted(names):
            if name.startswith("__rdmalog"):
                continue
            await self._sync_topic(name)

    async def _sync_topic(self, name: str) -> None:
        """Make the local topic match ZooKeeper's: created, grown, deleted; then its roles."""
        tv = self.view.topic(name)
        local = self.store.topics.get(name)
        mine = (
            []
            if tv is None
            else [p for p in tv.assignment.partitions if self.broker_id in tv.replicas(p)]
        )
        if local is not None and (
            tv is None
            or not mine
            or (tv.assignment.topic_id is not None and local.topic_id != tv.assignment.topic_id)
        ):
            if getattr(local, "deletion_suspended", False):
                # partitions copied into the data dir and adopted: never deleted unasked
                log.warning(
                    "topic %s is here but not (so) in ZooKeeper: left alone, unserved", name
                )
                return
            await self._delete_local(name)
            local = None
        if tv is None or not mine:
            return
        count = len(tv.assignment.partitions)
        if local is None:
            configs = self._known_configs(tv.configs)
            await asyncio.to_thread(
                self.store.create_topic, name, count, configs, topic_id=tv.assignment.topic_id
            )
            log.info("replica of topic %s (%d partitions) created here", name, count)
        elif len(local.partitions) < count:
            await asyncio.to_thread(self.store.create_partitions, name, count)
        for p in sorted(tv.assignment.partitions):
            self._reconcile(name, p)

    def _known_configs(self, configs: dict[str, str]) -> dict[str, str]:
        unknown = [k for k in configs if k not in TOPIC_DEFS]
        if unknown:
            log.warning("topic configs %s are not known here and left out", unknown)
        return {k: v for k, v in configs.items() if k in TOPIC_DEFS}

    async def _apply_configs(self, name: str) -> None:
        tv = self.view.topic(name)
        if tv is None or name not in self.store.topics:
            return
        try:
            self.store.alter_topic_config(name, self._known_configs(tv.configs), replace=True)
        except Exception as exc:
            log.warning("configs of %s from ZooKeeper not applied: %s", name, exc)

    async def _delete_local(self, name: str) -> None:
        topic = self.store.topics.get(name)
        if topic is None:
            return
        for p in range(len(topic.partitions)):
            rep = self.replicas.pop((name, p), None)
            if rep is not None:
                self._drop_role(rep)
                self._by_log.pop(id(rep.log), None)
        logs = list(topic.partitions)
        await asyncio.to_thread(self.store.delete_topic, name)
        log.info("replica of topic %s deleted here", name)
        for plog in logs:
            self._wake_appends(plog)
            for cb in self._deleted_listeners:
                cb(plog)

    def _drop_role(self, rep: Replica) -> None:
        was_leader = rep.role == LEADER
        self._role_changes(rep)
        self._fail_waiters(rep, NOT_LEADER_OR_FOLLOWER)
        if self.fetchers is not None:
            self.fetchers.unfollow(rep)
        rep.role = OFFLINE
        if was_leader:
            self._leadership(rep, False)

    # --- roles ----------------------------------------------------------------------------------------

    def _reconcile(self, topic: str, p: int) -> None:
        """Bring this broker's replica of topic-p in line with its state znode."""
        tv = self.view.topic(topic)
        rep = self.replicas.get((topic, p))
        if tv is None or self.broker_id not in tv.replicas(p):
            if rep is not None:
                self._drop_role(rep)
                self.replicas.pop((topic, p), None)
                self._by_log.pop(id(rep.log), None)
                if tv is not None:  # moved away (a reassignment): its data goes, as in Kafka
                    log.info("%s-%d: no longer a replica here; its data is deleted", topic, p)
                    rep.log.reset_to(0)
            return
        local = self.store.topics.get(topic)
        if local is None or p >= len(local.partitions):
            return  # _sync_topic creates it (an event is queued)
        if rep is None or rep.log is not local.partitions[p]:
            rep = self.replicas[(topic, p)] = Replica(topic, p, local.partitions[p])
            self._by_log[id(rep.log)] = rep
            self._listen_appends(rep.log)
        rep.replicas = tv.replicas(p)
        state = tv.states.get(p)
        if state is None or self.fenced or self.broker_epoch is None:
            return  # no role before this broker is registered (a duplicate id never gets one)
        can_lead = self.broker_epoch is not None and state.mzxid > self.broker_epoch
        if state.leader == self.broker_id and can_lead:
            if rep.role == LEADER and rep.leader_epoch == state.leader_epoch:
                rep.state, rep.isr = state, state.isr
                self._maybe_advance_hw(rep)
                return
            self._become_leader(rep, state)
            return
        leader = state.leader if state.leader != self.broker_id else Z.NO_LEADER
        if (
            rep.role == FOLLOWER
            and rep.leader_id == leader
            and rep.leader_epoch == state.leader_epoch
        ):
            rep.state, rep.isr = state, state.isr
            if self.fetchers is not None and leader != Z.NO_LEADER:
                self.fetchers.follow(rep, leader, state.leader_epoch)  # (a no-op when following)
            return
        self._become_follower(rep, state, leader)

    def _become_leader(self, rep: Replica, state: Z.PartitionState) -> None:
        self._role_changes(rep)
        if self.fetchers is not None:
            self.fetchers.unfollow(rep)
        rep.log.begin_leader_epoch(state.leader_epoch)
        now = monotonic_ms()
        rep.followers = {
            r: FollowerProgress(last_caught_up_ms=now if r in state.isr else 0)
            for r in rep.replicas
            if r != self.broker_id
        }
        was_leader = rep.role == LEADER
        rep.role, rep.leader_id, rep.leader_epoch = LEADER, self.broker_id, state.leader_epoch
        rep.state, rep.isr, rep.isr_pending = state, state.isr, None
        log.info(
            "leading %s-%d in epoch %d (isr %s, log end %d, high watermark %d)",
            rep.topic, rep.partition, state.leader_epoch, list(state.isr),
            rep.log.log_end_offset, rep.log.high_watermark,
        )  # fmt: skip
        self._maybe_advance_hw(rep)
        if not was_leader:
            self._leadership(rep, True)

    def _become_follower(self, rep: Replica, state: Z.PartitionState, leader: int) -> None:
        was_leader = rep.role == LEADER
        self._role_changes(rep)  # first: the deposed leader's writes are refused from here on
        rep.role, rep.leader_id, rep.leader_epoch = FOLLOWER, leader, state.leader_epoch
        rep.state, rep.isr, rep.isr_pending = state, state.isr, None
        rep.followers = {}
        self._fail_waiters(rep, NOT_LEADER_OR_FOLLOWER)
        if self.fetchers is not None:
            if leader == Z.NO_LEADER:
                self.fetchers.unfollow(rep)
            else:
                self.fetchers.follow(rep, leader, state.leader_epoch)
        log.info(
            "following %s-%d: leader %d epoch %d",
            rep.topic,
            rep.partition,
            leader,
            state.leader_epoch,
        )
        if was_leader:
            self._leadership(rep, False)
        self._wake_appends(rep.log)

    def _leadership(self, rep: Replica, leads: bool) -> None:
        for cb in list(self._leadership_listeners):
            try:
                cb(rep.topic, rep.partition, leads, rep.leader_epoch)
            except Exception:
                log.exception("leadership listener failed")

    # --- what handlers ask ----------------------------------------------------------------------------

    def replica(self, topic: str, p: int) -> Replica | None:
        return self.replicas.get((topic, p))

    def partition_count(self, topic: str) -> int:
        """Partitions of `topic` in the cluster (0 when ZooKeeper has no such topic)."""
        tv = self.view.topic(topic)
        return 0 if tv is None else len(tv.assignment.partitions)

    def leading(self) -> list[tuple[str, int]]:
        """The partitions this broker leads now."""
        return [key for key, rep in self.replicas.items() if rep.role == LEADER]

    def leader_error(self, topic: str, p: int, current_epoch: int = -1) -> int:
        """0 when this broker leads topic-p (in `current_epoch`, when given), else the error."""
        rep = self.replicas.get((topic, p))
        if rep is None:
            tv = self.view.topic(topic)
            if tv is None or p not in tv.assignment.partitions:
                return UNKNOWN_TOPIC_OR_PARTITION
            return NOT_LEADER_OR_FOLLOWER
        if self.fenced or rep.role != LEADER:
            return NOT_LEADER_OR_FOLLOWER
        if current_epoch >= 0:
            if current_epoch < rep.leader_epoch:
                return FENCED_LEADER_EPOCH
            if current_epoch > rep.leader_epoch:
                return UNKNOWN_LEADER_EPOCH
        return NONE

    def call_soon(self, fn: Callable, *args: Any) -> None:
        """`fn(*args)` on the loop (now when called there)."""
        if threading.get_ident() == self._loop_thread:
            fn(*args)
        elif not self.loop.is_closed():
            self.loop.call_soon_threadsafe(fn, *args)

    # --- waking followers' long polls -----------------------------------------------------------------

    def _listen_appends(self, plog: Any) -> None:
        if id(plog) not in self._append_listened:
            plog.add_append_listener(self._on_append)
            self._append_listened.add(id(plog))

    def _on_append(self, plog: Any) -> None:
        """The log grew (produce, the coordinator, an RDMA commit on any thread, maybe under the
        log's lock): pushed followers get the new batches at once, from this thread; on the loop,
        the high watermark moves (at once with no follower in the ISR) and followers' long polls
        wake. (Not here: the high watermark's lock is taken before the log's, never under it.)"""
        rep = self._by_log.get(id(plog))
        alone = False  # a leader with no other ISR member: the high watermark moves now
        if rep is not None and rep.role == LEADER:
            if self.push is not None and rep.pushed:
                self.push.appended(plog)
            alone = self._alone(rep)
        if not alone and id(plog) not in self._append_waiters:
            return  # nothing for the loop to do: no wake-up (a pushed follower's commits, a
            # leader's whose followers answer through push_acked)
        if threading.get_ident() == self._loop_thread:
            self._appended(plog)
        elif not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._appended, plog)

    def _appended(self, plog: Any) -> None:
        rep = self._by_log.get(id(plog))
        if rep is not None and rep.role == LEADER and rep.log is plog:
            self._maybe_advance_hw(rep)
        self._wake_appends(plog)

    def _wake_appends(self, plog: Any) -> None:
        for fut in self._append_waiters.pop(id(plog), ()):
            if not fut.done():
                fut.set_result(True)

    async def wait_for_appends(self, logs: list, timeout_s: float) -> bool:
        """Wait until any of `logs` grows (or its leadership changes), at most `timeout_s`."""
        if timeout_s <= 0 or not logs:
            return False
        fut = self.loop.create_future()
        for plog in logs:
            self._listen_appends(plog)
            self._append_waiters.setdefault(id(plog), set()).add(fut)
        timer = self.loop.call_later(timeout_s, lambda: fut.done() or fut.set_result(False))
        try:
            return await fut
        finally:
            timer.cancel()
            for plog in logs:
                waiters = self._append_waiters.get(id(plog))
                if waiters is not None:
                    waiters.discard(fut)
                    if not waiters:
                        del self._append_waiters[id(plog)]
