"""What spark-sql-kafka does against a broker, shown through the Python clients (the Java jar is not
available here): the driver describes topics and lists offsets (earliest, latest, by timestamp) with
an AdminClient; each task runs one consumer per partition with assign + seek + poll and, around every
poll, seeks to the beginning and the end and reads the positions (extra ListOffsets); consumers use
auto.offset.reset=none so an out-of-range offset raises; the sink is a default (idempotent, acks=all)
producer."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("confluent_kafka")
pytest.importorskip("kafka")

import kafka  # noqa: E402
import kafka.errors as kerr  # noqa: E402
from confluent_kafka import Consumer, KafkaError, Producer, TopicCollection, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec  # noqa: E402
from kafka.admin import KafkaAdminClient  # noqa: E402

from compat_tests.brokers import BrokerProcess  # noqa: E402
from compat_tests.common import TIMEOUT_S, Deadline  # noqa: E402

PARTITIONS = 3
PER_PARTITION = 40
T0 = 1_700_000_000_000
STEP_MS = 10  # record i of a partition has timestamp T0 + i * STEP_MS


@pytest.fixture(scope="module")
def kbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    tmp: Path = tmp_path_factory.mktemp("spark-pattern")
    broker = BrokerProcess(tmp / "data", {}, log_dir=tmp)
    broker.start()
    yield broker
    broker.close()


@pytest.fixture(scope="module")
def topic(kbroker: BrokerProcess) -> str:
    """A topic written the way Spark's Kafka sink writes: a default KafkaProducer (idempotent,
    acks=all), records with their own timestamps; half of each partition from librdkafka."""
    name = f"spark-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kbroker.bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(timeout=TIMEOUT_S)
    half = PER_PARTITION // 2
    sink = kafka.KafkaProducer(bootstrap_servers=kbroker.bootstrap)
    try:
        assert sink.config["enable_idempotence"] and sink.config["acks"] == -1
        futures = [
            sink.send(name, value=_value(p, i), partition=p, timestamp_ms=T0 + i * STEP_MS)
            for p in range(PARTITIONS)
            for i in range(half)
        ]
        sink.flush(timeout=TIMEOUT_S)
        for f in futures:
            f.get(timeout=TIMEOUT_S)
    finally:
        sink.close(timeout=TIMEOUT_S)
    ck = Producer({"bootstrap.servers": kbroker.bootstrap, "enable.idempotence": True})
    assert ck.list_topics(name, timeout=TIMEOUT_S).topics[name].error is None
    for p in range(PARTITIONS):
        for i in range(half, PER_PARTITION):
            ck.produce(name, value=_value(p, i), partition=p, timestamp=T0 + i * STEP_MS)
    assert ck.flush(TIMEOUT_S) == 0
    return name


def _value(partition: int, i: int) -> bytes:
    return b"p%d-%03d" % (partition, i)


def test_driver_describes_topics_and_lists_offsets(kbroker: BrokerProcess, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": kbroker.bootstrap})
    desc = admin.describe_topics(TopicCollection([topic]))[topic].result(timeout=TIMEOUT_S)
    assert desc.name == topic and not desc.is_internal
    assert [
        (p.id, p.leader.id, [r.id for r in p.replicas], [r.id for r in p.isr])
        for p in desc.partitions
    ] == [(p, 0, [0], [0]) for p in range(PARTITIONS)]
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]

    def offsets(spec: OffsetSpec) -> list[int]:
        futures = admin.list_offsets({tp: spec for tp in tps})
        return [futures[tp].result(timeout=TIMEOUT_S).offset for tp in tps]

    assert offsets(OffsetSpec.earliest()) == [0] * PARTITIONS
    # latest is exactly the number of records produced: nothing lost, nothing duplicated
    assert offsets(OffsetSpec.latest()) == [PER_PARTITION] * PARTITIONS
    # by timestamp: the first record at or after the time, exact to the record (not the batch)
    assert offsets(OffsetSpec.for_timestamp(T0 + 7 * STEP_MS)) == [7] * PARTITIONS
    assert offsets(OffsetSpec.for_timestamp(T0 + 25 * STEP_MS - 3)) == [25] * PARTITIONS
    assert offsets(OffsetSpec.for_timestamp(T0 + PER_PARTITION * STEP_MS)) == [-1] * PARTITIONS
    ts = admin.list_offsets({tps[0]: OffsetSpec.max_timestamp()})[tps[0]].result(timeout=TIMEOUT_S)
    assert (ts.offset, ts.timestamp) == (PER_PARTITION - 1, T0 + (PER_PARTITION - 1) * STEP_MS)

    # kafka-python's admin and consumer give the same answers
    kp_admin = KafkaAdminClient(bootstrap_servers=kbroker.bootstrap)
    try:
        (kp_desc,) = kp_admin.describe_topics([topic])
        indexes = sorted(p["partition_index"] for p in kp_desc["partitions"])
        assert indexes == list(range(PARTITIONS))
    finally:
        kp_admin.close()
    consumer = kafka.KafkaConsumer(bootstrap_servers=kbroker.bootstrap, enable_auto_commit=False)
    try:
        kps = [kafka.TopicPartition(topic, p) for p in range(PARTITIONS)]
        assert set(consumer.beginning_offsets(kps).values()) == {0}
        assert set(consumer.end_offsets(kps).values()) == {PER_PARTITION}
        found = consumer.offsets_for_times({tp: T0 + 13 * STEP_MS for tp in kps})
        assert {(f.offset, f.timestamp) for f in found.values()} == {(13, T0 + 13 * STEP_MS)}
    finally:
        consumer.close()


def _kp_range(consumer: kafka.KafkaConsumer, tp: kafka.TopicPartition) -> tuple[int, int]:
    """Spark's getAvailableOffsetRange: seek to the beginning and the end, read both positions."""
    consumer.seek_to_beginning(tp)
    earliest = consumer.position(tp)
    consumer.seek_to_end(tp)
    latest = consumer.position(tp)
    return earliest, latest


