"""Keyed records with headers and timestamps through each client and codec, over several
partitions, read back equal; plus cross-client reads and the clients' idempotent producers."""

from __future__ import annotations

import threading

import kafka
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, TopicPartition

from compat_tests import clients, java
from compat_tests.common import (
    CODECS,
    TIMEOUT_S,
    Deadline,
    Rec,
    compare,
    create_topic,
    make_records,
    now_ms,
    unique_topic,
)
from compat_tests.scenarios import scenario

PARTITIONS = 3
COUNT = 30


def roundtrip(bootstrap: str, producer: str, consumer: str, codec: str, **extra: object) -> None:
    topic = unique_topic(f"rt-{producer}-{codec}")
    create_topic(bootstrap, topic, PARTITIONS)
    sent = make_records(COUNT, PARTITIONS, f"{producer}/{codec}")
    clients.PRODUCERS[producer](bootstrap, topic, sent, codec, **extra)
    got = clients.CONSUMERS[consumer](bootstrap, topic, PARTITIONS, len(sent))
    compare(sent, got)


def _register(producer: str, consumer: str, codec: str, name: str, **extra: object) -> None:
    @scenario(name, "roundtrip")
    def run(bootstrap: str) -> None:
        roundtrip(bootstrap, producer, consumer, codec, **extra)


for _client in clients.PRODUCERS:
    for _codec in CODECS:
        _register(_client, _client, _codec, f"{_client}-roundtrip-{_codec}")

# one client writes, another reads
_register("kafka-python", "confluent", "gzip", "interop-kafka-python-to-confluent-gzip")
_register("confluent", "aiokafka", "lz4", "interop-confluent-to-aiokafka-lz4")
_register("aiokafka", "kafka-python", "zstd", "interop-aiokafka-to-kafka-python-zstd")
_register("confluent", "kafka-python", "snappy", "interop-confluent-to-kafka-python-snappy")
_register("java", "confluent", "zstd", "interop-java-to-confluent-zstd")
_register("kafka-python", "java", "lz4", "interop-kafka-python-to-java-lz4")

# idempotent producers (InitProducerId, producer id/epoch/sequence in the batch): kafka-python's
# default since KIP-679, librdkafka's and aiokafka's when asked
_register(
    "kafka-python", "confluent", "none", "kafka-python-idempotent-producer", enable_idempotence=True
)
_register(
    "confluent", "confluent", "lz4", "confluent-idempotent-producer", **{"enable.idempotence": True}
)
_register("aiokafka", "confluent", "gzip", "aiokafka-idempotent-producer", enable_idempotence=True)


@scenario("log-append-time-topic", "roundtrip")
def log_append_time(bootstrap: str) -> None:
    """A topic with message.timestamp.type=LogAppendTime: consumers see the broker's append time
    (timestamp type 1), not the producer's timestamps."""
    topic = unique_topic("lat")
    create_topic(bootstrap, topic, 1, {"message.timestamp.type": "LogAppendTime"})
    sent = make_records(10, 1, "lat", base_ts=now_ms() - 3_600_000)  # an hour old
    before = now_ms()
    clients.ck_produce(bootstrap, topic, sent, "lz4")
    after = now_ms()
    consumer = clients.ck_consumer(bootstrap)
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = []
        deadline = Deadline()
        while len(got) < len(sent) and deadline:
            got += [m for m in consumer.consume(num_messages=20, timeout=0.5) if not m.error()]
    finally:
        consumer.close()
    assert [m.value() for m in got] == [r.value for r in sent]
    for m in got:
        ts_type, ts = m.timestamp()
        assert ts_type == TIMESTAMP_LOG_APPEND_TIME, f"timestamp type {ts_type}"
        assert before - 1000 <= ts <= after + 1000, f"append time {ts} not in [{before}, {after}]"
    kp = clients.kp_consumer(bootstrap)
    try:
        tp = kafka.TopicPartition(topic, 0)
        kp.assign([tp])
        kp.seek(tp, 0)
        records = []
        deadline = Deadline()
        while len(records) < len(sent) and deadline:
            for batch in kp.poll(timeout_ms=500).values():
                records += batch
        assert [(r.timestamp_type, r.timestamp) for r in records] == [
            (1, m.timestamp()[1]) for m in got
        ]
    finally:
        kp.close()


