"""The Spark source's executor reads (what each task runs; no Spark session needed) against a real
`rdmalog serve`, on the Kafka transport (confluent-kafka through the gateway) and the native shm
one. Records deleted before a task reads its planned range are data loss: an error with
failOnDataLoss=true, else a warning and the rest of the range, as spark-sql-kafka's executors do.
A batch whose bytes changed on disk fails the task on both: CRCs are checked, as spark-sql-kafka's
Java consumer checks them."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("confluent_kafka")

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kafka.admin import KafkaAdminClient  # noqa: E402
from kafka.structs import TopicPartition  # noqa: E402

from compat_tests.brokers import free_port  # noqa: E402
from rdmalog.spark import kafka_client, native_client  # noqa: E402
from rdmalog.spark.offsets import DataLossError  # noqa: E402
from rdmalog.spark.options import parse_read  # noqa: E402


@pytest.fixture
def topic_reader(broker_factory, request) -> Iterator:
    """`make(topic, values)`: a one-partition topic holding `values` (a batch each) on a fresh
    broker, and `(broker, read)` where `read(start, end, fail)` is the executor read of the test's
    transport; the executors' pooled consumers are closed afterwards."""
    transport = request.param

    def make(topic: str, values: list[bytes]):
        control = f"127.0.0.1:{free_port()}"
        broker = broker_factory(
            {"rdma.transport": "shm", "rdma.control.port": control.rsplit(":", 1)[1]}, local=True
        )
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for v in values:
            producer.produce(topic, value=v, partition=0)
            producer.flush(10)  # one batch per record
        opts = {"rdmalog.bootstrap": broker.bootstrap, "subscribe": topic}
        conn = parse_read(
            opts | {"rdmalog.transport": transport, "rdmalog.control": control}, False
        )
        reader = kafka_client if transport == "kafka" else native_client

        def read(start: int, end: int, fail: bool) -> list[int]:
            rows = reader.read_range(conn.conn, (topic, 0), start, end, fail, 5000)
            return [r[2] for r in rows]

        return broker, read

    yield make
    for consumer in native_client._POOL.values():
        consumer.close()
    native_client._POOL.clear()
    for idle in kafka_client._POOL.values():
        for consumer in idle:
            consumer.close()
    kafka_client._POOL.clear()


TRANSPORTS = pytest.mark.parametrize("topic_reader", ["kafka", "shm"], indirect=True)


@TRANSPORTS
def test_deleted_records_under_a_planned_range(topic_reader, caplog) -> None:
    broker, read = topic_reader("dl", [b"v%d" % i for i in range(30)])
    deleter = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    deleter.delete_records({TopicPartition("dl", 0): 12})
    deleter.close()
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        read(10, 15, fail=True)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rdmalog.spark.offsets"):
        assert read(10, 15, fail=False) == [12, 13, 14]
    assert "failOnDataLoss is false" in caplog.text and "dl-0" in caplog.text
    assert read(5, 10, fail=False) == []  # all of it deleted
    assert read(12, 16, fail=True) == [12, 13, 14, 15]
    caplog.clear()
    assert read(20, 23, fail=False) == [20, 21, 22]
    assert "failOnDataLoss" not in caplog.text


@TRANSPORTS
def test_a_corrupt_batch_fails_the_task(topic_reader) -> None:
    broker, read = topic_reader("crc", [b"first-value", b"second-value", b"third-value"])
    (log_file,) = (broker.data_dir / "crc-0").glob("*.log")
    at = log_file.read_bytes().index(b"second-value")
    with open(log_file, "r+b") as f:  # a bit flip on disk, seen through the page cache
        f.seek(at)
        f.write(b"S")
    with pytest.raises(Exception, match="(?i)crc"):
        read(0, 3, fail=True)
