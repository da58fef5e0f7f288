"""A broker's picture of the cluster (live brokers, topics, assignments, partition states, topic configs,
the controller), kept current by ZooKeeper watches.

Every broker watches the same znodes (this is how brokers learn their roles, see
docs/architecture.md): /brokers/ids, /brokers/topics and each topic's assignment, config and
partition states, /controller, /admin/delete_topics and /admin/controlled_shutdown. Watch callbacks
run on kazoo's callback thread: they update the view under its lock, then tell subscribers what
changed with an `Event`. Subscribers reconcile against the view (level-triggered), so an event
that arrives late or twice does no harm; the view's states carry their znode versions, which are
the fencing tokens of conditional writes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from kazoo.exceptions import NoNodeError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from rdmalog.cluster import znodes as Z
from rdmalog.cluster.registry import Registry

log = logging.getLogger(__name__)


class Event(NamedTuple):
    """What changed: kind is "brokers", "topic", "state", "config", "controller", "delete",
    "shutdown" or "session"; topic/partition name the partition where they apply."""

    kind: str
    topic: str | None = None
    partition: int = -1


@dataclass
class TopicView:
    """One topic as ZooKeeper has it."""

    name: str
    assignment: Z.TopicAssignment
    configs: dict[str, str] = field(default_factory=dict)
    states: dict[int, Z.PartitionState] = field(default_factory=dict)

    def replicas(self, partition: int) -> list[int]:
        """The partition's replicas, reassignment targets included (Kafka's full replica set)."""
        reps = list(self.assignment.partitions.get(partition, []))
        for b in self.assignment.adding.get(partition, []):
            if b not in reps:
                reps.append(b)
        return reps


class ClusterView:
    """Thread-safe: written by the watcher, read by handlers, the replica manager, the controller."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.brokers: dict[int, Z.BrokerInfo] = {}
        self.topics: dict[str, TopicView] = {}
        self.controller_id = -1
        self.deleting: set[str] = set()
        self.shutting_down: set[int] = set()

    def topic(self, name: str) -> TopicView | None:
        with self.lock:
            return self.topics.get(name)

    def state(self, topic: str, partition: int) -> Z.PartitionState | None:
        with self.lock:
            t = self.topics.get(topic)
            return None if t is None else t.states.get(partition)

    def live_brokers(self) -> dict[int, Z.BrokerInfo]:
        with self.lock:
            return dict(self.brokers)

    def topic_by_id(self, topic_id) -> TopicView | None:
        with self.lock:
            for t in self.topics.values():
                if t.assignment.topic_id == topic_id:
                    return t
            return None

    def partitions(self) -> list[tuple[str, int]]:
        with self.lock:
            return [(t.name, p) for t in self.topics.values() for p in t.assignment.partitions]


