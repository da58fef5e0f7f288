"""Errors clients see: UNKNOWN_TOPIC_OR_PART for a topic that does not exist when auto-creation is
off (Metadata, a raw Produce request, and librdkafka's delivery report), auto-creation when it is
on, and OFFSET_OUT_OF_RANGE surfacing when the consumer has no reset policy."""

from __future__ import annotations

import socket
import struct
import uuid

import crc32c
import kafka
import kafka.errors as kerr
import pytest
from confluent_kafka import KafkaError, TopicPartition

from compat_tests import clients
from compat_tests.common import TIMEOUT_S, Deadline, Rec, admin, create_topic, now_ms

UNKNOWN_TOPIC_OR_PARTITION = 3


def _varint(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)  # zigzag
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def one_record_batch(value: bytes) -> bytes:
    """A magic v2 batch with one record (no key, no headers), CRC-32C filled in."""
    body = b"\x00" + _varint(0) + _varint(0) + _varint(-1) + _varint(len(value)) + value
    body += _varint(0)
    record = _varint(len(body)) + body
    ts = now_ms()
    after_crc = struct.pack(">hiqqqhii", 0, 0, ts, ts, -1, -1, -1, 1) + record
    crc = crc32c.crc32c(after_crc)
    head = struct.pack(">qiibI", 0, 4 + 1 + 4 + len(after_crc), -1, 2, crc)
    return head + after_crc


def raw_produce_v3(bootstrap: str, topic: str, partition: int, batch: bytes) -> int:
    """Send one Produce v3 request over a plain socket; return the partition's error code."""
    host, _, port = bootstrap.rpartition(":")
    name = topic.encode()
    client_id = b"rdmalog-tests"
    body = struct.pack(">hhih", 0, 3, 7, len(client_id)) + client_id
    body += struct.pack(">hhi", -1, 1, 10_000)  # null transactional id, acks=1, timeout
    body += struct.pack(">ih", 1, len(name)) + name
    body += struct.pack(">iii", 1, partition, len(batch)) + batch
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", _recv(s, 4))[0]
        resp = _recv(s, size)
    corr, n_topics = struct.unpack_from(">ii", resp, 0)
    assert corr == 7 and n_topics == 1, (corr, n_topics)
    pos = 8
    (name_len,) = struct.unpack_from(">h", resp, pos)
    pos += 2
    assert resp[pos : pos + name_len] == name
    pos += name_len
    n_parts, part, error = struct.unpack_from(">iih", resp, pos)
    assert n_parts == 1 and part == partition
    return error


