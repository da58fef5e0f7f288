"""Compacted topics through real clients against `rdmalog serve`: the broker's cleaner threads
compact what kafka-python and confluent-kafka produce, consumers read the latest value of every
key with Kafka's gaps, the cleaned files keep Kafka's batches, and `__consumer_offsets` stays as
small as its live offsets across a restart."""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("confluent_kafka")
pytest.importorskip("kafka")

import kafka  # noqa: E402
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition  # noqa: E402
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource  # noqa: E402

from compat_tests import clients  # noqa: E402
from compat_tests.common import TIMEOUT_S, Deadline, Rec, admin, create_topic  # noqa: E402
from rdmalog.store.records import RecordBatch, decode_records, iter_batches  # noqa: E402

FAST_CLEANER = {"log.cleaner.backoff.ms": "100", "log.cleaner.dedupe.buffer.size": str(8 << 20)}


def read_to_end(bootstrap: str, topic: str, start: int = 0) -> list[tuple[int, bytes, bytes]]:
    """(offset, key, value) of every record from `start` to the high watermark (confluent)."""
    consumer = clients.ck_consumer(bootstrap)
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S)
        consumer.assign([TopicPartition(topic, 0, start)])
        got = []
        deadline = Deadline()
        while deadline and (not got or got[-1][0] < high - 1):
            for msg in consumer.consume(num_messages=500, timeout=0.5):
                assert not msg.error(), msg.error()
                got.append((msg.offset(), msg.key(), msg.value()))
            if consumer.position([TopicPartition(topic, 0)])[0].offset >= high:
                break
        return got
    finally:
        consumer.close()


def file_batches(partition_dir: Path) -> list[RecordBatch]:
    """Every batch in the partition's segment files, as stored."""
    out = []
    for path in sorted(partition_dir.glob("*.log")):
        out += [RecordBatch(bytes(b.bytes())) for b in iter_batches(path.read_bytes())]
    return out


def set_topic_config(bootstrap: str, topic: str, name: str, value: str) -> None:
    res = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)],
    )
    client = admin(bootstrap)
    client.incremental_alter_configs([res])[res].result(timeout=TIMEOUT_S)


def test_keyed_updates_compact_to_the_latest_value_per_key(broker_factory) -> None:
    broker = broker_factory(FAST_CLEANER, local=True)
    topic = f"compact-{uuid.uuid4().hex[:8]}"
    create_topic(
        broker.bootstrap,
        topic,
        1,
        {
            "cleanup.policy": "compact",
            "segment.bytes": "4096",
            "segment.ms": "300",  # a quiet head rolls, so all of it becomes cleanable
            "min.compaction.lag.ms": "3600000",  # held back until the files are looked at
        },
    )
    keys = [f"user-{i}".encode() for i in range(25)]
    first = [Rec(0, keys[i % 25], b"ck-%04d" % i, (), 0) for i in range(300)]
    clients.ck_produce(broker.bootstrap, topic, first, "lz4", **{"batch.size": 1024})
    second = [Rec(0, keys[(i * 7) % 25], b"kp-%04d" % i, (), 0) for i in range(300)]
    clients.kp_produce(broker.bootstrap, topic, second, "none", batch_size=512)
    producer = clients.ck_producer(broker.bootstrap)
    for key in keys[:3]:  # tombstones
        producer.produce(topic, key=key, value=None, partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    before = read_to_end(broker.bootstrap, topic)
    assert len(before) == 603
    latest = {}
    for off, key, value in before:
        latest[key] = (off, key, value)
    expected = sorted(latest.values())
    partition_dir = broker.data_dir / f"{topic}-0"
    deadline = Deadline()
    while deadline and len(list(partition_dir.glob("*.log"))) < 10:
        time.sleep(0.1)
    originals = {b.base_offset: b for b in file_batches(partition_dir)}

    set_topic_config(broker.bootstrap, topic, "min.compaction.lag.ms", "0")
    deadline = Deadline(60)
    got = read_to_end(broker.bootstrap, topic)
    while deadline and got != expected:
        time.sleep(0.2)
        got = read_to_end(broker.bootstrap, topic)
    assert got == expected  # one record per key, its latest, tombstones kept (first pass)
    offsets = [o for o, _, _ in got]
    assert offsets[-1] == 602 and len(offsets) == 25 and offsets[0] > 0  # gaps, Kafka's offsets

    # Kafka's reading rules: the watermarks do not move; a position in a gap reads the next record
    consumer = clients.ck_consumer(broker.bootstrap)
    assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S) == (0, 603)
    consumer.close()
    inside_gap = offsets[0] - 1
    assert read_to_end(broker.bootstrap, topic, inside_gap)[0][0] == offsets[0]
    kp = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    tp = kafka.TopicPartition(topic, 0)
    kp.assign([tp])
    kp.seek(tp, 0)
    seen = []
    deadline = Deadline()
    while deadline and len(seen) < 25:
        for records in kp.poll(timeout_ms=500).values():
            seen += [(r.offset, r.key, r.value) for r in records]
    kp.close()
    assert seen == expected

    # the files: batches whose records all stayed are the produced bytes; the others are valid
    # v2 batches at their original base offsets with their original last offset and producer
    cleaned = file_batches(partition_dir)
    copied = rebuilt = 0
    for b in cleaned:
        orig = originals.get(b.base_offset)
        if orig is None:
            continue  # written after the files were looked at (none here but the head)
        if bytes(b.bytes()) == bytes(orig.bytes()):
            copied += 1
            continue
        rebuilt += 1
        assert b.is_valid() and b.last_offset == orig.last_offset and b.codec == orig.codec
        assert (b.producer_id, b.producer_epoch, b.base_sequence) == (
            orig.producer_id,
            orig.producer_epoch,
            orig.base_sequence,
        )
        kept = {r.offset: (r.key, r.value) for r in decode_records(b)}
        assert kept.items() <= {r.offset: (r.key, r.value) for r in decode_records(orig)}.items()
    assert copied and rebuilt


