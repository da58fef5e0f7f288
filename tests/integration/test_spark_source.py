"""The `rdmalog` PySpark data source against a real broker (the `bootstrap` fixture).

One local[2] SparkSession for the module. Records are written and checked with kafka-python and
confluent-kafka, independent of the source under test.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark", minversion="4.2")  # admission control, AvailableNow
pytest.importorskip("pyarrow")

from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer  # noqa: E402
from kafka.admin import NewTopic  # noqa: E402
from kafka.structs import TopicPartition as KpTopicPartition  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

import rdmalog.spark  # noqa: E402

POLL_ROUNDS = 200  # bounded consumer loops: at most this many 0.5 s polls
QUERY_TIMEOUT_S = 180


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("rdmalog-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    rdmalog.spark.register(session)
    yield session
    session.stop()


def new_topic(bootstrap: str, partitions: int = 2, configs: dict | None = None) -> str:
    name = f"spark-{uuid.uuid4().hex[:10]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1, topic_configs=configs or {})])
    finally:
        admin.close()
    return name


def produce(
    bootstrap: str,
    topic: str,
    records: list[tuple[int, bytes | None, bytes | None, list | None, int | None]],
) -> None:
    """(partition, key, value, headers, timestamp_ms) records, each acknowledged."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    try:
        futures = [
            producer.send(
                topic, key=key, value=value, partition=part, headers=headers, timestamp_ms=ts
            )
            for part, key, value, headers, ts in records
        ]
        producer.flush(timeout=60)
        for future in futures:
            future.get(timeout=30)
    finally:
        producer.close()


def simple_records(partitions: int, per_partition: int, tag: str = "") -> list:
    return [
        (p, f"k{p}-{i}".encode(), f"v{tag}{p}-{i}".encode(), None, None)
        for i in range(per_partition)
        for p in range(partitions)
    ]


def read_log(bootstrap: str, topic: str) -> list[tuple]:
    """Every record of `topic` as kafka-python sees it, sorted by (partition, offset)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tps = [KpTopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        out = []
        for _ in range(POLL_ROUNDS):
            if all(consumer.position(tp) >= ends[tp] for tp in tps):
                break
            for batch in consumer.poll(timeout_ms=500).values():
                for r in batch:
                    if r.offset < ends[KpTopicPartition(r.topic, r.partition)]:
                        headers = [(k, v) for k, v in r.headers] or None
                        out.append(
                            (
                                r.partition,
                                r.offset,
                                r.key,
                                r.value,
                                r.timestamp,
                                r.timestamp_type,
                                headers,
                            )
                        )
        else:
            raise AssertionError(f"could not read {topic} to its end {ends}")
        return sorted(out)
    finally:
        consumer.close()


def read_confluent(bootstrap: str, topic: str, partitions: int) -> list[tuple]:
    """(partition, key, value, headers) of every record, via confluent-kafka."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "check",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out, eof = [], set()
        for _ in range(POLL_ROUNDS):
            if len(eof) == partitions:
                break
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                eof.add(msg.partition())
                continue
            out.append((msg.partition(), msg.key(), msg.value(), msg.headers()))
        return sorted(out, key=lambda r: (r[0], r[1] or b"", r[2] or b""))
    finally:
        consumer.close()


