"""Clients that never ask ApiVersions, speaking Kafka 0.8-0.10's protocol: kafka-python with an
explicit `api_version` and librdkafka (confluent-kafka) with `api.version.request=false` and a
`broker.version.fallback`. They produce message sets of formats v0/v1 (any codec), consume them back
down-converted, and commit and fetch offsets with the old OffsetCommit/OffsetFetch versions. A tap
between client and broker records which request versions they really sent."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpPartition
from kafka.structs import OffsetAndMetadata
from kafka_tap import KafkaTap

from compat_tests.common import create_topic

N = 30
PRODUCE, FETCH, LIST_OFFSETS, OFFSET_COMMIT, OFFSET_FETCH, API_VERSIONS = 0, 1, 2, 8, 9, 18


@pytest.fixture
def tapped(broker_factory):
    """(tap address, tap): a broker whose advertised listener is the tap."""
    tap = KafkaTap()
    broker = broker_factory({"advertised.listeners": f"PLAINTEXT://{tap.address}"}, local=True)
    tap.upstream = (broker.host, broker.port)
    yield tap.address, tap
    tap.close()


def versions_sent(tap: KafkaTap, api_key: int) -> set[int]:
    return {v for k, v in tap.requests if k == api_key}


def take(consumer: KafkaConsumer, n: int) -> list[tuple]:
    """Up to n (offset, key, value, timestamp), stopping at n (consumer_timeout_ms bounds it)."""
    out = []
    for m in consumer:
        out.append((m.offset, m.key, m.value, m.timestamp))
        if len(out) == n:
            break
    return out


# kafka-python's api_version -> the Produce, Fetch, OffsetCommit versions it then speaks
KAFKA_PYTHON = {
    (0, 8, 1): (0, 0, 0),
    (0, 8, 2): (0, 0, 1),
    (0, 9): (1, 1, 2),
    (0, 10, 0): (2, 2, 2),
    (0, 10, 1): (2, 3, 2),
}
CASES = [
    (api, codec)
    for api in KAFKA_PYTHON
    for codec in ("none", "gzip", "snappy", "lz4")
    if codec != "lz4" or api >= (0, 8, 2)  # kafka-python: LZ4 needs 0.8.2
]


@pytest.mark.parametrize("api,codec", CASES, ids=[f"{'.'.join(map(str, a))}-{c}" for a, c in CASES])
def test_kafka_python_at_old_api_versions(tapped, api: tuple, codec: str) -> None:
    address, tap = tapped
    topic = f"kp-old-{uuid.uuid4().hex[:6]}"
    create_topic(address, topic, 1)
    tap.requests.clear()
    compression = None if codec == "none" else codec
    producer = KafkaProducer(
        bootstrap_servers=address, api_version=api, compression_type=compression
    )
    futures = [producer.send(topic, key=b"k%d" % i, value=b"v%d" % i) for i in range(N)]
    producer.flush(20)
    assert [f.get(10).offset for f in futures] == list(range(N))
    producer.close(5)

    group = f"g-{uuid.uuid4().hex[:6]}"
    tp = KpPartition(topic, 0)
    consumer = KafkaConsumer(
        bootstrap_servers=address, api_version=api, group_id=group, enable_auto_commit=False,
        auto_offset_reset="earliest", consumer_timeout_ms=15000,
    )  # fmt: skip
    consumer.assign([tp])
    got = take(consumer, N)
    assert [(o, k, v) for o, k, v, _ in got] == [(i, b"k%d" % i, b"v%d" % i) for i in range(N)]
    has_timestamps = api >= (0, 10)
    assert all((ts is not None and ts > 0) == has_timestamps for *_, ts in got)
    consumer.commit({tp: OffsetAndMetadata(N - 5, "old", -1)})
    consumer.close()
    again = KafkaConsumer(
        bootstrap_servers=address, api_version=api, group_id=group, enable_auto_commit=False,
        consumer_timeout_ms=15000,
    )  # fmt: skip
    again.assign([tp])
    assert again.committed(tp) == N - 5
    assert [o for o, *_ in take(again, 5)] == list(range(N - 5, N))
    again.close()

    produce_v, fetch_v, commit_v = KAFKA_PYTHON[api]
    if api < (0, 10):  # 0.10 brokers answer ApiVersions: kafka-python asks, then keeps its own
        assert versions_sent(tap, API_VERSIONS) == set()
    assert versions_sent(tap, PRODUCE) == {produce_v}
    assert versions_sent(tap, FETCH) == {fetch_v}
    assert versions_sent(tap, OFFSET_COMMIT) == {commit_v}
    assert not tap.errors, tap.errors


@pytest.mark.parametrize("fallback", ["0.9.0", "0.8.2"])
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_librdkafka_without_api_versions(tapped, fallback: str, codec: str) -> None:
    address, tap = tapped
    topic = f"rdk-old-{uuid.uuid4().hex[:6]}"
    create_topic(address, topic, 1)
    tap.requests.clear()
    conf = {
        "bootstrap.servers": address,
        "api.version.request": False,
        "broker.version.fallback": fallback,
        "log_level": 3,
    }
    failed: list = []
    producer = Producer({**conf, "compression.type": codec})
    for i in range(N):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i, on_delivery=lambda e, m: e and failed.append(e))  # fmt: skip
    assert producer.flush(20) == 0 and not failed, failed

    group = f"g-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({**conf, "group.id": group, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < N and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None:
            assert m.error() is None, m.error()
            got.append((m.offset(), m.key(), m.value()))
    assert got == [(i, b"k%d" % i, b"v%d" % i) for i in range(N)]
    consumer.commit(offsets=[TopicPartition(topic, 0, N - 3)], asynchronous=False)
    (committed,) = consumer.committed([TopicPartition(topic, 0)], timeout=10)
    assert committed.offset == N - 3
    consumer.close()

    assert versions_sent(tap, API_VERSIONS) == set()
    assert versions_sent(tap, PRODUCE) and max(versions_sent(tap, PRODUCE)) < 3
    assert versions_sent(tap, FETCH) and max(versions_sent(tap, FETCH)) < 4
    assert versions_sent(tap, OFFSET_COMMIT) and max(versions_sent(tap, OFFSET_COMMIT)) < 3
    assert not tap.errors, tap.errors
