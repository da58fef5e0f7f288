"""Transactions with kafka-python's transactional producer and Apache Kafka's Java client
(kafka-clients through compat_tests/java.py): commit and abort as read_committed consumers of each
client see them, offsets sent to the transaction (sendOffsetsToTransaction), fencing by a second
producer with the same transactional.id."""

from __future__ import annotations

import uuid

import pytest

from compat_tests.common import TIMEOUT_S, create_topic
from tests.integration.txn_helpers import COMMITTED, UNCOMMITTED, describe, read_values


def test_kafka_python_commit_abort_and_offsets(broker) -> None:
    kafka = pytest.importorskip("kafka")
    from kafka.structs import OffsetAndMetadata, TopicPartition

    bootstrap = broker.bootstrap
    topic = f"kp-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, 1)
    group = f"kp-{uuid.uuid4().hex[:6]}"
    p = kafka.KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"t-{topic}")
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, b"c1", partition=0)
        p.send_offsets_to_transaction(
            {TopicPartition(topic, 0): OffsetAndMetadata(1, "", -1)}, group
        )
        p.commit_transaction()
        p.begin_transaction()
        p.send(topic, b"a1", partition=0)
        p.send_offsets_to_transaction(
            {TopicPartition(topic, 0): OffsetAndMetadata(2, "", -1)}, group
        )
        p.flush()
        p.abort_transaction()
        p.begin_transaction()
        p.send(topic, b"c2", partition=0)
        p.commit_transaction()
    finally:
        p.close(timeout=TIMEOUT_S)
    assert read_values(bootstrap, topic, COMMITTED) == [b"c1", b"c2"]
    assert read_values(bootstrap, topic, UNCOMMITTED) == [b"c1", b"a1", b"c2"]

    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        isolation_level=COMMITTED,
        enable_auto_commit=False,
        consumer_timeout_ms=3000,
    )
    try:
        assert consumer.committed(TopicPartition(topic, 0)) == 1  # the aborted 2 is not
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek(TopicPartition(topic, 0), 0)
        assert [m.value for m in consumer] == [b"c1", b"c2"]
    finally:
        consumer.close()


def _java():
    from compat_tests import java

    return java.or_skip()


def test_java_transactions_offsets_and_fencing(broker) -> None:
    java = _java()
    jvm = java.jvm()
    bootstrap = broker.bootstrap
    src, dst = f"jin-{uuid.uuid4().hex[:6]}", f"jout-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, src, 1)
    create_topic(bootstrap, dst, 1)
    group = f"java-{uuid.uuid4().hex[:6]}"
    txn_id = f"t-{dst}"
    producer = java.producer(bootstrap, transactional_id=txn_id)
    producer.initTransactions()
    Record = jvm.org.apache.kafka.clients.producer.ProducerRecord

    def send(value: bytes) -> None:
        producer.send(Record(dst, 0, None, value)).get()

    offsets = jvm.java.util.HashMap()
    offsets.put(java.tp(src, 0), jvm.org.apache.kafka.clients.consumer.OffsetAndMetadata(3))
    metadata = jvm.org.apache.kafka.clients.consumer.ConsumerGroupMetadata(group)
    producer.beginTransaction()
    send(b"j1")
    send(b"j2")
    producer.sendOffsetsToTransaction(offsets, metadata)
    producer.commitTransaction()
    producer.beginTransaction()
    send(b"aborted")
    producer.abortTransaction()
    producer.beginTransaction()
    send(b"zombie")
    rival = java.producer(bootstrap, transactional_id=txn_id)
    rival.initTransactions()  # aborts the first producer's transaction: it is fenced
    with pytest.raises(Exception) as info:
        producer.commitTransaction()
    assert "ProducerFenced" in str(info.value) or "InvalidProducerEpoch" in str(info.value)
    producer.close()
    rival.beginTransaction()
    rival.send(Record(dst, 0, None, b"j3")).get()
    rival.commitTransaction()
    rival.close()

    got = java.java_consume(bootstrap, dst, 1, 3, isolation_level=COMMITTED)
    assert [r.value for r in got] == [b"j1", b"j2", b"j3"]
    everything = java.java_consume(bootstrap, dst, 1, 5, isolation_level=UNCOMMITTED)
    assert [r.value for r in everything] == [b"j1", b"j2", b"aborted", b"zombie", b"j3"]
    cons = java.consumer(bootstrap, group_id=group)
    try:
        committed = cons.committed(jvm.java.util.HashSet([java.tp(src, 0)]))
        assert committed.get(java.tp(src, 0)).offset() == 3
    finally:
        cons.close()
    assert describe(bootstrap, txn_id)["transaction_state"] == "CompleteCommit"
