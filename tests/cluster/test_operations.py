"""Cluster operations with clients running: controller failover, a rolling restart of every broker,
ZooKeeper stopped for a while, topic administration across brokers."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions

from compat_tests.cluster import BrokerCluster, wait_for
from compat_tests.zookeeper import ZooKeeperServer
from tests.cluster.clients import (
    GroupConsumer,
    ProducerLoad,
    create_topic,
    duplicates,
    produce_error,
    read_all,
)


def test_controller_failover(cluster: BrokerCluster) -> None:
    create_topic(cluster.bootstrap, "cf", partitions=3)
    first = cluster.controller()
    cluster.broker(first).stop(signal.SIGKILL)
    rest = set(cluster.brokers) - {first}
    second = wait_for(
        "a new controller", lambda: cluster.controller() in rest and cluster.controller()
    )
    # the new controller moved the partitions the old one led and answers admin requests
    for p in range(3):
        wait_for(f"cf-{p} led by a live broker", lambda p=p: cluster.leader("cf", p) in rest)
    create_topic(cluster.bootstrap, "after-failover", partitions=2, rf=2)
    for p in range(2):
        assert cluster.leader("after-failover", p) in rest
    # and it elects again when a leader goes
    victim = cluster.leader("cf", 0)
    if victim == second:
        victim = next(iter(rest - {second}))
    cluster.broker(victim).stop(signal.SIGKILL)
    wait_for(
        "cf-0 led by the last broker",
        lambda: all(cluster.leader("cf", p) in rest - {victim} for p in range(3)),
    )
    cluster.broker(first).start()
    cluster.broker(victim).start()
    cluster.wait_isr("cf", {1, 2, 3}, timeout=60)


def test_rolling_restart_with_clients_running(cluster: BrokerCluster) -> None:
    create_topic(cluster.bootstrap, "roll", partitions=3, min_insync_replicas="2")
    for p in range(3):
        cluster.wait_isr("roll", {1, 2, 3}, partition=p)
    consumer = GroupConsumer(cluster.bootstrap, "roll", "rollers").start()
    producer = ProducerLoad(cluster.bootstrap, "roll", count=4000, every_s=0.003).start()
    for b in sorted(cluster.brokers):
        start = len(producer.acked)
        wait_for("progress", lambda start=start: len(producer.acked) > start + 200, timeout=60)
        cluster.broker(b).restart(signal.SIGTERM)  # controlled shutdown, then start
        for p in range(3):
            cluster.wait_isr("roll", {1, 2, 3}, partition=p, timeout=60)
    producer.finish()
    assert not producer.errors, producer.errors[:5]
    acked = set(producer.acked)
    assert len(acked) == 4000
    wait_for("the consumer to read everything", lambda: acked <= set(consumer.values), timeout=90)
    consumer.stop()
    log = read_all(cluster.bootstrap, "roll", partitions=3)
    assert acked <= set(log) and duplicates(log) == []
    assert "controlled shutdown: 0 partition(s) still led here" in cluster.broker(1).stderr_tail(
        2000
    )


def test_zookeeper_stopped_for_a_while(own_zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    cluster = BrokerCluster(tmp_path / "cluster", own_zookeeper.connect + "/zkdown").start()
    try:
        create_topic(cluster.bootstrap, "zk", min_insync_replicas="2")
        before = cluster.wait_isr("zk", {1, 2, 3})
        cluster.stop_zk_client()
        leader = cluster.broker(before["leader"]).bootstrap
        own_zookeeper.stop()
        try:
            # without ZooKeeper the brokers keep serving what they lead, acks=all included
            deadline = time.monotonic() + 6.0  # longer than zookeeper.session.timeout.ms
            n = 0
            while time.monotonic() < deadline:
                assert produce_error(leader, "zk", [b"down-%d" % n]) == 0
                n += 1
                time.sleep(0.2)
        finally:
            own_zookeeper.start()
        cluster.wait_registered({1, 2, 3})
        time.sleep(1.0)
        after = cluster.state("zk")
        assert (after["leader"], after["leader_epoch"]) == (
            before["leader"],
            before["leader_epoch"],
        )
        assert produce_error(leader, "zk", [b"up"]) == 0
        log = read_all(cluster.bootstrap, "zk")
        assert log == [b"down-%d" % i for i in range(n)] + [b"up"]
    finally:
        cluster.stop()


def test_partitions_grow_and_topics_go_across_brokers(cluster: BrokerCluster) -> None:
    create_topic(cluster.bootstrap, "grow", partitions=2)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    # brokers the cluster does not have: refused with Kafka's codes (checked against ZooKeeper's
    # own list too, so only a broker that is not registered is refused), nothing made
    from confluent_kafka.admin import NewTopic

    refused = {
        "rf4": NewTopic("rf4", num_partitions=1, replication_factor=4),
        "on9": NewTopic("on9", num_partitions=1, replica_assignment=[[1, 9]]),
    }
    futures = admin.create_topics(list(refused.values()), operation_timeout=30)
    with pytest.raises(KafkaException, match="INVALID_REPLICATION_FACTOR"):
        futures["rf4"].result(30)
    with pytest.raises(KafkaException, match="INVALID_REPLICA_ASSIGNMENT"):
        futures["on9"].result(30)
    grown = admin.create_partitions([NewPartitions("grow", 3, replica_assignment=[[2, 9]])])
    with pytest.raises(KafkaException, match="INVALID_REPLICA_ASSIGNMENT"):
        grown["grow"].result(30)
    assert cluster.state("rf4", 0) is None and cluster.state("on9", 0) is None
    assert cluster.state("grow", 2) is None
    admin.create_partitions([NewPartitions("grow", 5)])["grow"].result(30)
    for p in range(5):
        assert cluster.leader("grow", p) in cluster.brokers
    for b in cluster.brokers:
        wait_for(
            f"broker {b} holds grow's replicas",
            lambda b=b: len(list(cluster.broker(b).data_dir.glob("grow-*"))) == 5,
        )
    admin.delete_topics(["grow"], operation_timeout=30)["grow"].result(30)
    assert cluster.state("grow", 0) is None
    for b in cluster.brokers:
        wait_for(
            f"broker {b} deleted its replicas",
            lambda b=b: not list(cluster.broker(b).data_dir.glob("grow-*")),
        )


def test_drain_a_broker_by_reassignment(cluster: BrokerCluster) -> None:
    """An operator moves every replica off broker 3 (kafka-python's admin client), with a producer
    running; then broker 3 holds nothing and can be decommissioned."""
    from kafka import KafkaAdminClient, TopicPartition

    create_topic(cluster.bootstrap, "drain", partitions=2, rf=2)
    producer = ProducerLoad(cluster.bootstrap, "drain", count=1500, every_s=0.002).start()
    wait_for("some acknowledged", lambda: len(producer.acked) > 300)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    targets = {TopicPartition("drain", 0): [1, 2], TopicPartition("drain", 1): [2, 1]}
    result = admin.alter_partition_reassignments(targets)
    assert all(v is None for v in result.values()), result
    wait_for("reassignments done", lambda: not admin.list_partition_reassignments(), timeout=60)
    for p in range(2):
        s = cluster.wait_isr("drain", {1, 2}, partition=p)
        assert s["leader"] in (1, 2)
    producer.finish()
    admin.close()
    assert not producer.errors, producer.errors[:5]
    log = read_all(cluster.bootstrap, "drain", partitions=2)
    assert set(producer.acked) <= set(log) and duplicates(log) == []
    # broker 3 has no replica of the topic left
    wait_for("broker 3 emptied", lambda: not list(cluster.broker(3).data_dir.glob("drain-*")))


def test_topic_configs_go_through_zookeeper(cluster: BrokerCluster) -> None:
    """kafka-configs' way (IncrementalAlterConfigs at any broker) changes min.insync.replicas on
    every replica; DescribeConfigs answers it from every broker."""
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    from rdmalog.cluster import znodes as Z

    create_topic(cluster.bootstrap, "cfg", min_insync_replicas="1")
    leader = cluster.leader("cfg")
    follower = next(b for b in cluster.brokers if b != leader)
    admin = AdminClient({"bootstrap.servers": cluster.broker(follower).bootstrap})
    entry = ConfigEntry("min.insync.replicas", "3", incremental_operation=AlterConfigOpType.SET)
    res = ConfigResource(ResourceType.TOPIC, "cfg", incremental_configs=[entry])
    admin.incremental_alter_configs([res])[res].result(30)
    data, _ = cluster.zk.get(Z.config_path("cfg"))
    assert Z.decode_config(data) == {"min.insync.replicas": "3"}
    # another broker's alter applies to what ZooKeeper holds (min.insync.replicas stays)
    other = AdminClient({"bootstrap.servers": cluster.broker(leader).bootstrap})
    entry = ConfigEntry("retention.ms", "86400000", incremental_operation=AlterConfigOpType.SET)
    res = ConfigResource(ResourceType.TOPIC, "cfg", incremental_configs=[entry])
    other.incremental_alter_configs([res])[res].result(30)
    data, _ = cluster.zk.get(Z.config_path("cfg"))
    assert Z.decode_config(data) == {"min.insync.replicas": "3", "retention.ms": "86400000"}
    for b in cluster.brokers:  # each broker's watch brings the change (as Kafka's notifications)
        one = AdminClient({"bootstrap.servers": cluster.broker(b).bootstrap})

        def described(one: AdminClient = one) -> dict[str, str]:
            got = one.describe_configs([ConfigResource(ResourceType.TOPIC, "cfg")])
            return {k: e.value for k, e in next(iter(got.values())).result(30).items()}

        wait_for(
            f"broker {b} describes both configs",
            lambda d=described: (
                (c := d())["min.insync.replicas"] == "3" and c["retention.ms"] == "86400000"
            ),
        )
    cluster.broker(follower).stop(signal.SIGKILL)
    cluster.wait_isr("cfg", set(cluster.brokers) - {follower})
    # the leader applies the new value: 2 in sync of 3 required
    assert produce_error(cluster.broker(leader).bootstrap, "cfg", [b"x"]) == 19


def _preferred_topic(cluster: BrokerCluster, name: str) -> None:
    from confluent_kafka.admin import NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = NewTopic(name, num_partitions=3, replica_assignment=[[1, 2, 3], [2, 3, 1], [3, 1, 2]])
    admin.create_topics([topic], operation_timeout=30)[name].result(30)
    for p in range(3):
        cluster.wait_isr(name, {1, 2, 3}, partition=p)


def _bounce_broker_1(cluster: BrokerCluster, name: str) -> None:
    cluster.broker(1).restart(signal.SIGTERM)  # controlled shutdown moves its leadership away
    for p in range(3):
        cluster.wait_isr(name, {1, 2, 3}, partition=p)


def test_preferred_leader_election(cluster: BrokerCluster) -> None:
    """kafka-leader-election.sh's way (ElectLeaders, confluent-kafka): the first replica leads again."""
    from confluent_kafka import ElectionType, TopicPartition

    _preferred_topic(cluster, "pref")
    _bounce_broker_1(cluster, "pref")
    assert cluster.leader("pref", 0) != 1  # no automatic move back within 300 s
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    parts = [TopicPartition("pref", p) for p in range(3)]
    results = admin.elect_leaders(ElectionType.PREFERRED, parts).result(30)
    assert results[TopicPartition("pref", 0)] is None  # elected
    assert "ELECTION_NOT_NEEDED" in str(results[TopicPartition("pref", 1)])
    assert [cluster.leader("pref", p) for p in range(3)] == [1, 2, 3]


@pytest.mark.parametrize(
    "cluster", [{"leader.imbalance.check.interval.seconds": "1"}], indirect=True
)
def test_auto_leader_rebalance(cluster: BrokerCluster) -> None:
    """auto.leader.rebalance.enable (default true): leadership goes back to the preferred replicas."""
    _preferred_topic(cluster, "auto")
    _bounce_broker_1(cluster, "auto")
    wait_for(
        "preferred leaders back", lambda: [cluster.leader("auto", p) for p in range(3)] == [1, 2, 3]
    )


def test_a_second_broker_with_the_same_id_is_refused(
    cluster: BrokerCluster, tmp_path: Path
) -> None:
    """It exits 1 with a message naming the id, and takes no role meanwhile: the first broker 1
    keeps its replicas."""
    from compat_tests.brokers import BrokerProcess, BrokerStartError

    create_topic(cluster.bootstrap, "dup")
    before = cluster.wait_isr("dup", {1, 2, 3})
    twin = BrokerProcess(
        tmp_path / "twin" / "data", dict(cluster.broker(1).overrides), log_dir=tmp_path / "twin"
    )
    try:
        try:
            twin.start(timeout=60)
        except BrokerStartError:
            pass  # it may exit before it listens, or after
        wait_for("the twin to exit", lambda: twin.proc.poll() is not None, timeout=60)
    finally:
        twin.kill()  # nothing left running when it did not exit
    assert twin.proc.returncode == 1
    assert "broker.id 1 is registered in ZooKeeper" in twin.stderr_tail()
    assert cluster.state("dup") == before and cluster.registered() == {1, 2, 3}


def test_zookeeper_unreachable_at_start(tmp_path: Path) -> None:
    from compat_tests.brokers import BrokerProcess, BrokerStartError, free_port

    dead = f"127.0.0.1:{free_port()}"
    b = BrokerProcess(
        tmp_path / "data",
        {"broker.id": "1", "zookeeper.connect": dead, "zookeeper.connection.timeout.ms": "1500"},
        log_dir=tmp_path,
    )
    try:
        with pytest.raises(BrokerStartError):
            b.start(timeout=30)
    finally:
        b.kill()  # nothing left running when it did start
    assert b.proc.returncode == 1
    assert f"cannot reach ZooKeeper at {dead} within 1500 ms" in b.stderr_tail()
