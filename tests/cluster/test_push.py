"""Push replication (KafkaDirect 4.3.2) on three `rdmalog serve` brokers with a real ZooKeeper and
real clients: the leader writes new batches into its followers' head files over the shm and tcp
transports, acks=all producers are answered once the ISR holds the data, followers go back to
pull and return to push, and a deposed leader's writes are refused."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from compat_tests.cluster import BrokerCluster, wait_for
from tests.cluster.clients import (
    ProducerLoad,
    create_topic,
    duplicates,
    pushing_followers,
    read_all,
)

TRANSPORTS = ["shm", "tcp"]


@pytest.fixture(params=TRANSPORTS)
def push_cluster(request, tmp_path: Path, zk_connect: str):
    c = BrokerCluster(tmp_path / "cluster", zk_connect, 3, rdma=request.param).start()
    c.transport = request.param
    yield c
    c.stop()


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> list[tuple[int, bytes]]:
    """acks=all through the gateway: (offset, value) of each acknowledged record."""
    acked: list[tuple[int, bytes]] = []
    errors: list[str] = []

    def done(err, msg) -> None:
        if err is None:
            acked.append((msg.offset(), msg.value()))
        else:
            errors.append(str(err))

    p = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 1}
    )
    for v in values:
        p.produce(topic, value=v, on_delivery=done)
        p.poll(0)
    assert p.flush(60) == 0
    assert not errors, errors
    return acked


def _consume(bootstrap: str, topic: str, count: int) -> list[bytes]:
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"}
    )
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < count and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    return got


def _log_bytes(c: BrokerCluster, broker: int, topic: str) -> bytes:
    """The partition's segment bytes on one broker (the preallocated zeros after them cut)."""
    d = c.broker(broker).data_dir / f"{topic}-0"
    return b"".join(p.read_bytes().rstrip(b"\0") for p in sorted(d.glob("*.log")))


def test_acks_all_through_push(push_cluster: BrokerCluster) -> None:
    c = push_cluster
    create_topic(c.bootstrap, "pushed", min_insync_replicas="2")
    c.wait_isr("pushed", {1, 2, 3})
    leader = c.leader("pushed")
    followers = set(c.brokers) - {leader}
    _produce(c.bootstrap, "pushed", [b"warm-%d" % i for i in range(5)])
    wait_for("push to both followers", lambda: pushing_followers(c, leader, "pushed") == followers)
    values = [b"v%05d" % i for i in range(300)]
    acked = _produce(c.bootstrap, "pushed", values)
    assert sorted(v for _, v in acked) == sorted(values)
    got = _consume(c.bootstrap, "pushed", 305)
    assert got[5:] == values
    # the followers' files hold the leader's bytes, as with pull replication
    want = _log_bytes(c, leader, "pushed")
    for f in followers:
        wait_for(
            f"follower {f} holds the leader's bytes", lambda f=f: _log_bytes(c, f, "pushed") == want
        )
    wait_for("ISR whole", lambda: set((c.state("pushed") or {}).get("isr", ())) == {1, 2, 3})
    # the records were pushed, not fetched: the followers never fell back to pull
    text = c.broker(leader).stderr_path.read_text(errors="replace")
    assert "pull replication for follower" not in text


def _count(c: BrokerCluster, broker: int, pattern: str) -> int:
    return len(re.findall(pattern, c.broker(broker).stderr_path.read_text(errors="replace")))


def _same_bytes_everywhere(c: BrokerCluster, topic: str) -> None:
    def same() -> bool:
        logs = {b: _log_bytes(c, b, topic) for b in c.brokers}
        return len(set(logs.values())) == 1

    wait_for("every replica holds the same bytes", same, timeout=60)


def _pushed_by(c: BrokerCluster, leader: int, topic: str, follower: int) -> int:
    return _count(c, leader, rf"{topic}-0: pushing to follower {follower} ")


def test_follower_killed_mid_push_pulls_then_is_pushed_again(push_cluster: BrokerCluster) -> None:
    c = push_cluster
    create_topic(c.bootstrap, "fk", min_insync_replicas="2")
    c.wait_isr("fk", {1, 2, 3})
    leader = c.leader("fk")
    victim = max(set(c.brokers) - {leader})
    producer = ProducerLoad(c.bootstrap, "fk", count=2000).start()
    wait_for("pushing to the victim", lambda: _pushed_by(c, leader, "fk", victim) >= 1)
    wait_for("a quarter acknowledged", lambda: len(producer.acked) >= 500, timeout=60)
    c.broker(victim).stop(signal.SIGKILL)
    wait_for("the ISR without it", lambda: victim not in c.state("fk")["isr"], timeout=30)
    pushed_before = _pushed_by(c, leader, "fk", victim)
    c.broker(victim).start()  # it pulls (truncating as KIP-101 says), catches up, is pushed
    c.wait_isr("fk", {1, 2, 3}, timeout=60)
    wait_for("pushed again", lambda: _pushed_by(c, leader, "fk", victim) > pushed_before)
    producer.finish()
    assert not producer.errors, producer.errors[:5]
    log = read_all(c.bootstrap, "fk")
    assert set(producer.acked) <= set(log)
    assert duplicates(log) == []
    _same_bytes_everywhere(c, "fk")