def test_consumer_offsets_are_compacted_and_a_restart_keeps_the_group_offsets(
    broker_factory,
) -> None:
    """Thousands of commits on one `__consumer_offsets` partition: the cleaner keeps the latest
    commit of each partition, so what a restart replays is a few KiB, not every commit, and the
    group's offsets come back as committed."""
    broker = broker_factory(
        {
            **FAST_CLEANER,
            "offsets.topic.num.partitions": "1",
            "offsets.topic.segment.bytes": "16384",
        },
        local=True,
    )
    topic = f"offsets-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 3)
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    commits = 2400
    for i in range(commits):
        consumer.commit(offsets=[TopicPartition(topic, i % 3, i + 1)], asynchronous=False)
    last = {p: max(i + 1 for i in range(commits) if i % 3 == p) for p in range(3)}
    partition_dir = broker.data_dir / "__consumer_offsets-0"

    def log_bytes() -> int:
        return sum(p.stat().st_size for p in partition_dir.glob("*.log"))

    def records_on_disk() -> int:
        return sum(len(decode_records(b)) for b in file_batches(partition_dir))

    assert max(b.last_offset for b in file_batches(partition_dir)) >= commits - 1
    deadline = Deadline(60)
    while deadline and records_on_disk() > 400:  # the head (16 KiB) is never cleaned
        time.sleep(0.2)
    assert records_on_disk() <= 400 and log_bytes() < 64 << 10
    consumer.close()

    assert broker.stop(signal.SIGTERM) == 0
    broker.start()
    again = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    committed = again.committed([TopicPartition(topic, p) for p in range(3)], timeout=TIMEOUT_S)
    assert {tp.partition: tp.offset for tp in committed} == last
    again.close()


def test_a_record_without_a_key_is_refused_by_a_compacted_topic(broker_factory) -> None:
    """Kafka's INVALID_RECORD for a keyless record on a compacted topic (confluent-kafka's
    delivery report, kafka-python's future); the keyed record before it stays."""
    broker = broker_factory({}, local=True)
    topic = f"compact-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1, {"cleanup.policy": "compact,delete"})
    reports = []
    producer = clients.ck_producer(broker.bootstrap)
    try:
        for key, value in ((b"k", b"kept"), (None, b"refused")):
            producer.produce(
                topic, key=key, value=value, partition=0, on_delivery=lambda e, _: reports.append(e)
            )
            assert producer.flush(TIMEOUT_S) == 0
    finally:
        producer.close()
    assert reports[0] is None
    assert reports[1].code() == KafkaError.INVALID_RECORD, reports[1]

    kp = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, retries=0)
    try:
        with pytest.raises(kafka.errors.InvalidRecordError):
            kp.send(topic, value=b"refused too", partition=0).get(timeout=TIMEOUT_S)
    finally:
        kp.close()
    assert read_to_end(broker.bootstrap, topic) == [(0, b"k", b"kept")]


def _set_broker_config(bootstrap: str, name: str, value: str) -> None:
    res = ConfigResource(
        ConfigResource.Type.BROKER,
        "0",
        incremental_configs=[ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)],
    )
    client = admin(bootstrap)  # held: a collected handle fails its futures
    client.incremental_alter_configs([res])[res].result(timeout=TIMEOUT_S)


def test_cleaner_threads_change_live(broker_factory) -> None:
    """log.cleaner.threads and the cleaner's buffers change at run time as in Kafka: within Kafka's
    limits (at most double, at least half), the threads restart with them and go on cleaning."""
    broker = broker_factory({**FAST_CLEANER, "log.cleaner.threads": "1"}, local=True)
    with pytest.raises(KafkaException) as refused:
        _set_broker_config(broker.bootstrap, "log.cleaner.threads", "3")
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert "more than double" in refused.value.args[0].str()
    _set_broker_config(broker.bootstrap, "log.cleaner.threads", "2")
    _set_broker_config(broker.bootstrap, "log.cleaner.dedupe.buffer.size", str(4 << 20))
    res = ConfigResource(ConfigResource.Type.BROKER, "0")
    client = admin(broker.bootstrap)
    described = client.describe_configs([res])[res].result(timeout=TIMEOUT_S)
    assert described["log.cleaner.threads"].value == "2"
    wait_until = Deadline()
    while wait_until and "log cleaner restarted: 2 threads" not in broker.stderr_tail():
        time.sleep(0.1)
    assert "log cleaner restarted: 2 threads" in broker.stderr_tail()

    topic = f"compact-{uuid.uuid4().hex[:8]}"
    config = {"cleanup.policy": "compact", "segment.bytes": "2048", "segment.ms": "300"}
    create_topic(broker.bootstrap, topic, 1, config)
    keys = [f"k{i}".encode() for i in range(10)]
    records = [Rec(0, keys[i % 10], b"v-%04d" % i, (), 0) for i in range(300)]
    clients.ck_produce(broker.bootstrap, topic, records, "none", **{"batch.size": 512})
    deadline = Deadline(60)
    got = read_to_end(broker.bootstrap, topic)
    while deadline and len(got) > 10:  # the restarted threads compact it to one per key
        time.sleep(0.2)
        got = read_to_end(broker.bootstrap, topic)
    assert sorted(value for _, _, value in got) == [b"v-%04d" % i for i in range(290, 300)]
