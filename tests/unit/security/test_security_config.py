"""Security configuration read as Kafka reads it: JAAS values, listeners and their protocols, the
SSL principal (RFC 2253 subject and ssl.principal.mapping.rules), cipher names, ACL filters, SCRAM
credentials in Kafka's format."""

from __future__ import annotations

import base64
import hashlib

import pytest

from rdmalog.config import BrokerConfig
from rdmalog.errors import InvalidConfigError
from rdmalog.security import jaas
from rdmalog.security.acls import ALLOW, ANY, MATCH, matches
from rdmalog.security.authorizer import Acl, Operation, PatternType, ResourceType
from rdmalog.security.entity_configs import ScramCredential
from rdmalog.security.listeners import ListenerSettings, inter_broker_listener, listener_specs
from rdmalog.security.tls import PrincipalMapper, openssl_cipher_name, subject_name


def test_jaas_as_kafka_reads_it():
    entries = jaas.parse(
        "org.apache.kafka.common.security.plain.PlainLoginModule required\n"
        '  username="admin" password="a\\"b" user_admin="a\\"b" user_alice=alice-pw;'
    )
    assert entries[0].flag == "required"
    assert jaas.plain_users(entries) == {"admin": 'a"b', "alice": "alice-pw"}
    for bad in ("PlainLoginModule", "x required user_a=", "x sometimes;", 'x required a="b"'):
        with pytest.raises(ValueError):
            jaas.parse(bad)


def _config(**overrides) -> BrokerConfig:
    return BrokerConfig.from_sources(None, {k.replace("_", "."): v for k, v in overrides.items()})


def test_listeners_and_protocols():
    config = BrokerConfig.from_sources(
        None,
        {
            "listeners": "EXTERNAL://:9093,INTERNAL://127.0.0.1:9092",
            "advertised.listeners": "EXTERNAL://kafka.example.com:19093",
            "listener.security.protocol.map": "EXTERNAL:SASL_SSL,INTERNAL:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
        },
    )
    external, internal = listener_specs(config)
    assert (external.protocol, external.advertised_host, external.advertised_port) == (
        "SASL_SSL",
        "kafka.example.com",
        19093,
    )
    assert external.tls and external.sasl and not internal.tls
    assert inter_broker_listener(config) == "INTERNAL"


@pytest.mark.parametrize(
    "overrides,named",
    [
        ({"listeners": "A://:1,A://:2", "listener.security.protocol.map": "A:SSL"}, "different name"),
        ({"listeners": "A://:1,B://:1", "listener.security.protocol.map": "A:SSL,B:SSL"}, "different port"),
        ({"listeners": "X://:1"}, "listener.security.protocol.map"),
        ({"listener.security.protocol.map": "PLAINTEXT:TLS"}, "listener.security.protocol.map"),
        ({"advertised.listeners": "SSL://h:1"}, "advertised.listeners"),
        ({"inter.broker.listener.name": "PLAINTEXT", "security.inter.broker.protocol": "PLAINTEXT"}, "Only one"),
        ({"zookeeper.connect": "zk:2181", "listeners": "SSL://:9093"}, "security.inter.broker.protocol"),
    ],
)  # fmt: skip
def test_listener_mistakes_are_named(overrides, named):
    with pytest.raises(InvalidConfigError, match=named):
        listener_specs(BrokerConfig.from_sources(None, overrides))


def test_listener_prefixed_keys_win():
    config = BrokerConfig.from_sources(
        None,
        {
            "ssl.client.auth": "requested",
            "listener.name.ssl.ssl.client.auth": "required",
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": "x required;",
        },
    )
    ssl_view, other = ListenerSettings(config, "SSL"), ListenerSettings(config, "SASL_SSL")
    assert ssl_view.get("ssl.client.auth") == "required"
    assert ssl_view.key("ssl.client.auth") == "listener.name.ssl.ssl.client.auth"
    assert other.get("ssl.client.auth") == "requested"
    assert other.get("scram-sha-256.sasl.jaas.config") == "x required;"
    with pytest.raises(InvalidConfigError, match="listener.name.ssl.ssl.client.auth"):
        BrokerConfig.from_sources(None, {"listener.name.ssl.ssl.client.auth": "sometimes"})