def test_leader_killed_mid_push_loses_nothing_acknowledged(push_cluster: BrokerCluster) -> None:
    c = push_cluster
    create_topic(c.bootstrap, "lk", min_insync_replicas="2")
    c.wait_isr("lk", {1, 2, 3})
    leader = c.leader("lk")
    producer = ProducerLoad(c.bootstrap, "lk", count=2000).start()
    wait_for("pushing", lambda: len(pushing_followers(c, leader, "lk")) == 2)
    wait_for("a quarter acknowledged", lambda: len(producer.acked) >= 500, timeout=60)
    c.broker(leader).stop(signal.SIGKILL)
    new = wait_for(
        "a new leader", lambda: c.leader("lk") not in (-1, leader) and c.leader("lk"), timeout=60
    )
    other = (set(c.brokers) - {leader, new}).pop()
    wait_for("the new leader pushes", lambda: other in pushing_followers(c, new, "lk"), timeout=60)
    producer.finish()
    assert not producer.errors, producer.errors[:5]
    acked = set(producer.acked)
    assert len(acked) == 2000
    # the old leader returns as a follower: its uncommitted tail is truncated, then it is pushed
    c.broker(leader).start()
    c.wait_isr("lk", {1, 2, 3}, timeout=60)
    wait_for(
        "the old leader is pushed", lambda: leader in pushing_followers(c, new, "lk"), timeout=60
    )
    log = read_all(c.bootstrap, "lk")
    assert acked <= set(log), f"lost: {sorted(acked - set(log))[:10]}"
    assert duplicates(log) == []
    _same_bytes_everywhere(c, "lk")


def test_follower_that_stops_taking_writes(push_cluster: BrokerCluster) -> None:
    """Frozen (SIGSTOP): the leader's credits run out and it stays bounded; the follower leaves
    the ISR after replica.lag.time.max.ms, producers go on; thawed, it pulls and is pushed again."""
    c = push_cluster
    create_topic(c.bootstrap, "frozen", min_insync_replicas="2")
    c.wait_isr("frozen", {1, 2, 3})
    leader = c.leader("frozen")
    victim = max(set(c.brokers) - {leader})
    producer = ProducerLoad(c.bootstrap, "frozen", count=1_000_000).start()  # until stopped
    wait_for("pushing to the victim", lambda: _pushed_by(c, leader, "frozen", victim) >= 1)
    wait_for("some acknowledged", lambda: len(producer.acked) >= 200, timeout=60)
    c.broker(victim).proc.send_signal(signal.SIGSTOP)
    try:
        wait_for("the ISR without it", lambda: victim not in c.state("frozen")["isr"], timeout=30)
        wait_for(
            "the leader's push link to it is given up",
            lambda: _count(c, leader, rf"push link to broker {victim} is down") >= 1,
            timeout=30,
        )
        acked = len(producer.acked)
        wait_for("acks=all goes on without it", lambda: len(producer.acked) > acked + 100)
    finally:
        c.broker(victim).proc.send_signal(signal.SIGCONT)
    pushed_before = _pushed_by(c, leader, "frozen", victim)
    c.wait_isr("frozen", {1, 2, 3}, timeout=60)
    wait_for("pushed again", lambda: _pushed_by(c, leader, "frozen", victim) > pushed_before)
    producer.stop()
    assert not producer.errors, producer.errors[:5]
    log = read_all(c.bootstrap, "frozen")
    assert set(producer.acked) <= set(log)
    assert duplicates(log) == []
    _same_bytes_everywhere(c, "frozen")


def test_a_frozen_leader_deposed_meanwhile_writes_nothing(push_cluster: BrokerCluster) -> None:
    """The leader frozen past its ZooKeeper session: a new leader is elected and the followers
    revoke the old one's grants first; thawed, the old leader's writes still on their way are
    refused, it follows, and nothing acknowledged is lost."""
    c = push_cluster
    create_topic(c.bootstrap, "zombie", min_insync_replicas="2")
    c.wait_isr("zombie", {1, 2, 3})
    leader = c.leader("zombie")
    producer = ProducerLoad(c.bootstrap, "zombie", count=1_000_000).start()
    wait_for("pushing", lambda: len(pushing_followers(c, leader, "zombie")) == 2)
    wait_for("some acknowledged", lambda: len(producer.acked) >= 300, timeout=60)
    c.broker(leader).proc.send_signal(signal.SIGSTOP)
    try:
        new = wait_for(
            "a new leader",
            lambda: c.leader("zombie") not in (-1, leader) and c.leader("zombie"),
            timeout=60,
        )
    finally:
        c.broker(leader).proc.send_signal(signal.SIGCONT)
    other = (set(c.brokers) - {leader, new}).pop()
    wait_for(
        "the new leader pushes", lambda: other in pushing_followers(c, new, "zombie"), timeout=60
    )
    c.wait_isr("zombie", {1, 2, 3}, timeout=90)
    acked = len(producer.acked)
    wait_for("acks=all goes on", lambda: len(producer.acked) > acked + 100)
    producer.stop()
    assert not producer.errors, producer.errors[:5]
    log = read_all(c.bootstrap, "zombie")
    assert set(producer.acked) <= set(log)
    assert duplicates(log) == []
    _same_bytes_everywhere(c, "zombie")


def test_replica_transport_pull_keeps_kafkas_way(tmp_path: Path, zk_connect: str) -> None:
    c = BrokerCluster(tmp_path / "c", zk_connect, 3, {"replica.transport": "pull"}, rdma="shm")
    c.start()
    try:
        create_topic(c.bootstrap, "pulled", min_insync_replicas="2")
        c.wait_isr("pulled", {1, 2, 3})
        values = [b"p%d" % i for i in range(50)]
        assert sorted(v for _, v in _produce(c.bootstrap, "pulled", values)) == sorted(values)
        _same_bytes_everywhere(c, "pulled")
        for b in c.brokers:
            assert _count(c, b, "pushing to follower") == 0
    finally:
        c.stop()
