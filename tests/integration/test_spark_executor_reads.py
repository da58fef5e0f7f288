"""The Spark source's executor reads (what each task runs; no Spark session needed) against a real
`rdmalog serve`, on the Kafka transport (confluent-kafka through the gateway) and the native shm
one: records deleted before a task reads its planned range are data loss - an error with
failOnDataLoss=true, else a warning and the rest of the range, as spark-sql-kafka's executors do."""

from __future__ import annotations

import logging

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


@pytest.mark.parametrize("transport", ["kafka", "shm"])
def test_deleted_records_under_a_planned_range(broker_factory, transport, caplog) -> None:
    control = f"127.0.0.1:{free_port()}"
    broker = broker_factory(
        {"rdma.transport": "shm", "rdma.control.port": control.rsplit(":", 1)[1]}, local=True
    )
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("dl", 1, 1)])["dl"].result(15)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(30):
        producer.produce("dl", value=b"v%d" % i, partition=0)
        producer.flush(10)  # one batch per record
    deleter = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    deleter.delete_records({TopicPartition("dl", 0): 12})
    deleter.close()
    opts = {"rdmalog.bootstrap": broker.bootstrap, "subscribe": "dl"}
    conn = parse_read(opts | {"rdmalog.transport": transport, "rdmalog.control": control}, False)
    reader = kafka_client if transport == "kafka" else native_client

    def read(start: int, end: int, fail: bool) -> list[int]:
        return [r[2] for r in reader.read_range(conn.conn, ("dl", 0), start, end, fail, 5000)]

    try:
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
    finally:  # the executors' pooled consumers
        for consumer in native_client._POOL.values():
            consumer.close()
        native_client._POOL.clear()
        for idle in kafka_client._POOL.values():
            for consumer in idle:
                consumer.close()
        kafka_client._POOL.clear()
