"""The broker's record-level validation (Kafka's LogValidator) as real producers meet it: null keys on
a compacted topic (INVALID_RECORD) and timestamps outside message.timestamp.before/after.max.ms
(INVALID_TIMESTAMP) fail the batch with Kafka's errors, for every codec; nothing is written."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import KafkaError, Producer
from kafka import KafkaProducer
from kafka.errors import InvalidRecordError, InvalidTimestampError
from rawkafka import RawClient, list_offset, produce

from compat_tests import java
from compat_tests.common import Rec, create_topic
from rdmalog.store.records import MAX_TIMESTAMP, Record, build_batch, set_crc

HOUR = 3_600_000


def topic_with(bootstrap: str, config: dict[str, str]) -> str:
    name = f"valid-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, name, 1, config)
    return name


def confluent_errors(bootstrap: str, topic: str, codec: str, key, timestamp: int = 0) -> list:
    errors: list = []
    # linger.ms: both records wait for flush() in one batch however loaded the machine is
    conf = {"bootstrap.servers": bootstrap, "compression.type": codec, "retries": 0}
    p = Producer({**conf, "linger.ms": 10000})
    # the partition known first: records produced before the topic's metadata arrives wait in
    # librdkafka's unassigned queue, and the two records could then leave in separate batches
    p.list_topics(topic, timeout=20)
    p.produce(topic, key=b"k", value=b"ok")  # same batch: the whole batch fails
    p.produce(topic, key=key, value=b"v", timestamp=timestamp, on_delivery=lambda e, m: errors.append(e))  # fmt: skip
    assert p.flush(20) == 0
    return errors


def end_offset(bootstrap: str, topic: str) -> int:
    with RawClient(bootstrap) as c:
        return list_offset(c, topic, 0, -1)["offset"]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_null_key_on_compacted_topic(bootstrap: str, codec: str) -> None:
    topic = topic_with(bootstrap, {"cleanup.policy": "compact"})
    (err,) = confluent_errors(bootstrap, topic, codec, key=None)
    assert err.code() == KafkaError.INVALID_RECORD
    assert end_offset(bootstrap, topic) == 0
    assert confluent_errors(bootstrap, topic, codec, key=b"fine") == [None]


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_confluent_timestamp_out_of_range(bootstrap: str, codec: str) -> None:
    topic = topic_with(
        bootstrap,
        {"message.timestamp.before.max.ms": str(HOUR), "message.timestamp.after.max.ms": str(HOUR)},
    )
    now = int(time.time() * 1000)
    (err,) = confluent_errors(bootstrap, topic, codec, key=b"k", timestamp=now - 2 * HOUR)
    assert err.code() == KafkaError.INVALID_TIMESTAMP
    (err,) = confluent_errors(bootstrap, topic, codec, key=b"k", timestamp=now + 2 * HOUR)
    assert err.code() == KafkaError.INVALID_TIMESTAMP
    assert end_offset(bootstrap, topic) == 0


@pytest.mark.parametrize("codec", [None, "gzip", "lz4"])
def test_kafka_python_refusals(bootstrap: str, codec: str | None) -> None:
    compacted = topic_with(bootstrap, {"cleanup.policy": "compact"})
    p = KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec, retries=0)
    with pytest.raises(InvalidRecordError):
        p.send(compacted, key=None, value=b"v").get(20)
    bounded = topic_with(bootstrap, {"message.timestamp.before.max.ms": str(HOUR)})
    with pytest.raises(InvalidTimestampError):
        p.send(bounded, key=b"k", value=b"v", timestamp_ms=1_000_000).get(20)
    p.close(5)


def test_java_client_reports_the_record_error(bootstrap: str) -> None:
    reason = java.unavailable()
    if reason:
        pytest.skip(reason)
    topic = topic_with(bootstrap, {"cleanup.policy": "compact"})
    prod = java.producer(bootstrap, acks="all", retries=0)
    try:
        future = java.send(prod, topic, Rec(0, None, b"v", (), int(time.time() * 1000)))
        prod.flush()
        with pytest.raises(Exception) as e:
            java.wait(future)
    finally:
        prod.close()
    # Kafka's Java client names the failing record's error from the response's record_errors
    assert "InvalidRecordException" in str(e.value)
    assert "Compacted topic cannot accept message without key" in str(e.value)


def test_a_wrong_max_timestamp_is_found_by_time(bootstrap: str) -> None:
    """A client that leaves the batch's maxTimestamp unset: the broker computes it from the records,
    so ListOffsets by time and time retention see the records' times."""
    topic = topic_with(bootstrap, {})
    now = int(time.time() * 1000)
    batch = build_batch(
        [Record(b"a", b"1", timestamp=now - 500), Record(b"b", b"2", timestamp=now)]
    )
    batch[MAX_TIMESTAMP : MAX_TIMESTAMP + 8] = (-1).to_bytes(8, "big", signed=True)  # unset...
    set_crc(batch, 0, len(batch))  # ...and a CRC that covers it, as a sloppy client would send
    with RawClient(bootstrap) as c:
        assert produce(c, topic, 0, batch)["error_code"] == 0
        assert list_offset(c, topic, 0, now - 100)["offset"] == 1
        assert list_offset(c, topic, 0, -3)["timestamp"] == now  # max timestamp
