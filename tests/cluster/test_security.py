"""A cluster whose brokers talk SASL to each other: followers log in to the leader's inter-broker
listener (SCRAM, sasl.mechanism.inter.broker.protocol) and are authorized as super users, clients
authenticate as well, and acks=all goes through the ISR."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.brokers import serve_command
from compat_tests.cluster import BrokerCluster

ADMIN = ("admin", "admin-secret")
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


@pytest.fixture
def sasl_cluster(tmp_path: Path, zk_connect: str):
    c = BrokerCluster(tmp_path / "cluster", zk_connect, 3, per_broker=_sasl_listener)
    for b in c.brokers.values():
        _scram_add(b.data_dir, *ADMIN)  # each broker's users, before its first start
    c.start()
    yield c
    c.stop()


def test_replication_between_sasl_brokers(sasl_cluster: BrokerCluster) -> None:
    c = sasl_cluster
    conf = {
        "bootstrap.servers": c.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": ADMIN[0],
        "sasl.password": ADMIN[1],
    }
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
