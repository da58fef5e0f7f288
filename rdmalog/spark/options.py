"""Parse and validate the source's options, with spark-sql-kafka's names and rules."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from rdmalog.spark.security_options import SecurityOptionError, client_security

# Kafka's special offsets in per-partition JSON (spark-sql-kafka uses the same numbers)
LATEST = -1
EARLIEST = -2

TRANSPORTS = ("kafka", "shm", "tcp")
DEFAULT_POLL_TIMEOUT_MS = (
    120_000  # spark-sql-kafka: kafkaConsumer.pollTimeoutMs = spark.network.timeout
)

# spark-sql-kafka options this source does not implement: rejected rather than silently ignored
UNSUPPORTED = ("minoffsetspertrigger", "maxtriggerdelay", "maxrecordsperpartition")

# Kafka client settings spark-sql-kafka itself forbids (it owns them)
FORBIDDEN_KAFKA = {
    "auto.offset.reset": "use startingOffsets/endingOffsets instead",
    "enable.auto.commit": "the source never commits offsets to Kafka",
    "key.deserializer": "keys are always returned as binary",
    "value.deserializer": "values are always returned as binary",
    "key.serializer": "keys are always written as binary",
    "value.serializer": "values are always written as binary",
    "interceptor.classes": "not supported",
}

TopicPartition = tuple[str, int]


class OptionError(ValueError):
    """A bad option; the message names it."""


@dataclass(frozen=True)
class Subscription:
    """Which topic-partitions to read: `subscribe`, `subscribePattern` or `assign`."""

    kind: str
    topics: tuple[str, ...] = ()
    pattern: str = ""
    assigned: tuple[TopicPartition, ...] = ()

    def matches(self, topic: str) -> bool:
        """True when `topic` belongs to a `subscribe`/`subscribePattern` subscription."""
        if self.kind == "subscribe":
            return topic in self.topics
        return re.fullmatch(self.pattern, topic) is not None


@dataclass(frozen=True)
class OffsetSpec:
    """A starting or ending position: `earliest`, `latest`, per-partition offsets or timestamps.

    kind is "earliest", "latest", "offsets" (`offsets` maps topic-partition to an offset or
    LATEST/EARLIEST), "timestamp" (one `timestamp` for all partitions) or "timestamps"
    (`offsets` maps topic-partition to a timestamp).
    """

    kind: str
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    timestamp: int = 0
    option: str = ""


@dataclass(frozen=True)
class ConnectionOptions:
    """Where and how to connect: bootstrap, transport and pass-through client settings."""

    bootstrap: str
    transport: str
    client_conf: dict[str, str]
    control: str = ""


@dataclass(frozen=True)
class ReadOptions:
    """Everything a reader needs, validated."""

    conn: ConnectionOptions
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec | None
    include_headers: bool
    fail_on_data_loss: bool
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    poll_timeout_ms: int
    timestamp_strategy: str


@dataclass(frozen=True)
class WriteOptions:
    """Everything a writer needs, validated."""

    conn: ConnectionOptions
    topic: str | None


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def parse_bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    """Read a boolean option ("true"/"false", any case)."""
    raw = opts.get(name.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise OptionError(f"option '{name}' must be 'true' or 'false', got {raw!r}")
    return value == "true"


def parse_positive_int(opts: Mapping[str, str], name: str) -> int | None:
    """Read an optional integer option that must be > 0."""
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(f"option '{name}' must be a positive integer, got {raw!r}") from None
    if value <= 0:
        raise OptionError(f"option '{name}' must be a positive integer, got {raw!r}")
    return value


def parse_connection(options: Mapping[str, str]) -> ConnectionOptions:
    """`rdmalog.bootstrap` (or `kafka.bootstrap.servers`), `rdmalog.transport`/`rdmalog.control`,
    and `kafka.*` client settings."""
    opts = _lower(options)
    bootstrap = (opts.get("rdmalog.bootstrap") or opts.get("kafka.bootstrap.servers") or "").strip()
    if not bootstrap:
        raise OptionError(
            "option 'rdmalog.bootstrap' (or 'kafka.bootstrap.servers') must be set to the "
            "broker's host:port list"
        )
    transport = opts.get("rdmalog.transport", "kafka").strip().lower()
    if transport not in TRANSPORTS:
        raise OptionError(
            f"option 'rdmalog.transport' must be one of {', '.join(TRANSPORTS)}, "
            f"got {opts['rdmalog.transport']!r}"
        )
    conf: dict[str, str] = {}
    for key, value in opts.items():
        if not key.startswith("kafka.") or key == "kafka.bootstrap.servers":
            continue
        name = key[len("kafka.") :]
        if name in FORBIDDEN_KAFKA:
            raise OptionError(f"option '{key}' is not supported: {FORBIDDEN_KAFKA[name]}")
        conf[name] = value
    try:
        conf = client_security(conf)
    except SecurityOptionError as exc:
        raise OptionError(str(exc)) from None
    control = opts.get("rdmalog.control", "").strip()
    if transport != "kafka" and not control:
        raise OptionError(
            f"option 'rdmalog.control' must be set to the broker's RDMA control address "
            f"(host:port) when rdmalog.transport={transport}"
        )
    if control:
        _check_address("rdmalog.control", control)
    return ConnectionOptions(bootstrap, transport, conf, control)


def _check_address(name: str, value: str) -> None:
    """One host:port (checked on the driver: a bad one would fail each executor's task)."""
    host, _, port = value.rpartition(":")
    if not host or "," in host or not port.isdigit() or not 0 < int(port) < 65536:
        raise OptionError(f"option '{name}' must be one host:port address, got {value!r}")


def parse_subscription(opts: Mapping[str, str]) -> Subscription:
    """Exactly one of `subscribe`, `subscribePattern`, `assign`."""
    given = [name for name in ("subscribe", "subscribePattern", "assign") if name.lower() in opts]
    if len(given) != 1:
        what = "none" if not given else ", ".join(given)
        raise OptionError(
            "exactly one of the options 'subscribe', 'subscribePattern', 'assign' must be "
            f"specified for the rdmalog source, got {what}"
        )
    name = given[0]
    raw = opts[name.lower()]
    if name == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise OptionError(f"option 'subscribe' must name at least one topic, got {raw!r}")
        return Subscription("subscribe", topics=topics)
    if name == "subscribePattern":
        if not raw.strip():
            raise OptionError("option 'subscribePattern' must not be empty")
        try:
            re.compile(raw.strip())
        except re.error as exc:
            raise OptionError(f"option 'subscribePattern' is not a valid regex: {exc}") from None
        return Subscription("subscribePattern", pattern=raw.strip())
    parsed = _parse_json(name, raw)
    assigned: list[TopicPartition] = []
    for topic, parts in parsed.items():
        if not isinstance(parts, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts
        ):
            raise OptionError(
                f"option 'assign' expects JSON like {{\"topicA\":[0,1]}}; topic {topic!r} has {parts!r}"
            )
        assigned.extend((topic, p) for p in parts)
    if not assigned:
        raise OptionError("option 'assign' must name at least one topic-partition")
    return Subscription("assign", assigned=tuple(sorted(set(assigned))))


def _parse_json(name: str, raw: str) -> dict:
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option '{name}' is neither a keyword nor valid JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise OptionError(f"option '{name}' must be a JSON object, got {raw!r}")
    return parsed


def parse_partition_map(name: str, raw: str) -> dict[TopicPartition, int]:
    """Parse spark-sql-kafka's `{"topic":{"0":23,"1":-1}}` JSON into {(topic, 0): 23, ...}."""
    result: dict[TopicPartition, int] = {}
    for topic, parts in _parse_json(name, raw).items():
        if not isinstance(parts, dict):
            raise OptionError(
                f'option \'{name}\' expects JSON like {{"topic":{{"0":23}}}}; '
                f"topic {topic!r} has {parts!r}"
            )
        for part, value in parts.items():
            try:
                index = int(part)
            except (TypeError, ValueError):
                raise OptionError(
                    f"option '{name}': partition {part!r} of topic {topic!r} is not an integer"
                ) from None
            if not isinstance(value, int) or isinstance(value, bool):
                raise OptionError(
                    f"option '{name}': value for {topic}-{index} must be an integer, got {value!r}"
                )
            result[(topic, index)] = value
    return result


def parse_offset_spec(
    opts: Mapping[str, str], prefix: str, default: str | None
) -> OffsetSpec | None:
    """`<prefix>Timestamp` > `<prefix>OffsetsByTimestamp` > `<prefix>Offsets` (spark-sql-kafka's order)."""
    ts_name, by_ts_name, off_name = (
        f"{prefix}Timestamp",
        f"{prefix}OffsetsByTimestamp",
        f"{prefix}Offsets",
    )
    if ts_name.lower() in opts:
        raw = opts[ts_name.lower()]
        try:
            ts = int(raw.strip())
        except ValueError:
            raise OptionError(
                f"option '{ts_name}' must be a timestamp in milliseconds, got {raw!r}"
            ) from None
        if ts < 0:
            raise OptionError(f"option '{ts_name}' must be >= 0, got {raw!r}")
        return OffsetSpec("timestamp", timestamp=ts, option=ts_name)
    if by_ts_name.lower() in opts:
        stamps = parse_partition_map(by_ts_name, opts[by_ts_name.lower()])
        for tp, ts in stamps.items():
            if ts < 0:
                raise OptionError(
                    f"option '{by_ts_name}': timestamp for {tp[0]}-{tp[1]} must be >= 0"
                )
        return OffsetSpec("timestamps", offsets=stamps, option=by_ts_name)
    raw = opts.get(off_name.lower(), default)
    if raw is None:
        return None
    word = raw.strip().lower()
    if word in ("earliest", "latest"):
        return OffsetSpec(word, option=off_name)
    offsets = parse_partition_map(off_name, raw)
    for tp, off in offsets.items():
        if off < EARLIEST:
            raise OptionError(
                f"option '{off_name}': offset {off} for {tp[0]}-{tp[1]} is invalid "
                "(use an offset >= 0, -1 for latest or -2 for earliest)"
            )
    return OffsetSpec("offsets", offsets=offsets, option=off_name)


def parse_read(options: Mapping[str, str], streaming: bool) -> ReadOptions:
    """Validate reader options like spark-sql-kafka does for batch or streaming queries."""
    opts = _lower(options)
    for name in UNSUPPORTED:
        if name in opts:
            original = next(k for k in options if str(k).lower() == name)
            raise OptionError(f"option '{original}' is not supported by the rdmalog source")
    conn = parse_connection(options)
    subscription = parse_subscription(opts)
    starting = parse_offset_spec(opts, "starting", "latest" if streaming else "earliest")
    assert starting is not None
    ending = parse_offset_spec(opts, "ending", None)
    if streaming:
        if ending is not None:
            raise OptionError(f"option '{ending.option}' is not valid in streaming queries")
    else:
        if starting.kind == "latest":
            raise OptionError(
                "option 'startingOffsets': starting offset can't be latest for batch queries"
            )
        if starting.kind == "offsets":
            for tp, off in starting.offsets.items():
                if off == LATEST:
                    raise OptionError(
                        f"option 'startingOffsets': starting offset for {tp[0]}-{tp[1]} can't be "
                        "latest (-1) for batch queries"
                    )
        if ending is None:
            ending = OffsetSpec("latest", option="endingOffsets")
        if ending.kind == "earliest":
            raise OptionError(
                "option 'endingOffsets': ending offset can't be earliest for batch queries"
            )
        if ending.kind == "offsets":
            for tp, off in ending.offsets.items():
                if off == EARLIEST:
                    raise OptionError(
                        f"option 'endingOffsets': ending offset for {tp[0]}-{tp[1]} can't be "
                        "earliest (-2) for batch queries"
                    )
    max_per_trigger = parse_positive_int(opts, "maxOffsetsPerTrigger")
    if max_per_trigger is not None and not streaming:
        max_per_trigger = None  # spark-sql-kafka ignores it for batch queries
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError(
            "option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', "
            f"got {opts['startingoffsetsbytimestampstrategy']!r}"
        )
    poll_ms = parse_positive_int(opts, "kafkaConsumer.pollTimeoutMs") or DEFAULT_POLL_TIMEOUT_MS
    return ReadOptions(
        conn=conn,
        subscription=subscription,
        starting=starting,
        ending=ending,
        include_headers=parse_bool(opts, "includeHeaders", False),
        fail_on_data_loss=parse_bool(opts, "failOnDataLoss", True),
        max_offsets_per_trigger=max_per_trigger,
        min_partitions=parse_positive_int(opts, "minPartitions"),
        poll_timeout_ms=poll_ms,
        timestamp_strategy=strategy,
    )


def parse_write(options: Mapping[str, str]) -> WriteOptions:
    """Validate writer options: connection plus the optional `topic`."""
    opts = _lower(options)
    conn = parse_connection(options)
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise OptionError("option 'topic' must not be empty")
    return WriteOptions(conn=conn, topic=topic.strip() if topic else None)
