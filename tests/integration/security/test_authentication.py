"""Authentication with real clients: SASL_SSL with SCRAM-SHA-256/512 and PLAIN, mTLS on the SSL
listener, SASL_PLAINTEXT, wrong credentials refused; Metadata advertises the listener a client came
in on; Kafka's legacy SASL flow and its close-before-authentication rule over a raw socket;
re-authentication (KIP-368)."""

from __future__ import annotations

import socket
import ssl
import struct
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from gateway.protocol import decode_response, encode_request
from tests.integration.security.conftest import ADMIN, ALICE, SecureBroker

TIMEOUT = 30


def _produce_consume(settings: dict, topic: str, n: int = 5) -> list[bytes]:
    producer = Producer(settings)
    try:
        for i in range(n):
            producer.produce(topic, f"m{i}".encode())
        assert producer.flush(TIMEOUT) == 0
    finally:
        producer.close()
    consumer = Consumer(
        {**settings, "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
    finally:
        consumer.close()
    return got


def _create(broker: SecureBroker, topic: str, partitions: int = 1) -> None:
    admin = AdminClient(broker.sasl("SASL_SSL", ADMIN))
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(TIMEOUT)


@pytest.mark.parametrize(
    "listener,mechanism,user",
    [
        ("SASL_SSL", "SCRAM-SHA-256", ADMIN),
        ("SASL_SSL", "SCRAM-SHA-512", ADMIN),
        ("SASL_SSL", "PLAIN", ("carol", "carol-secret")),
        ("SASL_PLAINTEXT", "SCRAM-SHA-256", ADMIN),
    ],
)
def test_confluent_kafka_round_trip(secure_broker, listener, mechanism, user):
    """confluent-kafka produces and consumes over each SASL listener and mechanism (the
    principals here are allowed by super.users or by an ACL)."""
    broker = secure_broker
    topic = f"auth-{uuid.uuid4().hex[:6]}"
    _create(broker, topic)
    if user != ADMIN:
        _allow_all_on(broker, f"User:{user[0]}", topic)
    assert _produce_consume(broker.sasl(listener, user, mechanism), topic) == [
        f"m{i}".encode() for i in range(5)
    ]


def _allow_all_on(broker: SecureBroker, principal: str, topic: str) -> None:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    admin = AdminClient(broker.sasl("SASL_SSL", ADMIN))
    bindings = [
        AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*",
                   AclOperation.ALL, AclPermissionType.ALLOW),
        AclBinding(ResourceType.GROUP, "*", ResourcePatternType.LITERAL, principal, "*",
                   AclOperation.ALL, AclPermissionType.ALLOW),
    ]  # fmt: skip
    for future in admin.create_acls(bindings).values():
        future.result(TIMEOUT)


def _auth_error(settings: dict) -> str:
    """The authentication error librdkafka reports for `settings` (bounded wait)."""
    from confluent_kafka import KafkaError

    errors: list = []
    producer = Producer({**settings, "error_cb": errors.append})
    deadline = time.monotonic() + TIMEOUT
    try:
        while time.monotonic() < deadline and not any(
            e.code() == KafkaError._AUTHENTICATION for e in errors
        ):
            producer.poll(0.2)
    finally:
        producer.close()
    found = [e.str() for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert found, f"no authentication error, only {errors}"
    return found[0]


def test_wrong_password_and_unknown_user_are_refused(secure_broker):
    for user, mechanism in [(("admin", "nope"), "SCRAM-SHA-256"), (("nobody", "x"), "SCRAM-SHA-512"),
                            (("carol", "nope"), "PLAIN")]:  # fmt: skip
        message = _auth_error(secure_broker.sasl("SASL_SSL", user, mechanism))
        assert "Authentication failed" in message


def test_mtls_principal_from_the_certificate(secure_broker):
    """On the SSL listener (ssl.client.auth=required) the principal is the certificate's subject:
    User:CN=alice gets what its ACLs allow; a certificate of another CA is refused at the
    handshake."""
    broker = secure_broker
    topic = f"mtls-{uuid.uuid4().hex[:6]}"
    _create(broker, topic)
    _allow_all_on(broker, "User:CN=alice", topic)
    assert len(_produce_consume(broker.mtls(), topic)) == 5
    admin = AdminClient({**broker.mtls(broker.pki.mallory)})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)


def test_kafka_python_scram_and_mtls(secure_broker):
    from kafka import KafkaConsumer, KafkaProducer

    broker = secure_broker
    topic = f"kp-{uuid.uuid4().hex[:6]}"
    _create(broker, topic)
    _allow_all_on(broker, "User:CN=alice", topic)
    ca = str(broker.pki.ca.pem)
    scram = {
        "bootstrap_servers": broker.listeners["SASL_SSL"],
        "security_protocol": "SASL_SSL",
        "ssl_cafile": ca,
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": ADMIN[0],
        "sasl_plain_password": ADMIN[1],
    }
    mtls = {
        "bootstrap_servers": broker.listeners["SSL"],
        "security_protocol": "SSL",
        "ssl_cafile": ca,
        "ssl_certfile": str(broker.pki.alice.cert),
        "ssl_keyfile": str(broker.pki.alice.key),
    }
    for settings in (scram, mtls):
        producer = KafkaProducer(**settings)
        producer.send(topic, b"kp").get(TIMEOUT)
        producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=5000, **scram)
    assert [m.value for m in consumer] == [b"kp", b"kp"]
    consumer.close()


