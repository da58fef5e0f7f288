"""message.max.bytes: a record batch just under the topic's max.message.bytes is stored and read
back; one just over it is refused with MESSAGE_TOO_LARGE, which the client reports."""

from __future__ import annotations

import os

import aiokafka
import aiokafka.errors as akerr
import kafka.errors as kerr
from confluent_kafka import KafkaError, TopicPartition

from compat_tests import clients
from compat_tests.common import (
    TIMEOUT_S,
    create_topic,
    topic_max_message_bytes,
    unique_topic,
)
from compat_tests.scenarios import scenario

# a v2 batch holding one record with a short key and no headers costs 61 bytes of batch header
# plus ~25 bytes of record framing; stay this far under / go this far over the limit
MARGIN = 512


def sizes(bootstrap: str, topic: str) -> tuple[int, int, int]:
    limit = topic_max_message_bytes(bootstrap, topic)
    return limit, limit - MARGIN, limit + MARGIN


def ck_send_one(bootstrap: str, topic: str, value: bytes, limit: int) -> KafkaError | None:
    # the client's own limits sit well above the broker's so that the broker decides
    producer = clients.ck_producer(
        bootstrap,
        **{"message.max.bytes": limit * 4, "batch.size": limit * 4, "linger.ms": 0},
    )
    result: list[KafkaError | None] = []
    producer.produce(topic, value=value, key=b"big", partition=0,
                     on_delivery=lambda err, msg: result.append(err))  # fmt: skip
    assert producer.flush(TIMEOUT_S) == 0, "no delivery report"
    return result[0]


@scenario("confluent-message-max-bytes", "limits")
def confluent_large(bootstrap: str) -> None:
    topic = unique_topic("big-ck")
    create_topic(bootstrap, topic, 1)
    limit, under, over = sizes(bootstrap, topic)
    value = os.urandom(under)
    err = ck_send_one(bootstrap, topic, value, limit)
    assert err is None, f"{under}-byte record (limit {limit}) refused: {err}"
    err = ck_send_one(bootstrap, topic, os.urandom(over), limit)
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE, (
        f"{over}-byte record (limit {limit}): {err}"
    )
    [got] = clients.ck_consume(bootstrap, topic, 1, 1)
    assert got.offset == 0 and got.value == value, "large record not read back intact"
    # nothing after it: the refused record was not stored
    consumer = clients.ck_consumer(bootstrap)
    try:
        lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S)
        assert (lo, hi) == (0, 1), f"watermarks after the refused record {(lo, hi)}"
    finally:
        consumer.close()


@scenario("kafka-python-message-max-bytes", "limits")
def kafka_python_large(bootstrap: str) -> None:
    topic = unique_topic("big-kp")
    create_topic(bootstrap, topic, 1)
    limit, under, over = sizes(bootstrap, topic)
    value = os.urandom(under)
    producer = clients.kp_producer(
        bootstrap, max_request_size=limit * 4, batch_size=limit * 4, linger_ms=0, retries=0
    )
    try:
        producer.send(topic, value=value, key=b"big", partition=0).get(timeout=TIMEOUT_S)
        try:
            producer.send(topic, value=os.urandom(over), key=b"big", partition=0).get(
                timeout=TIMEOUT_S
            )
        except kerr.MessageSizeTooLargeError:
            pass
        else:
            raise AssertionError(f"{over}-byte record (limit {limit}) was accepted")
    finally:
        producer.close(timeout=5)
    got = clients.kp_consume(bootstrap, topic, 1, 1)
    assert got[0].offset == 0 and got[0].value == value, "large record not read back intact"


@scenario("topic-max-message-bytes-config", "limits")
def topic_level_limit(bootstrap: str) -> None:
    """A topic created with max.message.bytes takes its own limit (DescribeConfigs reports it)."""
    topic = unique_topic("big-topic")
    limit = 50_000
    create_topic(bootstrap, topic, 1, {"max.message.bytes": str(limit)})
    described = topic_max_message_bytes(bootstrap, topic)
    assert described == limit, f"DescribeConfigs max.message.bytes = {described}, want {limit}"
    err = ck_send_one(bootstrap, topic, os.urandom(limit - MARGIN), limit)
    assert err is None, f"{limit - MARGIN}-byte record (topic limit {limit}) refused: {err}"
    err = ck_send_one(bootstrap, topic, os.urandom(limit + MARGIN), limit)
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE, (
        f"{limit + MARGIN}-byte record (topic limit {limit}): {err}"
    )


@scenario("aiokafka-message-max-bytes", "limits")
def aiokafka_large(bootstrap: str) -> None:
    topic = unique_topic("big-ak")
    create_topic(bootstrap, topic, 1)
    limit, under, over = sizes(bootstrap, topic)
    value = os.urandom(under)

    async def main() -> None:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=bootstrap, max_request_size=limit * 4, max_batch_size=limit * 4
        )
        try:
            await producer.start()
            await producer.send_and_wait(topic, value=value, key=b"big", partition=0)
            try:
                await producer.send_and_wait(topic, value=os.urandom(over), partition=0)
            except akerr.MessageSizeTooLargeError:
                pass
            else:
                raise AssertionError(f"{over}-byte record (limit {limit}) was accepted")
        finally:
            await producer.stop()

    clients.run(main)
    got = clients.ak_consume(bootstrap, topic, 1, 1)
    assert got[0].offset == 0 and got[0].value == value, "large record not read back intact"
