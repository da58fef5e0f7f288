"""The ZooKeeper-backed security stores against a real ZooKeeper, several brokers' worth of
sessions: concurrent changes to the same znodes all land (version checks, retried), a store sees
another's change through the notifications, Kafka's name sanitizing, and a data dir's users and
ACLs handed over once."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from compat_tests.cluster import wait_for
from rdmalog.cluster.security_store import ZkAclAuthorizer, ZkEntityConfigs, entity_path
from rdmalog.security.acls import StoredAclAuthorizer
from rdmalog.security.authorizer import Acl, Operation, PatternType, ResourceType
from rdmalog.security.entity_configs import DEFAULT, Entity, EntityConfigs


@pytest.fixture
def sessions(zk_connect: str) -> Iterator[list[KazooClient]]:
    """Three ZooKeeper sessions on this test's chroot (as three brokers have)."""
    hosts, _, chroot = zk_connect.partition("/")
    root = KazooClient(hosts=hosts, timeout=10)
    root.start(timeout=15)
    root.ensure_path("/" + chroot)
    root.stop()
    root.close()
    clients = [KazooClient(hosts=zk_connect, timeout=10) for _ in range(3)]
    for c in clients:
        c.start(timeout=15)
    yield clients
    for c in clients:
        c.stop()
        c.close()


def _acl(user: str, name: str = "t", pattern: PatternType = PatternType.LITERAL) -> Acl:
    return Acl(f"User:{user}", Operation.READ, ResourceType.TOPIC, name, pattern)


def test_concurrent_acl_changes_all_land(sessions: list[KazooClient]) -> None:
    stores = [ZkAclAuthorizer(zk).start() for zk in sessions]
    users = [f"u{i}" for i in range(12)]
    threads = [
        threading.Thread(target=stores[i % 3].add, args=(_acl(u),)) for i, u in enumerate(users)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    expected = {_acl(u) for u in users}
    for store in stores:
        wait_for("every ACL at every store", lambda s=store: set(s.acls()) == expected)
    stores[2].remove(*[_acl(u) for u in users])
    assert not sessions[0].exists("/kafka-acl/Topic/t")  # the last binding took the znode
    wait_for("removed at the first store", lambda: stores[0].acls() == [])


def test_entity_changes_seen_by_other_stores(sessions: list[KazooClient]) -> None:
    a, b = ZkEntityConfigs(sessions[0]).start(), ZkEntityConfigs(sessions[1]).start()
    heard = threading.Event()
    b.add_listener(heard.set)
    odd = Entity("CN=app, O=acme*", "client 1")
    a.alter({odd: {"producer_byte_rate": "1024"}, Entity(DEFAULT): {"consumer_byte_rate": "9"}})
    # Kafka's Sanitizer: URL-encoded, `*` and spaces percent-encoded, <default> as is
    assert entity_path(odd) == "users/CN%3Dapp%2C%20O%3Dacme%2A/clients/client%201"
    assert sessions[2].exists("/config/users/CN%3Dapp%2C%20O%3Dacme%2A/clients/client%201")
    assert sessions[2].exists("/config/users/<default>")
    wait_for("b sees a's change", lambda: b.get(odd) == {"producer_byte_rate": "1024"})
    assert heard.is_set()
    b.alter({odd: {"producer_byte_rate": None}})
    wait_for("a sees b's removal", lambda: a.get(odd) == {})


def test_data_dir_stores_handed_over_once(sessions: list[KazooClient], tmp_path) -> None:
    entity_file = tmp_path / "entity-configs.json"
    EntityConfigs(entity_file).alter({Entity("alice"): {"SCRAM-SHA-256": "local"}})
    acl_file = tmp_path / "acls.json"
    StoredAclAuthorizer(acl_file).add(_acl("alice", "app-", PatternType.PREFIXED))
    ZkEntityConfigs(sessions[0]).start().alter({Entity("alice"): {"SCRAM-SHA-256": "cluster"}})

    configs = ZkEntityConfigs(sessions[1], entity_file).start()
    acls = ZkAclAuthorizer(sessions[1], import_from=acl_file).start()
    assert configs.get(Entity("alice")) == {"SCRAM-SHA-256": "cluster"}  # ZooKeeper's kept
    assert acls.acls() == [_acl("alice", "app-", PatternType.PREFIXED)]
    assert sessions[2].exists("/kafka-acl-extended/prefixed/Topic/app-")
    assert not entity_file.exists() and not acl_file.exists()
    assert (tmp_path / "acls.json.imported").exists()


def test_names_znodes_cannot_hold_are_refused(sessions: list[KazooClient]) -> None:
    from rdmalog.errors import InvalidRequestError

    store = ZkAclAuthorizer(sessions[0]).start()
    with pytest.raises(InvalidRequestError):
        store.add(_acl("alice", "a/b"), _acl("alice", "fine"))
    assert store.acls() == [] and not sessions[0].exists("/kafka-acl/Topic/fine")  # neither


def test_old_change_notifications_purged(sessions: list[KazooClient]) -> None:
    """Kafka deletes change notifications older than 15 minutes after a change; with that age
    set to 0 a change leaves none behind, and the stores still agree."""
    writer = ZkEntityConfigs(sessions[0], change_expiration_ms=0).start()
    reader = ZkEntityConfigs(sessions[1]).start()
    writer.alter({Entity("bob"): {"producer_byte_rate": "5"}})
    assert sessions[2].get_children("/config/changes") == []
    wait_for("the reader has it", lambda: reader.get(Entity("bob")) == {"producer_byte_rate": "5"})
    acls = ZkAclAuthorizer(sessions[0], change_expiration_ms=0).start()
    acls.add(_acl("bob"), _acl("bob", "p-", PatternType.PREFIXED))
    assert sessions[2].get_children("/kafka-acl-changes") == []
    assert sessions[2].get_children("/kafka-acl-extended-changes") == []
    kept = ZkAclAuthorizer(sessions[1]).start()
    kept.add(_acl("carol"))  # the default age keeps fresh notifications
    assert len(sessions[2].get_children("/kafka-acl-changes")) == 1