def _recv(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        assert chunk, "broker closed the connection"
        buf += chunk
    return buf


def test_unknown_topic_without_auto_create(broker_factory) -> None:
    broker = broker_factory({"auto.create.topics.enable": "false"}, local=True)
    topic = f"missing-{uuid.uuid4().hex[:8]}"

    md = admin(broker.bootstrap).list_topics(topic=topic, timeout=TIMEOUT_S)
    err = md.topics[topic].error
    assert err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART, err

    assert raw_produce_v3(broker.bootstrap, topic, 0, one_record_batch(b"v")) == (
        UNKNOWN_TOPIC_OR_PARTITION
    )

    producer = clients.ck_producer(
        broker.bootstrap, **{"topic.metadata.propagation.max.ms": 1000, "message.timeout.ms": 15000}
    )
    errors: list[KafkaError] = []
    producer.produce(topic, value=b"v", on_delivery=lambda e, m: errors.append(e))
    producer.flush(TIMEOUT_S)
    assert len(errors) == 1 and errors[0] is not None, errors
    assert errors[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART, errors

    # nothing was created on the broker or on disk
    md = admin(broker.bootstrap).list_topics(timeout=TIMEOUT_S)
    assert topic not in md.topics
    assert not list(broker.data_dir.glob(f"{topic}-*"))

    # and a partition beyond an existing topic's count is unknown as well
    create_topic(broker.bootstrap, f"{topic}-real", 2)
    assert raw_produce_v3(broker.bootstrap, f"{topic}-real", 5, one_record_batch(b"v")) == (
        UNKNOWN_TOPIC_OR_PARTITION
    )
    assert raw_produce_v3(broker.bootstrap, f"{topic}-real", 1, one_record_batch(b"v")) == 0


def test_auto_create_on_produce(broker_factory) -> None:
    broker = broker_factory({"auto.create.topics.enable": "true", "num.partitions": "2"})
    topic = f"auto-{uuid.uuid4().hex[:8]}"
    recs = [Rec(i % 2, f"k{i}".encode(), f"v{i}".encode(), (), now_ms()) for i in range(4)]
    clients.ck_produce(broker.bootstrap, topic, recs)
    md = admin(broker.bootstrap).list_topics(topic=topic, timeout=TIMEOUT_S)
    assert md.topics[topic].error is None and len(md.topics[topic].partitions) == 2
    got = clients.ck_consume(broker.bootstrap, topic, 2, 4)
    assert sorted(r.value for r in got) == sorted(r.value for r in recs)


@pytest.fixture
def small_topic(broker) -> tuple[str, str]:
    topic = f"oor-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1)
    recs = [Rec(0, b"k", f"v{i}".encode(), (), now_ms()) for i in range(3)]
    clients.ck_produce(broker.bootstrap, topic, recs)
    return broker.bootstrap, topic


def test_fetch_out_of_range_without_reset_policy_kafka_python(small_topic) -> None:
    bootstrap, topic = small_topic
    tp = kafka.TopicPartition(topic, 0)
    consumer = clients.kp_consumer(bootstrap, reset="none")
    try:
        consumer.assign([tp])
        consumer.seek(tp, 50)
        deadline = Deadline()
        with pytest.raises(kerr.OffsetOutOfRangeError):
            while deadline:
                assert not consumer.poll(timeout_ms=500), "records returned past the end"
        consumer.seek(tp, 1)  # within range again: reads normally
        got = clients.kp_poll(consumer, 2)
        assert [r.offset for r in got] == [1, 2]
    finally:
        consumer.close()


def test_fetch_out_of_range_without_reset_policy_librdkafka(small_topic) -> None:
    bootstrap, topic = small_topic
    consumer = clients.ck_consumer(bootstrap, reset="error")
    try:
        consumer.assign([TopicPartition(topic, 0, 50)])
        deadline = Deadline()
        seen = None
        while seen is None and deadline:
            for msg in consumer.consume(num_messages=10, timeout=0.5):
                assert msg.error() is not None, f"record at offset {msg.offset()} past the end"
                seen = msg.error()
        assert seen is not None and seen.code() == KafkaError._AUTO_OFFSET_RESET, seen
        assert "out of range" in seen.str().lower(), seen.str()
    finally:
        consumer.close()


def test_fetch_out_of_range_resets_to_earliest(small_topic) -> None:
    bootstrap, topic = small_topic
    got = clients.ck_consume(bootstrap, topic, 1, 3, start=1000)
    assert [(r.offset, r.value) for r in got[:3]] == [(i, f"v{i}".encode()) for i in range(3)]


def test_broker_message_max_bytes_override(broker_factory) -> None:
    """`--override message.max.bytes=N` bounds every topic without its own max.message.bytes."""
    limit = 20_000
    broker = broker_factory({"message.max.bytes": str(limit)}, local=True)
    topic = f"mmb-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1)
    producer = clients.ck_producer(
        broker.bootstrap, **{"message.max.bytes": limit * 4, "batch.size": limit * 4}
    )
    results: list[KafkaError | None] = []
    for size in (limit - 200, limit + 200):
        producer.produce(topic, value=b"m" * size, partition=0,
                         on_delivery=lambda e, m: results.append(e))  # fmt: skip
        assert producer.flush(TIMEOUT_S) == 0
    assert results[0] is None, f"{limit - 200} bytes under a {limit} limit refused: {results[0]}"
    assert results[1] is not None and results[1].code() == KafkaError.MSG_SIZE_TOO_LARGE, results
    # the raw Produce response carries MESSAGE_TOO_LARGE (10) as well
    assert raw_produce_v3(broker.bootstrap, topic, 0, one_record_batch(b"r" * (limit + 100))) == 10
    assert raw_produce_v3(broker.bootstrap, topic, 0, one_record_batch(b"r" * 100)) == 0
