"""The controller: one broker, elected through the ephemeral /controller znode, that decides leaders.

It runs on every broker as a thread with an event queue (Kafka's ControllerEventManager), fed by the
ClusterWatcher; it acts only while this broker holds /controller. Its decisions are ZooKeeper
writes fenced by its controller epoch (Registry.fenced_write), and brokers learn them through their
watches on the partition state znodes:

- a new topic or new partitions get their first state: the first live replica leads, the live
  replicas are the ISR (leader epoch 0);
- a broker that goes (its registration vanished or was re-made by a new session): partitions it led
  get a new leader, the first live replica of the assignment that is in the ISR, with the leader
  epoch bumped; it leaves the ISR of partitions it followed. With no live ISR member left the
  partition has no leader (-1) and keeps its last ISR, so one of those comes back to lead it
  (`unclean.leader.election.enable` lets any live replica lead instead, with data loss);
- a broker that comes (back) leads the partitions that have no leader and list it in their ISR;
- controlled shutdown (/admin/controlled_shutdown/<id>): its leaderships move to other ISR members
  and it leaves every ISR; the answer is the number of partitions it still leads;
- /admin/delete_topics/<topic>: the topic's znodes are deleted (brokers delete their replicas when
  they see the assignment go);
- reassignments (adding/removing replicas in the assignment, KIP-455): once the target replicas
  are all in the ISR, leadership moves into the target set and the assignment becomes the target.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kazoo.exceptions import KazooException, NoNodeError

from rdmalog.cluster import znodes as Z
from rdmalog.cluster.registry import (
    ControllerLease,
    ControllerMovedError,
    Registry,
    StaleStateError,
)
from rdmalog.cluster.view import ClusterWatcher, Event, TopicView

log = logging.getLogger(__name__)

RETRIES = 5  # re-reads of a partition state after a refused conditional write


@dataclass
class Reassignment:
    """A request of AlterPartitionReassignments for one partition (target None: cancel)."""

    topic: str
    partition: int
    target: list[int] | None


class Controller:
    """Controller election and the controller's work, on a thread of its own."""

    def __init__(
        self,
        registry: Registry,
        watcher: ClusterWatcher,
        broker_id: int,
        unclean_default: bool = False,
        rebalance_interval_s: float | None = None,
        rebalance_imbalance_pct: int = 10,
    ) -> None:
        """`rebalance_interval_s`: check leadership balance that often and give partitions back to
        their preferred replica (Kafka's auto.leader.rebalance.enable); None: never."""
        self.rebalance_interval_s = rebalance_interval_s
        self.rebalance_imbalance_pct = rebalance_imbalance_pct
        self._next_rebalance = 0.0
        self.registry = registry
        self.zk = registry.zk
        self.watcher = watcher
        self.view = watcher.view
        self.broker_id = broker_id
        self.unclean_default = unclean_default
        self.lease: ControllerLease | None = None
        self._queue: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._known_brokers: dict[int, int] = {}  # live broker id -> registration epoch (czxid)
        self._shutting_down: set[int] = set()  # brokers in controlled shutdown (not electable)
        self.on_change: Callable[[bool], None] | None = None  # told when this broker wins/loses

    @property
    def active(self) -> bool:
        return self.lease is not None

    # --- life cycle -----------------------------------------------------------------------------------

    def start(self) -> Controller:
        self.watcher.subscribe(self._queue.put)
        self._thread = threading.Thread(target=self._run, name="rdmalog-controller", daemon=True)
        self._thread.start()
        self._queue.put(Event("controller"))
        return self

    def stop(self) -> None:
        """Stop acting and give up /controller (another broker is elected)."""
        self.watcher.unsubscribe(self._queue.put)
        self._stop.set()
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.lease is not None:
            self.lease = None
            try:
                self.registry.resign(self.broker_id)
            except KazooException:
                pass

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                item = self._queue.get(timeout=1.0)
            except queue.Empty:
                item = Event("tick")
            if item is None:
                break
            try:
                if callable(item) and not isinstance(item, Event):
                    item()
                else:
                    self._handle(item)
            except ControllerMovedError:
                log.warning(
                    "controller epoch moved on: broker %d is no longer controller", self.broker_id
                )
                self._lose()
            except KazooException as exc:
                log.warning("controller: ZooKeeper unavailable (%r); will retry", exc)
                time.sleep(0.2)
                self._queue.put(Event("retry"))
            except Exception:
                log.exception("controller event %r failed", item)

    # --- events ---------------------------------------------------------------------------------------

    def _handle(self, event: Event) -> None:
        kind = event.kind
        if kind == "session" and event.topic == "LOST":
            self._lose()  # the ephemeral /controller went with the session
        if kind == "tick" and not self.active:
            return
        if kind in ("controller", "session") or not self.active:
            self._maybe_elect()  # winning runs a full pass
            return
        if kind == "tick":
            self._maybe_rebalance()
        elif kind == "retry":
            self._on_elected()
        elif kind == "brokers":
            self._on_brokers()
            self._controlled_shutdowns()
        elif kind == "topic":
            self._init_partitions(event.topic)
            self._progress_reassignments(event.topic)
        elif kind == "delete":
            self._delete_topics()
        elif kind == "shutdown":
            self._controlled_shutdowns()
        elif kind == "state":
            self._progress_reassignments(event.topic)

    def call(self, fn: Callable[[], object]) -> concurrent.futures.Future:
        """Run `fn()` on the controller thread; its result (or exception) in a Future."""
        fut: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            if not fut.set_running_or_notify_cancel():
                return
            try:
                fut.set_result(fn())
            except BaseException as exc:
                fut.set_exception(exc)

        self._queue.put(run)
        return fut

    def _maybe_elect(self) -> None:
        if self.active:
            if self.registry.controller_id() != self.broker_id:
                self._lose()
            return
        if self.view.controller_id != -1 and self.registry.controller_id() != -1:
            return
        lease = self.registry.try_become_controller(self.broker_id)
        if lease is None:
            return
        self.lease = lease
        log.info("broker %d is the controller (epoch %d)", self.broker_id, lease.epoch)
        if self.rebalance_interval_s is not None:
            self._next_rebalance = time.monotonic() + self.rebalance_interval_s
        self._known_brokers = {}
        self._shutting_down = set()
        if self.on_change is not None:
            self.on_change(True)
        self._on_elected()

    def _lose(self) -> None:
        if self.lease is not None:
            log.info("broker %d stops being the controller", self.broker_id)
            self.lease = None
            if self.on_change is not None:
                self.on_change(False)

    def _on_elected(self) -> None:
        """Take over: every partition checked against the live brokers, pending work resumed."""
        self._on_brokers()
        self._init_partitions(None)
        self._delete_topics()
        self._controlled_shutdowns()
        self._progress_reassignments(None)

    # --- brokers coming and going ---------------------------------------------------------------------

    def _live(self) -> dict[int, Z.BrokerInfo]:
        return self.registry.brokers()

    def _on_brokers(self) -> None:
        live = self._live()
        now = {b: info.epoch for b, info in live.items()}
        dead = set(self._known_brokers) - set(now)
        came = {b for b, e in now.items() if self._known_brokers.get(b) != e}
        first = not self._known_brokers
        self._known_brokers = now
        self._shutting_down &= set(now)
        self._shutting_down -= came  # a broker that left and came back is electable again
        if dead:
            log.info("controller: brokers %s went away", sorted(dead))
        if came and not first:
            log.info("controller: brokers %s registered", sorted(came))
        electable = set(now) - self._shutting_down
        for tv in self._topics():
            for p in sorted(tv.assignment.partitions):
                self._update_partition(tv, p, electable, exclude=dead)
        if came and not first:
            self._init_partitions(None)

    def _update_partition(
        self, tv: TopicView, p: int, electable: set[int], exclude: set[int]
    ) -> None:
        """Elect a leader where the current one is gone, restarted or missing; drop departed or
        restarted ISR members."""
        state = self.view.state(tv.name, p)  # the watched state; a stale one fails its write
        for _ in range(RETRIES):
            if state is None:
                return  # not initialized yet (_init_partitions does)
            new = self._decide(tv, p, state, electable, exclude)
            if new is None:
                return
            try:
                self._write_state(tv.name, p, new, state.version)
                return
            except StaleStateError:
                state = self.registry.partition_state(tv.name, p)

    def _restarted(self, broker: int, state: Z.PartitionState) -> bool:
        """The broker registered (again) after `state` was written: it restarted or lost its
        session since, so it may lack what the ISR had; it must catch up and rejoin."""
        return self._known_brokers.get(broker, -1) > state.mzxid

    def _decide(
        self,
        tv: TopicView,
        p: int,
        state: Z.PartitionState,
        electable: set[int],
        exclude: set[int],
    ) -> Z.PartitionState | None:
        """The partition's next state, or None when it stays as it is."""
        usable = [r for r in state.isr if r in electable and r not in exclude]
        fresh = [r for r in usable if not self._restarted(r, state)]
        if state.leader in fresh:
            if len(fresh) == len(state.isr):
                return None
            return self._state(state.leader, state.leader_epoch + 1, fresh)
        replicas = tv.replicas(p)
        leaders = [r for r in replicas if r in fresh]
        if leaders:
            return self._state(leaders[0], state.leader_epoch + 1, fresh)
        # no ISR member that stayed up: one that came back leads with what the ISR had
        back = [r for r in replicas if r in usable]
        if back:
            return self._state(back[0], state.leader_epoch + 1, [back[0]])
        if self._unclean(tv):
            live = [r for r in replicas if r in electable and r not in exclude]
            if live:
                log.warning(
                    "controller: unclean leader election of %s-%d: broker %d leads without being "
                    "in sync (data may be lost)",
                    tv.name, p, live[0],
                )  # fmt: skip
                return self._state(live[0], state.leader_epoch + 1, [live[0]])
        if state.leader == Z.NO_LEADER:
            return None
        log.warning(
            "controller: %s-%d has no live in-sync replica (ISR %s); it stays offline until one "
            "comes back",
            tv.name, p, list(state.isr),
        )  # fmt: skip
        return self._state(Z.NO_LEADER, state.leader_epoch + 1, list(state.isr))

    def _unclean(self, tv: TopicView) -> bool:
        value = tv.configs.get("unclean.leader.election.enable")
        if value is None:
            return self.unclean_default
        return value.strip().lower() == "true"

    def _state(self, leader: int, epoch: int, isr: list[int]) -> Z.PartitionState:
        return Z.PartitionState(leader, epoch, tuple(isr), self.lease.epoch)

    def _write_state(self, topic: str, p: int, new: Z.PartitionState, version: int) -> None:
        self.registry.fenced_write(
            self.lease, [("set", Z.state_path(topic, p), Z.encode_state(new), version)]
        )
        log.info(
            "controller: %s-%d leader %d epoch %d isr %s",
            topic, p, new.leader, new.leader_epoch, list(new.isr),
        )  # fmt: skip

    def _topics(self) -> list[TopicView]:
        with self.view.lock:
            return list(self.view.topics.values())

    # --- new topics and partitions --------------------------------------------------------------------

    def _init_partitions(self, topic: str | None) -> None:
        """Create the first state of partitions that have none (new topics, CreatePartitions)."""
        names = [topic] if topic else self.registry.topics()
        live = set(self._known_brokers) - self._shutting_down
        for name in names:
            assignment = self.registry.topic(name)
            if assignment is None or name in self.view.deleting:
                continue
            for p, replicas in sorted(assignment.partitions.items()):
                if self.zk.exists(Z.state_path(name, p)):
                    continue
                alive = [r for r in replicas if r in live]
                if not alive:
                    log.warning("controller: no live replica of new partition %s-%d yet", name, p)
                    continue
                state = self._state(alive[0], 0, alive)
                self.zk.ensure_path(f"{Z.partitions_path(name)}/{p}")
                try:
                    self.registry.fenced_write(
                        self.lease, [("create", Z.state_path(name, p), Z.encode_state(state))]
                    )
                except StaleStateError:
                    continue  # created meanwhile
                log.info(
                    "controller: new partition %s-%d leader %d isr %s", name, p, alive[0], alive
                )

    # --- topic deletion -------------------------------------------------------------------------------

    def _delete_topics(self) -> None:
        for name in self.registry.topics_to_delete():
            assignment = self.registry.topic(name)
            ops: list[tuple] = []
            if assignment is not None:
                for p in sorted(assignment.partitions):
                    ops.append(("delete", Z.state_path(name, p)))
                    ops.append(("delete", f"{Z.partitions_path(name)}/{p}"))
                ops.append(("delete", Z.partitions_path(name)))
                ops.append(("delete", Z.topic_path(name)))
            try:
                self.registry.fenced_write(self.lease, ops) if ops else None
            except StaleStateError:
                # some znode was missing (a half-created topic): delete what is there
                self.registry.delete_tree(Z.topic_path(name))
            self.registry.delete_tree(Z.config_path(name))
            self.registry.delete_tree(Z.delete_path(name))
            log.info("controller: deleted topic %s", name)

    # --- controlled shutdown --------------------------------------------------------------------------

    def _controlled_shutdowns(self) -> None:
        try:
            asking = [int(c) for c in self.zk.get_children(Z.CONTROLLED_SHUTDOWN) if c.isdigit()]
        except NoNodeError:
            return
        for broker in asking:
            if Z.decode_shutdown_answer(self._shutdown_data(broker)) is not None:
                continue  # answered already
            self._shutting_down.add(broker)
            electable = set(self._known_brokers) - self._shutting_down
            remaining = 0
            for tv in self._topics():
                for p in sorted(tv.assignment.partitions):
                    state = self.registry.partition_state(tv.name, p)
                    if state is None or broker not in (state.leader, *state.isr):
                        continue
                    if not [r for r in state.isr if r != broker and r in electable]:
                        remaining += state.leader == broker  # nobody else in sync: it stays
                        continue
                    self._update_partition(tv, p, electable, exclude={broker})
                    after = self.registry.partition_state(tv.name, p)
                    if after is not None and after.leader == broker:
                        remaining += 1
            try:
                self.zk.set(Z.shutdown_path(broker), Z.encode_shutdown_answer(remaining))
            except NoNodeError:
                pass  # it stopped waiting
            log.info(
                "controller: controlled shutdown of broker %d, %d partition(s) remain led by it",
                broker,
                remaining,
            )

    def _shutdown_data(self, broker: int) -> bytes | None:
        try:
            return self.zk.get(Z.shutdown_path(broker))[0]
        except NoNodeError:
            return None

    # --- preferred leaders ----------------------------------------------------------------------------

    def elect_preferred(
        self, partitions: list[tuple[str, int]] | None
    ) -> dict[tuple[str, int], tuple[int, str | None]]:
        """ElectLeaders (preferred): each partition's first replica leads again if it is live and
        in sync. Per partition (error code, message); None asks for every partition."""
        if partitions is None:
            partitions = [(tv.name, p) for tv in self._topics() for p in tv.assignment.partitions]
        live = set(self._known_brokers) - self._shutting_down
        out: dict[tuple[str, int], tuple[int, str | None]] = {}
        for topic, p in partitions:
            tv = self.view.topic(topic)
            state = self.view.state(topic, p)
            if tv is None or state is None or p not in tv.assignment.partitions:
                out[(topic, p)] = (3, "unknown topic or partition")  # UNKNOWN_TOPIC_OR_PARTITION
                continue
            preferred = tv.replicas(p)[0]
            if state.leader == preferred:
                out[(topic, p)] = (84, "the preferred replica leads already")  # ELECTION_NOT_NEEDED
            elif preferred not in live or preferred not in state.isr:
                out[(topic, p)] = (80, f"preferred replica {preferred} is not live and in sync")
            else:
                new = self._state(preferred, state.leader_epoch + 1, list(state.isr))
                try:
                    self._write_state(topic, p, new, state.version)
                    out[(topic, p)] = (0, None)
                except StaleStateError:
                    out[(topic, p)] = (80, "the partition's state changed meanwhile; try again")
        return out

    def _maybe_rebalance(self) -> None:
        """Kafka's auto leader rebalance: a broker leading fewer than its preferred share (by more
        than leader.imbalance.per.broker.percentage) gets its preferred partitions back."""
        if self.rebalance_interval_s is None or not self.active:
            return
        now = time.monotonic()
        if now < self._next_rebalance:
            return
        self._next_rebalance = now + self.rebalance_interval_s
        preferred: dict[int, list[tuple[str, int, int]]] = {}
        for tv in self._topics():
            for p in tv.assignment.partitions:
                state = tv.states.get(p)
                reps = tv.replicas(p)
                if state is not None and reps:
                    preferred.setdefault(reps[0], []).append((tv.name, p, state.leader))
        moves = []
        for broker, parts in preferred.items():
            away = [(t, p) for t, p, leader in parts if leader != broker]
            if away and 100 * len(away) / len(parts) > self.rebalance_imbalance_pct:
                moves += away
        if moves:
            done = [k for k, (code, _) in self.elect_preferred(moves).items() if code == 0]
            if done:
                log.info("controller: preferred leaders restored for %d partition(s)", len(done))

    # --- reassignments --------------------------------------------------------------------------------

    def reassign(
        self, requests: list[Reassignment]
    ) -> dict[tuple[str, int], tuple[int, str | None]]:
        """Start or cancel reassignments (on the controller thread); per partition (error code, message)."""
        out: dict[tuple[str, int], tuple[int, str | None]] = {}
        live = set(self._known_brokers)
        by_topic: dict[str, list[Reassignment]] = {}
        for r in requests:
            by_topic.setdefault(r.topic, []).append(r)
        for name, reqs in by_topic.items():
            for _ in range(RETRIES):
                a = self.registry.topic(name)
                if a is None:
                    for r in reqs:
                        out[(name, r.partition)] = (
                            3,
                            "unknown topic",
                        )  # UNKNOWN_TOPIC_OR_PARTITION
                    break
                for r in reqs:
                    key = (name, r.partition)
                    if r.partition not in a.partitions:
                        out[key] = (3, "unknown partition")
                        continue
                    current = a.partitions[r.partition]
                    adding = a.adding.get(r.partition, [])
                    removing = a.removing.get(r.partition, [])
                    if r.target is None:
                        if not adding and not removing:
                            out[key] = (
                                85,
                                "no reassignment in progress",
                            )  # NO_REASSIGNMENT_IN_PROGRESS
                            continue
                        original = [b for b in current if b not in adding]
                        a.partitions[r.partition] = original
                        a.adding.pop(r.partition, None)
                        a.removing.pop(r.partition, None)
                        out[key] = (0, None)
                        continue
                    target = list(dict.fromkeys(r.target))
                    if not target or len(target) != len(r.target):
                        out[key] = (
                            39,
                            "replicas must be distinct and not empty",
                        )  # INVALID_REPLICA_ASSIGNMENT
                        continue
                    if any(b not in live for b in target):
                        out[key] = (39, f"replicas {target} include brokers that are not live")
                        continue
                    original = [b for b in current if b not in adding]
                    if target == original and not adding and not removing:
                        out[key] = (0, None)
                        continue
                    full = list(dict.fromkeys(target + original))
                    a.partitions[r.partition] = full
                    a.adding[r.partition] = [b for b in target if b not in original]
                    a.removing[r.partition] = [b for b in original if b not in target]
                    out[key] = (0, None)
                try:
                    self.registry.fenced_write(
                        self.lease, [("set", Z.topic_path(name), Z.encode_topic(a), a.version)]
                    )
                    break
                except StaleStateError:
                    continue
        self._queue.put(Event("state", None))
        return out

    def _progress_reassignments(self, topic: str | None) -> None:
        names = [
            tv.name
            for tv in self._topics()
            if (topic is None or tv.name == topic)
            and (tv.assignment.adding or tv.assignment.removing)
        ]
        live = set(self._known_brokers)
        for name in names:
            for _ in range(RETRIES):
                a = self.registry.topic(name)
                if a is None or not (a.adding or a.removing):
                    break
                changed = False
                for p in sorted(set(a.adding) | set(a.removing)):
                    adding, removing = a.adding.get(p, []), a.removing.get(p, [])
                    target = [b for b in a.partitions[p] if b not in removing]
                    state = self.registry.partition_state(name, p)
                    if state is None or any(b not in state.isr for b in target):
                        continue
                    if state.leader not in target or state.leader not in live:
                        leaders = [b for b in target if b in state.isr and b in live]
                        if not leaders:
                            continue
                        new = self._state(
                            leaders[0],
                            state.leader_epoch + 1,
                            [b for b in state.isr if b in target],
                        )
                    else:
                        new = self._state(
                            state.leader,
                            state.leader_epoch + 1,
                            [b for b in state.isr if b in target],
                        )
                    try:
                        self._write_state(name, p, new, state.version)
                    except StaleStateError:
                        continue
                    a.partitions[p] = target
                    a.adding.pop(p, None)
                    a.removing.pop(p, None)
                    changed = True
                    log.info(
                        "controller: reassignment of %s-%d done: replicas %s (removed %s, added %s)",
                        name,
                        p,
                        target,
                        removing,
                        adding,
                    )
                if not changed:
                    break
                try:
                    self.registry.fenced_write(
                        self.lease, [("set", Z.topic_path(name), Z.encode_topic(a), a.version)]
                    )
                    break
                except StaleStateError:
                    continue
