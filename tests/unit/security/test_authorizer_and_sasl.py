"""The authorization hook (Kafka's ACL rules over a table) and SASL PLAIN/SCRAM exchanges."""

from __future__ import annotations

import pytest

from rdmalog.security.authorizer import (
    ANONYMOUS,
    Acl,
    AclAuthorizer,
    AllowAll,
    Operation,
    PatternType,
    Principal,
    Resource,
    ResourceType,
    is_internal_topic,
)
from rdmalog.security.sasl import AuthenticationError, SaslClient, SaslServer, UserStore

ALICE, BOB = Principal("User", "alice"), Principal("User", "bob")


def topic(name: str) -> Resource:
    return Resource(ResourceType.TOPIC, name)


def test_acl_rules_as_kafka_applies_them():
    acls = AclAuthorizer(
        [
            Acl("User:alice", Operation.WRITE, ResourceType.TOPIC, "orders"),
            Acl("User:alice", Operation.READ, ResourceType.TOPIC, "logs-", PatternType.PREFIXED),
            Acl("User:*", Operation.READ, ResourceType.TOPIC, "public"),
            Acl("User:bob", Operation.ALL, ResourceType.TOPIC, "*"),
            Acl("User:bob", Operation.WRITE, ResourceType.TOPIC, "orders", allow=False),
            Acl("User:alice", Operation.READ, ResourceType.GROUP, "g", host="10.0.0.1"),
        ],
        super_users=["User:admin"],
    )
    ok = acls.authorize
    assert ok(ALICE, "h", Operation.WRITE, topic("orders"))
    assert ok(ALICE, "h", Operation.DESCRIBE, topic("orders"))  # WRITE implies DESCRIBE
    assert not ok(ALICE, "h", Operation.READ, topic("orders"))
    assert ok(ALICE, "h", Operation.READ, topic("logs-app")) and not ok(
        ALICE, "h", Operation.READ, topic("log")
    )
    assert ok(ANONYMOUS, "h", Operation.READ, topic("public"))
    assert ok(BOB, "h", Operation.READ, topic("orders"))
    assert not ok(BOB, "h", Operation.WRITE, topic("orders"))  # deny wins over ALL on *
    assert ok(ALICE, "10.0.0.1", Operation.READ, Resource(ResourceType.GROUP, "g"))
    assert not ok(ALICE, "10.0.0.2", Operation.READ, Resource(ResourceType.GROUP, "g"))
    assert ok(Principal("User", "admin"), "h", Operation.DELETE, topic("x"))
    # no ACL names the resource: denied, unless allow.everyone.if.no.acl.found
    cluster = Resource(ResourceType.CLUSTER, "kafka-cluster")
    assert not ok(ALICE, "h", Operation.IDEMPOTENT_WRITE, cluster)
    assert AclAuthorizer(allow_everyone_if_no_acl_found=True).authorize(
        ALICE, "h", Operation.IDEMPOTENT_WRITE, cluster
    )
    assert AllowAll().authorize(ANONYMOUS, "h", Operation.WRITE, topic("x"))


def test_acl_changes_are_told_to_listeners():
    acls = AclAuthorizer()
    calls = []
    acls.add_listener(lambda: calls.append(len(acls.acls())))
    acl = Acl("User:alice", Operation.WRITE, ResourceType.TOPIC, "t")
    acls.add(acl)
    assert acls.authorize(ALICE, "h", Operation.WRITE, topic("t"))
    acls.remove(acl)
    assert not acls.authorize(ALICE, "h", Operation.WRITE, topic("t"))
    assert calls == [1, 0]


def test_principals_and_internal_topics():
    assert Principal.parse("User:alice") == ALICE and str(ALICE) == "User:alice"
    with pytest.raises(ValueError):
        Principal.parse("alice")
    assert is_internal_topic("__consumer_offsets") and is_internal_topic("__transaction_state")
    assert not is_internal_topic("_single") and not is_internal_topic("orders")


def _exchange(mechanism: str, user: str, password: str, store: UserStore) -> Principal:
    server, client = SaslServer(mechanism, store), SaslClient(mechanism, user, password)
    out = client.first()
    while True:
        answer = server.step(out)
        out = client.step(answer)
        if out is None:
            break
    assert server.done and client.done
    return server.principal


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_exchanges(mechanism):
    store = UserStore({"alice": "s3cret"})
    assert _exchange(mechanism, "alice", "s3cret", store) == ALICE
    for user, password in (("alice", "wrong"), ("nobody", "s3cret")):
        with pytest.raises(AuthenticationError):
            _exchange(mechanism, user, password, store)


def test_the_store_keeps_no_password():
    store = UserStore({"alice": "s3cret"})
    assert b"s3cret" not in repr(store._creds).encode()
    store.remove("alice")
    with pytest.raises(AuthenticationError):
        _exchange("PLAIN", "alice", "s3cret", store)


def test_malformed_and_unsupported():
    store = UserStore({"alice": "s3cret"})
    with pytest.raises(AuthenticationError, match="unsupported"):
        SaslServer("GSSAPI", store)
    with pytest.raises(AuthenticationError, match="malformed"):
        SaslServer("PLAIN", store).step(b"no separators")
    with pytest.raises(AuthenticationError):
        SaslServer("SCRAM-SHA-256", store).step(b"\xff\xfe")
