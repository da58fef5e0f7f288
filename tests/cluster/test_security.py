"""A cluster whose brokers talk SASL to each other: followers log in to the leader's inter-broker
listener (SCRAM, sasl.mechanism.inter.broker.protocol) and are authorized as super users, clients
authenticate as well, and acks=all goes through the ISR; the cluster's admin paths (ElectLeaders,
partition reassignments, configs and partition counts through ZooKeeper) check ACLs as every
handler does."""

from __future__ import annotations

import json
import subprocess
import time
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
from tests.cluster.clients import pushing_followers

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
        "transaction.state.log.num.partitions": "4",
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


def test_push_replication_between_sasl_brokers(tmp_path: Path, zk_connect: str) -> None:
    """Push replication (an RDMA transport served, so replica.transport defaults to push) where every
    broker's RDMA service requires a SASL login: the leader logs in to each follower's with the
    inter-broker credentials, pushes, and acks=all is answered once both followers hold the data."""
    c = BrokerCluster(tmp_path, zk_connect, 3, rdma="shm", per_broker=_sasl_listener)
    for b in c.brokers.values():
        _scram_add(b.data_dir, *ADMIN)
    c.start()
    try:
        conf = _client_conf(c, ADMIN)
        topic = NewTopic("secure-push", 1, 3, config={"min.insync.replicas": "3"})
        admin = AdminClient(conf)
        admin.create_topics([topic], operation_timeout=30)["secure-push"].result(30)
        c.wait_isr("secure-push", {1, 2, 3})
        leader = c.leader("secure-push")
        followers = set(c.brokers) - {leader}
        producer = Producer({**conf, "acks": "all", "enable.idempotence": True, "linger.ms": 1})
        for i in range(200):
            producer.produce("secure-push", b"p%d" % i)
            producer.poll(0)
        assert producer.flush(30) == 0
        wait_for("both followers pushed to", lambda: pushing_followers(c, leader, "secure-push"))
        assert pushing_followers(c, leader, "secure-push") == followers
        log = c.broker(leader).stderr_path.read_text(errors="replace")
        assert "refused" not in log and "authentication" not in log.lower(), log[-2000:]
        consumer = Consumer({**conf, "group.id": "push-readers", "enable.auto.commit": False})
        consumer.assign([TopicPartition("secure-push", 0, 0)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 200 and time.monotonic() < deadline:
            m = consumer.poll(1)
            if m is not None:
                assert not m.error(), m.error()
                got.append(m.value())
        consumer.close()
        assert got == [b"p%d" % i for i in range(200)]
        # min.insync.replicas=3: every answer above needed both followers in the ISR
        assert set(c.state("secure-push")["isr"]) == {1, 2, 3}
    finally:
        c.stop()


def test_transactions_between_sasl_brokers(sasl_cluster: BrokerCluster) -> None:
    """Markers travel over the SASL inter-broker listener (WriteTxnMarkers needs CLUSTER_ACTION:
    the brokers' principal is a super user): a transactional producer commits and aborts across
    partitions led by different brokers; a read_committed consumer sees the committed records."""
    c = sasl_cluster
    conf = _client_conf(c, ADMIN)
    admin = AdminClient(conf)
    admin.create_topics([NewTopic("secure-txn", 3, 3)], operation_timeout=30)["secure-txn"].result(
        30
    )
    leaders = [
        wait_for("a leader", lambda p=p: max(c.leader("secure-txn", p), 0)) for p in range(3)
    ]
    assert len(set(leaders)) > 1, leaders
    producer = Producer({**conf, "transactional.id": "secure-txn-1"})
    producer.init_transactions(60)
    committed = []
    for round_, commit in enumerate([True, False, True]):
        producer.begin_transaction()
        for i in range(6):
            value = b"%d-%d" % (round_, i)
            producer.produce("secure-txn", value, partition=i % 3)
            committed += [value] if commit else []
        assert producer.flush(30) == 0
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    consumer = Consumer(
        {**conf, "group.id": "secure-txn-readers", "isolation.level": "read_committed",
         "enable.auto.commit": False, "enable.partition.eof": True}
    )  # fmt: skip
    consumer.assign([TopicPartition("secure-txn", p, 0) for p in range(3)])
    got, at_end = [], set()
    deadline = time.monotonic() + 30
    while len(at_end) < 3 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is None:
            continue
        if m.error():
            assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
            at_end.add(m.partition())
            continue
        got.append(m.value())
    consumer.close()
    assert len(at_end) == 3 and sorted(got) == sorted(committed)


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


# --- users, quotas and ACLs kept in ZooKeeper ------------------------------------------------------


def _one_broker_conf(c: BrokerCluster, broker_id: int, user: tuple[str, str]) -> dict[str, str]:
    return {**_client_conf(c, user), "bootstrap.servers": c.broker(broker_id).bootstrap}


def _logs_in(c: BrokerCluster, broker_id: int, user: tuple[str, str]) -> bool:
    """Whether `user` authenticates at that broker (a metadata answer comes back)."""
    admin = AdminClient({**_one_broker_conf(c, broker_id, user), "socket.timeout.ms": 5000})
    try:
        admin.list_topics(timeout=5)
        return True
    except KafkaException:
        return False


def _znode(c: BrokerCluster, path: str) -> dict:
    return json.loads(c.zk.get(path)[0])


def _notifications(c: BrokerCluster, path: str) -> list[bytes]:
    return [c.zk.get(f"{path}/{child}")[0] for child in sorted(c.zk.get_children(path))]


def test_data_dir_users_handed_to_zookeeper(sasl_cluster: BrokerCluster) -> None:
    """The users `rdmalog scram add` put in each data dir went to ZooKeeper at the first start,
    once: the data-dir files are retired."""
    c = sasl_cluster
    for user in (ADMIN[0], ALICE[0]):
        config = _znode(c, f"/config/users/{user}")
        assert config["version"] == 1
        assert set(config["config"]) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    for b in c.brokers.values():
        security = b.data_dir / "__rdmalog_metadata" / "security"
        assert not (security / "entity-configs.json").exists()
        assert (security / "entity-configs.json.imported").exists()


def test_scram_user_created_at_one_broker_logs_in_at_the_others(
    sasl_cluster: BrokerCluster,
) -> None:
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    c = sasl_cluster
    carol = ("carol", "carol-secret")
    assert not _logs_in(c, 2, carol)
    admin = AdminClient(_one_broker_conf(c, 1, ADMIN))
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192)
    upsert = UserScramCredentialUpsertion(
        carol[0], info, carol[1].encode(), b"carol-salt-of-32-bytes-or-so!!!!"
    )
    admin.alter_user_scram_credentials([upsert])[carol[0]].result(30)

    # Kafka's layout: the credential string under /config/users, a change notification
    config = _znode(c, "/config/users/carol")
    assert config["version"] == 1
    fields = dict(f.split("=", 1) for f in config["config"]["SCRAM-SHA-256"].split(","))
    assert set(fields) == {"salt", "stored_key", "server_key", "iterations"}
    assert fields["iterations"] == "8192"
    changes = [json.loads(n) for n in _notifications(c, "/config/changes")]
    assert {"version": 2, "entity_path": "users/carol"} in changes

    for broker_id in (2, 3, 1):
        wait_for(f"carol logs in at broker {broker_id}", lambda b=broker_id: _logs_in(c, b, carol))
    assert not _logs_in(c, 3, (carol[0], "wrong"))


def _scram_cli(c: BrokerCluster, *args: str) -> str:
    """`rdmalog scram ... --zookeeper` against the cluster's ZooKeeper; what it printed."""
    done = subprocess.run(
        [*serve_command()[:-1], "scram", *args, "--zookeeper", c.zk_connect],
        check=True, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return done.stdout


def test_scram_cli_writes_users_to_zookeeper(sasl_cluster: BrokerCluster) -> None:
    """`rdmalog scram add --zookeeper` (kafka-configs.sh --zookeeper's job) gives the whole
    running cluster a user; `delete` takes it away everywhere."""
    c = sasl_cluster
    dave = ("dave", "dave-secret")
    assert not _logs_in(c, 1, dave)
    _scram_cli(c, "add", "--user", dave[0], "--password", dave[1])
    assert set(_znode(c, "/config/users/dave")["config"]) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert "dave: SCRAM-SHA-256 (iterations=4096), SCRAM-SHA-512" in _scram_cli(c, "list")
    for broker_id in (1, 2, 3):
        wait_for(f"dave logs in at broker {broker_id}", lambda b=broker_id: _logs_in(c, b, dave))
    _scram_cli(c, "delete", "--user", dave[0])
    for broker_id in (1, 2, 3):
        wait_for(
            f"dave refused at broker {broker_id}", lambda b=broker_id: not _logs_in(c, b, dave)
        )


def _produce_at_broker_1(c: BrokerCluster, user: tuple[str, str], topic: str) -> KafkaError | None:
    """Produce one record as `user` (the topic's only replica is broker 1); its delivery error."""
    outcome: list[KafkaError | None] = []
    producer = Producer({**_one_broker_conf(c, 1, user), "message.timeout.ms": 10000, "retries": 0})
    producer.produce(topic, b"x", on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(20)
    return outcome[0] if outcome else KafkaError(KafkaError._MSG_TIMED_OUT)


def test_acl_created_at_one_broker_enforced_at_another(sasl_cluster: BrokerCluster) -> None:
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
    )

    c = sasl_cluster
    admin = AdminClient(_client_conf(c, ADMIN))
    topic = "acl-guarded"
    new = NewTopic(topic, num_partitions=1, replica_assignment=[[1]])
    admin.create_topics([new], operation_timeout=30)[topic].result(30)
    c.wait_isr(topic, {1})
    err = _produce_at_broker_1(c, ALICE, topic)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    through_2 = AdminClient(_one_broker_conf(c, 2, ADMIN))
    write = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
                       AclOperation.WRITE, AclPermissionType.ALLOW)  # fmt: skip
    prefixed = AclBinding(ResourceType.GROUP, "alice-", ResourcePatternType.PREFIXED,
                          "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)  # fmt: skip
    for f in through_2.create_acls([write, prefixed]).values():
        f.result(30)

    # Kafka's layout: a znode per resource pattern, change notifications in both change paths
    assert _znode(c, f"/kafka-acl/Topic/{topic}") == {
        "version": 1,
        "acls": [{"principal": "User:alice", "permissionType": "Allow", "operation": "Write",
                  "host": "*"}],
    }  # fmt: skip
    assert _znode(c, "/kafka-acl-extended/prefixed/Group/alice-")["acls"] == [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}
    ]
    assert f"TOPIC:{topic}".encode() in _notifications(c, "/kafka-acl-changes")
    extended = [json.loads(n) for n in _notifications(c, "/kafka-acl-extended-changes")]
    assert {"version": 1, "resourceType": "GROUP", "name": "alice-",
            "patternType": "PREFIXED"} in extended  # fmt: skip

    wait_for("alice may write at broker 1", lambda: _produce_at_broker_1(c, ALICE, topic) is None)

    doomed = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, None, None,
                              AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
    assert len(through_2.delete_acls([doomed])[doomed].result(30)) == 1
    assert not c.zk.exists(f"/kafka-acl/Topic/{topic}")

    def refused() -> bool:
        err = _produce_at_broker_1(c, ALICE, topic)
        return err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    wait_for("alice refused again at broker 1", refused)


def _alter_quota_through(c: BrokerCluster, broker_id: int, user: str, rate: float | None) -> None:
    """AlterClientQuotas sent to that broker by kafka-python (what kafka-configs.sh sends)."""
    from kafka import KafkaAdminClient
    from kafka.protocol.admin import AlterClientQuotasRequest

    admin = KafkaAdminClient(
        bootstrap_servers=c.broker(broker_id).bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username=ADMIN[0],
        sasl_plain_password=ADMIN[1],
    )
    request = AlterClientQuotasRequest(
        entries=[([("user", user)], [("producer_byte_rate", rate or 0.0, rate is None)])],
        validate_only=False,
    )

    async def send():  # to that broker: the admin client would pick any
        return await admin._manager.send(request, node_id=broker_id)

    try:
        response = admin._manager.run(send)
    finally:
        admin.close()
    assert [e.error_code for e in response.entries] == [0], response


def _produce_throttles(c: BrokerCluster, topic: str) -> list[int]:
    """Throttle times of produce responses for 100 kB produced as alice at broker 1."""
    throttles: list[int] = []
    producer = Producer({**_one_broker_conf(c, 1, ALICE), "linger.ms": 5, "batch.size": 16384,
                         "throttle_cb": lambda e: throttles.append(e.throttle_time)})  # fmt: skip
    for _ in range(100):
        producer.produce(topic, b"q" * 1000)
        producer.poll(0)
    assert producer.flush(60) == 0
    return throttles


def test_quota_set_at_one_broker_throttles_at_another(sasl_cluster: BrokerCluster) -> None:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
    )

    c = sasl_cluster
    admin = AdminClient(_client_conf(c, ADMIN))
    topic = "quota-guarded"
    new = NewTopic(topic, num_partitions=1, replica_assignment=[[1]])
    admin.create_topics([new], operation_timeout=30)[topic].result(30)
    write = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
                       AclOperation.WRITE, AclPermissionType.ALLOW)  # fmt: skip
    admin.create_acls([write])[write].result(30)
    wait_for("alice may write", lambda: _produce_at_broker_1(c, ALICE, topic) is None)

    _alter_quota_through(c, 3, "alice", 20000.0)
    assert _znode(c, "/config/users/alice")["config"]["producer_byte_rate"] == "20000"
    wait_for("alice throttled at broker 1", lambda: max(_produce_throttles(c, topic) or [0]) > 0)

    _alter_quota_through(c, 3, "alice", None)  # removed: the credential stays
    assert set(_znode(c, "/config/users/alice")["config"]) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}


def test_restarted_broker_reads_users_and_acls_back(sasl_cluster: BrokerCluster) -> None:
    """Runs after the tests above: carol, alice's prefixed group ACL are in ZooKeeper only."""
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
    )

    c = sasl_cluster
    c.broker(1).restart()
    c.wait_registered({1, 2, 3})
    wait_for(
        "carol logs in at the restarted broker", lambda: _logs_in(c, 1, ("carol", "carol-secret"))
    )
    only_1 = AdminClient(_one_broker_conf(c, 1, ADMIN))
    groups = AclBindingFilter(ResourceType.GROUP, None, ResourcePatternType.ANY, None, None,
                              AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
    found = only_1.describe_acls(groups).result(30)
    assert [(b.name, b.principal) for b in found] == [("alice-", "User:alice")]
