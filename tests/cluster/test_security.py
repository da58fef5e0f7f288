"""A cluster whose brokers talk SASL to each other: followers log in to the leader's inter-broker
listener (SCRAM, sasl.mechanism.inter.broker.protocol) and are authorized as super users, clients
authenticate as well, and acks=all goes through the ISR; the cluster's admin paths (ElectLeaders,
partition reassignments, configs and partition counts through ZooKeeper) check ACLs as every
handler does."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import (
    Consumer,
    ElectionType,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from compat_tests.brokers import serve_command
from compat_tests.cluster import BrokerCluster, wait_for

ADMIN = ("admin", "admin-secret")
ALICE = ("alice", "alice-secret")  # a user no ACL names
SCRAM_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    f'username="{ADMIN[0]}" password="{ADMIN[1]}";'
)


def _sasl_listener(_broker_id: int, port: int) -> dict[str, str]:
    return {
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
    }


def _scram_add(data_dir: Path, user: str, password: str) -> None:
    """`rdmalog scram add`: a user in a broker's data dir before its first start."""
    subprocess.run(
        [*serve_command()[:-1], "scram", "add", "--user", user, "--password", password,
         "--data-dir", str(data_dir)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip


@pytest.fixture(scope="module")
def sasl_cluster(zookeeper_server, tmp_path_factory: pytest.TempPathFactory):
    """Three SASL brokers shared by this module's tests (each test uses topics of its own)."""
    connect = f"{zookeeper_server.connect}/sasl-cluster"
    directory = tmp_path_factory.mktemp("sasl-cluster")
    c = BrokerCluster(directory, connect, 3, per_broker=_sasl_listener)
    for b in c.brokers.values():
        for user in (ADMIN, ALICE):  # each broker's users, before its first start
            _scram_add(b.data_dir, *user)
    c.start()
    yield c
    c.stop()


def _client_conf(c: BrokerCluster, user: tuple[str, str]) -> dict[str, str]:
    return {
        "bootstrap.servers": c.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": user[0],
        "sasl.password": user[1],
    }


def test_replication_between_sasl_brokers(sasl_cluster: BrokerCluster) -> None:
    c = sasl_cluster
    conf = _client_conf(c, ADMIN)
    admin = AdminClient(conf)
    topic = NewTopic("secure", 1, 3, config={"min.insync.replicas": "2"})
    admin.create_topics([topic], operation_timeout=30)["secure"].result(30)
    c.wait_isr("secure", {1, 2, 3})
    producer = Producer({**conf, "acks": "all", "enable.idempotence": True})
    for i in range(50):
        producer.produce("secure", b"s%d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer({**conf, "group.id": "secure-readers", "enable.auto.commit": False})
    consumer.assign([TopicPartition("secure", 0, 0)])
    got = []
    while len(got) < 50:
        m = consumer.poll(10)
        assert m is not None and not m.error(), m and m.error()
        got.append(m.value())
    consumer.close()
    assert got == [b"s%d" % i for i in range(50)]
    # the followers kept up through their SASL logins: still all in sync, high watermark at 50
    assert set(c.wait_isr("secure", {1, 2, 3})["isr"]) == {1, 2, 3}


def _error_code(future) -> int:
    """The Kafka error code a confluent-kafka admin future failed with."""
    with pytest.raises(KafkaException) as failed:
        future.result(30)
    return failed.value.args[0].code()


def test_cluster_admin_paths_check_acls(sasl_cluster: BrokerCluster) -> None:
    """A user without ACLs is refused by the cluster's admin paths at any broker (Kafka's codes:
    CLUSTER_AUTHORIZATION_FAILED for ElectLeaders and reassignments, TOPIC_AUTHORIZATION_FAILED for
    a topic's configs and partitions), and nothing it asked for reaches ZooKeeper; the super user
    is served."""
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.errors import ClusterAuthorizationFailedError

    c = sasl_cluster
    admin = AdminClient(_client_conf(c, ADMIN))
    admin.create_topics([NewTopic("guarded", 1, 3)], operation_timeout=30)["guarded"].result(30)
    c.wait_isr("guarded", {1, 2, 3})
    assignment = json.loads(c.zk.get("/brokers/topics/guarded")[0])["partitions"]
    alice = AdminClient(_client_conf(c, ALICE))
    part = TopicPartition("guarded", 0)
    topic = ConfigResource(ResourceType.TOPIC, "guarded")

    code = _error_code(alice.elect_leaders(ElectionType.PREFERRED, [part]))
    assert code == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert (
        _error_code(alice.describe_configs([topic])[topic]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    )
    change = ConfigResource(
        ResourceType.TOPIC,
        "guarded",
        incremental_configs=[
            ConfigEntry("retention.ms", "1234", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    code = _error_code(alice.incremental_alter_configs([change])[change])
    assert code == KafkaError.TOPIC_AUTHORIZATION_FAILED
    grow = NewPartitions("guarded", 2)
    code = _error_code(alice.create_partitions([grow], operation_timeout=30)["guarded"])
    assert code == KafkaError.TOPIC_AUTHORIZATION_FAILED

    sasl = {
        "bootstrap_servers": c.bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-256",
    }
    kp_alice = KafkaAdminClient(**sasl, sasl_plain_username=ALICE[0], sasl_plain_password=ALICE[1])
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            kp_alice.alter_partition_reassignments({KafkaTopicPartition("guarded", 0): [3, 2]})
        with pytest.raises(ClusterAuthorizationFailedError):
            kp_alice.list_partition_reassignments()
    finally:
        kp_alice.close()

    # nothing alice asked for reached ZooKeeper: the topic's assignment and config are as they were
    assert json.loads(c.zk.get("/brokers/topics/guarded")[0])["partitions"] == assignment
    assert "retention.ms" not in json.loads(c.zk.get("/config/topics/guarded")[0])["config"]

    # the super user is served on the same path: the config goes to ZooKeeper, every broker sees it
    admin.incremental_alter_configs([change])[change].result(30)
    stored = json.loads(c.zk.get("/config/topics/guarded")[0])["config"]
    assert stored["retention.ms"] == "1234"
    wait_for(
        "the new config described",
        lambda: admin.describe_configs([topic])[topic].result(30)["retention.ms"].value == "1234",
    )
