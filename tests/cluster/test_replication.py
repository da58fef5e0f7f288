"""Replication across three `rdmalog serve` brokers with real clients: acks=all through the ISR,
followers holding the leader's bytes, Metadata of a cluster."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.cluster import BrokerCluster, wait_for
from tests.cluster.clients import segment_batches


def _create(bootstrap: str, name: str, partitions: int = 1, rf: int = 3, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [
            NewTopic(
                name, partitions, rf, config={k.replace("_", "."): v for k, v in configs.items()}
            )
        ],
        operation_timeout=30,
    )
    futures[name].result(30)


def test_acks_all_replicates_byte_for_byte(cluster: BrokerCluster) -> None:
    _create(cluster.bootstrap, "r3", min_insync_replicas="2")
    state = cluster.wait_isr("r3", {1, 2, 3})
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
        }
    )
    errors = []
    for i in range(200):
        producer.produce(
            "r3", key=b"%d" % i, value=b"v%d" % i, on_delivery=lambda e, m: e and errors.append(e)
        )
    assert producer.flush(30) == 0 and not errors
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "g",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([__import__("confluent_kafka").TopicPartition("r3", 0, 0)])
    got = []
    while len(got) < 200:
        m = consumer.poll(10)
        assert m is not None, f"got {len(got)} records"
        assert not m.error(), m.error()
        got.append(m.value())
    consumer.close()
    assert got == [b"v%d" % i for i in range(200)]
    leader = state["leader"]
    # DescribeCluster: the three registered brokers and the controller ZooKeeper names
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    described = admin.describe_cluster().result(30)
    assert sorted(n.id for n in described.nodes) == [1, 2, 3]
    assert described.controller.id == cluster.controller()
    expect = segment_batches(cluster.broker(leader).data_dir, "r3")
    for b in (1, 2, 3):
        wait_for(
            f"broker {b} holds the leader's bytes",
            lambda b=b: segment_batches(cluster.broker(b).data_dir, "r3") == expect,
            timeout=20,
        )