def test_ssl_principal_as_kafka_names_it():
    cert = {
        "subject": (
            (("countryName", "US"),),
            (("organizationName", "Acme, Inc."),),
            (("organizationalUnitName", "eng"),),
            (("commonName", "alice"),),
        )
    }
    dn = subject_name(cert)
    assert dn == "CN=alice,OU=eng,O=Acme\\, Inc.,C=US"
    assert PrincipalMapper("DEFAULT").name(dn) == dn
    mapper = PrincipalMapper("RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/L,DEFAULT")
    assert mapper.name("CN=Alice,OU=ENG,O=x") == "alice@eng"
    assert mapper.name("CN=bob") == "CN=bob"
    assert PrincipalMapper("RULE:^CN=(.*)$/$1/").name("O=x") is None  # no rule: refused
    with pytest.raises(InvalidConfigError):
        PrincipalMapper("RULE:broken")


def test_cipher_names():
    assert (
        openssl_cipher_name("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256")
        == "ECDHE-RSA-AES128-GCM-SHA256"
    )
    assert (
        openssl_cipher_name("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256")
        == "ECDHE-ECDSA-CHACHA20-POLY1305"
    )
    assert openssl_cipher_name("TLS_RSA_WITH_AES_256_GCM_SHA384") == "AES256-GCM-SHA384"
    assert openssl_cipher_name("ECDHE-RSA-AES256-GCM-SHA384") == "ECDHE-RSA-AES256-GCM-SHA384"


def _filter(**fields) -> dict:
    base = {"resource_type_filter": ANY, "resource_name_filter": None, "pattern_type_filter": ANY,
            "principal_filter": None, "host_filter": None, "operation": ANY, "permission_type": ANY}  # fmt: skip
    return {**base, **fields}


def test_acl_filters():
    literal = Acl("User:a", Operation.READ, ResourceType.TOPIC, "orders")
    prefixed = Acl("User:a", Operation.WRITE, ResourceType.TOPIC, "ord", PatternType.PREFIXED)
    wildcard = Acl("User:b", Operation.ALL, ResourceType.TOPIC, "*", allow=False)
    acls = [literal, prefixed, wildcard]
    assert [
        a
        for a in acls
        if matches(_filter(resource_name_filter="orders", pattern_type_filter=MATCH), a)
    ] == acls
    assert [a for a in acls if matches(_filter(resource_name_filter="orders"), a)] == [literal]
    assert [a for a in acls if matches(_filter(pattern_type_filter=4), a)] == [prefixed]
    assert [
        a for a in acls if matches(_filter(permission_type=ALLOW, principal_filter="User:a"), a)
    ] == [literal, prefixed]


def test_scram_credential_in_kafkas_format():
    cred = ScramCredential.from_password("SCRAM-SHA-256", "pencil", 4096)
    text = cred.encode()
    assert text.startswith("salt=") and text.endswith(",iterations=4096")
    assert ScramCredential.decode(text) == cred
    # RFC 7677's test vector: the stored key of "pencil" with its salt and 4096 iterations
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", salt, 4096)
    derived = ScramCredential.from_salted_password("SCRAM-SHA-256", salt, salted, 4096)
    assert base64.b64encode(derived.server_key) == b"wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU="


def test_inter_broker_login_fails_closed():
    from rdmalog.security.inter_broker import client_security

    base = {
        "listeners": "INTERNAL://:9092",
        "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
    }
    with pytest.raises(InvalidConfigError, match="sasl.mechanism.inter.broker.protocol=GSSAPI"):
        client_security(BrokerConfig.from_sources(None, base))
    scram = {**base, "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256"}
    with pytest.raises(
        InvalidConfigError, match="listener.name.internal.scram-sha-256.sasl.jaas.config"
    ):
        client_security(BrokerConfig.from_sources(None, scram))
    jaas_line = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="b1" password="p";'
    found = client_security(
        BrokerConfig.from_sources(
            None, {**scram, "listener.name.internal.scram-sha-256.sasl.jaas.config": jaas_line}
        )
    )
    assert (found.protocol, found.mechanism, found.username, found.ssl_context) == (
        "SASL_PLAINTEXT",
        "SCRAM-SHA-256",
        "b1",
        None,
    )
