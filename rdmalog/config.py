"""Broker and topic configuration with Kafka's names, defaults and validation.

`BrokerConfig.from_sources(properties_file, overrides)` reads a Java `.properties` file (Kafka's
`server.properties`) and command-line overrides; `TopicConfig.from_overrides(broker, overrides)` layers
per-topic settings (Kafka's topic config names) over the broker's `log.*` defaults. Both expose typed
attributes (`config.log_segment_bytes`, `topic.retention_ms`), `.get(name)` and `.describe()` rows
`(name, value, is_default, source)` for DescribeConfigs. Bad values and unknown topic keys raise
`InvalidConfigError` naming the key; an unknown broker key that looks like a typo of a known one raises too,
other keys Kafka knows but rdmalog ignores are logged.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple

from rdmalog.config_text import Listener, parse_listeners, parse_properties
from rdmalog.errors import InvalidConfigError

log = logging.getLogger(__name__)

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in SECURITY_PROTOCOLS)
LISTENER_PREFIX = "listener.name."


class ConfigSource(IntEnum):
    """DescribeConfigs `config_source` values."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ConfigEntry(NamedTuple):
    """One `describe()` row."""

    name: str
    value: str | None
    is_default: bool
    source: ConfigSource


# --- value parsing ---------------------------------------------------------------------------------


def _at_least(lo: int, at_most: int | None = None) -> Callable[[Any], str | None]:
    if at_most is None:
        return lambda v: None if v is None or v >= lo else f"must be at least {lo}"
    return lambda v: None if v is None or lo <= v <= at_most else f"must be {lo} to {at_most}"


def _between(lo: float, hi: float) -> Callable[[Any], str | None]:
    return lambda v: None if v is None or lo <= v <= hi else f"must be between {lo} and {hi}"


def _minus_one_or_at_least(lo: int) -> Callable[[Any], str | None]:
    return lambda v: None if v is None or v == -1 or v >= lo else f"must be -1 or at least {lo}"


def _port_or_off(v: Any) -> str | None:
    """A TCP port, or -1 for none."""
    return None if v is None or v == -1 or 0 <= v <= 65535 else "must be -1 (off) or 0 to 65535"


def _one_of(*choices: str) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        vals = v if isinstance(v, list) else [v]
        bad = [x for x in vals if x is not None and x not in choices]
        return f"must be one of {', '.join(choices)}" if bad else None

    return check


def _parse(name: str, kind: str, raw: Any, validator: Callable[[Any], str | None] | None) -> Any:
    """Parse `raw` (a string, or an already typed value) as `kind`; raise InvalidConfigError."""
    try:
        if raw is None:
            value: Any = None
        elif kind in ("int", "long", "short"):
            if isinstance(raw, bool):
                raise ValueError
            value = int(raw.strip()) if isinstance(raw, str) else int(raw)
            limit = {"int": INT_MAX, "long": LONG_MAX, "short": 2**15 - 1}[kind]
            if not -limit - 1 <= value <= limit:
                raise ValueError
        elif kind == "double":
            value = float(raw)
        elif kind == "boolean":
            if isinstance(raw, bool):
                value = raw
            elif str(raw).strip().lower() in ("true", "false"):
                value = str(raw).strip().lower() == "true"
            else:
                raise ValueError
        elif kind == "list":
            items = raw.split(",") if isinstance(raw, str) else list(raw)
            value = [str(x).strip() for x in items if str(x).strip()]
        elif kind == "password":
            value = str(raw)  # secrets are kept as given (a PEM or JAAS value spans lines)
        else:
            value = str(raw).strip()
    except (TypeError, ValueError):
        raise InvalidConfigError(
            f"Invalid value {raw!r} for configuration {name}: not a {kind}"
        ) from None
    if validator is not None:
        problem = validator(value)
        if problem:
            raise InvalidConfigError(f"Invalid value {raw!r} for configuration {name}: {problem}")
    return value


