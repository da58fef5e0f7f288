"""Push replication (KafkaDirect 4.3.2) on three `rdmalog serve` brokers with a real ZooKeeper and
real clients: the leader writes new batches into its followers' head files over the shm and tcp
transports, acks=all producers are answered once the ISR holds the data, followers go back to
pull and return to push, and a deposed leader's writes are refused."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from compat_tests.cluster import BrokerCluster, wait_for
from tests.cluster.clients import create_topic

TRANSPORTS = ["shm", "tcp"]


@pytest.fixture(params=TRANSPORTS)
def push_cluster(request, tmp_path: Path, zk_connect: str):
    c = BrokerCluster(tmp_path / "cluster", zk_connect, 3, rdma=request.param).start()
    c.transport = request.param
    yield c
    c.stop()


def _pushing(c: BrokerCluster, leader: int, topic: str) -> set[int]:
    """Followers the leader's log says it started pushing `topic`-0 to."""
    text = c.broker(leader).stderr_path.read_text(errors="replace")
    return {int(m) for m in re.findall(rf"{topic}-0: pushing to follower (\d+)", text)}


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
    wait_for("push to both followers", lambda: _pushing(c, leader, "pushed") == followers)
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