def test_metadata_advertises_the_listener_the_client_came_in_on(secure_broker):
    """Kafka's rule: brokers are described with the endpoint of the listener of the request."""
    from kafka import KafkaAdminClient

    broker = secure_broker
    admin = AdminClient(broker.sasl("SASL_PLAINTEXT", ADMIN))
    brokers = admin.list_topics(timeout=TIMEOUT).brokers
    assert [f"{b.host}:{b.port}" for b in brokers.values()] == [broker.listeners["SASL_PLAINTEXT"]]
    internal = KafkaAdminClient(bootstrap_servers=broker.listeners["INTERNAL"])
    try:
        described = internal.describe_cluster()
    finally:
        internal.close()
    assert [f"{b['host']}:{b['port']}" for b in described["brokers"]] == [
        broker.listeners["INTERNAL"]
    ]


# --- the protocol itself, over a raw socket -----------------------------------------------------


def _frame(sock, payload: bytes) -> bytes:
    sock.sendall(struct.pack(">i", len(payload)) + payload)
    head = _recv(sock, 4)
    return _recv(sock, struct.unpack(">i", head)[0])


def _recv(sock, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed by the broker")
        out += chunk
    return out


def _request(sock, api_key: int, version: int, body: dict) -> dict:
    frame = encode_request(api_key, version, 1, body, client_id="raw")
    _, response = decode_response(api_key, version, _frame(sock, bytes(frame[4:])))
    return response


def _closed(sock) -> bool:
    sock.settimeout(10)
    try:
        return sock.recv(1) == b""
    except ConnectionError:
        return True


def _connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def test_requests_before_authentication_close_the_connection(secure_broker):
    """Before SASL authentication only ApiVersions and SaslHandshake are served (Kafka closes the
    connection on anything else); an unknown mechanism is answered with the listener's list."""
    address = secure_broker.listeners["SASL_PLAINTEXT"]
    with _connect(address) as sock:
        assert (
            _request(sock, 18, 3, {"client_software_name": "raw", "client_software_version": "1"})[
                "error_code"
            ]
            == 0
        )
        frame = encode_request(3, 12, 2, {"topics": None}, client_id="raw")
        sock.sendall(bytes(frame))
        assert _closed(sock)
    with _connect(address) as sock:  # frames are bounded by sasl.server.max.receive.size
        sock.sendall(struct.pack(">i", 524288 + 1) + b"\0" * 1024)
        assert _closed(sock)
    with _connect(address) as sock:
        answer = _request(sock, 17, 1, {"mechanism": "GSSAPI"})
        assert answer["error_code"] == 33  # UNSUPPORTED_SASL_MECHANISM
        assert answer["mechanisms"] == ["SCRAM-SHA-256"]
        assert _closed(sock)


def test_legacy_flow_raw_tokens_after_handshake_v0(secure_broker):
    """SaslHandshake v0, then a bare PLAIN token and a bare (empty) answer, then Kafka requests."""
    context = ssl.create_default_context(cafile=str(secure_broker.pki.ca.pem))
    host, port = secure_broker.listeners["SASL_SSL"].rsplit(":", 1)
    with context.wrap_socket(socket.create_connection((host, int(port)), timeout=10),
                             server_hostname="localhost") as sock:  # fmt: skip
        assert _request(sock, 17, 0, {"mechanism": "PLAIN"})["error_code"] == 0
        assert _frame(sock, b"\0carol\0carol-secret") == b""
        metadata = _request(sock, 3, 9, {"topics": None, "allow_auto_topic_creation": False})
        assert metadata["brokers"][0]["port"] == int(port)
    with context.wrap_socket(socket.create_connection((host, int(port)), timeout=10),
                             server_hostname="localhost") as sock:  # fmt: skip
        assert _request(sock, 17, 0, {"mechanism": "PLAIN"})["error_code"] == 0
        sock.sendall(struct.pack(">i", 19) + b"\0carol\0wrong-secret")
        assert _closed(sock)


def test_scram_framed_flow_and_reauthentication(secure_broker_factory):
    """SaslAuthenticate v2 with SCRAM: session lifetime from connections.max.reauth.ms; the client
    re-authenticates on the same connection; a request after the session expired closes it."""
    from rdmalog.security.sasl import SaslClient

    broker = secure_broker_factory({"connections.max.reauth.ms": "1500"})

    def authenticate(sock, user=ADMIN) -> dict:
        assert _request(sock, 17, 1, {"mechanism": "SCRAM-SHA-256"})["error_code"] == 0
        client = SaslClient("SCRAM-SHA-256", *user)
        answer = _request(sock, 36, 2, {"auth_bytes": client.first()})
        assert answer["error_code"] == 0, answer
        final = _request(sock, 36, 2, {"auth_bytes": client.step(answer["auth_bytes"])})
        assert final["error_code"] == 0, final
        client.step(final["auth_bytes"])  # checks the server's signature
        return final

    with _connect(broker.listeners["SASL_PLAINTEXT"]) as sock:
        final = authenticate(sock)
        assert 0 < final["session_lifetime"] <= 1500
        assert _request(sock, 3, 12, {"topics": None})["brokers"]
        authenticate(sock)  # re-authentication, same principal
        assert _request(sock, 3, 12, {"topics": None})["brokers"]
        time.sleep(1.7)
        sock.sendall(bytes(encode_request(3, 12, 9, {"topics": None}, client_id="raw")))
        assert _closed(sock)
    with _connect(broker.listeners["SASL_PLAINTEXT"]) as sock:
        authenticate(sock)
        assert _request(sock, 17, 1, {"mechanism": "SCRAM-SHA-256"})["error_code"] == 0
        client = SaslClient("SCRAM-SHA-256", *ALICE)  # another principal: refused, closed
        answer = _request(sock, 36, 2, {"auth_bytes": client.first()})
        final = _request(sock, 36, 2, {"auth_bytes": client.step(answer["auth_bytes"])})
        assert final["error_code"] == 58  # SASL_AUTHENTICATION_FAILED
        assert _closed(sock)


def test_confluent_kafka_reauthenticates(secure_broker_factory):
    """librdkafka re-authenticates (KIP-368) within the session lifetime and keeps producing."""
    broker = secure_broker_factory({"connections.max.reauth.ms": "1000"})
    topic = f"reauth-{uuid.uuid4().hex[:6]}"
    _create(broker, topic)
    producer = Producer(broker.sasl("SASL_SSL", ADMIN))
    try:
        for i in range(4):
            producer.produce(topic, f"r{i}".encode())
            assert producer.flush(TIMEOUT) == 0
            time.sleep(0.8)
    finally:
        producer.close()
    log = broker.process.stderr_tail(500)
    assert "SASL session expired" not in log


def test_inter_broker_login(secure_broker):
    """What a follower uses to reach a leader's inter-broker listener: TLS with the broker's trust
    store and SCRAM with sasl.mechanism.inter.broker.protocol and its JAAS entry's credentials."""
    import asyncio

    from compat_tests.brokers import free_ports
    from rdmalog.config import BrokerConfig
    from rdmalog.security.inter_broker import authenticate, client_security
    from tests.integration.security.conftest import security_overrides

    broker = secure_broker
    config = BrokerConfig.from_sources(
        None,
        {
            **security_overrides(
                broker.pki, dict(zip(("SASL_SSL", "INTERNAL"), free_ports(2), strict=True))
            ),
            "listener.security.protocol.map": "SASL_SSL:SASL_SSL,INTERNAL:PLAINTEXT",
            "inter.broker.listener.name": "SASL_SSL",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="{ADMIN[0]}" password="{ADMIN[1]}";'
            ),
        },
    )
    security = client_security(config)
    host, port = broker.listeners["SASL_SSL"].rsplit(":", 1)

    async def login() -> dict:
        reader, writer = await asyncio.open_connection(
            host, int(port), ssl=security.ssl_context, server_hostname="localhost"
        )
        correlation = iter(range(1, 100))

        async def request(api_key: int, version: int, body: dict) -> dict:
            writer.write(
                bytes(
                    encode_request(api_key, version, next(correlation), body, client_id="broker-1")
                )
            )
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            return decode_response(api_key, version, await reader.readexactly(size))[1]

        try:
            await authenticate(request, security)
            return await request(3, 12, {"topics": None})
        finally:
            writer.close()

    metadata = asyncio.run(asyncio.wait_for(login(), TIMEOUT))
    assert metadata["brokers"][0]["port"] == int(port)
