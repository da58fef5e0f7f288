"""The broker refuses to start rather than serve less security than configured: each case below
makes `rdmalog serve` exit with a message naming the key, before any port is open."""

from __future__ import annotations

import subprocess

import pytest

from compat_tests.brokers import free_port, port_open, serve_command
from tests.integration.security.conftest import PLAIN_JAAS


def _serve(tmp_path, overrides: dict[str, str]) -> tuple[int, str, int]:
    port = free_port()
    cmd = [*serve_command(), "--data-dir", str(tmp_path / "data")]
    listeners = overrides.pop("listeners", f"SASL_SSL://127.0.0.1:{port}")
    for key, value in {"listeners": listeners.format(port=port), **overrides}.items():
        cmd += ["--override", f"{key}={value}"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    return done.returncode, done.stderr, port


def _tls(pki) -> dict[str, str]:
    return {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.broker.keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca.pem),
    }


CASES = {
    "GSSAPI, Kafka's default mechanism": ({}, "sasl.enabled.mechanisms"),
    "OAUTHBEARER": ({"sasl.enabled.mechanisms": "SCRAM-SHA-256,OAUTHBEARER"}, "OAUTHBEARER"),
    "PLAIN without a JAAS entry": ({"sasl.enabled.mechanisms": "PLAIN"}, "listener.name.sasl_ssl.plain.sasl.jaas.config"),
    "an unreadable JAAS entry": (
        {"sasl.enabled.mechanisms": "PLAIN",
         "listener.name.sasl_ssl.plain.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="x"'},
        "listener.name.sasl_ssl.plain.sasl.jaas.config",
    ),
    "a JAAS entry of another login module": (
        {"sasl.enabled.mechanisms": "PLAIN",
         "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;"},
        "sasl.jaas.config",
    ),
    "a missing key store file": (
        {"sasl.enabled.mechanisms": "SCRAM-SHA-256", "ssl.keystore.location": "/nonexistent/broker.pem"},
        "ssl.keystore.location",
    ),
    "a JKS key store": ({"sasl.enabled.mechanisms": "SCRAM-SHA-256", "ssl.keystore.type": "JKS"}, "ssl.keystore.type"),
    "no key store at all": ({"sasl.enabled.mechanisms": "SCRAM-SHA-256", "ssl.keystore.location": ""}, "ssl.keystore.location"),
    "client auth without a trust store": (
        {"listeners": "SSL://127.0.0.1:{port}", "ssl.client.auth": "required", "ssl.truststore.location": ""},
        "ssl.truststore.location",
    ),
    "an unknown security protocol": (
        {"listeners": "SECURE://127.0.0.1:{port}", "listener.security.protocol.map": "SECURE:KERBEROS"},
        "listener.security.protocol.map",
    ),
    "a listener without a protocol": ({"listeners": "EXTERNAL://127.0.0.1:{port}"}, "listener.security.protocol.map"),
    "an authorizer rdmalog does not have": (
        {"listeners": "PLAINTEXT://127.0.0.1:{port}", "authorizer.class.name": "org.apache.ranger.authorization.kafka.authorizer.RangerKafkaAuthorizer"},
        "authorizer.class.name",
    ),
    "a TLS protocol that does not exist": (
        {"listeners": "SSL://127.0.0.1:{port}", "ssl.enabled.protocols": "TLSv1.4"},
        "ssl.enabled.protocols",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_refuses_to_start(tmp_path, pki, case):
    overrides, key = CASES[case]
    settings = {**_tls(pki), **dict(overrides)}
    settings = {k: v for k, v in settings.items() if v != ""}
    code, stderr, port = _serve(tmp_path, settings)
    assert code != 0, stderr
    assert key in stderr, stderr
    assert not port_open("127.0.0.1", port)


def test_encrypted_key_needs_its_password(tmp_path, pki):
    locked = pki.ca.issue("locked-broker", server=True, password="key-secret")
    settings = {
        **_tls(pki),
        "listeners": "SSL://127.0.0.1:{port}",
        "ssl.keystore.location": str(locked.keystore),
    }
    code, stderr, _ = _serve(tmp_path, dict(settings))
    assert code != 0 and "ssl.key.password" in stderr, stderr
    code, stderr, _ = _serve(tmp_path, {**settings, "ssl.key.password": "wrong"})
    assert code != 0 and "ssl.key.password" in stderr, stderr


def test_plain_users_need_the_jaas_entry_only(tmp_path, pki):
    """The same settings with a good JAAS entry do start (the cases above fail for their key)."""
    from compat_tests.brokers import BrokerProcess

    port = free_port()
    broker = BrokerProcess(
        tmp_path / "data",
        {
            **_tls(pki),
            "listeners": f"SASL_SSL://127.0.0.1:{port}",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        },
        port=port,
    )
    try:
        broker.start()
        assert port_open("127.0.0.1", port)
    finally:
        broker.close()