def source(spark: SparkSession, bootstrap: str, streaming: bool = False, **options: str):
    reader = spark.readStream if streaming else spark.read
    reader = reader.format("rdmalog").option("rdmalog.bootstrap", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def rows(df) -> list[tuple]:
    return sorted(
        (r.partition, r.offset, r.key, r.value)
        for r in df.select("partition", "offset", "key", "value").collect()
    )


def test_batch_read_equals_log(spark: SparkSession, bootstrap: str) -> None:
    topic = new_topic(bootstrap, 2)
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    try:
        for i in range(60):
            producer.send(
                topic,
                key=None if i % 7 == 0 else f"key-{i}".encode(),
                value=None if i % 11 == 4 else f"value-{i}".encode() * (i % 5 + 1),
                partition=i % 2,
                headers=[("h", f"{i}".encode()), ("empty", b"")] if i % 3 == 0 else None,
            )
        producer.flush(timeout=30)
    finally:
        producer.close()
    expected = read_log(bootstrap, topic)
    assert len(expected) == 60

    df = source(spark, bootstrap, subscribe=topic, includeHeaders="true")
    assert df.columns == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    got = sorted(
        (
            r.partition,
            r.offset,
            r.key,
            r.value,
            r.ms,
            r.timestampType,
            [(h.key, h.value) for h in r.headers] if r.headers else None,
        )
        for r in df.withColumn("ms", F.unix_millis("timestamp")).collect()
    )
    assert got == expected
    assert {r.topic for r in df.select("topic").collect()} == {topic}
    # without includeHeaders: spark-sql-kafka's seven columns
    assert len(source(spark, bootstrap, subscribe=topic).columns) == 7


def test_batch_offsets_like_spark_sql_kafka(spark: SparkSession, bootstrap: str) -> None:
    topic = new_topic(bootstrap, 2)
    base = 1_700_000_000_000
    produce(
        bootstrap,
        topic,
        [
            (p, f"k{i}".encode(), f"v{p}-{i}".encode(), None, base + i * 1000)
            for i in range(10)
            for p in range(2)
        ],
    )
    log = [(p, o, k, v) for p, o, k, v, *_ in read_log(bootstrap, topic)]

    # per-partition JSON: -2 earliest, -1 latest; end exclusive
    df = source(
        spark,
        bootstrap,
        subscribe=topic,
        startingOffsets=json.dumps({topic: {"0": 2, "1": -2}}),
        endingOffsets=json.dumps({topic: {"0": 5, "1": -1}}),
    )
    assert rows(df) == [r for r in log if (r[0] == 0 and 2 <= r[1] < 5) or r[0] == 1]

    # startingTimestamp: first record with timestamp >= it, in every partition
    df = source(spark, bootstrap, subscribe=topic, startingTimestamp=str(base + 6500))
    assert rows(df) == [r for r in log if r[1] >= 7]

    # no record that recent: an error naming the option, or latest with the "latest" strategy
    future = str(base + 10**9)
    with pytest.raises(Exception, match="startingTimestamp"):
        source(spark, bootstrap, subscribe=topic, startingTimestamp=future).collect()
    late = source(
        spark,
        bootstrap,
        subscribe=topic,
        startingTimestamp=future,
        startingOffsetsByTimestampStrategy="latest",
    )
    assert late.count() == 0

    # assign and subscribePattern
    df = source(spark, bootstrap, assign=json.dumps({topic: [1]}))
    assert rows(df) == [r for r in log if r[0] == 1]
    df = source(spark, bootstrap, subscribePattern=topic[:8] + ".*" + topic[-3:])
    assert rows(df) == log

    # an empty topic reads as no rows
    assert source(spark, bootstrap, subscribe=new_topic(bootstrap, 2)).count() == 0

    # minPartitions splits offset ranges without changing the result
    df = source(spark, bootstrap, subscribe=topic, minPartitions="5")
    assert df.rdd.getNumPartitions() >= 5
    assert rows(df) == log


def test_fail_on_data_loss(spark: SparkSession, bootstrap: str) -> None:
    topic = new_topic(bootstrap, 1)
    produce(bootstrap, topic, simple_records(1, 10))
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.delete_records({KpTopicPartition(topic, 0): 4})
    finally:
        admin.close()
    from_zero = {"startingOffsets": json.dumps({topic: {"0": 0}})}
    with pytest.raises(Exception, match="failOnDataLoss"):
        source(spark, bootstrap, subscribe=topic, **from_zero).collect()
    lenient = source(spark, bootstrap, subscribe=topic, failOnDataLoss="false", **from_zero)
    assert [r[1] for r in rows(lenient)] == list(range(4, 10))
    assert [r[1] for r in rows(source(spark, bootstrap, subscribe=topic))] == list(range(4, 10))


def _run_available_now(spark, bootstrap, topic, out: Path, checkpoint: Path, **options):
    stream = source(spark, bootstrap, streaming=True, subscribe=topic, **options)
    query = (
        stream.select("partition", "offset", "key", "value")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_TIMEOUT_S), "availableNow query did not finish"
    assert query.exception() is None
    return query


def test_streaming_restart_exactly_once(spark: SparkSession, bootstrap: str, tmp_path) -> None:
    topic = new_topic(bootstrap, 2)
    produce(bootstrap, topic, simple_records(2, 40, "a"))
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    # first run: small triggers, stopped after a couple of micro-batches (mid-way)
    stream = source(
        spark,
        bootstrap,
        streaming=True,
        subscribe=topic,
        startingOffsets="earliest",
        maxOffsetsPerTrigger="7",
    )
    query = (
        stream.select("partition", "offset", "key", "value")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        for _ in range(QUERY_TIMEOUT_S * 10):
            progress = query.lastProgress
            if progress and progress["batchId"] >= 2:
                break
            assert query.exception() is None
            query.awaitTermination(0.1)
        else:
            raise AssertionError("the first run made no progress")
    finally:
        query.stop()
    first = spark.read.parquet(str(out)).count()
    assert 0 < first < 80  # stopped mid-way

    # more records arrive while the query is down; restart from the checkpoint
    produce(bootstrap, topic, simple_records(2, 15, "b"))
    _run_available_now(spark, bootstrap, topic, out, checkpoint, maxOffsetsPerTrigger="40")

    got = rows(spark.read.parquet(str(out)))
    log = [(p, o, k, v) for p, o, k, v, *_ in read_log(bootstrap, topic)]
    assert len(got) == len(log) == 110
    assert got == log  # every record, exactly once


def test_streaming_offsets_and_rate_limit(spark: SparkSession, bootstrap: str, tmp_path) -> None:
    topic = new_topic(bootstrap, 2)
    produce(bootstrap, topic, [(0, b"k", f"p0-{i}".encode(), None, None) for i in range(30)])
    produce(bootstrap, topic, [(1, b"k", f"p1-{i}".encode(), None, None) for i in range(10)])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    # startingOffsets=latest (the streaming default): nothing before the query's start
    query = _run_available_now(spark, bootstrap, topic, out, checkpoint)
    assert query.recentProgress == [] or all(p["numInputRows"] == 0 for p in query.recentProgress)
    produce(bootstrap, topic, [(0, b"k", f"p0-new-{i}".encode(), None, None) for i in range(3)])
    _run_available_now(spark, bootstrap, topic, out, checkpoint)
    assert sorted(r.value for r in spark.read.parquet(str(out)).collect()) == [
        f"p0-new-{i}".encode() for i in range(3)
    ]

    # maxOffsetsPerTrigger: offsets split by backlog size, as spark-sql-kafka does
    out2, checkpoint2 = tmp_path / "out2", tmp_path / "checkpoint2"
    query = _run_available_now(
        spark,
        bootstrap,
        topic,
        out2,
        checkpoint2,
        startingOffsets="earliest",
        maxOffsetsPerTrigger="8",
    )
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert all(p["numInputRows"] <= 8 for p in batches)
    assert sum(p["numInputRows"] for p in batches) == 43
    first_end = json.loads(batches[0]["sources"][0]["endOffset"])
    assert first_end == {topic: {"0": 6, "1": 1}}  # floor(8 * 33/43), floor(8 * 10/43)
    assert json.loads(batches[-1]["sources"][0]["endOffset"]) == {topic: {"0": 33, "1": 10}}


def test_batch_and_stream_write_readable_by_confluent(
    spark: SparkSession, bootstrap: str, tmp_path
) -> None:
    topic = new_topic(bootstrap, 2)
    data = [(f"k{i}", f"value {i}", i % 2) for i in range(50)]
    df = spark.createDataFrame(data, "key string, value string, partition int").withColumn(
        "headers",
        F.array(F.struct(F.lit("source").alias("key"), F.lit(b"spark").alias("value"))),
    )
    df.write.mode("append").format("rdmalog").option("rdmalog.bootstrap", bootstrap).option(
        "topic", topic
    ).save()
    got = read_confluent(bootstrap, topic, 2)
    assert sorted(got) == sorted(
        (p, k.encode(), v.encode(), [("source", b"spark")]) for k, v, p in data
    )

    # streaming write: copy the topic into another one (kafka.bootstrap.servers also works)
    copy = new_topic(bootstrap, 2)
    query = (
        source(spark, bootstrap, streaming=True, subscribe=topic, startingOffsets="earliest")
        .select("key", "value", "partition", F.lit(copy).alias("topic"))
        .writeStream.format("rdmalog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_TIMEOUT_S)
    assert query.exception() is None
    assert sorted((p, k, v) for p, k, v, _ in read_confluent(bootstrap, copy, 2)) == sorted(
        (p, k.encode(), v.encode()) for k, v, p in data
    )


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({}, "subscribe"),
        ({"subscribe": "t", "assign": '{"t":[0]}'}, "assign"),
        ({"subscribe": "t", "startingOffsets": "latest"}, "startingOffsets"),
        ({"subscribe": "t", "endingOffsets": "earliest"}, "endingOffsets"),
        ({"subscribe": "t", "startingOffsets": "{bad json"}, "startingOffsets"),
        ({"subscribe": "t", "includeHeaders": "yes"}, "includeHeaders"),
        ({"subscribe": "t", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"subscribe": "t", "rdmalog.transport": "carrier-pigeon"}, "rdmalog.transport"),
        ({"subscribe": "t", "kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset"),
        ({"subscribe": "t", "kafka.no.such.setting": "1"}, "kafka.no.such.setting"),
        ({"subscribe": "t", "minPartitions": "0"}, "minPartitions"),
    ],
)
def test_bad_batch_options_named(spark: SparkSession, bootstrap: str, options, named) -> None:
    with pytest.raises(Exception, match=named.replace(".", r"\.")):
        source(spark, bootstrap, **options).collect()


def test_bad_options_named_elsewhere(spark: SparkSession, bootstrap: str, tmp_path) -> None:
    with pytest.raises(Exception, match="rdmalog.bootstrap"):
        spark.read.format("rdmalog").option("subscribe", "t").load().collect()
    with pytest.raises(Exception, match="endingOffsets"):
        source(
            spark, bootstrap, streaming=True, subscribe="t", endingOffsets="latest"
        ).writeStream.format("console").option(
            "checkpointLocation", str(tmp_path / "c")
        ).start().awaitTermination(QUERY_TIMEOUT_S)
    with pytest.raises(Exception, match="topic"):
        spark.createDataFrame([("v",)], "value string").write.mode("append").format(
            "rdmalog"
        ).option("rdmalog.bootstrap", bootstrap).save()
    topic = new_topic(bootstrap, 1)
    with pytest.raises(Exception, match="rdmalog.control"):
        source(spark, bootstrap, subscribe=topic, **{"rdmalog.transport": "shm"}).collect()


class InProcessBroker:
    """Gateway and RDMA service (tcp soft-RNIC) over one store, in this process's threads."""

    def __init__(self, data_dir: Path) -> None:
        import asyncio
        import threading

        from gateway import app
        from rdmalog.config import BrokerConfig
        from rdmalog.rdma.broker.service import RdmaService

        self._app = app
        config = BrokerConfig.from_sources(
            None,
            {
                "log.dirs": str(data_dir),
                "listeners": "PLAINTEXT://127.0.0.1:0",
                "offsets.topic.num.partitions": "1",
            },
        )
        self.loop = asyncio.new_event_loop()
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.gateway = self.loop.run_until_complete(app.start(config, ("127.0.0.1", 0)))
            started.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert started.wait(120), "in-process gateway did not start"
        self.bootstrap = f"127.0.0.1:{self.gateway.address[1]}"
        self.rdma = RdmaService(self.gateway.broker.store, "tcp").start()
        self.control = self.rdma.control_address

    def close(self) -> None:
        import asyncio

        self.rdma.stop()
        asyncio.run_coroutine_threadsafe(self._app.shutdown(self.gateway), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


@pytest.fixture(scope="module")
def native_broker(tmp_path_factory) -> Iterator[InProcessBroker]:
    pytest.importorskip("rdmalog.rdma.broker.service")
    broker = InProcessBroker(tmp_path_factory.mktemp("native-broker"))
    yield broker
    broker.close()


def test_native_tcp_transport(
    spark: SparkSession, native_broker: InProcessBroker, tmp_path
) -> None:
    bs = native_broker.bootstrap
    native = {"rdmalog.transport": "tcp", "rdmalog.control": native_broker.control}
    topic = new_topic(bs, 2)
    produce(bs, topic, simple_records(2, 25))

    # batch read: the native datapath returns what the Kafka protocol returns
    kafka_rows = rows(source(spark, bs, subscribe=topic))
    assert len(kafka_rows) == 50
    assert rows(source(spark, bs, subscribe=topic, **native)) == kafka_rows
    ranged = source(
        spark, bs, subscribe=topic, endingOffsets=json.dumps({topic: {"0": 10, "1": -1}}), **native
    )
    assert rows(ranged) == [r for r in kafka_rows if r[0] == 1 or r[1] < 10]

    # a LogAppendTime topic: the broker's stamp and timestampType 1, as over the Kafka protocol
    stamped = new_topic(bs, 1, {"message.timestamp.type": "LogAppendTime"})
    produce(bs, stamped, [(0, b"k", b"v%d" % i, None, 1_000 + i) for i in range(5)])

    def stamps(df) -> list[tuple]:
        return sorted(
            (r.offset, r.ms, r.timestampType)
            for r in df.withColumn("ms", F.unix_millis("timestamp")).collect()
        )

    kafka_stamps = stamps(source(spark, bs, subscribe=stamped))
    assert {t for _, _, t in kafka_stamps} == {1} and all(
        ms > 1_000_000 for _, ms, _ in kafka_stamps
    )
    assert stamps(source(spark, bs, subscribe=stamped, **native)) == kafka_stamps

    # batch write (keyed records spread by Kafka's partitioner), read back with confluent-kafka
    written = new_topic(bs, 2)
    data = [(f"key-{i}", f"native {i}") for i in range(40)]
    spark.createDataFrame(data, "key string, value string").write.mode("append").format(
        "rdmalog"
    ).option("rdmalog.bootstrap", bs).option("topic", written).options(**native).save()
    assert sorted((k, v) for _, k, v, _ in read_confluent(bs, written, 2)) == sorted(
        (k.encode(), v.encode()) for k, v in data
    )

    # streaming read through the native datapath
    query = _run_available_now(
        spark, bs, topic, tmp_path / "out", tmp_path / "cp", startingOffsets="earliest", **native
    )
    assert query.exception() is None
    assert rows(spark.read.parquet(str(tmp_path / "out"))) == kafka_rows
