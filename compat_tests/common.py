"""Helpers for the scenarios: topic names, topic creation, generated records, comparisons."""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
TIMEOUT_S = 20.0  # bound for every wait on the broker
DEFAULT_MESSAGE_MAX_BYTES = 1048588  # Kafka's message.max.bytes default


class ScenarioSkip(Exception):
    """The scenario cannot run here (e.g. a tool is missing); neither a pass nor a failure."""


def unique_topic(prefix: str) -> str:
    return f"compat-{prefix}-{uuid.uuid4().hex[:10]}"


def now_ms() -> int:
    return int(time.time() * 1000)


class Deadline:
    def __init__(self, seconds: float = TIMEOUT_S) -> None:
        self.end = time.monotonic() + seconds

    def __bool__(self) -> bool:
        return time.monotonic() < self.end

    def left(self) -> float:
        return max(0.0, self.end - time.monotonic())


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})


def create_topic(
    bootstrap: str, name: str, partitions: int = 3, config: dict[str, str] | None = None
) -> None:
    """Create a topic through CreateTopics and wait until metadata shows every partition led."""
    client = admin(bootstrap)
    futures = client.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})],
        operation_timeout=10,
        request_timeout=15,
    )
    futures[name].result(timeout=TIMEOUT_S)
    wait_for_topic(client, name, partitions)


def wait_for_topic(client: AdminClient, name: str, partitions: int) -> None:
    deadline = Deadline()
    last = "not listed"
    while deadline:
        md = client.list_topics(topic=name, timeout=5)
        topic = md.topics.get(name)
        if topic is not None and topic.error is None and len(topic.partitions) == partitions:
            if all(p.leader >= 0 and p.error is None for p in topic.partitions.values()):
                return
            last = f"partitions {[(p.id, p.leader, p.error) for p in topic.partitions.values()]}"
        elif topic is not None:
            last = f"error={topic.error} partitions={len(topic.partitions)}"
        time.sleep(0.1)
    raise AssertionError(f"topic {name} not ready in metadata: {last}")


def topic_max_message_bytes(bootstrap: str, topic: str) -> int:
    """The topic's effective max.message.bytes (DescribeConfigs), or Kafka's default."""
    try:
        res = ConfigResource(ConfigResource.Type.TOPIC, topic)
        client = admin(bootstrap)  # keep a reference: the futures die with their client
        configs = client.describe_configs([res])[res].result(timeout=10)
        entry = configs.get("max.message.bytes")
        if entry is not None and entry.value:
            return int(entry.value)
    except (KafkaException, ValueError, TimeoutError):
        pass
    return DEFAULT_MESSAGE_MAX_BYTES


@dataclass(frozen=True)
class Rec:
    """One record as sent and as read back (offset is -1 until read)."""

    partition: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int
    offset: int = field(default=-1, compare=False)


def make_records(n: int, partitions: int, tag: str, base_ts: int | None = None) -> list[Rec]:
    """Records spread over all partitions: keyed (one null key), headers (a repeated key, an empty
    value), explicit CreateTime timestamps, values mixing compressible text and every byte value."""
    base_ts = base_ts if base_ts is not None else now_ms() - 60_000
    recs = []
    for i in range(n):
        key = None if i == 0 else f"key-{tag}-{i}".encode()
        text = f"value {i} of {tag} " * (1 + i % 7)
        value = text.encode() + bytes(range(256))[: (i * 37) % 257]
        headers = (("idx", str(i).encode()), ("dup", b"1"), ("dup", b"2"), ("empty", b""))
        recs.append(Rec(i % partitions, key, value, headers, base_ts + i * 3))
    return recs


def norm_headers(
    headers: Iterable[tuple[str, bytes | None]] | None,
) -> tuple[tuple[str, bytes], ...]:
    out = []
    for k, v in headers or ():
        out.append((k.decode() if isinstance(k, bytes) else k, b"" if v is None else bytes(v)))
    return tuple(out)


def compare(sent: list[Rec], got: list[Rec]) -> None:
    """Per partition, the records read (in offset order) equal the records sent (in send order),
    and offsets within each partition are contiguous from 0."""
    by_part_sent: dict[int, list[Rec]] = defaultdict(list)
    by_part_got: dict[int, list[Rec]] = defaultdict(list)
    for r in sent:
        by_part_sent[r.partition].append(r)
    for r in sorted(got, key=lambda r: (r.partition, r.offset)):
        by_part_got[r.partition].append(r)
    assert sorted(by_part_got) == sorted(by_part_sent), (
        f"partitions read {sorted(by_part_got)} != partitions written {sorted(by_part_sent)}"
    )
    for p, want in by_part_sent.items():
        have = by_part_got[p]
        offsets = [r.offset for r in have]
        assert offsets == list(range(len(have))), f"partition {p}: offsets {offsets}"
        assert len(have) == len(want), f"partition {p}: read {len(have)} records, sent {len(want)}"
        for i, (a, b) in enumerate(zip(want, have, strict=True)):
            assert a == b, f"partition {p} record {i}:\n sent {a}\n read {b}"
