"""Fixtures of the security tests: a test PKI (made with `cryptography`) and brokers with several
listeners (SASL_SSL, SSL with client certificates, SASL_PLAINTEXT, PLAINTEXT) whose SCRAM users are
added with `rdmalog scram add` before the first start, as an operator would."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from compat_tests.brokers import BrokerProcess, external_bootstrap, free_ports, serve_command
from tests.integration.security.certs import Issued, TestCA

ADMIN, ALICE, BOB = ("admin", "admin-secret"), ("alice", "alice-secret"), ("bob", "bob-secret")
PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" user_carol="carol-secret";'
)


@dataclass
class Pki:
    ca: TestCA
    broker: Issued
    alice: Issued  # CN=alice: principal User:CN=alice on the SSL listener
    mallory: Issued  # signed by another CA: refused


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    root = tmp_path_factory.mktemp("pki")
    ca = TestCA(root / "ca")
    other = TestCA(root / "other", name="another CA")
    return Pki(ca, ca.issue("broker", server=True), ca.issue("alice"), other.issue("mallory"))


@dataclass
class SecureBroker:
    """A running broker and its listeners' bootstrap addresses by name."""

    process: BrokerProcess
    listeners: dict[str, str]
    pki: Pki

    @property
    def data_dir(self) -> Path:
        return self.process.data_dir

    def client_tls(self) -> dict[str, str]:
        """confluent-kafka settings trusting the test CA."""
        return {"ssl.ca.location": str(self.pki.ca.pem)}

    def sasl(self, listener: str, user: tuple[str, str], mechanism: str = "SCRAM-SHA-256") -> dict:
        """confluent-kafka settings to authenticate as `user` on `listener`."""
        protocol = "SASL_SSL" if listener == "SASL_SSL" else "SASL_PLAINTEXT"
        out = {
            "bootstrap.servers": self.listeners[listener],
            "security.protocol": protocol,
            "sasl.mechanism": mechanism,
            "sasl.username": user[0],
            "sasl.password": user[1],
        }
        if protocol == "SASL_SSL":
            out.update(self.client_tls())
        return out

    def mtls(self, issued: Issued | None = None) -> dict:
        """confluent-kafka settings for the SSL listener with a client certificate."""
        issued = issued or self.pki.alice
        return {
            "bootstrap.servers": self.listeners["SSL"],
            "security.protocol": "SSL",
            "ssl.ca.location": str(self.pki.ca.pem),
            "ssl.certificate.location": str(issued.cert),
            "ssl.key.location": str(issued.key),
        }


def security_overrides(pki: Pki, ports: dict[str, int]) -> dict[str, str]:
    """SASL_SSL (PLAIN and SCRAM), SSL requiring client certificates, SASL_PLAINTEXT (SCRAM) and a
    PLAINTEXT listener named INTERNAL for brokers, with ACLs on."""
    return {
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,SSL:SSL,"
        "SASL_PLAINTEXT:SASL_PLAINTEXT,INTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.broker.keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca.pem),
        "listener.name.ssl.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
    }


def scram_add(data_dir: Path, user: str, password: str) -> None:
    """`rdmalog scram add` (both mechanisms), the way to have users before the first start."""
    rdmalog = serve_command()[:-1]
    subprocess.run(
        [
            *rdmalog,
            "scram",
            "add",
            "--user",
            user,
            "--password",
            password,
            "--data-dir",
            str(data_dir),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )


BrokerMaker = Callable[..., SecureBroker]


@pytest.fixture
def secure_broker_factory(tmp_path: Path, pki: Pki) -> Iterator[BrokerMaker]:
    """`factory(extra_overrides=None, users=(ADMIN, ALICE, BOB))` starts a secured broker."""
    if external_bootstrap():
        pytest.skip("KAFKA_BOOTSTRAP: the security tests configure their own broker")
    started: list[BrokerProcess] = []

    def factory(extra: dict[str, str] | None = None, users=(ADMIN, ALICE, BOB)) -> SecureBroker:
        names = ("SASL_SSL", "SSL", "SASL_PLAINTEXT", "INTERNAL")
        ports = dict(zip(names, free_ports(len(names)), strict=True))
        first = ports["SASL_SSL"]
        data = tmp_path / f"broker{len(started)}" / "data"
        for user, password in users:
            scram_add(data, user, password)
        overrides = {**security_overrides(pki, ports), **(extra or {})}
        process = BrokerProcess(data, overrides, log_dir=data.parent, port=first)
        started.append(process)
        process.start()
        return SecureBroker(
            process, {name: f"127.0.0.1:{port}" for name, port in ports.items()}, pki
        )

    yield factory
    for process in started:
        process.close()


@pytest.fixture
def secure_broker(secure_broker_factory: BrokerMaker) -> SecureBroker:
    return secure_broker_factory()
