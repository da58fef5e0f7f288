"""acks for native (RDMA-style) producers on a three-broker cluster with a real ZooKeeper and push
replication: acks=all (the default) is answered once the ISR holds the batch, bounded by the
producer's request timeout and min.insync.replicas as Kafka answers it; acks=1 at the leader's
commit; an acks=all answer survives kill -9 of the leader."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.cluster import BrokerCluster, wait_for
from rdmalog.errors import (
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    RequestTimedOutError,
)
from rdmalog.rdma import Producer
from rdmalog.rdma.client.endpoint import BrokerDisconnected
from tests.cluster.clients import duplicates, pushing_followers, read_all

LAG_MS = 5000  # replica.lag.time.max.ms: long enough to freeze followers and thaw them in time


@pytest.fixture(params=["shm", "tcp"])
def acks_cluster(request, tmp_path: Path, zk_connect: str):
    c = BrokerCluster(
        tmp_path / "cluster",
        zk_connect,
        3,
        rdma=request.param,
        overrides={"replica.lag.time.max.ms": str(LAG_MS)},
    ).start()
    c.transport = request.param
    yield c
    c.stop()


def _pushed_topic(c: BrokerCluster, topic: str, min_isr: str) -> tuple[int, list[int]]:
    """A replicated topic pushed to both followers: (leader, followers)."""
    new = NewTopic(
        topic,
        num_partitions=1,
        replica_assignment=[[1, 2, 3]],
        config={"min.insync.replicas": min_isr},
    )
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([new], operation_timeout=30)[topic].result(30)
    c.wait_isr(topic, {1, 2, 3})  # broker 1 leads every topic here (the first replica)
    leader = c.leader(topic)
    followers = sorted(set(c.brokers) - {leader})
    warm = Producer(c.rdma_control[leader], c.transport, acks=1)

    def warmed() -> bool:  # the leader may apply the state a moment after ZooKeeper has it
        try:
            warm.send(topic, 0, b"warm").wait(30)
            return True
        except Exception as exc:
            if "NotLeaderOrFollower" not in str(exc):
                raise
            return False

    try:
        wait_for(f"{leader} leads {topic}", warmed, timeout=30, every=0.2)
    finally:
        warm.close()
    wait_for(
        f"{topic} pushed to both followers",
        lambda: pushing_followers(c, leader, topic) == set(followers),
    )
    return leader, followers


def _signal(c: BrokerCluster, brokers: list[int], sig: int) -> None:
    for b in brokers:
        c.broker(b).proc.send_signal(sig)
    if sig == signal.SIGSTOP:  # delivered asynchronously: wait until every thread is stopped
        for b in brokers:
            wait_for(f"broker {b} stopped", lambda b=b: _stopped(c.broker(b).proc.pid), 10, 0.01)


def _stopped(pid: int) -> bool:
    states = []
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            states.append(stat.read_text().rsplit(")", 1)[1].split()[0])
        except OSError:  # a thread that ended meanwhile
            continue
    return bool(states) and all(s in "tT" for s in states)


def test_native_acks_all_waits_for_the_isr(acks_cluster: BrokerCluster) -> None:
    c = acks_cluster
    leader, followers = _pushed_topic(c, "na", "2")
    ctl, tr = c.rdma_control[leader], c.transport
    # three producers of one partition: shared mode (acks=all is the default)
    strict = Producer(ctl, tr, mode="shared")
    quick = Producer(ctl, tr, mode="shared", acks=1)
    short = Producer(ctl, tr, mode="shared", request_timeout_ms=500)
    try:
        assert strict.send("na", 0, b"before").wait(30)[0] >= 1
        _signal(c, followers, signal.SIGSTOP)
        try:
            held = strict.send("na", 0, b"held")
            strict._drive(lambda: held.done, 1.5)  # the ISR cannot take it: no answer
            assert not held.done
            # acks=1: answered at the leader's commit, followers frozen or not
            assert quick.send("na", 0, b"leader-only").wait(5)[0] >= 0
            assert not held.done
            # the request timeout bounds the wait: REQUEST_TIMED_OUT (committed on the leader)
            with pytest.raises(RequestTimedOutError):
                short.send("na", 0, b"timed-out").wait(10)
        finally:
            _signal(c, followers, signal.SIGCONT)
        base, last = held.wait(30)  # the followers took it: answered with its offsets
        assert base == last
        assert set(c.state("na")["isr"]) == {1, 2, 3}  # answered by the ISR, not by a shrink
    finally:
        for p in (strict, quick, short):
            p.close()
    assert [v for v in read_all(c.bootstrap, "na") if v != b"warm"] == [
        b"before", b"held", b"leader-only", b"timed-out",
    ]  # fmt: skip


def test_native_acks_all_when_followers_leave_the_isr(acks_cluster: BrokerCluster) -> None:
    """Followers frozen past replica.lag.time.max.ms leave the ISR: a waiting acks=all batch is
    answered then, OK with min.insync.replicas=1, NOT_ENOUGH_REPLICAS_AFTER_APPEND with 2; a new
    acks=all grant is refused NOT_ENOUGH_REPLICAS (before any append), acks=1 still goes."""
    c = acks_cluster
    leader, followers = _pushed_topic(c, "one", "1")
    assert _pushed_topic(c, "two", "2") == (leader, followers)
    ctl, tr = c.rdma_control[leader], c.transport
    p = Producer(ctl, tr, mode="shared", request_timeout_ms=60000)
    try:
        _signal(c, followers, signal.SIGSTOP)
        try:
            start = time.monotonic()
            one, two = p.send("one", 0, b"x1"), p.send("two", 0, b"x2")
            p._drive(lambda: one.done and two.done, LAG_MS / 1000 + 30)
            waited = time.monotonic() - start
            assert one.done and two.done
            assert waited >= LAG_MS / 1000 * 0.5, waited  # not before the ISR shrank
            assert one.error is None, one.error
            assert isinstance(two.error, NotEnoughReplicasAfterAppendError), two.error
            assert set(c.state("two")["isr"]) == {leader}
            late = Producer(ctl, tr, mode="shared")
            try:
                with pytest.raises(NotEnoughReplicasError):
                    late.send("two", 0, b"refused").wait(10)
            finally:
                late.close()
            alone = Producer(ctl, tr, mode="shared", acks=1)
            try:
                alone.send("two", 0, b"acks-1").wait(10)
            finally:
                alone.close()
        finally:
            _signal(c, followers, signal.SIGCONT)
    finally:
        p.close()
    c.wait_isr("two", {1, 2, 3}, timeout=60)
    assert read_all(c.bootstrap, "two") == [b"warm", b"x2", b"acks-1"]  # x2 was committed


def test_native_acks_all_answer_survives_leader_kill(acks_cluster: BrokerCluster) -> None:
    c = acks_cluster
    leader, _ = _pushed_topic(c, "kill", "2")
    acked: list[bytes] = []
    stop = threading.Event()

    def produce() -> None:
        p = Producer(c.rdma_control[leader], c.transport)
        try:
            for i in range(100000):
                if stop.is_set():
                    return
                value = b"k%06d" % i
                p.send("kill", 0, value).wait(30)
                acked.append(value)
        except (BrokerDisconnected, OSError, TimeoutError):
            return  # the leader is gone: what was answered before must survive
        finally:
            try:
                p.close()
            except Exception:
                pass

    t = threading.Thread(target=produce, daemon=True)
    t.start()
    try:
        wait_for("some acks=all answers", lambda: len(acked) >= 200, timeout=60)
        c.broker(leader).stop(signal.SIGKILL)
    finally:
        stop.set()
        t.join(60)
    count = len(acked)
    new = wait_for(
        "a new leader",
        lambda: c.leader("kill") not in (-1, leader) and c.leader("kill"),
        timeout=60,
    )
    assert new != leader
    log = read_all(c.bootstrap, "kill")
    assert set(acked[:count]) <= set(log), f"lost: {sorted(set(acked) - set(log))[:10]}"
    assert duplicates(log) == []


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_pushed_followers_high_watermark_follows_at_once(
    transport: str, tmp_path: Path, zk_connect: str
) -> None:
    """A pushed follower's fetches bring the high watermark only every replica.fetch.wait.max.ms
    (10 s here); the leader sends it along as it advances, so a follower that becomes leader
    serves every acknowledged record at once (its remaining follower frozen, so nothing else
    moves its high watermark before replica.lag.time.max.ms)."""
    c = BrokerCluster(
        tmp_path / "cluster",
        zk_connect,
        3,
        {"replica.fetch.wait.max.ms": "10000", "replica.lag.time.max.ms": "30000"},
        rdma=transport,
        # broker 3 is frozen below: its ZooKeeper session must outlast that, or the controller
        # takes it out of the ISR (and the high watermark moves for that reason)
        per_broker=lambda b, _port: {"zookeeper.session.timeout.ms": "30000"} if b == 3 else {},
    ).start()
    c.transport = transport
    try:
        leader, (heir, frozen) = _pushed_topic(c, "hw", "2")
        assert (leader, heir, frozen) == (1, 2, 3)
        p = Producer(c.rdma_control[leader], transport)
        try:
            for i in range(50):
                p.send("hw", 0, b"h%d" % i)
            p.flush(30)  # acks=all: every follower holds them, the leader's HW is 51
        finally:
            p.close()
        time.sleep(0.5)
        _signal(c, [frozen], signal.SIGSTOP)
        try:
            c.broker(leader).stop(signal.SIGKILL)
            wait_for("the heir leads", lambda: c.leader("hw") == heir, timeout=30)
            consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "hw"})
            try:

                def high() -> int:
                    try:
                        return consumer.get_watermark_offsets(TopicPartition("hw", 0), 5)[1]
                    except Exception:  # the client may not know the new leader yet
                        return -1

                wait_for("the heir's HW covers every acknowledged record", lambda: high() == 51, 10)
            finally:
                consumer.close()
            assert set(c.state("hw")["isr"]) == {heir, frozen}  # nothing shrank meanwhile
        finally:
            c.broker(frozen).proc.send_signal(signal.SIGCONT)
    finally:
        c.stop()
