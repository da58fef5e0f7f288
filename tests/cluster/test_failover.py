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
