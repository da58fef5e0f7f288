"""ACLs with real clients: what a principal may not do is answered with Kafka's codes
(TOPIC_/GROUP_/CLUSTER_AUTHORIZATION_FAILED) for confluent-kafka, kafka-python and the Java client;
Metadata leaves out topics the principal may not describe; literal, prefixed and wildcard
patterns, deny over allow, super.users; ACLs and SCRAM users managed through the admin APIs and kept
across a restart."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from compat_tests.common import ScenarioSkip
from tests.integration.security.conftest import ADMIN, ALICE, BOB, SecureBroker

TIMEOUT = 30


def _acl(rtype, name, principal, op, allow=True, pattern=ResourcePatternType.LITERAL):
    permission = AclPermissionType.ALLOW if allow else AclPermissionType.DENY
    return AclBinding(rtype, name, pattern, principal, "*", op, permission)


@pytest.fixture
def acl_broker(secure_broker: SecureBroker) -> SecureBroker:
    """Topics orders-1, orders-secret and payments; alice may read and write topics prefixed
    `orders-` (but is denied writes to orders-secret) and use groups prefixed `alice-`; bob has no
    ACL."""
    admin = AdminClient(secure_broker.sasl("SASL_SSL", ADMIN))
    for f in admin.create_topics(
        [NewTopic(t, 1, 1) for t in ("orders-1", "orders-secret", "payments")]
    ).values():
        f.result(TIMEOUT)
    prefixed = ResourcePatternType.PREFIXED
    bindings = [
        _acl(ResourceType.TOPIC, "orders-", "User:alice", AclOperation.READ, pattern=prefixed),
        _acl(ResourceType.TOPIC, "orders-", "User:alice", AclOperation.WRITE, pattern=prefixed),
        _acl(ResourceType.TOPIC, "orders-secret", "User:alice", AclOperation.WRITE, allow=False),
        _acl(ResourceType.GROUP, "alice-", "User:alice", AclOperation.READ, pattern=prefixed),
    ]
    for f in admin.create_acls(bindings).values():
        f.result(TIMEOUT)
    return secure_broker


def _delivery_error(settings: dict, topic: str) -> KafkaError | None:
    errors: list = []
    producer = Producer({**settings, "message.timeout.ms": 10000})
    try:
        producer.produce(topic, b"x", on_delivery=lambda err, _msg: errors.append(err))
        producer.flush(TIMEOUT)
    finally:
        producer.close()
    return errors[0] if errors else None


def _consume_error(settings: dict, topic: str, group: str) -> KafkaError | None:
    consumer = Consumer({**settings, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    deadline = time.monotonic() + TIMEOUT
    try:
        while time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() and m.error().code() != KafkaError._PARTITION_EOF:
                return m.error()
            if m is not None and not m.error():
                return None
    finally:
        consumer.close()
    raise AssertionError("neither a record nor an error")


def test_confluent_kafka_denied_codes(acl_broker):
    alice = acl_broker.sasl("SASL_SSL", ALICE, "SCRAM-SHA-512")
    bob = acl_broker.sasl("SASL_SSL", BOB)
    assert _delivery_error(alice, "orders-1") is None
    assert _delivery_error(alice, "orders-secret").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _delivery_error(bob, "orders-1").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _delivery_error(alice, "payments").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _consume_error(alice, "orders-1", "alice-app") is None
    assert (
        _consume_error(alice, "orders-1", "bobs-group").code()
        == KafkaError.GROUP_AUTHORIZATION_FAILED
    )
    assert (
        _consume_error(alice, "payments", "alice-app").code()
        == KafkaError.TOPIC_AUTHORIZATION_FAILED
    )


def test_metadata_and_admin_as_a_principal_sees_it(acl_broker):
    alice = AdminClient(acl_broker.sasl("SASL_SSL", ALICE))
    assert sorted(alice.list_topics(timeout=TIMEOUT).topics) == ["orders-1", "orders-secret"]
    with pytest.raises(KafkaException) as info:
        alice.create_topics([NewTopic("orders-2", 1, 1)])["orders-2"].result(TIMEOUT)
    assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    grant = _acl(ResourceType.TOPIC, "payments", "User:alice", AclOperation.READ)
    with pytest.raises(KafkaException) as info:
        alice.create_acls([grant])[grant].result(TIMEOUT)
    assert info.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # (librdkafka's describe_acls drops DescribeAcls' top-level error; kafka-python's is checked
    # in test_kafka_python_denied_codes)
    admin = AdminClient(acl_broker.sasl("SASL_SSL", ADMIN))
    assert {"orders-1", "orders-secret", "payments"} <= set(
        admin.list_topics(timeout=TIMEOUT).topics
    )


def test_acl_admin_describe_delete_and_restart(acl_broker):
    admin = AdminClient(acl_broker.sasl("SASL_SSL", ADMIN))
    any_alice = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice",
                                 None, AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
    assert len(admin.describe_acls(any_alice).result(TIMEOUT)) == 4
    match = AclBindingFilter(ResourceType.TOPIC, "orders-secret", ResourcePatternType.MATCH, None,
                             None, AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
    assert len(admin.describe_acls(match).result(TIMEOUT)) == 3  # the literal and both prefixes
    acl_broker.process.restart()
    admin = AdminClient(acl_broker.sasl("SASL_SSL", ADMIN))
    assert len(admin.describe_acls(any_alice).result(TIMEOUT)) == 4
    deny = AclBindingFilter(ResourceType.TOPIC, "orders-secret", ResourcePatternType.LITERAL, None,
                            None, AclOperation.ANY, AclPermissionType.DENY)  # fmt: skip
    deleted = admin.delete_acls([deny])[deny].result(TIMEOUT)
    assert [b.operation for b in deleted] == [AclOperation.WRITE]
    assert _delivery_error(acl_broker.sasl("SASL_SSL", ALICE), "orders-secret") is None


def test_kafka_python_denied_codes(acl_broker):
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka.errors import (
        ClusterAuthorizationFailedError,
        GroupAuthorizationFailedError,
        TopicAuthorizationFailedError,
    )

    def settings(user):
        return {
            "bootstrap_servers": acl_broker.listeners["SASL_SSL"],
            "security_protocol": "SASL_SSL",
            "ssl_cafile": str(acl_broker.pki.ca.pem),
            "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_plain_username": user[0],
            "sasl_plain_password": user[1],
        }

    producer = KafkaProducer(**settings(BOB), max_block_ms=10000)
    with pytest.raises(TopicAuthorizationFailedError):
        producer.send("orders-1", b"x").get(TIMEOUT)
    producer.close()
    consumer = KafkaConsumer("orders-1", group_id="bobs-group", **settings(ALICE))
    with pytest.raises(GroupAuthorizationFailedError):
        consumer.poll(timeout_ms=10000)
    consumer.close()
    admin = KafkaAdminClient(**settings(BOB))
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            admin.describe_acls(_kp_any_filter())
    finally:
        admin.close()


def _kp_any_filter():
    from kafka.admin import ACLFilter, ACLOperation, ACLPermissionType, ResourcePatternFilter
    from kafka.admin import ACLResourcePatternType as PatternType
    from kafka.admin import ResourceType as KpResourceType

    pattern = ResourcePatternFilter(KpResourceType.ANY, None, PatternType.ANY)
    return ACLFilter(None, "*", ACLOperation.ANY, ACLPermissionType.ANY, pattern)


def test_scram_users_through_the_admin_api(acl_broker):
    """AlterUserScramCredentials adds dave (who then authenticates), Describe lists mechanisms and
    iterations, a deletion locks dave out; bob may not alter users."""
    admin = AdminClient(acl_broker.sasl("SASL_SSL", ADMIN))
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion("dave", info, b"dave-pw")])[
        "dave"
    ].result(TIMEOUT)
    described = admin.describe_user_scram_credentials(["dave"])["dave"].result(TIMEOUT)
    assert [(c.mechanism, c.iterations) for c in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_512, 8192)
    ]
    dave = AdminClient(acl_broker.sasl("SASL_SSL", ("dave", "dave-pw"), "SCRAM-SHA-512"))
    assert dave.list_topics(timeout=TIMEOUT).brokers
    bob = AdminClient(acl_broker.sasl("SASL_SSL", BOB))
    with pytest.raises(KafkaException) as err:
        bob.alter_user_scram_credentials([UserScramCredentialUpsertion("bob", info, b"x")])[
            "bob"
        ].result(TIMEOUT)
    assert err.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    deletion = UserScramCredentialDeletion("dave", ScramMechanism.SCRAM_SHA_512)
    admin.alter_user_scram_credentials([deletion])["dave"].result(TIMEOUT)
    from tests.integration.security.test_authentication import _auth_error

    assert "Authentication failed" in _auth_error(
        acl_broker.sasl("SASL_SSL", ("dave", "dave-pw"), "SCRAM-SHA-512")
    )


def test_java_client_sasl_ssl_and_denied_codes(acl_broker):
    """kafka-clients over SASL_SSL with SCRAM and a PEM trust store: alice writes her topic, bob
    gets TopicAuthorizationException."""
    from compat_tests import java

    try:
        java.jvm()
    except ScenarioSkip as exc:
        pytest.skip(str(exc))
    ca = acl_broker.pki.ca.pem.read_text()

    def settings(user):
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{user[0]}" password="{user[1]}";',
            "ssl.truststore.type": "PEM",
            "ssl.truststore.certificates": ca,
            "max.block.ms": 15000,
            "delivery.timeout.ms": 15000,
            "request.timeout.ms": 10000,
        }

    bootstrap = acl_broker.listeners["SASL_SSL"]
    producer = java.producer(bootstrap, **settings(ALICE))
    try:
        meta = java.wait(
            producer.send(
                java.jvm().org.apache.kafka.clients.producer.ProducerRecord("orders-1", b"j")
            )
        )
        assert meta.topic() == "orders-1"
    finally:
        producer.close()
    producer = java.producer(bootstrap, **settings(BOB))
    try:
        future = producer.send(
            java.jvm().org.apache.kafka.clients.producer.ProducerRecord("orders-1", b"j")
        )
        with pytest.raises(Exception) as info:
            java.wait(future)
        assert "TopicAuthorizationException" in str(info.value)
    finally:
        producer.close()


def test_kafkajs_sasl_ssl_and_denied_codes(acl_broker):
    """KafkaJS over SASL_SSL with SCRAM-SHA-256: alice writes and reads (group alice-kafkajs), and
    gets TOPIC_AUTHORIZATION_FAILED for a topic she may not write."""
    import json
    import os
    import shutil
    import subprocess
    from pathlib import Path

    repo = Path(__file__).resolve().parents[3]
    modules = repo / "compat_tests" / "js" / "node_modules"
    if shutil.which("node") is None or not (modules / "kafkajs").is_dir():
        pytest.skip("node or compat_tests/js/node_modules/kafkajs missing (scripts/setup.sh test)")
    script = Path(__file__).with_name("kafkajs_security.js")
    done = subprocess.run(
        ["node", str(script), acl_broker.listeners["SASL_SSL"], str(acl_broker.pki.ca.pem),
         "SCRAM-SHA-256", *ALICE, "orders-1", "payments"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "NODE_PATH": str(modules)},
    )  # fmt: skip
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["ok"], (result, done.stderr[-2000:])
    assert result["consumed"] == "from-kafkajs"
    assert result["denied"] == "TOPIC_AUTHORIZATION_FAILED"


def test_native_clients_are_the_same_principals_under_the_same_acls(secure_broker_factory):
    """`rdmalog serve` with rdma.transport=tcp and secured listeners: the RDMA control port wants
    SASL with the Kafka listeners' SCRAM users, grants follow the Kafka ACLs (and go when a
    DeleteAcls takes the ACL away), and what a native producer wrote is read by a Kafka consumer."""
    from compat_tests.brokers import free_port
    from rdmalog.errors import SaslAuthenticationFailedError, TopicAuthorizationFailedError
    from rdmalog.rdma import Producer as NativeProducer
    from rdmalog.rdma.client.endpoint import SaslCredentials

    control = free_port()
    broker = secure_broker_factory({"rdma.transport": "tcp", "rdma.control.port": str(control)})
    admin = AdminClient(broker.sasl("SASL_SSL", ADMIN))
    admin.create_topics([NewTopic("native-t", 1, 1)])["native-t"].result(TIMEOUT)
    write = _acl(ResourceType.TOPIC, "native-t", "User:alice", AclOperation.WRITE)
    admin.create_acls([write])[write].result(TIMEOUT)
    address = f"127.0.0.1:{control}"
    with pytest.raises(SaslAuthenticationFailedError):
        NativeProducer(address)
    with pytest.raises(SaslAuthenticationFailedError):
        NativeProducer(address, sasl=SaslCredentials("SCRAM-SHA-256", "alice", "wrong"))
    with NativeProducer(address, sasl=SaslCredentials("SCRAM-SHA-256", *BOB)) as bob:
        with pytest.raises(TopicAuthorizationFailedError):
            bob.produce("native-t", 0, b"not bob's")
    alice = NativeProducer(address, sasl=SaslCredentials("SCRAM-SHA-512", *ALICE))
    try:
        alice.produce("native-t", 0, b"native")
        gone = AclBindingFilter(ResourceType.TOPIC, "native-t", ResourcePatternType.LITERAL,
                                "User:alice", None, AclOperation.WRITE, AclPermissionType.ALLOW)  # fmt: skip
        admin.delete_acls([gone])[gone].result(TIMEOUT)
        with pytest.raises(TopicAuthorizationFailedError):
            for _ in range(50):  # the grant is withdrawn once the ACL is gone
                alice.produce("native-t", 0, b"after")
                time.sleep(0.1)
    finally:
        alice.close()
    consumer = Consumer({**broker.sasl("SASL_SSL", ADMIN), "group.id": "native-check",
                         "auto.offset.reset": "earliest"})  # fmt: skip
    consumer.subscribe(["native-t"])
    values = []
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline and b"native" not in values:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            values.append(m.value())
    consumer.close()
    assert values[0] == b"native"
