"""Hostile frames for the fuzz test (test_fuzz_frames.py) and the fuzz bench (bench/fuzz.py).

The corpus is what real clients send: kafka-python and confluent-kafka produce, consume in a group,
commit and administer topics, configs and groups through `kafka_tap.py`, which keeps every request
frame. `Mutator` derives frames from it with a seeded RNG (the same seed gives the same frames for
the same corpus): bit flips, truncations, trailing bytes, length and count fields set to edge values,
huge or cut varints, a repeated slice (elements twice), splices of two requests, unknown API keys and
versions, and size prefixes that lie. `Flood` sends them over several connections, each a burst of
frames then reading until the broker answers no more or closes; `Watcher` is a well-behaved client
timing ApiVersions meanwhile.
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from compat_tests.brokers import BrokerProcess
from gateway.protocol import encode_request
from tests.integration.kafka_tap import KafkaTap
from tests.integration.rawkafka import recv_exact

CAPTURE_TIMEOUT_S = 30.0
_EDGE_VALUES = (
    0,
    1,
    2,
    0x7F,
    0x80,
    0xFF,
    0x7FFF,
    0x8000,
    0xFFFF,
    0x7FFFFFFF,
    0x80000000,
    0xFFFFFFFF,
)


# --- the corpus ---------------------------------------------------------------------------------


def _kafka_python_clients(bootstrap: str) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic

    admin = KafkaAdminClient(
        bootstrap_servers=bootstrap, client_id="fuzz-kp", request_timeout_ms=10000
    )
    try:
        admin.create_topics([NewTopic("fz-kp", 2, 1, topic_configs={"retention.ms": "3600000"})])
        admin.create_topics([NewTopic("fz-kp-tmp", 1, 1)])
        admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "fz-kp")])
        admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, "fz-kp", configs={"retention.ms": "7200000"})]
        )
        admin.create_partitions({"fz-kp": NewPartitions(3)})
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
        for i in range(30):
            producer.send("fz-kp", key=b"k%d" % i, value=b"v" * 100, headers=[("h", b"1")])
        producer.flush(10)
        producer.close(10)
        consumer = KafkaConsumer(
            "fz-kp",
            bootstrap_servers=bootstrap,
            group_id="fz-kp-group",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        got, deadline = 0, time.monotonic() + CAPTURE_TIMEOUT_S
        while got < 30 and time.monotonic() < deadline:
            got += sum(len(v) for v in consumer.poll(500).values())
        consumer.commit()
        consumer.close()
        for call in (
            admin.list_groups,
            lambda: admin.describe_groups(["fz-kp-group"]),
            lambda: admin.list_group_offsets("fz-kp-group"),
            admin.describe_log_dirs,
            admin.list_topics,
            lambda: admin.delete_topics(["fz-kp-tmp"]),
        ):
            try:
                call()
            except Exception:  # an answer is what the corpus needs, not success
                pass
    finally:
        admin.close()


def _confluent_clients(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        NewTopic,
    )

    def wait(futures: dict) -> None:
        for f in futures.values():
            try:
                f.result(timeout=CAPTURE_TIMEOUT_S)
            except Exception:  # an answer is what the corpus needs, not success
                pass

    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "fuzz-ck"})
    wait(admin.create_topics([NewTopic("fz-ck", 2, 1), NewTopic("fz-ck-tmp", 1, 1)]))
    resource = ConfigResource(ConfigResource.Type.TOPIC, "fz-ck")
    wait(admin.describe_configs([resource]))
    entry = ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
    wait(
        admin.incremental_alter_configs(
            [ConfigResource(ConfigResource.Type.TOPIC, "fz-ck", incremental_configs=[entry])]
        )
    )
    wait(admin.create_partitions([NewPartitions("fz-ck", 3)]))
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    for i in range(30):
        producer.produce("fz-ck", key=b"k%d" % i, value=b"v" * 100, headers={"h": b"1"})
    producer.flush(CAPTURE_TIMEOUT_S)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "fz-ck-group",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(["fz-ck"])
    got, deadline = 0, time.monotonic() + CAPTURE_TIMEOUT_S
    while got < 30 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got += 1
    consumer.commit(asynchronous=False)
    consumer.close()
    wait(admin.delete_records([TopicPartition("fz-ck", 0, 5)]))
    admin.describe_cluster().result(timeout=CAPTURE_TIMEOUT_S)
    admin.list_consumer_groups().result(timeout=CAPTURE_TIMEOUT_S)
    wait(admin.describe_consumer_groups(["fz-ck-group"]))
    wait(admin.delete_topics(["fz-ck-tmp"]))
    wait(admin.delete_consumer_groups(["fz-ck-group"]))


def capture_corpus(work: Path) -> list[bytes]:
    """Every request frame (size prefix included) the clients above send to a fresh broker."""
    tap = KafkaTap(keep_requests=True)
    broker = BrokerProcess(
        Path(work) / "capture-data",
        overrides={
            "advertised.listeners": f"PLAINTEXT://{tap.address}",
            "group.initial.rebalance.delay.ms": "0",
        },
        log_dir=Path(work),
    )
    broker.start()
    tap.upstream = (broker.host, broker.port)
    try:
        _kafka_python_clients(tap.address)
        _confluent_clients(tap.address)
    finally:
        tap.close()
        broker.stop()
    return list(tap.requests)


# --- mutations ----------------------------------------------------------------------------------


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


class Mutator:
    """Mutated frames from a corpus: each picks an (API key, version) of the corpus uniformly (so
    the chatty APIs do not drown the rare ones), one of its frames and one mutation."""

    def __init__(self, corpus: list[bytes], seed: int) -> None:
        self.rng = random.Random(seed)
        groups: dict[tuple[int, int], list[bytes]] = defaultdict(list)
        for frame in corpus:
            body = frame[4:]
            if len(body) >= 8:
                groups[struct.unpack_from(">hh", body)].append(body)
        self.groups = [groups[k] for k in sorted(groups)]
        self.kinds: list[tuple[str, Callable[[bytes], bytes]]] = [
            ("bits", self._bits),
            ("truncate", self._truncate),
            ("extend", self._extend),
            ("length", self._length),
            ("varint", self._varint),
            ("repeat", self._repeat),
            ("splice", self._splice),
            ("api_key", self._api_key),
            ("version", self._version),
        ]

    def apis(self) -> list[tuple[int, int]]:
        return [struct.unpack_from(">hh", g[0]) for g in self.groups]

    def _body(self) -> bytes:
        return self.rng.choice(self.rng.choice(self.groups))

    def next(self) -> tuple[str, bytes]:
        """(mutation name, frame with its size prefix)."""
        if self.rng.random() < 0.05:  # a size prefix that lies
            body = self._body()
            cut = self.rng.randrange(1, len(body))
            return "size", struct.pack(">i", cut) + body
        name, mutate = self.rng.choice(self.kinds)
        return name, _frame(mutate(self._body()))

    def _bits(self, body: bytes) -> bytes:
        out = bytearray(body)
        for _ in range(self.rng.randint(1, 8)):
            out[self.rng.randrange(len(out))] ^= 1 << self.rng.randrange(8)
        return bytes(out)

    def _truncate(self, body: bytes) -> bytes:
        return body[: self.rng.randrange(len(body))]

    def _extend(self, body: bytes) -> bytes:
        return body + self.rng.randbytes(self.rng.randint(1, 64))

    def _length(self, body: bytes) -> bytes:
        """An edge value where a length or count may be (2 or 4 bytes)."""
        width = self.rng.choice((2, 4))
        at = self.rng.randrange(8, max(9, len(body) - width + 1))
        value = self.rng.choice((*_EDGE_VALUES, len(body), len(body) + 1)) & (
            (1 << (8 * width)) - 1
        )
        out = bytearray(body)
        out[at : at + width] = value.to_bytes(width, "big")
        return bytes(out)

    def _varint(self, body: bytes) -> bytes:
        """A huge, negative-looking or cut unsigned varint (compact lengths and counts)."""
        at = self.rng.randrange(8, max(9, len(body)))
        junk = self.rng.choice(
            (b"\xff" * 4 + b"\x07", b"\xff" * 9 + b"\x01", b"\x80", b"\x00", b"\x01", b"\xff\x7f")
        )
        return body[:at] + junk + body[at + 1 :]

    def _repeat(self, body: bytes) -> bytes:
        """A slice of the body twice in a row (array elements repeated, counts unchanged)."""
        start = self.rng.randrange(8, max(9, len(body)))
        end = min(len(body), start + self.rng.randint(1, 64))
        return body[:end] + body[start:end] * self.rng.randint(1, 50) + body[end:]

    def _splice(self, body: bytes) -> bytes:
        other = self._body()
        return body[: self.rng.randrange(len(body))] + other[self.rng.randrange(len(other)) :]

    def _api_key(self, body: bytes) -> bytes:
        key = self.rng.choice((-1, 7, 17, 24, 50, 67, 68, 80, 1000, -32768))
        return struct.pack(">h", key) + body[2:]

    def _version(self, body: bytes) -> bytes:
        version = self.rng.choice((-1, -32768, 0, 1, 15, 16, 17, 20, 32767))
        return body[:2] + struct.pack(">h", version) + body[4:]


# --- sending ------------------------------------------------------------------------------------


@dataclass
class FloodStats:
    frames: int = 0
    connections: int = 0
    closed_by_broker: int = 0
    answer_bytes: int = 0
    by_kind: dict[str, int] = field(default_factory=lambda: defaultdict(int))


class Flood:
    """Sends `total` mutated frames over `connections` parallel connections, in bursts of a few
    frames per connection; each burst is followed by reading until the broker has said nothing
    for `idle_s` (or closed), then the connection is closed."""

    def __init__(
        self,
        address: tuple[str, int],
        mutator: Mutator,
        total: int,
        connections: int = 4,
        idle_s: float = 0.02,
    ) -> None:
        self.address = address
        self.mutator = mutator
        self.total = total
        self.connections = connections
        self.idle_s = idle_s
        self.stats = FloodStats()
        self._lock = threading.Lock()

    def _take(self, n: int) -> list[tuple[str, bytes]]:
        with self._lock:
            n = min(n, self.total - self.stats.frames)
            self.stats.frames += n
            batch = [self.mutator.next() for _ in range(n)]
            for kind, _ in batch:
                self.stats.by_kind[kind] += 1
            return batch

    def _worker(self) -> None:
        rng = random.Random(self.mutator.rng.random())
        while True:
            batch = self._take(rng.randint(1, 8))
            if not batch:
                return
            try:
                sock = socket.create_connection(self.address, timeout=5)
            except OSError:
                time.sleep(0.05)  # the broker refuses connections for a moment: not a crash
                continue
            closed = False
            received = 0
            try:
                sock.sendall(b"".join(frame for _, frame in batch))
                sock.settimeout(self.idle_s)
                while True:
                    chunk = sock.recv(1 << 16)
                    if not chunk:
                        closed = True
                        break
                    received += len(chunk)
            except TimeoutError:
                pass
            except OSError:
                closed = True
            finally:
                sock.close()
            with self._lock:
                self.stats.connections += 1
                self.stats.closed_by_broker += closed
                self.stats.answer_bytes += received

    def run(self) -> FloodStats:
        threads = [threading.Thread(target=self._worker) for _ in range(self.connections)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return self.stats


class Watcher(threading.Thread):
    """A well-behaved client: ApiVersions every `interval_s` on one connection, timed, until
    stopped; `latencies` in seconds, `failures` when an answer did not come."""

    def __init__(self, address: tuple[str, int], interval_s: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.address = address
        self.interval_s = interval_s
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self._halt = threading.Event()

    def run(self) -> None:
        request = encode_request(18, 3, 1, {"client_software_name": "watcher",
                                            "client_software_version": "1"})  # fmt: skip
        sock = socket.create_connection(self.address, timeout=30)
        try:
            while not self._halt.is_set():
                start = time.monotonic()
                try:
                    sock.sendall(request)
                    head = recv_exact(sock, 4)
                    recv_exact(sock, struct.unpack(">i", head)[0])
                except OSError as exc:
                    self.failures.append(f"{type(exc).__name__}: {exc}")
                    sock.close()
                    sock = socket.create_connection(self.address, timeout=30)
                    continue
                self.latencies.append(time.monotonic() - start)
                self._halt.wait(self.interval_s)
        finally:
            sock.close()

    def stop(self) -> None:
        self._halt.set()
        self.join()


def broker_tracebacks(stderr: str) -> list[str]:
    """The log lines that start a traceback in a broker's stderr (with the line before)."""
    lines = stderr.splitlines()
    return [
        f"{lines[i - 1] if i else ''} / {line}"
        for i, line in enumerate(lines)
        if line.startswith("Traceback")
    ]