@pytest.mark.parametrize("partition", range(PARTITIONS))
def test_kafka_python_consumer_per_partition(
    kbroker: BrokerProcess, topic: str, partition: int
) -> None:
    tp = kafka.TopicPartition(topic, partition)
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=kbroker.bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="none",
        max_poll_records=7,
    )
    try:
        consumer.assign([tp])
        offset, until, got = 5, 33, []  # a task's offset range
        deadline = Deadline(TIMEOUT_S)
        while offset < until and deadline:
            assert _kp_range(consumer, tp) == (0, PER_PARTITION)
            consumer.seek(tp, offset)
            for rec in consumer.poll(timeout_ms=500).get(tp, []):
                if rec.offset < until:
                    got.append((rec.offset, rec.value, rec.timestamp))
            offset = got[-1][0] + 1 if got else offset
        assert got == [(i, _value(partition, i), T0 + i * STEP_MS) for i in range(5, until)]

        # an offset beyond the log end with auto.offset.reset=none raises
        consumer.seek(tp, PER_PARTITION + 10)
        with pytest.raises(kerr.OffsetOutOfRangeError):
            for _ in range(20):
                consumer.poll(timeout_ms=500)
    finally:
        consumer.close()


def test_confluent_consumer_per_partition(kbroker: BrokerProcess, topic: str) -> None:
    for partition in range(PARTITIONS):
        consumer = Consumer(
            {
                "bootstrap.servers": kbroker.bootstrap,
                "group.id": f"spark-{uuid.uuid4().hex[:6]}",
                "enable.auto.commit": False,
                "auto.offset.reset": "error",
                # a ListOffsets waits behind the connection's parked fetch (Kafka answers one
                # request per connection at a time): keep the long poll short
                "fetch.wait.max.ms": 20,
            }
        )
        try:
            tp = TopicPartition(topic, partition, 10)
            consumer.assign([tp])
            got: list[int] = []
            deadline = Deadline(TIMEOUT_S)
            while len(got) < PER_PARTITION - 10 and deadline:
                lo, hi = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=TIMEOUT_S, cached=False
                )
                assert (lo, hi) == (0, PER_PARTITION)
                msg = consumer.poll(0.5)
                if msg is not None:
                    assert msg.error() is None, msg.error()
                    got.append(msg.offset())
            assert got == list(range(10, PER_PARTITION))
            consumer.seek(TopicPartition(topic, partition, PER_PARTITION + 3))
            error = None
            while error is None and deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is not None:
                    error = msg.error()
            assert error is not None and error.code() == KafkaError._AUTO_OFFSET_RESET, error
        finally:
            consumer.close()
