"""Client workloads for the cluster's fault tests: an idempotent acks=all producer and a group
consumer (confluent-kafka), each in a thread, recording what was acknowledged and what was read."""

from __future__ import annotations

import re
import struct
import threading
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(
    bootstrap: str, name: str, partitions: int = 1, rf: int = 3, **configs: str
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    cfg = {k.replace("_", "."): v for k, v in configs.items()}
    admin.create_topics([NewTopic(name, partitions, rf, config=cfg)], operation_timeout=30)[
        name
    ].result(30)


class ProducerLoad:
    """Produces numbered values (idempotent, acks=all) until stopped or `count` were sent."""

    def __init__(self, bootstrap: str, topic: str, count: int, every_s: float = 0.002) -> None:
        self.topic = topic
        self.count = count
        self.every_s = every_s
        self.acked: list[bytes] = []
        self.errors: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 2,
                "message.timeout.ms": 120000,
                "retry.backoff.ms": 50,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> ProducerLoad:
        self.thread.start()
        return self

    def _delivered(self, err, msg) -> None:
        if err is None:
            self.acked.append(msg.value())
        else:
            self.errors.append(str(err))

    def _run(self) -> None:
        for i in range(self.count):
            if self._stop.is_set():
                break
            self.producer.produce(
                self.topic, key=b"%d" % (i % 7), value=b"%08d" % i, on_delivery=self._delivered
            )
            self.sent += 1
            self.producer.poll(0)
            time.sleep(self.every_s)
        self.producer.flush(120)

    def finish(self, timeout: float = 150) -> None:
        """Wait until every value was sent and answered."""
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"producer still running: {len(self.acked)} acknowledged"

    def stop(self, timeout: float = 150) -> None:
        self._stop.set()
        self.thread.join(timeout)


class KafkaPythonProducerLoad(ProducerLoad):
    """The same load with kafka-python (idempotent, acks=all)."""

    def __init__(self, bootstrap: str, topic: str, count: int, every_s: float = 0.002) -> None:
        from kafka import KafkaProducer

        self.topic, self.count, self.every_s = topic, count, every_s
        self.acked, self.errors, self.sent = [], [], 0
        self._stop = threading.Event()
        self.producer = KafkaProducer(
            bootstrap_servers=bootstrap.split(","),
            acks="all",
            enable_idempotence=True,
            linger_ms=2,
            retries=2**31 - 1,
            delivery_timeout_ms=120000,
            request_timeout_ms=10000,
            retry_backoff_ms=50,
            metadata_max_age_ms=1000,
        )
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        for i in range(self.count):
            if self._stop.is_set():
                break
            value = b"%08d" % i
            future = self.producer.send(self.topic, key=b"%d" % (i % 7), value=value)
            future.add_callback(lambda _md, v=value: self.acked.append(v))
            future.add_errback(lambda e: self.errors.append(repr(e)))
            self.sent += 1
            time.sleep(self.every_s)
        self.producer.flush(120)
        self.producer.close(30)


class JavaProducerLoad(ProducerLoad):
    """The same load with Apache Kafka's Java client (idempotent, acks=all) through py4j."""

    def __init__(self, bootstrap: str, topic: str, count: int, every_s: float = 0.002) -> None:
        from compat_tests import java

        java.jvm()  # ScenarioSkip when java or the jars are missing
        self.topic, self.count, self.every_s = topic, count, every_s
        self.acked, self.errors, self.sent = [], [], 0
        self._stop = threading.Event()
        self.producer = java.producer(
            bootstrap,
            acks="all",
            enable_idempotence="true",
            linger_ms=2,
            delivery_timeout_ms=120000,
            request_timeout_ms=10000,
            retry_backoff_ms=50,
            metadata_max_age_ms=1000,
        )
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from compat_tests import java

        j = java.jvm()
        pending = []
        for i in range(self.count):
            if self._stop.is_set():
                break
            value = b"%08d" % i
            record = j.org.apache.kafka.clients.producer.ProducerRecord(
                self.topic, b"%d" % (i % 7), value
            )
            pending.append((value, self.producer.send(record)))
            self.sent += 1
            while pending and pending[0][1].isDone():
                self._settle(*pending.pop(0))
            time.sleep(self.every_s)
        self.producer.flush()
        for value, future in pending:
            self._settle(value, future)
        self.producer.close()

    def _settle(self, value: bytes, future) -> None:
        from compat_tests import java

        try:
            java.wait(future)
            self.acked.append(value)
        except Exception as exc:  # py4j wraps the Java ExecutionException
            self.errors.append(str(exc)[:300])


PRODUCERS = {
    "confluent": ProducerLoad,
    "kafka-python": KafkaPythonProducerLoad,
    "java": JavaProducerLoad,
}


class GroupConsumer:
    """Reads `topic` in group `group` (commits automatically) until stopped."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.values: list[bytes] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 200,
                "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 1000,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        self.consumer.subscribe([topic])
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> GroupConsumer:
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            m = self.consumer.poll(0.2)
            if m is None:
                continue
            if m.error():
                self.errors.append(str(m.error()))
                continue
            self.values.append(m.value())

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(30)
        self.consumer.close()


class KafkaPythonGroupConsumer(GroupConsumer):
    """A kafka-python group consumer (auto commit)."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        from kafka import KafkaConsumer

        self.values, self.errors = [], []
        self._stop = threading.Event()
        self.consumer = KafkaConsumer(
            topic,
            bootstrap_servers=bootstrap.split(","),
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=True,
            auto_commit_interval_ms=200,
            session_timeout_ms=10000,
            heartbeat_interval_ms=1000,
            metadata_max_age_ms=1000,
            request_timeout_ms=10000,
        )
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for records in self.consumer.poll(200).values():
                self.values += [r.value for r in records]

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(30)
        self.consumer.close()


class JavaGroupConsumer(GroupConsumer):
    """A Java kafka-clients group consumer (auto commit), polled from one thread."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        from compat_tests import java

        java.jvm()  # started here, once (ScenarioSkip without java or the jars)
        self.values, self.errors = [], []
        self._stop = threading.Event()
        self._args = (bootstrap, topic, group)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from compat_tests import java

        bootstrap, topic, group = self._args
        consumer = java.consumer(
            bootstrap,
            group_id=group,
            enable_auto_commit="true",
            auto_commit_interval_ms=200,
            metadata_max_age_ms=1000,
            request_timeout_ms=10000,
        )
        consumer.subscribe([topic])
        step = java.jvm().java.time.Duration.ofMillis(200)
        try:
            while not self._stop.is_set():
                it = consumer.poll(step).iterator()
                while it.hasNext():
                    self.values.append(bytes(it.next().value()))
        finally:
            consumer.close()

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(30)


CONSUMERS = {
    "confluent": GroupConsumer,
    "kafka-python": KafkaPythonGroupConsumer,
    "java": JavaGroupConsumer,
}


def read_all(bootstrap: str, topic: str, partitions: int = 1, timeout: float = 30) -> list[bytes]:
    """Every record of the topic from its start to the current end (a fresh consumer)."""
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "read-all", "enable.auto.commit": False}
    )
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    ends = {}
    for tp in tps:
        _, high = c.get_watermark_offsets(tp, timeout=10)
        ends[tp.partition] = high
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[bytes] = []
    done = {p for p, end in ends.items() if end == 0}
    deadline = time.monotonic() + timeout
    while len(done) < len(tps) and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None or m.error():
            continue
        out.append(m.value())
        if m.offset() + 1 >= ends[m.partition()]:
            done.add(m.partition())
    c.close()
    assert len(done) == len(tps), f"read {len(out)} records, partitions done {done} of {ends}"
    return out


def duplicates(values: list[bytes]) -> list[bytes]:
    return [v for v, n in Counter(values).items() if n > 1]


def raw_request(
    bootstrap: str, api_key: int, version: int, body: dict, timeout: float = 30
) -> dict:
    """One request on a fresh connection, with the gateway's codec (for what no client does on
    purpose, such as producing to one given broker)."""
    import socket
    import struct

    from gateway.protocol import decode_response, encode_request

    host, _, port = bootstrap.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(encode_request(api_key, version, 1, body, "cluster-tests"))
        head = b""
        while len(head) < 4:
            chunk = sock.recv(4 - len(head))
            assert chunk, "connection closed"
            head += chunk
        (size,) = struct.unpack(">i", head)
        frame = bytearray()
        while len(frame) < size:
            chunk = sock.recv(size - len(frame))
            assert chunk, "connection closed"
            frame += chunk
    _, response = decode_response(api_key, version, bytes(frame))
    return response


def produce_body(topic: str, values: list[bytes], acks: int = -1, partition: int = 0) -> dict:
    """A Produce v9 request body with one batch of `values`."""
    from rdmalog.store.records import Record, build_batch

    batch = build_batch([Record(None, v) for v in values])
    return {
        "transactional_id": None,
        "acks": acks,
        "timeout": 10000,
        "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": bytes(batch)}]}
        ],
    }


def produce_error(bootstrap: str, topic: str, values: list[bytes], acks: int = -1) -> int:
    """Produce `values` straight to the broker at `bootstrap`; the partition's error code."""
    resp = raw_request(bootstrap, 0, 9, produce_body(topic, values, acks))
    return resp["responses"][0]["partition_responses"][0]["error_code"]


def segment_batches(data_dir: Path, topic: str, p: int = 0) -> bytes:
    """The batches of a partition's segment files as they are on disk (files are preallocated:
    read batch by batch up to the first empty length)."""
    out = bytearray()
    for path in sorted((data_dir / f"{topic}-{p}").glob("*.log")):
        with open(path, "rb") as f:
            while len(head := f.read(12)) == 12:
                length = struct.unpack(">i", head[8:12])[0]
                if length <= 0:
                    break
                out += head + f.read(length)
    return bytes(out)


def pushing_followers(cluster, leader: int, topic: str) -> set[int]:
    """Followers the leader's log says it started pushing `topic`-0 to (push replication)."""
    text = cluster.broker(leader).stderr_path.read_text(errors="replace")
    return {int(m) for m in re.findall(rf"{topic}-0: pushing to follower (\d+)", text)}
