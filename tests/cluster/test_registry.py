"""The ZooKeeper registry against a real ZooKeeper: Kafka's znodes and JSON, broker registration,
controller election and fenced writes, conditional ISR writes, producer id blocks; and Kafka's
rack-unaware replica assignment."""

from __future__ import annotations

import json
import random
import uuid
from collections import Counter

import pytest

from rdmalog.cluster import znodes as Z
from rdmalog.cluster.assignment import assign_replicas, grow_assignment
from rdmalog.cluster.registry import (
    BrokerIdInUseError,
    ControllerMovedError,
    Registry,
    StaleStateError,
)
from rdmalog.errors import InvalidReplicationFactorError


@pytest.fixture
def registries(zk_connect: str):
    made: list[Registry] = []

    def make() -> Registry:
        reg = Registry(zk_connect, session_timeout_ms=4000).start()
        made.append(reg)
        return reg

    yield make
    for reg in made:
        reg.stop()


def _json(reg: Registry, path: str) -> dict:
    data, _ = reg.zk.get(path)
    return json.loads(data)


def test_cluster_id_and_broker_registration_in_kafkas_format(registries) -> None:
    a, b = registries(), registries()
    cid = a.cluster_id()
    assert len(cid) == 22 and b.cluster_id() == cid
    assert _json(a, "/cluster/id") == {"version": "1", "id": cid}
    endpoints = [Z.Endpoint("PLAINTEXT", "127.0.0.1", 9092)]
    epoch = a.register_broker(1, endpoints)
    body = _json(a, "/brokers/ids/1")
    assert body["version"] == 5 and body["endpoints"] == ["PLAINTEXT://127.0.0.1:9092"]
    assert (body["host"], body["port"], body["jmx_port"]) == ("127.0.0.1", 9092, -1)
    assert body["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
    info = b.brokers()[1]
    assert info.endpoint().port == 9092 and info.epoch == epoch
    with pytest.raises(BrokerIdInUseError, match="broker.id 1"):
        b.register_broker(1, [Z.Endpoint("PLAINTEXT", "127.0.0.1", 9093)], wait_s=0.5)
    # the registration is ephemeral: it goes with its session
    a.stop()
    b.register_broker(1, [Z.Endpoint("PLAINTEXT", "127.0.0.1", 9093)], wait_s=10)
    assert b.brokers()[1].endpoint().port == 9093


def test_topic_state_and_config_znodes(registries) -> None:
    reg = registries()
    tid = uuid.uuid4()
    assignment = Z.TopicAssignment(tid, {0: [1, 2, 3], 1: [2, 3, 1]})
    reg.create_topic("orders", assignment, {"min.insync.replicas": "2"})
    assert _json(reg, "/brokers/topics/orders") == {
        "version": 2,
        "topic_id": str(tid),
        "partitions": {"0": [1, 2, 3], "1": [2, 3, 1]},
        "adding_replicas": {},
        "removing_replicas": {},
    }
    assert _json(reg, "/config/topics/orders") == {
        "version": 1,
        "config": {"min.insync.replicas": "2"},
    }
    got = reg.topic("orders")
    assert got.topic_id == tid and got.partitions[1] == [2, 3, 1]
    lease = reg.try_become_controller(1)
    state = Z.PartitionState(1, 0, (1, 2, 3), lease.epoch)
    reg.zk.ensure_path(Z.partitions_path("orders") + "/0")
    reg.fenced_write(lease, [("create", Z.state_path("orders", 0), Z.encode_state(state))])
    assert _json(reg, Z.state_path("orders", 0)) == {
        "controller_epoch": lease.epoch,
        "leader": 1,
        "version": 1,
        "leader_epoch": 0,
        "isr": [1, 2, 3],
    }
    read = reg.partition_state("orders", 0)
    shrunk = reg.set_isr(
        "orders", 0, Z.PartitionState(1, 0, (1, 2), read.controller_epoch, read.version)
    )
    assert shrunk.version == read.version + 1 and reg.partition_state("orders", 0).isr == (1, 2)
    with pytest.raises(StaleStateError):  # the leader's version is stale now
        reg.set_isr("orders", 0, Z.PartitionState(1, 0, (1,), read.controller_epoch, read.version))
    reg.set_topic_configs("orders", {"min.insync.replicas": "1"})
    assert reg.topic_configs("orders") == {"min.insync.replicas": "1"}
    change = reg.zk.get_children("/config/changes")[0]
    assert change.startswith("config_change_")
    assert _json(reg, f"/config/changes/{change}") == {"version": 2, "entity_path": "topics/orders"}
    # an alter writes at the version it read: one that lost a race writes nothing, no notification
    configs, version = reg.versioned_topic_configs("orders")
    reg.set_topic_configs("orders", {**configs, "retention.ms": "1000"}, version)
    with pytest.raises(StaleStateError):
        reg.set_topic_configs("orders", {"retention.ms": "2000"}, version)
    assert reg.topic_configs("orders") == {"min.insync.replicas": "1", "retention.ms": "1000"}
    assert len(reg.zk.get_children("/config/changes")) == 2
    assert reg.versioned_topic_configs("absent") == ({}, -1)


def test_controller_election_and_fencing(registries) -> None:
    a, b = registries(), registries()
    lease_a = a.try_become_controller(1)
    assert lease_a is not None and b.try_become_controller(2) is None
    assert b.controller_id() == 1 and _json(a, "/controller")["brokerid"] == 1
    a.zk.ensure_path("/x")
    a.fenced_write(lease_a, [("set", "/x", b"1", -1)])
    a.stop()  # the controller's session ends: its ephemeral /controller goes
    lease_b = b.try_become_controller(2)
    assert lease_b is not None and lease_b.epoch == lease_a.epoch + 1
    assert b.zk.get("/controller_epoch")[0] == str(lease_b.epoch).encode()
    with pytest.raises(ControllerMovedError):  # a deposed controller's write is refused
        b.fenced_write(lease_a, [("set", "/x", b"2", -1)])
    with pytest.raises(StaleStateError):
        b.fenced_write(lease_b, [("set", "/x", b"3", 99)])
    assert b.zk.get("/x")[0] == b"1"


def test_producer_id_blocks_never_overlap(registries) -> None:
    a, b = registries(), registries()
    blocks = [a.allocate_producer_ids(1), b.allocate_producer_ids(2), a.allocate_producer_ids(1)]
    assert blocks == [(0, 999), (1000, 1999), (2000, 2999)]
    assert _json(a, "/latest_producer_id_block") == {
        "version": 1,
        "broker": 1,
        "block_start": "2000",
        "block_end": "2999",
    }


def test_rack_unaware_assignment_spreads_leaders_and_followers() -> None:
    got = assign_replicas(6, 3, [3, 1, 2], start_index=0)
    assert got == {
        0: [1, 2, 3],
        1: [2, 3, 1],
        2: [3, 1, 2],
        3: [1, 3, 2],
        4: [2, 1, 3],
        5: [3, 2, 1],
    }  # Kafka's AdminUtils with a fixed start gives exactly this
    rnd = assign_replicas(30, 2, [1, 2, 3, 4, 5], rng=random.Random(7))
    assert Counter(r[0] for r in rnd.values()) == {b: 6 for b in range(1, 6)}
    assert all(len(set(r)) == 2 for r in rnd.values())
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas(1, 4, [1, 2, 3])
    grown = grow_assignment({0: [2, 3, 1], 1: [3, 1, 2]}, 4, [1, 2, 3])
    assert sorted(grown) == [2, 3] and grown[2][0] == 1 and grown[3][0] == 2
