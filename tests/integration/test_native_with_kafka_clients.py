"""Native (RDMA-style) and Kafka clients on one partition of a real `rdmalog serve`, at the same time.

The broker runs with `rdma.transport` set; a native producer in shared mode reserves its places with
FETCH_AND_ADD while confluent-kafka produces through the gateway, whose appends reserve through the
same word. Both kinds of consumer then read the one log: a Kafka consumer sees the native batches, the
native consumer sees the Kafka producer's batches, offsets are contiguous and each producer's order holds.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.brokers import free_port
from rdmalog.rdma import Consumer, Producer

N = 200


def _create_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(15)


def _kafka_read_all(bootstrap: str, topic: str, count: int) -> list[tuple[int, bytes]]:
    consumer = KafkaConsumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 30
    while len(out) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            out.append((msg.offset(), msg.value()))
    consumer.close()
    return out


def _native_read_all(control: str, transport: str, topic: str, count: int):
    consumer = Consumer(control, transport)
    consumer.assign([(topic, 0)])
    out = []
    deadline = time.monotonic() + 30
    while len(out) < count and time.monotonic() < deadline:
        out += [(r.offset, r.value) for r in consumer.poll(0.2)]
    consumer.close()
    return out


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_native_and_kafka_producers_share_a_partition(broker_factory, transport: str) -> None:
    control_port = free_port()
    broker = broker_factory(
        {"rdma.transport": transport, "rdma.control.port": str(control_port)}, local=True
    )
    control = f"127.0.0.1:{control_port}"
    topic = f"shared-{transport}"
    _create_topic(broker.bootstrap, topic)

    native = Producer(control, transport, mode="shared")
    kafka = KafkaProducer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "acks": "all"})
    for i in range(N):
        native.send(topic, 0, b"native-%d" % i)
        kafka.produce(topic, b"kafka-%d" % i, partition=0)
        kafka.poll(0)
    native.flush()
    assert kafka.flush(30) == 0
    native.close()

    for seen in (
        _kafka_read_all(broker.bootstrap, topic, 2 * N),
        _native_read_all(control, transport, topic, 2 * N),
    ):
        assert [o for o, _ in seen] == list(range(2 * N))  # contiguous: no hole, no overlap
        values = [v for _, v in seen]
        for prefix in (b"native-", b"kafka-"):
            mine = [v for v in values if v.startswith(prefix)]
            assert mine == [prefix + b"%d" % i for i in range(N)]  # all of them, in send order
