"""Native (RDMA-style) clients on a three-broker cluster: the leader grants access, a native
consumer reads only replicated records (its last readable byte follows the high watermark), a
follower refuses native producers."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from compat_tests.cluster import BrokerCluster, wait_for
from rdmalog.rdma import Consumer, Producer
from tests.cluster.clients import create_topic


@pytest.fixture
def rdma_cluster(tmp_path: Path, zk_connect: str):
    c = BrokerCluster(tmp_path / "cluster", zk_connect, 3, rdma="shm").start()
    yield c
    c.stop()


def _read(consumer: Consumer, count: int, timeout: float) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        got += [r.value for r in consumer.poll(0.1)]
    return got


def test_native_consumers_read_only_replicated_records(rdma_cluster: BrokerCluster) -> None:
    c = rdma_cluster
    create_topic(c.bootstrap, "native", min_insync_replicas="2")
    c.wait_isr("native", {1, 2, 3})
    leader = c.leader("native")
    followers = sorted(set(c.brokers) - {leader})
    producer = Producer(c.rdma_control[leader], "shm", acks=1)  # answered while followers freeze
    consumer = Consumer(c.rdma_control[leader], "shm")

    def assigned() -> bool:  # the leader may apply its state a moment after ZooKeeper has it
        try:
            consumer.assign([("native", 0)])
            return True
        except Exception as exc:
            if "NotLeaderOrFollower" not in str(exc):
                raise
            return False

    wait_for("the leader serves native-0", assigned, timeout=30, every=0.2)
    try:
        for i in range(50):
            producer.send("native", 0, b"r%d" % i)
        producer.flush(30)
        assert _read(consumer, 50, 30) == [b"r%d" % i for i in range(50)]
        # followers frozen: what the leader takes now is not replicated, so not readable
        for f in followers:
            c.broker(f).proc.send_signal(signal.SIGSTOP)
        try:
            time.sleep(0.5)  # their pending long polls come back empty first
            for i in range(50, 60):
                producer.send("native", 0, b"r%d" % i)
            producer.flush(30)
            assert _read(consumer, 1, 1.0) == []
        finally:
            for f in followers:
                c.broker(f).proc.send_signal(signal.SIGCONT)
        assert _read(consumer, 10, 30) == [b"r%d" % i for i in range(50, 60)]
    finally:
        producer.close()
        consumer.close()
    # a follower grants no produce access
    with pytest.raises(Exception, match="NotLeaderOrFollower"):
        p = Producer(c.rdma_control[followers[0]], "shm")
        try:
            p.send("native", 0, b"x").wait(10)
        finally:
            p.close()
    wait_for("ISR back", lambda: set(c.state("native")["isr"]) == {1, 2, 3})
