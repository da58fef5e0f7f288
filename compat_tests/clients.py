"""Produce and consume the same records through each real client: confluent-kafka, kafka-python,
aiokafka. Consumers use assign()/seek only (no group coordinator needed)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import aiokafka
import kafka
from confluent_kafka import TIMESTAMP_CREATE_TIME, Consumer, Producer, TopicPartition

from compat_tests import java
from compat_tests.common import TIMEOUT_S, Deadline, Rec, norm_headers

# --- confluent-kafka (librdkafka) -------------------------------------------------------------


def ck_producer(bootstrap: str, **extra: Any) -> Producer:
    conf = {"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all"}
    conf.update(extra)
    return Producer(conf)


def ck_produce(
    bootstrap: str, topic: str, recs: list[Rec], codec: str = "none", **extra: Any
) -> None:
    producer = ck_producer(bootstrap, **{"compression.type": codec, **extra})
    errors: list[str] = []
    delivered: list[int] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(f"{err.name()}: {err.str()}")
        else:
            delivered.append(msg.offset())

    for r in recs:
        producer.produce(
            topic,
            value=r.value,
            key=r.key,
            partition=r.partition,
            headers=list(r.headers),
            timestamp=r.timestamp,
            on_delivery=on_delivery,
        )
    left = producer.flush(TIMEOUT_S)
    assert not errors, f"confluent-kafka delivery errors: {errors[:5]}"
    assert left == 0, f"confluent-kafka: {left} records not delivered within {TIMEOUT_S}s"
    assert len(delivered) == len(recs), f"{len(delivered)} delivery reports for {len(recs)}"


def ck_consumer(bootstrap: str, reset: str = "earliest", **extra: Any) -> Consumer:
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": f"compat-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": reset,
    }
    conf.update(extra)
    return Consumer(conf)


def ck_rec(msg: Any) -> Rec:
    ts_type, ts = msg.timestamp()
    assert ts_type == TIMESTAMP_CREATE_TIME, f"timestamp type {ts_type} at offset {msg.offset()}"
    return Rec(
        msg.partition(), msg.key(), msg.value(), norm_headers(msg.headers()), ts, msg.offset()
    )


def ck_consume(
    bootstrap: str, topic: str, partitions: int, count: int, start: int = 0, **extra: Any
) -> list[Rec]:
    consumer = ck_consumer(bootstrap, **extra)
    try:
        consumer.assign([TopicPartition(topic, p, start) for p in range(partitions)])
        return ck_poll(consumer, count)
    finally:
        consumer.close()


def ck_poll(consumer: Consumer, count: int, seconds: float = TIMEOUT_S) -> list[Rec]:
    got: list[Rec] = []
    errors: list[str] = []
    deadline = Deadline(seconds)
    while len(got) < count and deadline:
        for msg in consumer.consume(num_messages=count - len(got), timeout=0.5):
            if msg.error():
                errors.append(str(msg.error()))
            else:
                got.append(ck_rec(msg))
    assert len(got) >= count, (
        f"confluent-kafka read {len(got)}/{count} records; errors {errors[:5]}"
    )
    return got


# --- kafka-python ------------------------------------------------------------------------------


def kp_codec(codec: str) -> str | None:
    return None if codec == "none" else codec


def kp_producer(bootstrap: str, **extra: Any) -> kafka.KafkaProducer:
    conf: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "linger_ms": 20,
        "acks": "all",
        "enable_idempotence": False,
    }
    conf.update(extra)
    return kafka.KafkaProducer(**conf)


def kp_produce(
    bootstrap: str, topic: str, recs: list[Rec], codec: str = "none", **extra: Any
) -> None:
    producer = kp_producer(bootstrap, compression_type=kp_codec(codec), **extra)
    try:
        futures = [
            producer.send(
                topic,
                value=r.value,
                key=r.key,
                partition=r.partition,
                timestamp_ms=r.timestamp,
                headers=list(r.headers),
            )
            for r in recs
        ]
        producer.flush(timeout=TIMEOUT_S)
        for f in futures:
            f.get(timeout=TIMEOUT_S)
    finally:
        producer.close(timeout=5)


def kp_consumer(bootstrap: str, reset: str = "earliest", **extra: Any) -> kafka.KafkaConsumer:
    conf: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "group_id": None,
        "enable_auto_commit": False,
        "auto_offset_reset": reset,
    }
    conf.update(extra)
    return kafka.KafkaConsumer(**conf)


def kp_rec(r: Any) -> Rec:
    assert r.timestamp_type == 0, f"timestamp type {r.timestamp_type} at offset {r.offset}"
    return Rec(r.partition, r.key, r.value, norm_headers(r.headers), r.timestamp, r.offset)


def kp_poll(consumer: kafka.KafkaConsumer, count: int, seconds: float = TIMEOUT_S) -> list[Rec]:
    got: list[Rec] = []
    deadline = Deadline(seconds)
    while len(got) < count and deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got.extend(kp_rec(r) for r in records)
    assert len(got) >= count, f"kafka-python read {len(got)}/{count} records"
    return got


def kp_consume(
    bootstrap: str, topic: str, partitions: int, count: int, start: int = 0, **extra: Any
) -> list[Rec]:
    consumer = kp_consumer(bootstrap, **extra)
    try:
        tps = [kafka.TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, start)
        return kp_poll(consumer, count)
    finally:
        consumer.close()


# --- aiokafka ----------------------------------------------------------------------------------


def run(coro_fn: Callable[[], Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro_fn(), timeout=TIMEOUT_S * 3))


def ak_produce(
    bootstrap: str, topic: str, recs: list[Rec], codec: str = "none", **extra: Any
) -> None:
    async def main() -> None:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            compression_type=kp_codec(codec),
            linger_ms=20,
            acks="all",
            request_timeout_ms=int(TIMEOUT_S * 1000),
            **extra,
        )
        try:
            await producer.start()
            futures = [
                await producer.send(
                    topic,
                    value=r.value,
                    key=r.key,
                    partition=r.partition,
                    timestamp_ms=r.timestamp,
                    headers=list(r.headers),
                )
                for r in recs
            ]
            await producer.flush()
            for f in futures:
                await f
        finally:
            await producer.stop()

    run(main)


def ak_consumer(bootstrap: str, reset: str = "earliest", **extra: Any) -> aiokafka.AIOKafkaConsumer:
    return aiokafka.AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset=reset,
        **extra,
    )


async def ak_poll(
    consumer: aiokafka.AIOKafkaConsumer, count: int, seconds: float = TIMEOUT_S
) -> list[Rec]:
    got: list[Rec] = []
    deadline = Deadline(seconds)
    while len(got) < count and deadline:
        batches = await consumer.getmany(timeout_ms=500)
        for records in batches.values():
            got.extend(kp_rec(r) for r in records)
    assert len(got) >= count, f"aiokafka read {len(got)}/{count} records"
    return got


def ak_consume(
    bootstrap: str, topic: str, partitions: int, count: int, start: int = 0, **extra: Any
) -> list[Rec]:
    async def main() -> list[Rec]:
        consumer = ak_consumer(bootstrap, **extra)
        try:
            await consumer.start()
            tps = [aiokafka.TopicPartition(topic, p) for p in range(partitions)]
            consumer.assign(tps)
            for tp in tps:
                consumer.seek(tp, start)
            return await ak_poll(consumer, count)
        finally:
            await consumer.stop()

    return run(main)


PRODUCERS = {
    "confluent": ck_produce,
    "kafka-python": kp_produce,
    "aiokafka": ak_produce,
    "java": java.java_produce,  # Apache Kafka's kafka-clients in a JVM (compat_tests/java.py)
}
CONSUMERS = {
    "confluent": ck_consume,
    "kafka-python": kp_consume,
    "aiokafka": ak_consume,
    "java": java.java_consume,
}