class ClusterWatcher:
    """Installs the watches of a ClusterView and reports changes to subscribers."""

    def __init__(self, registry: Registry, view: ClusterView | None = None) -> None:
        self.registry = registry
        self.zk = registry.zk
        self.view = view or ClusterView()
        self._subscribers: list[Callable[[Event], None]] = []
        self._topic_watched: set[str] = set()
        self._state_watched: set[tuple[str, int]] = set()
        self._pending_configs: dict[str, dict[str, str]] = {}  # read before their topic
        self._started = False
        self.registry.add_state_listener(self._on_session)

    def subscribe(self, cb: Callable[[Event], None]) -> None:
        """`cb(event)` on kazoo's threads after the view changed; it must not block."""
        self._subscribers.append(cb)

    def unsubscribe(self, cb: Callable[[Event], None]) -> None:
        if cb in self._subscribers:
            self._subscribers.remove(cb)

    def _emit(self, event: Event) -> None:
        for cb in list(self._subscribers):
            try:
                cb(event)
            except Exception:
                log.exception("cluster view subscriber failed on %s", event)

    def start(self) -> ClusterWatcher:
        """Read everything once (the watches' first calls are synchronous) and keep watching."""
        self._started = True
        ChildrenWatch(self.zk, Z.BROKER_IDS, self._on_brokers)
        DataWatch(self.zk, Z.CONTROLLER, self._on_controller)
        ChildrenWatch(self.zk, Z.BROKER_TOPICS, self._on_topics)
        ChildrenWatch(self.zk, Z.DELETE_TOPICS, self._on_deletes)
        ChildrenWatch(self.zk, Z.CONTROLLED_SHUTDOWN, self._on_shutdowns)
        return self

    def stop(self) -> None:
        self._started = False
        self._subscribers.clear()

    # --- callbacks (kazoo's threads) ------------------------------------------------------------------

    def _on_session(self, state: str) -> None:
        if self._started:
            self._emit(Event("session", state))

    def _on_brokers(self, children: list[str]) -> bool | None:
        if not self._started:
            return False
        brokers = {}
        for child in children:
            if not child.isdigit():
                continue
            try:
                data, stat = self.zk.get(Z.broker_path(int(child)))
            except NoNodeError:
                continue
            brokers[int(child)] = Z.decode_broker(int(child), data, stat.czxid)
        with self.view.lock:
            changed = brokers != self.view.brokers
            self.view.brokers = brokers
        if changed:
            self._emit(Event("brokers"))
        return None

    def _on_controller(self, data: bytes | None, _stat) -> bool | None:
        if not self._started:
            return False
        with self.view.lock:
            self.view.controller_id = Z.decode_controller(data) if data else -1
        self._emit(Event("controller"))
        return None

    def _on_deletes(self, children: list[str]) -> bool | None:
        if not self._started:
            return False
        with self.view.lock:
            self.view.deleting = set(children)
        self._emit(Event("delete"))
        return None

    def _on_shutdowns(self, children: list[str]) -> bool | None:
        if not self._started:
            return False
        with self.view.lock:
            self.view.shutting_down = {int(c) for c in children if c.isdigit()}
        self._emit(Event("shutdown"))
        return None

    def _on_topics(self, children: list[str]) -> bool | None:
        if not self._started:
            return False
        for name in children:
            if name not in self._topic_watched:
                self._topic_watched.add(name)
                DataWatch(self.zk, Z.config_path(name), self._config_watch(name))
                DataWatch(self.zk, Z.topic_path(name), self._topic_watch(name))
        return None

    def _topic_watch(self, name: str):
        def on_topic(data: bytes | None, stat) -> bool | None:
            if not self._started:
                return False
            if data is None and stat is None:  # deleted
                self._topic_watched.discard(name)
                with self.view.lock:
                    gone = self.view.topics.pop(name, None)
                if gone is not None:
                    self._emit(Event("topic", name))
                return False
            assignment = Z.decode_topic(data, stat.version)
            with self.view.lock:
                tv = self.view.topics.get(name)
                if tv is None:
                    tv = self.view.topics[name] = TopicView(name, assignment)
                    tv.configs = self._pending_configs.pop(name, {})
                else:
                    tv.assignment = assignment
            self._emit(Event("topic", name))
            for p in assignment.partitions:
                if (name, p) not in self._state_watched:
                    self._state_watched.add((name, p))
                    DataWatch(self.zk, Z.state_path(name, p), self._state_watch(name, p))
            return None

        return on_topic

    def _config_watch(self, name: str):
        def on_config(data: bytes | None, stat) -> bool | None:
            if not self._started:
                return False
            configs = Z.decode_config(data) if data else {}
            with self.view.lock:
                tv = self.view.topics.get(name)
                if tv is None:
                    if name not in self._topic_watched:
                        return False  # the topic went
                    self._pending_configs[name] = configs
                    return None
                tv.configs = configs
            self._emit(Event("config", name))
            return None

        return on_config

    def _state_watch(self, name: str, partition: int):
        def on_state(data: bytes | None, stat) -> bool | None:
            if not self._started:
                return False
            if data is None:
                if name not in self._topic_watched:
                    self._state_watched.discard((name, partition))
                    return False
                return None  # not created yet (the controller initializes it)
            state = Z.decode_state(data, stat.version, stat.mzxid)
            with self.view.lock:
                tv = self.view.topics.get(name)
                if tv is None:
                    return None
                tv.states[partition] = state
            self._emit(Event("state", name, partition))
            return None

        return on_state