def _to_str(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


@dataclass(frozen=True)
class ConfigDef:
    """A known configuration key: type, default and validator."""

    name: str
    kind: str
    default: Any
    validator: Callable[[Any], str | None] | None = None


def _defs(*rows: tuple) -> dict[str, ConfigDef]:
    return {r[0]: ConfigDef(*r) for r in rows}


# --- broker configuration --------------------------------------------------------------------------

BROKER_DEFS = _defs(
    ("broker.id", "int", -1, _at_least(-1)),
    ("node.id", "int", -1, _at_least(-1)),
    ("listeners", "string", "PLAINTEXT://:9092"),
    ("advertised.listeners", "string", None),
    ("log.dirs", "list", None),
    ("log.dir", "string", "/tmp/kafka-logs"),
    ("num.partitions", "int", 1, _at_least(1)),
    ("auto.create.topics.enable", "boolean", True),
    ("delete.topic.enable", "boolean", True),
    ("default.replication.factor", "int", 1, _at_least(1)),
    ("min.insync.replicas", "int", 1, _at_least(1)),
    ("log.segment.bytes", "int", 1073741824, _at_least(14)),
    ("log.roll.ms", "long", None, _at_least(1)),
    ("log.roll.hours", "int", 168, _at_least(1)),
    ("log.retention.ms", "long", None, _at_least(-1)),
    ("log.retention.minutes", "int", None, _at_least(-1)),
    ("log.retention.hours", "int", 168, _at_least(-1)),
    ("log.retention.bytes", "long", -1),
    ("log.retention.check.interval.ms", "long", 300000, _at_least(1)),
    ("log.cleanup.policy", "list", ["delete"], _one_of("delete", "compact")),
    ("log.preallocate", "boolean", False),
    # the log cleaner (compacted topics): rdmalog/store/cleaner_manager.py
    ("log.cleaner.enable", "boolean", True),
    ("log.cleaner.threads", "int", 1, _at_least(0)),
    ("log.cleaner.dedupe.buffer.size", "long", 134217728, _at_least(0)),
    ("log.cleaner.io.buffer.size", "int", 524288, _at_least(0)),
    ("log.cleaner.io.buffer.load.factor", "double", 0.9),
    ("log.cleaner.io.max.bytes.per.second", "double", 1.7976931348623157e308),
    ("log.cleaner.backoff.ms", "long", 15000, _at_least(0)),
    ("log.cleaner.min.cleanable.ratio", "double", 0.5, _between(0, 1)),
    ("log.cleaner.delete.retention.ms", "long", 86400000, _at_least(0)),
    ("log.cleaner.min.compaction.lag.ms", "long", 0, _at_least(0)),
    ("log.cleaner.max.compaction.lag.ms", "long", LONG_MAX, _at_least(1)),
    ("log.flush.interval.messages", "long", LONG_MAX, _at_least(1)),
    ("log.flush.interval.ms", "long", None, _at_least(0)),
    ("log.flush.scheduler.interval.ms", "long", LONG_MAX, _at_least(0)),
    ("log.flush.offset.checkpoint.interval.ms", "int", 60000, _at_least(0)),
    ("log.flush.start.offset.checkpoint.interval.ms", "int", 60000, _at_least(0)),
    ("log.index.interval.bytes", "int", 4096, _at_least(0)),
    ("log.index.size.max.bytes", "int", 10485760, _at_least(4)),
    ("log.message.timestamp.type", "string", "CreateTime", _one_of(*TIMESTAMP_TYPES)),
    ("message.max.bytes", "int", 1048588, _at_least(0)),
    ("log.message.timestamp.difference.max.ms", "long", LONG_MAX, _at_least(0)),
    ("log.message.timestamp.before.max.ms", "long", LONG_MAX, _at_least(0)),
    ("log.message.timestamp.after.max.ms", "long", LONG_MAX, _at_least(0)),
    ("log.message.downconversion.enable", "boolean", True),
    ("fetch.max.bytes", "int", 57671680, _at_least(1024)),
    ("socket.request.max.bytes", "int", 104857600, _at_least(1)),
    ("queued.max.request.bytes", "long", -1),
    ("max.connections", "int", INT_MAX, _at_least(0)),
    ("max.connections.per.ip", "int", INT_MAX, _at_least(0)),
    ("connections.max.idle.ms", "long", 600000),
    # rdmalog's own: a request frame must arrive whole this long after its first byte (-1: no limit)
    ("request.receive.timeout.ms", "long", 60000, _minus_one_or_at_least(1)),
    # rdmalog's own: the memory (estimated) one decoded request may take; larger ones are refused
    ("request.max.decoded.bytes", "long", 32 * 1024 * 1024, _at_least(1024 * 1024)),
    ("compression.type", "string", "producer", _one_of("producer")),
    ("offsets.topic.num.partitions", "int", 50, _at_least(1)),
    ("offsets.topic.replication.factor", "short", 3, _at_least(1)),
    ("offsets.topic.segment.bytes", "int", 104857600, _at_least(1)),
    ("offsets.retention.minutes", "int", 10080, _at_least(1)),
    ("transaction.state.log.num.partitions", "int", 50, _at_least(1)),
    ("transaction.state.log.replication.factor", "short", 3, _at_least(1)),
    ("transaction.state.log.min.isr", "int", 2, _at_least(1)),
    ("transaction.max.timeout.ms", "int", 900000, _at_least(1)),
    ("transactional.id.expiration.ms", "int", 604800000, _at_least(1)),
    ("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000, _at_least(1)),
    ("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3600000, _at_least(1)),
    ("transaction.partition.verification.enable", "boolean", True),
    ("group.initial.rebalance.delay.ms", "int", 3000, _at_least(0)),
    ("group.max.size", "int", INT_MAX, _at_least(1)),
    ("offsets.retention.check.interval.ms", "long", 600000, _at_least(1)),
    ("offset.metadata.max.bytes", "int", 4096, _at_least(0)),
    ("group.min.session.timeout.ms", "int", 6000),
    ("producer.id.expiration.ms", "int", 86400000, _at_least(1)),
    ("producer.id.expiration.check.interval.ms", "int", 600000, _at_least(1)),
    ("group.max.session.timeout.ms", "int", 1800000),
    # rdmalog's own: KafkaDirect datapaths for native clients (rdmalog/rdma), off by default
    ("rdma.transport", "string", "none", _one_of("none", "shm", "tcp", "verbs")),
    ("rdma.host", "string", "127.0.0.1"),
    ("rdma.control.port", "int", 0, _at_least(0)),
    ("rdma.order.timeout.ms", "int", 1000, _at_least(1)),
    ("rdma.commit.interval.ms", "int", 100, _at_least(1)),
    ("rdma.consumer.slots", "int", 1024, _at_least(1, at_most=4096)),
    # rdmalog's own: the Prometheus endpoint (gateway/metrics_http.py), off unless a port is set
    ("metrics.port", "int", -1, _port_or_off),
    ("metrics.host", "string", None),
    # rdmalog's own: how often mirror links copy source groups' committed offsets (gateway/mirror)
    ("mirror.offsets.sync.interval.ms", "int", 5000, _at_least(100)),
    # security: listeners and their protocols, TLS, SASL, ACLs (rdmalog/security), quotas
    ("listener.security.protocol.map", "string", DEFAULT_PROTOCOL_MAP),
    ("inter.broker.listener.name", "string", None),
    ("security.inter.broker.protocol", "string", None, _one_of(*SECURITY_PROTOCOLS)),
    ("ssl.keystore.type", "string", "JKS"),
    ("ssl.keystore.location", "string", None),
    ("ssl.keystore.password", "password", None),
    ("ssl.keystore.key", "password", None),
    ("ssl.keystore.certificate.chain", "password", None),
    ("ssl.key.password", "password", None),
    ("ssl.truststore.type", "string", "JKS"),
    ("ssl.truststore.location", "string", None),
    ("ssl.truststore.password", "password", None),
    ("ssl.truststore.certificates", "password", None),
    ("ssl.client.auth", "string", "none", _one_of("required", "requested", "none")),
    ("ssl.enabled.protocols", "list", ["TLSv1.2", "TLSv1.3"]),
    ("ssl.protocol", "string", "TLSv1.3"),
    ("ssl.cipher.suites", "list", []),
    ("ssl.principal.mapping.rules", "string", "DEFAULT"),
    ("ssl.endpoint.identification.algorithm", "string", "https"),
    ("sasl.enabled.mechanisms", "list", ["GSSAPI"]),
    ("sasl.mechanism.inter.broker.protocol", "string", "GSSAPI"),
    ("sasl.jaas.config", "password", None),
    ("sasl.server.max.receive.size", "int", 524288, _at_least(1)),
    ("connections.max.reauth.ms", "long", 0, _at_least(0)),
    ("connection.failed.authentication.delay.ms", "int", 100, _at_least(0)),
    ("authorizer.class.name", "string", ""),
    ("super.users", "string", None),
    ("allow.everyone.if.no.acl.found", "boolean", False),
    ("quota.window.num", "int", 11, _at_least(1)),
    ("quota.window.size.seconds", "int", 1, _at_least(1)),
    # cluster mode (Kafka's ZooKeeper mode): set zookeeper.connect; unset, one broker as before
    ("zookeeper.connect", "string", None),
    ("zookeeper.session.timeout.ms", "int", 18000, _at_least(1)),
    ("zookeeper.connection.timeout.ms", "int", None, _at_least(1)),
    ("broker.rack", "string", None),
    ("replica.lag.time.max.ms", "long", 30000, _at_least(1)),
    ("replica.fetch.max.bytes", "int", 1048576, _at_least(0)),
    ("replica.fetch.response.max.bytes", "int", 10485760, _at_least(0)),
    ("replica.fetch.wait.max.ms", "int", 500, _at_least(0)),
    ("replica.fetch.min.bytes", "int", 1, _at_least(1)),
    # push replication (KafkaDirect 4.3.2): unset, push when rdma.transport names one, else pull
    ("replica.transport", "string", None, _one_of("pull", "push")),
    ("replica.push.credits", "int", 32, _at_least(1, at_most=128)),
    ("replica.push.batch.max.bytes", "int", 4096, _at_least(0)),
    ("unclean.leader.election.enable", "boolean", False),
    ("controlled.shutdown.enable", "boolean", True),
    ("auto.leader.rebalance.enable", "boolean", True),
    ("leader.imbalance.check.interval.seconds", "long", 300, _at_least(1)),
    ("leader.imbalance.per.broker.percentage", "int", 10, _at_least(0)),
    ("controlled.shutdown.max.retries", "int", 3, _at_least(0)),
    ("controlled.shutdown.retry.backoff.ms", "long", 5000, _at_least(0)),
    ("offsets.commit.timeout.ms", "int", 5000, _at_least(1)),
)

# Keys Kafka knows that rdmalog accepts and ignores (logged, never an error).
IGNORED_BROKER_KEYS = frozenset(
    """num.network.threads num.io.threads num.recovery.threads.per.data.dir num.replica.fetchers
    socket.send.buffer.bytes socket.receive.buffer.bytes queued.max.requests background.threads
    log.roll.jitter.ms log.roll.jitter.hours log.segment.delete.delay.ms
    log.message.format.version
    inter.broker.protocol.version controller.listener.names controller.quorum.voters
    controller.quorum.bootstrap.servers process.roles metadata.log.dir
    replica.socket.timeout.ms group.coordinator.rebalance.protocols
    confluent.support.metrics.enable metric.reporters transaction.state.log.segment.bytes
    offsets.load.buffer.size message.timestamp.difference.max.ms""".split()
)
# Other keys under these prefixes are accepted and ignored (logged). A setting that would make the
# broker serve less security than asked is never among them: what rdmalog/security cannot honour stops
# start-up instead (see rdmalog/security/listeners.py).
_IGNORED_PREFIXES = (
    "ssl.",
    "sasl.",
    "confluent.",
    "metrics.",
    "quota.",
    "remote.",
)


class _Config:
    """Shared machinery: parsed values, their sources, typed attribute access.

    A config is immutable once built (altering a topic config builds a new one), so resolved values
    are cached: the append path reads a dozen of them per call.
    """

    _defs: Mapping[str, ConfigDef]

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}
        self._sources: dict[str, ConfigSource] = {}
        self._resolved: dict[str, Any] = {}

    def get(self, name: str) -> Any:
        """The typed value of `name` (its default when not set)."""
        try:
            return self._resolved[name]
        except KeyError:
            pass
        if name in self._values:
            value = self._values[name]
        elif name in self._defs:
            value = self._default(name)
        else:
            raise InvalidConfigError(f"Unknown configuration {name}")
        self._resolved[name] = value
        return value

    def _default(self, name: str) -> Any:
        return self._defs[name].default

    def is_set(self, name: str) -> bool:
        return name in self._values

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):
            raise AttributeError(attr)
        name = attr.replace("_", ".")
        if name in self._defs:
            value = self.__dict__[attr] = self.get(name)  # later reads skip __getattr__
            return value
        raise AttributeError(attr)

    def describe(self) -> list[ConfigEntry]:
        """One row per known key: (name, string value, is_default, source)."""
        rows = []
        for name in self._defs:
            set_here = name in self._values
            rows.append(
                ConfigEntry(
                    name,
                    _to_str(self.get(name)),
                    not set_here,
                    self._sources.get(name, ConfigSource.DEFAULT_CONFIG),
                )
            )
        return rows


_UNSET = object()


class BrokerConfig(_Config):
    """A broker's configuration (Kafka `server.properties` names and defaults)."""

    _defs = BROKER_DEFS

    def __init__(self) -> None:
        super().__init__()
        self._listener_values: dict[tuple[str, str], Any] = {}
        self.static = self  # the server.properties layer (rdmalog/dynamic_broker_config.py)
        self.dynamic: dict[ConfigSource, dict[str, Any]] = {}

    def with_dynamic(self, layers: Mapping[ConfigSource, Mapping[str, str]]) -> BrokerConfig:
        """The static config with dynamic layers over it, lowest precedence first; validated."""
        cfg = BrokerConfig()
        cfg.static, cfg._listener_values = self.static, self.static._listener_values
        cfg._values, cfg._sources = dict(self.static._values), dict(self.static._sources)
        for source, values in layers.items():
            defs = {k: BROKER_DEFS[k] for k in values}
            parsed = {k: _parse(k, d.kind, values[k], d.validator) for k, d in defs.items()}
            cfg.dynamic[source] = parsed
            cfg._values.update(parsed)
            cfg._sources.update(dict.fromkeys(parsed, source))
        cfg._check()
        return cfg

    def layer_rows(self, key: str) -> list[ConfigEntry]:
        """`key`'s values where set, most specific first: per-broker, default dynamic, static."""
        static = (ConfigSource.STATIC_BROKER_CONFIG, self.static._values)
        layers = [*sorted(self.dynamic.items()), static]
        return [ConfigEntry(key, _to_str(v[key]), False, s) for s, v in layers if key in v]

    @classmethod
    def from_sources(
        cls, properties_file: Path | None = None, overrides: Mapping[str, Any] | None = None
    ) -> BrokerConfig:
        """Load `properties_file` (if any), then apply `overrides` (command line, tests)."""
        cfg = cls()
        if properties_file is not None:
            try:
                text = Path(properties_file).read_text(encoding="utf-8")
            except OSError as e:
                raise InvalidConfigError(f"Cannot read {properties_file}: {e}") from None
            cfg._apply(parse_properties(text), ConfigSource.STATIC_BROKER_CONFIG)
        cfg._apply(dict(overrides or {}), ConfigSource.STATIC_BROKER_CONFIG)
        cfg._check()
        return cfg

    def _apply(self, values: Mapping[str, Any], source: ConfigSource) -> None:
        for name, raw in values.items():
            d = self._defs.get(name)
            if d is None and name.startswith(LISTENER_PREFIX):
                self._apply_listener_key(name, raw)
                continue
            if d is None:
                _unknown_broker_key(name)
                continue
            self._values[name] = _parse(name, d.kind, raw, d.validator)
            self._sources[name] = source
        self._resolved.clear()

    def _apply_listener_key(self, name: str, raw: Any) -> None:
        """`listener.name.<listener>.<key>`: a broker key for one listener (Kafka's listener
        prefix), and `listener.name.<listener>.<mechanism>.sasl.jaas.config`."""
        listener, _, key = name[len(LISTENER_PREFIX) :].partition(".")
        d = BROKER_DEFS.get(key)
        if key.endswith(".sasl.jaas.config"):
            d = BROKER_DEFS["sasl.jaas.config"]
        if not listener or d is None:
            log.info("ignoring broker configuration %s (not used by rdmalog)", name)
            return
        self._listener_values[(listener.lower(), key)] = _parse(name, d.kind, raw, d.validator)

    def for_listener(self, listener: str, key: str) -> Any:
        """`key` as listener `listener` sees it: `listener.name.<listener>.<key>` when set, else
        the broker-wide `key` (None for a `<mechanism>.sasl.jaas.config` set nowhere)."""
        found = self._listener_values.get((listener.lower(), key), _UNSET)
        if found is not _UNSET:
            return found
        return self.get(key) if key in BROKER_DEFS else None

    def set_for_listener(self, listener: str, key: str) -> bool:
        """Whether `listener.name.<listener>.<key>` is set."""
        return (listener.lower(), key) in self._listener_values

    def _check(self) -> None:
        parse_listeners(self.get("listeners"))
        if self.get("advertised.listeners"):
            parse_listeners(self.get("advertised.listeners"))
        queued, frame = self.get("queued.max.request.bytes"), self.get("socket.request.max.bytes")
        if 0 < queued < frame:
            raise InvalidConfigError(
                "queued.max.request.bytes must be larger or equal to socket.request.max.bytes"
            )
        if self.get("max.connections.per.ip") == 0:
            raise InvalidConfigError(
                "max.connections.per.ip can be set to zero only if "
                "max.connections.per.ip.overrides is set, which rdmalog does not support"
            )
        b, n = self.get("broker.id"), self.get("node.id")
        if b >= 0 and n >= 0 and b != n:
            raise InvalidConfigError(f"broker.id={b} and node.id={n} must agree")
        threads = self.get("log.cleaner.threads")
        if threads and self.get("log.cleaner.dedupe.buffer.size") // threads <= 1 << 20:
            raise InvalidConfigError(
                "log.cleaner.dedupe.buffer.size must be at least 1MB per cleaner thread."
            )

    # Effective values that Kafka derives from several keys.
    @property
    def log_dirs(self) -> list[Path]:
        dirs = self.get("log.dirs")
        return [Path(d) for d in dirs] if dirs else [Path(self.get("log.dir"))]

    @property
    def node_id(self) -> int:
        n = self.get("node.id")
        return n if n >= 0 else max(self.get("broker.id"), 0)

    @property
    def broker_id(self) -> int:
        return self.node_id

    @property
    def log_roll_ms(self) -> int:
        ms = self.get("log.roll.ms")
        return ms if ms is not None else self.get("log.roll.hours") * 3_600_000

    @property
    def log_retention_ms(self) -> int:
        ms = self.get("log.retention.ms")
        if ms is None and self.get("log.retention.minutes") is not None:
            ms = self.get("log.retention.minutes") * 60_000
        if ms is None:
            ms = self.get("log.retention.hours") * 3_600_000
        return -1 if ms < 0 else ms

    @property
    def log_flush_interval_ms(self) -> int:
        ms = self.get("log.flush.interval.ms")
        return ms if ms is not None else self.get("log.flush.scheduler.interval.ms")

    @property
    def listeners(self) -> list[Listener]:
        return parse_listeners(self.get("listeners"))

    @property
    def advertised_listeners(self) -> list[Listener]:
        adv = self.get("advertised.listeners")
        return parse_listeners(adv) if adv else self.listeners


def _unknown_broker_key(name: str) -> None:
    if name in IGNORED_BROKER_KEYS or name.startswith(_IGNORED_PREFIXES):
        log.info("ignoring broker configuration %s (not used by rdmalog)", name)
        return
    close = difflib.get_close_matches(name, list(BROKER_DEFS) + list(IGNORED_BROKER_KEYS), 1, 0.85)
    if close:
        raise InvalidConfigError(f"Unknown configuration {name} (did you mean {close[0]}?)")
    log.warning("ignoring unknown broker configuration %s", name)


# --- topic configuration ---------------------------------------------------------------------------

# Topic key -> (definition, broker key or derived property supplying the default).
_TOPIC_ROWS: list[tuple[tuple, str | None]] = [
    (("retention.ms", "long", None, _at_least(-1)), "log_retention_ms"),
    (("retention.bytes", "long", None), "log.retention.bytes"),
    (("segment.bytes", "int", None, _at_least(14)), "log.segment.bytes"),
    (("segment.ms", "long", None, _at_least(1)), "log_roll_ms"),
    (("segment.index.bytes", "int", None, _at_least(4)), "log.index.size.max.bytes"),
    (("index.interval.bytes", "int", None, _at_least(0)), "log.index.interval.bytes"),
    (("max.message.bytes", "int", None, _at_least(0)), "message.max.bytes"),
    (
        ("message.timestamp.type", "string", None, _one_of(*TIMESTAMP_TYPES)),
        "log.message.timestamp.type",
    ),
    (("cleanup.policy", "list", None, _one_of("delete", "compact")), "log.cleanup.policy"),
    (("min.insync.replicas", "int", None, _at_least(1)), "min.insync.replicas"),
    (("flush.messages", "long", None, _at_least(1)), "log.flush.interval.messages"),
    (("flush.ms", "long", None, _at_least(0)), "log_flush_interval_ms"),
    (("compression.type", "string", None, _one_of("producer")), "compression.type"),
    (("preallocate", "boolean", None), "log.preallocate"),
    (("delete.retention.ms", "long", None, _at_least(0)), "log.cleaner.delete.retention.ms"),
    (
        ("min.cleanable.dirty.ratio", "double", None, _between(0, 1)),
        "log.cleaner.min.cleanable.ratio",
    ),
    (("min.compaction.lag.ms", "long", None, _at_least(0)), "log.cleaner.min.compaction.lag.ms"),
    (("max.compaction.lag.ms", "long", None, _at_least(1)), "log.cleaner.max.compaction.lag.ms"),
    # Accepted and described with Kafka's defaults; not enforced yet.
    (("file.delete.delay.ms", "long", 60000, _at_least(0)), None),
    (("segment.jitter.ms", "long", 0, _at_least(0)), None),
    (("unclean.leader.election.enable", "boolean", False), None),
    (("message.downconversion.enable", "boolean", None), "log.message.downconversion.enable"),
    (("message.format.version", "string", "3.0-IV1"), None),
    (
        ("message.timestamp.difference.max.ms", "long", None, _at_least(0)),
        "log.message.timestamp.difference.max.ms",
    ),
    (
        ("message.timestamp.before.max.ms", "long", None, _at_least(0)),
        "log.message.timestamp.before.max.ms",
    ),
    (
        ("message.timestamp.after.max.ms", "long", None, _at_least(0)),
        "log.message.timestamp.after.max.ms",
    ),
    (("leader.replication.throttled.replicas", "list", []), None),
    (("follower.replication.throttled.replicas", "list", []), None),
    (("local.retention.ms", "long", -2, _at_least(-2)), None),
    (("local.retention.bytes", "long", -2, _at_least(-2)), None),
    (("remote.storage.enable", "boolean", False), None),
    # rdmalog's own: a mirror topic's source cluster (bootstrap servers; gateway/mirror)
    (("rdmalog.mirror.source", "string", ""), None),
]
TOPIC_DEFS = _defs(*(row for row, _ in _TOPIC_ROWS))
_TOPIC_BROKER_DEFAULT = {row[0]: src for row, src in _TOPIC_ROWS}


class TopicConfig(_Config):
    """A topic's effective configuration: its overrides over the broker's defaults."""

    _defs = TOPIC_DEFS

    def __init__(self, broker: BrokerConfig) -> None:
        super().__init__()
        self.broker = broker

    @classmethod
    def from_overrides(
        cls, broker: BrokerConfig, overrides: Mapping[str, Any] | None = None
    ) -> TopicConfig:
        """Validate `overrides` (Kafka topic config names); unknown names raise InvalidConfigError."""
        cfg = cls(broker)
        for name, raw in (overrides or {}).items():
            d = TOPIC_DEFS.get(name)
            if d is None:
                raise InvalidConfigError(f"Unknown topic config name: {name}")
            if raw is None:
                continue
            cfg._values[name] = _parse(name, d.kind, raw, d.validator)
            cfg._sources[name] = ConfigSource.DYNAMIC_TOPIC_CONFIG
        lo, hi = cfg.get("min.compaction.lag.ms"), cfg.get("max.compaction.lag.ms")
        if lo > hi:
            raise InvalidConfigError(
                f"conflict topic config setting min.compaction.lag.ms ({lo}) > "
                f"max.compaction.lag.ms ({hi})"
            )
        return cfg

    @property
    def overrides(self) -> dict[str, str]:
        """The explicitly set keys as strings (what is persisted with the topic)."""
        return {k: _to_str(v) for k, v in self._values.items()}  # type: ignore[misc]

    def altered(self, changes: Mapping[str, Any], replace: bool = False) -> TopicConfig:
        """A new config with `changes` applied (value None reverts a key to its default)."""
        merged: dict[str, Any] = {} if replace else dict(self.overrides)
        for k, v in changes.items():
            if k not in TOPIC_DEFS:
                raise InvalidConfigError(f"Unknown topic config name: {k}")
            if v is None:
                merged.pop(k, None)
            else:
                merged[k] = v
        return TopicConfig.from_overrides(self.broker, merged)

    def _default(self, name: str) -> Any:
        src = _TOPIC_BROKER_DEFAULT.get(name)
        if src is None:
            return TOPIC_DEFS[name].default
        return getattr(self.broker, src) if "_" in src else self.broker.get(src)

    def describe(self) -> list[ConfigEntry]:
        rows = []
        for name in TOPIC_DEFS:
            if name in self._values:
                source = ConfigSource.DYNAMIC_TOPIC_CONFIG
            else:
                src = _TOPIC_BROKER_DEFAULT.get(name)
                keys = _broker_synonyms(src.replace("_", ".")) if src else ()
                set_at = [self.broker._sources[k] for k in keys if self.broker.is_set(k)]
                source = min(set_at, default=ConfigSource.DEFAULT_CONFIG)  # most specific
            rows.append(
                ConfigEntry(name, _to_str(self.get(name)), name not in self._values, source)
            )
        return rows

    def synonyms(self, name: str) -> list[ConfigEntry]:
        """DescribeConfigs synonyms of a topic key, most specific first: the topic override, the
        broker keys that supply its default when set, then the built-in default."""
        if name not in TOPIC_DEFS:
            raise InvalidConfigError(f"Unknown topic config name: {name}")
        rows = []
        if name in self._values:
            rows.append(
                ConfigEntry(
                    name, _to_str(self._values[name]), False, ConfigSource.DYNAMIC_TOPIC_CONFIG
                )
            )
        src = _TOPIC_BROKER_DEFAULT.get(name)
        if src is None:
            rows.append(
                ConfigEntry(
                    name, _to_str(TOPIC_DEFS[name].default), True, ConfigSource.DEFAULT_CONFIG
                )
            )
            return rows
        keys = list(_broker_synonyms(src.replace("_", ".")))
        for key in keys:
            rows.extend(self.broker.layer_rows(key))
        for key in keys:
            if BROKER_DEFS[key].default is not None:
                rows.append(
                    ConfigEntry(
                        key, _to_str(BROKER_DEFS[key].default), True, ConfigSource.DEFAULT_CONFIG
                    )
                )
                break
        return rows

    @cached_property  # read per append; a config is immutable once built
    def log_append_time(self) -> bool:
        return self.get("message.timestamp.type") == "LogAppendTime"


def _broker_synonyms(key: str) -> Iterable[str]:
    if key == "log.retention.ms":
        return ("log.retention.ms", "log.retention.minutes", "log.retention.hours")
    if key == "log.roll.ms":
        return ("log.roll.ms", "log.roll.hours")
    if key == "log.flush.interval.ms":
        return ("log.flush.interval.ms", "log.flush.scheduler.interval.ms")
    return (key,)
