"""Faults under load: a leader killed with kill -9 while an idempotent acks=all producer and a group
consumer run; nothing acknowledged is lost, nothing is duplicated, the consumer goes on."""

from __future__ import annotations

import signal

import pytest

from compat_tests.cluster import BrokerCluster, wait_for
from compat_tests.common import ScenarioSkip
from tests.cluster.clients import CONSUMERS, PRODUCERS, create_topic, duplicates, read_all


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "java"])
def test_kill_leader_under_idempotent_acks_all(cluster: BrokerCluster, client: str) -> None:
    create_topic(cluster.bootstrap, "orders", min_insync_replicas="2")
    cluster.wait_isr("orders", {1, 2, 3})
    try:
        consumer = CONSUMERS[client](cluster.bootstrap, "orders", "billing").start()
        producer = PRODUCERS[client](cluster.bootstrap, "orders", count=3000).start()
    except ScenarioSkip as e:
        pytest.skip(str(e))
    wait_for("a third acknowledged", lambda: len(producer.acked) >= 1000, timeout=60)
    leader = cluster.leader("orders")
    cluster.broker(leader).stop(signal.SIGKILL)
    new = wait_for(
        "a new leader",
        lambda: cluster.leader("orders") not in (-1, leader) and cluster.leader("orders"),
    )
    assert new != leader
    producer.finish()
    assert not producer.errors, producer.errors[:5]
    acked = set(producer.acked)
    assert len(acked) == 3000
    wait_for(
        "the group consumer to read everything acknowledged",
        lambda: acked <= set(consumer.values),
        timeout=90,
    )
    consumer.stop()
    log = read_all(cluster.bootstrap, "orders")
    assert acked <= set(log), f"lost: {sorted(acked - set(log))[:10]}"
    assert duplicates(log) == []
    # the killed broker comes back as a follower, truncates what was not committed and rejoins
    cluster.broker(leader).start()
    cluster.wait_isr("orders", {1, 2, 3}, timeout=60)
    assert cluster.leader("orders") == new


def test_kill_leader_under_kafkajs(cluster: BrokerCluster) -> None:
    """The same with KafkaJS (Node.js): an idempotent producer and a group consumer in one process
    (compat_tests/js/steady.js)."""
    import shutil
    import subprocess
    import threading
    from pathlib import Path

    node = shutil.which("node")
    js = Path(__file__).resolve().parents[2] / "compat_tests" / "js"
    if node is None or not (js / "node_modules" / "kafkajs").exists():
        pytest.skip("node or kafkajs (npm ci --prefix compat_tests/js) is missing")
    create_topic(cluster.bootstrap, "js-orders", min_insync_replicas="2")
    cluster.wait_isr("js-orders", {1, 2, 3})
    proc = subprocess.Popen(
        [node, str(js / "steady.js"), cluster.bootstrap, "js-orders", "1000", "js-billing"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    acked: list[bytes] = []
    read: list[bytes] = []
    errors: list[str] = []
    done = threading.Event()

    def collect() -> None:
        for line in proc.stdout:
            kind, _, rest = line.strip().partition(" ")
            if kind == "done":
                done.set()
            else:
                {"acked": acked, "read": read}.get(kind, errors).append(rest.encode())

    reader = threading.Thread(target=collect, daemon=True)
    reader.start()
    try:
        wait_for("a third acknowledged", lambda: len(acked) >= 300, timeout=90)
        leader = cluster.leader("js-orders")
        cluster.broker(leader).stop(signal.SIGKILL)
        wait_for("the load to finish", done.is_set, timeout=200)
    finally:
        proc.kill()
        proc.wait(10)
        reader.join(10)
    assert errors == [], errors[:5]
    assert len(set(acked)) == 1000 and set(acked) <= set(read)
    log = read_all(cluster.bootstrap, "js-orders")
    assert set(acked) <= set(log) and duplicates(log) == []


def test_group_coordinator_moves_with_its_partition(cluster: BrokerCluster) -> None:
    """Committed offsets outlive the coordinator: kill -9 the broker leading the group's
    __consumer_offsets partition; the new leader loads the group and answers the same offsets."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    from gateway.groups.schema import partition_for

    create_topic(cluster.bootstrap, "coord", partitions=2)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(20):
        p.produce("coord", b"%d" % i, partition=i % 2)
    p.flush(30)
    conf = {
        "bootstrap.servers": cluster.bootstrap,
        "group.id": "keeper",
        "enable.auto.commit": False,
    }
    c = Consumer(conf)
    c.commit(
        offsets=[TopicPartition("coord", 0, 7), TopicPartition("coord", 1, 9)], asynchronous=False
    )
    c.close()
    offsets_partition = partition_for(
        "keeper", int(cluster.overrides["offsets.topic.num.partitions"])
    )
    coordinator = cluster.leader("__consumer_offsets", offsets_partition)
    cluster.broker(coordinator).stop(signal.SIGKILL)
    wait_for(
        "a new coordinator",
        lambda: cluster.leader("__consumer_offsets", offsets_partition) not in (-1, coordinator),
    )
    c = Consumer(conf)
    got = c.committed([TopicPartition("coord", 0), TopicPartition("coord", 1)], timeout=30)
    c.close()
    assert [(t.partition, t.offset) for t in got] == [(0, 7), (1, 9)]