@scenario("concurrent-producers-one-partition", "roundtrip")
def concurrent_producers(bootstrap: str) -> None:
    """The clients produce to one partition at once (the Java one when java and its jars are
    here): every record is stored once, each producer's records stay in their order, offsets are
    contiguous."""
    names = [n for n in clients.PRODUCERS if n != "java" or java.unavailable() is None]
    topic = unique_topic("conc")
    create_topic(bootstrap, topic, 1)
    per = 150
    plans = {
        name: [
            Rec(
                0,
                f"{name}-{i}".encode(),
                f"{name}:{i:05d}".encode(),
                (("p", name.encode()),),
                now_ms(),
            )
            for i in range(per)
        ]
        for name in names
    }
    codecs = {"confluent": "lz4", "kafka-python": "gzip", "aiokafka": "none", "java": "zstd"}
    errors: list[BaseException] = []

    def produce(name: str) -> None:
        try:
            # several small sends so that the producers' batches interleave
            for k in range(0, per, 25):
                clients.PRODUCERS[name](bootstrap, topic, plans[name][k : k + 25], codecs[name])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=produce, args=(n,)) for n in plans]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT_S * 6)
    assert not errors, f"producer failed: {errors[0]!r}"
    got = clients.ck_consume(bootstrap, topic, 1, per * len(plans))
    assert [r.offset for r in got] == list(range(per * len(plans)))
    for name, recs in plans.items():
        mine = [r for r in got if r.key is not None and r.key.startswith(f"{name}-".encode())]
        assert [r.value for r in mine] == [r.value for r in recs], f"{name}: order or loss"


@scenario("volume-confluent-to-kafka-python", "roundtrip")
def volume(bootstrap: str) -> None:
    """A few thousand records over three partitions, written by librdkafka in large batches and
    read by kafka-python across many fetches."""
    topic = unique_topic("vol")
    create_topic(bootstrap, topic, PARTITIONS)
    sent = [
        Rec(i % PARTITIONS, f"k{i}".encode(), f"v{i:06d}".encode() * 8, (), now_ms())
        for i in range(3000)
    ]
    clients.ck_produce(bootstrap, topic, sent, "zstd")
    got = clients.kp_consume(
        bootstrap, topic, PARTITIONS, len(sent), max_partition_fetch_bytes=16384
    )
    compare(sent, got)


@scenario("multi-topic-produce-and-fetch", "roundtrip")
def multi_topic(bootstrap: str) -> None:
    """One producer writes two topics at once (Produce requests carrying both), one consumer
    assigned to both reads them back (Fetch requests carrying both)."""
    topics = [unique_topic("multi-a"), unique_topic("multi-b")]
    for t in topics:
        create_topic(bootstrap, t, 2)
    sent = {t: make_records(20, 2, t) for t in topics}
    producer = clients.ck_producer(bootstrap, **{"linger.ms": 50})
    errors: list[object] = []
    for i in range(20):
        for t in topics:
            r = sent[t][i]
            producer.produce(t, value=r.value, key=r.key, partition=r.partition,
                             headers=list(r.headers), timestamp=r.timestamp,
                             on_delivery=lambda e, m: e and errors.append(e))  # fmt: skip
    assert producer.flush(TIMEOUT_S) == 0 and not errors, errors
    consumer = clients.ck_consumer(bootstrap)
    try:
        consumer.assign([TopicPartition(t, p, 0) for t in topics for p in range(2)])
        got: dict[str, list[Rec]] = {t: [] for t in topics}
        deadline = Deadline()
        while sum(map(len, got.values())) < 40 and deadline:
            for m in consumer.consume(num_messages=50, timeout=0.5):
                if not m.error():
                    got[m.topic()].append(clients.ck_rec(m))
    finally:
        consumer.close()
    for t in topics:
        compare(sent[t], got[t])
