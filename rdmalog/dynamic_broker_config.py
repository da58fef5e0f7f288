"""Kafka's dynamic broker configs: keys changed at run time, per broker (`<id>`) and cluster-wide
(`<default>`), layered over server.properties with Kafka's precedence (per-broker dynamic > default
dynamic > static > built-in default; see `BrokerConfig.with_dynamic`).

`DYNAMIC_KEYS` are the keys rdmalog lets change and reads live: the `log.*` topic defaults that
topics without an override inherit, connection limits and the cleaner's I/O throttle. Other keys
rdmalog knows are refused as Kafka refuses its read-only ones (INVALID_REQUEST "Cannot update these
configs dynamically: ..."), bad values with INVALID_CONFIG.

A single broker keeps them in its data directory (`__rdmalog_metadata/broker-configs.json`,
replaced atomically); a cluster keeps them in ZooKeeper `/config/brokers/<id>` and
`/config/brokers/<default>` (rdmalog/cluster/broker_configs.py). Both are `BrokerConfigStore`s:
`entities()` -> {entity: {key: value}}, `alter(entity, configs)` replacing one entity's keys, and
listeners called after every change (from any broker).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from rdmalog.config import BROKER_DEFS, BrokerConfig, ConfigSource
from rdmalog.errors import InvalidConfigError, InvalidRequestError
from rdmalog.store.checkpoints import write_atomic

DEFAULT_ENTITY = "<default>"  # Kafka's name of the cluster-wide default broker entity
CONFIG_FILE = Path("__rdmalog_metadata") / "broker-configs.json"

# Keys Kafka changes at run time (DynamicLogConfig, DynamicConnectionQuota, the cleaner's
# reconfigurables) that rdmalog reads live: topic defaults are read through each topic's config,
# rebuilt on every change; the others by their owners' listeners (gateway/server.py, the cleaner).
DYNAMIC_KEYS = frozenset(
    """log.retention.ms log.retention.minutes log.retention.hours log.retention.bytes
    log.segment.bytes log.roll.ms log.roll.hours log.index.size.max.bytes log.index.interval.bytes
    log.flush.interval.messages log.flush.interval.ms log.cleanup.policy log.preallocate
    log.cleaner.delete.retention.ms log.cleaner.min.cleanable.ratio
    log.cleaner.min.compaction.lag.ms log.cleaner.max.compaction.lag.ms
    log.message.timestamp.type log.message.timestamp.difference.max.ms
    log.message.timestamp.before.max.ms log.message.timestamp.after.max.ms
    log.message.downconversion.enable message.max.bytes min.insync.replicas
    max.connections max.connections.per.ip
    log.cleaner.io.max.bytes.per.second log.cleaner.backoff.ms log.cleaner.threads
    log.cleaner.dedupe.buffer.size log.cleaner.io.buffer.size
    log.cleaner.io.buffer.load.factor""".split()
)


def entity_of(resource_name: str, node_id: int) -> str:
    """The entity a BROKER resource names: "" is the cluster-wide default."""
    return DEFAULT_ENTITY if resource_name == "" else str(node_id)


def check_keys(keys: list[str]) -> None:
    """Refuse keys that cannot change at run time, as Kafka does."""
    unknown = sorted(k for k in keys if k not in BROKER_DEFS)
    if unknown:
        raise InvalidConfigError(f"Unknown broker configs: {', '.join(unknown)}")
    fixed = sorted(k for k in keys if k not in DYNAMIC_KEYS)
    if fixed:
        raise InvalidRequestError(f"Cannot update these configs dynamically: {', '.join(fixed)}")


def layered(static: BrokerConfig, entities: Mapping[str, Mapping[str, str]]) -> BrokerConfig:
    """`static` with the dynamic `<default>` and this broker's entity over it (validated)."""
    own = str(static.node_id)
    return static.with_dynamic(
        {
            ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG: _known(entities.get(DEFAULT_ENTITY, {})),
            ConfigSource.DYNAMIC_BROKER_CONFIG: _known(entities.get(own, {})),
        }
    )


def _known(configs: Mapping[str, str]) -> dict[str, str]:
    """Stored keys rdmalog applies (another broker version may have stored others: kept, unused)."""
    return {k: v for k, v in configs.items() if k in DYNAMIC_KEYS}


Changes = Mapping[str, "str | None"]  # key -> new value, None: remove
Check = Callable[[dict[str, dict[str, str]]], None]  # raises when the entities would be bad


def merged(
    entities: Mapping[str, Mapping[str, str]], entity: str, changes: Changes, replace: bool
) -> dict[str, dict[str, str]]:
    """`entities` with `changes` applied to `entity` (`replace`: its keys become exactly those)."""
    out = {e: dict(c) for e, c in entities.items()}
    config = {} if replace else out.get(entity, {})
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    out[entity] = config
    if not config:
        del out[entity]
    return out


class BrokerConfigStore(Protocol):
    def entities(self) -> dict[str, dict[str, str]]: ...

    def alter(self, entity: str, changes: Changes, replace: bool, check: Check) -> None: ...

    def add_listener(self, callback: Callable[[], None]) -> None: ...


class FileBrokerConfigs:
    """A single broker's dynamic configs, in memory and in `path`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []
        self._entities: dict[str, dict[str, str]] = _read(path) if path.exists() else {}

    @classmethod
    def in_data_dir(cls, log_dir: Path) -> FileBrokerConfigs:
        return cls(Path(log_dir) / CONFIG_FILE)

    def entities(self) -> dict[str, dict[str, str]]:
        with self._lock:
            return {e: dict(c) for e, c in self._entities.items()}

    def alter(self, entity: str, changes: Changes, replace: bool, check: Check) -> None:
        """Apply `changes` to `entity` if `check` passes, durably; then tell the listeners."""
        with self._lock:
            entities = merged(self._entities, entity, changes, replace)
            check(entities)
            _write(self.path, entities)
            self._entities = entities
            listeners = list(self._listeners)
        for callback in listeners:
            callback()

    def add_listener(self, callback: Callable[[], None]) -> None:
        with self._lock:
            self._listeners.append(callback)


def _read(path: Path) -> dict[str, dict[str, str]]:
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        return {str(e): {str(k): str(v) for k, v in c.items()} for e, c in body["brokers"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InvalidConfigError(f"{path}: cannot read dynamic broker configs: {exc}") from None


def _write(path: Path, entities: dict[str, dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps({"version": 1, "brokers": entities}, indent=1, sort_keys=True))
