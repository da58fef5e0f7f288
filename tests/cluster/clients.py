"""Client workloads for the cluster's fault tests: an idempotent acks=all producer and a group
consumer (confluent-kafka), each in a thread, recording what was acknowledged and what was read."""

from __future__ import annotations

import threading
import time
from collections import Counter

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
