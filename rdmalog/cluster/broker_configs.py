"""Dynamic broker configs in ZooKeeper, laid out as Kafka's ZooKeeper mode keeps them:

    /config/brokers/<id>          {"version":1,"config":{"log.retention.ms":"3600000"}}
    /config/brokers/<default>     the cluster-wide defaults
    /config/changes/config_change_<seq>   {"version":2,"entity_path":"brokers/<id>"}

Every broker watches its own entity and `<default>` (any writer's change, Kafka's tools included,
reaches it) and tells its listeners; an alter is written at the znode version it read, with the
change notification, in one transaction (read again and applied again when another broker won).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import DataWatch

from rdmalog.cluster import znodes as Z
from rdmalog.cluster.registry import Registry, StaleStateError
from rdmalog.dynamic_broker_config import DEFAULT_ENTITY, Changes, Check, merged

log = logging.getLogger(__name__)

CONFIG_BROKERS = "/config/brokers"
WRITE_ATTEMPTS = 10  # alters of one entity racing at several brokers


def entity_path(entity: str) -> str:
    return f"{CONFIG_BROKERS}/{entity}"


def encode_change(entity: str) -> bytes:
    """The /config/changes notification of a broker entity (Kafka's version 2 form)."""
    return json.dumps({"version": 2, "entity_path": f"brokers/{entity}"}).encode()


class ZkBrokerConfigs:
    """The dynamic configs of broker `node_id` and of `<default>`, as ZooKeeper has them."""

    def __init__(self, registry: Registry, node_id: int) -> None:
        self.zk = registry.zk
        self.watched = (DEFAULT_ENTITY, str(node_id))
        self._lock = threading.Lock()
        self._entities: dict[str, dict[str, str]] = {}
        self._listeners: list[Callable[[], None]] = []

    def start(self) -> ZkBrokerConfigs:
        """Read both entities (the watches' first calls are synchronous) and keep watching."""
        self.zk.ensure_path(CONFIG_BROKERS)
        for entity in self.watched:
            DataWatch(self.zk, entity_path(entity), self._watch(entity))
        return self

    def _watch(self, entity: str):
        def on_data(data: bytes | None, _stat) -> None:
            self._set(entity, Z.decode_config(data) if data else {})

        return on_data

    def _set(self, entity: str, configs: dict[str, str]) -> None:
        with self._lock:
            if self._entities.get(entity, {}) == configs:
                return
            if configs:
                self._entities[entity] = configs
            else:
                self._entities.pop(entity, None)
            listeners = list(self._listeners)
        log.info("dynamic broker configs of %s: %s", entity, configs)
        for callback in listeners:
            try:
                callback()
            except Exception:
                log.exception("applying the dynamic configs of %s failed", entity)

    def entities(self) -> dict[str, dict[str, str]]:
        with self._lock:
            return {e: dict(c) for e, c in self._entities.items()}

    def add_listener(self, callback: Callable[[], None]) -> None:
        with self._lock:
            self._listeners.append(callback)

    def alter(self, entity: str, changes: Changes, replace: bool, check: Check) -> None:
        """Apply `changes` to /config/brokers/<entity> if `check` passes on the result."""
        path = entity_path(entity)
        self.zk.ensure_path(Z.CONFIG_CHANGES)
        for _ in range(WRITE_ATTEMPTS):
            try:
                data, stat = self.zk.get(path)
                stored, version = Z.decode_config(data), stat.version
            except NoNodeError:
                stored, version = {}, -1
            entities = merged({**self.entities(), entity: stored}, entity, changes, replace)
            check(entities)
            new = entities.get(entity, {})
            t = self.zk.transaction()
            if version == -1:
                t.create(path, Z.encode_config(new))
            else:
                t.set_data(path, Z.encode_config(new), version)
            t.create(f"{Z.CONFIG_CHANGES}/config_change_", encode_change(entity), sequence=True)
            results = t.commit()
            if isinstance(results[0], (BadVersionError, NodeExistsError, NoNodeError)):
                continue
            failed = [r for r in results if isinstance(r, Exception)]
            if failed:
                raise failed[0]
            if entity in self.watched:
                self._set(entity, new)  # at once: the answer's describe shows it
            return
        raise StaleStateError(f"the dynamic configs of broker entity {entity} kept changing")
