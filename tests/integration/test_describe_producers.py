"""DescribeProducers (key 61, KIP-664) on one broker: the Java AdminClient's describeProducers sees
each partition's idempotent and transactional producers (last sequence, an open transaction's
start offset, the coordinator epoch of its last marker), and raw v0 requests get Kafka's errors.
`check_describe_producers` is shared with the cluster test (tests/cluster)."""

from __future__ import annotations

import uuid

from confluent_kafka import Producer

from compat_tests.common import create_topic
from tests.integration.rawkafka import RawClient


def _java():
    from compat_tests import java

    return java.or_skip()


def _states(java, bootstrap: str, topic: str, partitions: int) -> dict[int, dict[int, dict]]:
    """partition -> producer id -> its state, from the Java AdminClient's describeProducers."""
    jvm = java.jvm()
    admin = java.admin(bootstrap)
    try:
        tps = jvm.java.util.ArrayList([java.tp(topic, p) for p in range(partitions)])
        result = java.wait(admin.describeProducers(tps).all())
        out: dict[int, dict[int, dict]] = {}
        for p in range(partitions):
            state = result.get(java.tp(topic, p))
            out[p] = {}
            for s in state.activeProducers():
                txn = s.currentTransactionStartOffset()
                coord = s.coordinatorEpoch()
                out[p][s.producerId()] = {
                    "epoch": s.producerEpoch(),
                    "last_sequence": s.lastSequence(),
                    "last_timestamp": s.lastTimestamp(),
                    "txn_start": txn.getAsLong() if txn.isPresent() else None,
                    "coordinator_epoch": coord.getAsInt() if coord.isPresent() else None,
                }
        return out
    finally:
        admin.close()


def check_describe_producers(bootstrap: str, topic: str, partitions: int) -> None:
    """An idempotent producer writes 5 records to each partition, a transactional one leaves a
    transaction open on every partition then commits: describeProducers (asking each partition's
    leader) shows both, the open transaction's start offset, then none open and a marker seen."""
    java = _java()
    idem = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for p in range(partitions):
        for i in range(5):
            idem.produce(topic, b"i%d" % i, partition=p)
    assert idem.flush(30) == 0
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"dp-{topic}"})
    txn.init_transactions(60)
    txn.begin_transaction()
    for p in range(partitions):
        txn.produce(topic, b"t", partition=p)
    assert txn.flush(30) == 0
    states = _states(java, bootstrap, topic, partitions)
    for p in range(partitions):
        assert len(states[p]) == 2, states[p]
        by_seq = sorted(states[p].values(), key=lambda s: s["last_sequence"])
        opened, idempotent = by_seq
        assert idempotent["last_sequence"] == 4 and idempotent["txn_start"] is None
        assert idempotent["last_timestamp"] > 0
        assert opened["last_sequence"] == 0 and opened["txn_start"] == 5  # after the 5 records
    txn.commit_transaction(30)
    states = _states(java, bootstrap, topic, partitions)
    for p in range(partitions):
        opened = [s for s in states[p].values() if s["coordinator_epoch"] is not None]
        assert len(opened) == 1 and opened[0]["txn_start"] is None, states[p]
        assert opened[0]["coordinator_epoch"] >= 0


def test_describe_producers_java_admin(broker) -> None:
    topic = f"dp-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, 2)
    check_describe_producers(broker.bootstrap, topic, 2)


def test_describe_producers_raw_errors(broker) -> None:
    topic = f"dpr-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic, 1)
    body = {
        "topics": [
            {"name": topic, "partition_indexes": [0, 7]},
            {"name": "nope", "partition_indexes": [0]},
        ]
    }
    with RawClient(broker.bootstrap) as c:
        got = c.call(61, 0, body)
    parts = {(t["name"], p["partition_index"]): p for t in got["topics"] for p in t["partitions"]}
    assert parts[(topic, 0)]["error_code"] == 0 and parts[(topic, 0)]["active_producers"] == []
    assert parts[(topic, 7)]["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION
    assert parts[("nope", 0)]["error_code"] == 3
