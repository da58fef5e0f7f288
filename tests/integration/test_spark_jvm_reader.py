"""The JVM reader (rdmalog/spark/java): `format("rdmalog")` with its jar on Spark's classpath.

The jar is built from the sources with the JDK's javac against pyspark's jars (as scripts/setup.sh
does) and loaded into a fresh JVM for this module (`spark.jars` counts only when the JVM starts;
the JVM is shut down again at the end so later modules start without it). One local[2] session
reads an in-process gateway plus RDMA service on the tcp soft-RNIC; what it reads is checked
against the log read independently (kafka-python) and against the Python source, which the JVM
reader hands the Kafka transport and writes to.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark", minversion="4.2")
pytest.importorskip("pyarrow")

from kafka import KafkaAdminClient  # noqa: E402
from kafka.structs import TopicPartition as KpTopicPartition  # noqa: E402
from pyspark import SparkContext  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

import rdmalog.spark  # noqa: E402
from rdmalog.spark import jvm  # noqa: E402
from tests.integration.test_spark_source import (  # noqa: E402
    InProcessBroker,
    new_topic,
    produce,
    read_confluent,
    read_log,
    rows,
    simple_records,
)

QUERY_TIMEOUT_S = 180
WAIT_ROUNDS = 600  # bounded waits for streamed rows: at most this many 0.2 s looks


def _fresh_jvm() -> None:
    """Stop an earlier session and its JVM: spark.jars reach the classpath when the JVM starts."""
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    if SparkContext._gateway is not None:
        SparkContext._gateway.shutdown()
        SparkContext._gateway = None
        SparkContext._jvm = None


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    try:
        jar = jvm.jar()
    except jvm.Unavailable as exc:  # no JDK: scripts/setup.sh installs one
        pytest.skip(f"the JVM reader's jar cannot be built here: {exc}")
    # a jvm.BuildError (javac refused the sources) fails the tests: it is a bug, not a missing tool
    os.environ["PYSPARK_PYTHON"] = sys.executable
    _fresh_jvm()
    session = (
        SparkSession.builder.master("local[2]")
        .appName("rdmalog-jvm-reader-tests")
        .config("spark.jars", str(jar))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    rdmalog.spark.register(session)
    yield session
    _fresh_jvm()


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[InProcessBroker]:
    pytest.importorskip("rdmalog.rdma.broker.service")
    b = InProcessBroker(tmp_path_factory.mktemp("jvm-reader-broker"))
    yield b
    b.close()


def native(broker: InProcessBroker) -> dict[str, str]:
    return {
        "rdmalog.bootstrap": broker.bootstrap,
        "rdmalog.transport": "tcp",
        "rdmalog.control": broker.control,
    }


def read(spark: SparkSession, options: dict, streaming: bool = False):
    return (
        (spark.readStream if streaming else spark.read).format("rdmalog").options(**options).load()
    )


def test_jvm_reader_serves_tcp_and_hands_the_rest_to_python(
    spark: SparkSession, broker: InProcessBroker
) -> None:
    assert jvm.loaded(spark)
    topic = new_topic(broker.bootstrap, 2)
    records = simple_records(2, 30)
    records[3] = (1, b"hk", b"with headers", [("h1", b"x"), ("h2", b"")], None)
    produce(broker.bootstrap, topic, records)

    df = read(spark, native(broker) | {"subscribe": topic, "includeHeaders": "true"})
    assert "JVM reader" in df._jdf.queryExecution().executedPlan().toString()
    got = sorted(
        (r.partition, r.offset, r.key, r.value, r.timestampType, r.headers) for r in df.collect()
    )
    log = read_log(broker.bootstrap, topic)
    assert [(p, o, k, v, t, h) for p, o, k, v, _, t, h in log] == [
        (p, o, k, v, t, [(x.key, x.value) for x in h] if h else None) for p, o, k, v, t, h in got
    ]
    # the Kafka transport is the Python source's (registered as rdmalog-python), same rows
    kafka_opts = {"rdmalog.bootstrap": broker.bootstrap, "subscribe": topic}
    kafka_df = read(spark, kafka_opts)
    assert "JVM reader" not in kafka_df._jdf.queryExecution().executedPlan().toString()
    assert rows(kafka_df) == rows(df)

    # offsets and timestamps resolved as spark-sql-kafka does
    ranged = read(
        spark,
        native(broker)
        | {
            "subscribe": topic,
            "startingOffsets": json.dumps({topic: {"0": 5, "1": -2}}),
            "endingOffsets": json.dumps({topic: {"0": 12, "1": -1}}),
        },
    )
    assert rows(ranged) == [r for r in rows(df) if r[0] == 1 or 5 <= r[1] < 12]
    split = read(spark, native(broker) | {"subscribe": topic, "minPartitions": "6"})
    assert split.rdd.getNumPartitions() == 6 and rows(split) == rows(df)

    # writes go to the Python source's writer (native producer), read back with confluent-kafka
    written = new_topic(broker.bootstrap, 2)
    data = [(f"key-{i}", f"jvm {i}") for i in range(20)]
    spark.createDataFrame(data, "key string, value string").write.mode("append").format(
        "rdmalog"
    ).options(**native(broker)).option("topic", written).save()
    assert sorted((k, v) for _, k, v, _ in read_confluent(broker.bootstrap, written, 2)) == sorted(
        (k.encode(), v.encode()) for k, v in data
    )


def test_jvm_reader_options_named(spark: SparkSession, broker: InProcessBroker) -> None:
    topic = new_topic(broker.bootstrap, 1)
    bad = [
        (
            {"subscribe": topic, "assign": json.dumps({topic: [0]})},
            "'subscribe', 'subscribePattern'",
        ),
        ({"subscribe": topic, "startingOffsets": "latest"}, "startingOffsets"),
        ({"subscribe": topic, "includeHeaders": "maybe"}, "includeHeaders"),
        ({"subscribe": topic, "maxTriggerDelay": "5s"}, "maxTriggerDelay"),
    ]
    for options, named in bad:
        with pytest.raises(Exception, match=named):
            read(spark, native(broker) | options).collect()
    with pytest.raises(Exception, match="fixed schema"):
        spark.read.format("rdmalog").schema("value binary").options(**native(broker)).option(
            "subscribe", topic
        ).load().collect()


def test_jvm_reader_stamps_and_data_loss(spark: SparkSession, broker: InProcessBroker) -> None:
    bs = broker.bootstrap
    stamped = new_topic(bs, 1, {"message.timestamp.type": "LogAppendTime"})
    produce(bs, stamped, [(0, b"k", b"v%d" % i, None, 1_000 + i) for i in range(10)])
    df = read(spark, native(broker) | {"subscribe": stamped})
    log = read_log(bs, stamped)
    assert sorted(
        (r.offset, int(r.timestamp.timestamp() * 1000), r.timestampType) for r in df.collect()
    ) == [(o, ts, t) for _, o, _, _, ts, t, _ in log]
    assert {t for *_, t, _ in log} == {1}

    admin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        admin.delete_records({KpTopicPartition(stamped, 0): 4})
    finally:
        admin.close()
    start = {"startingOffsets": json.dumps({stamped: {"0": 2}})}
    with pytest.raises(Exception, match="failOnDataLoss"):
        read(spark, native(broker) | {"subscribe": stamped} | start).collect()
    lenient = read(
        spark, native(broker) | {"subscribe": stamped, "failOnDataLoss": "false"} | start
    )
    assert [r[1] for r in rows(lenient)] == list(range(4, 10))


def test_jvm_reader_micro_batches_resume_from_checkpoint(
    spark: SparkSession, broker: InProcessBroker, tmp_path: Path
) -> None:
    bs = broker.bootstrap
    topic = new_topic(bs, 2)
    produce(bs, topic, simple_records(2, 20, "a"))

    def available_now(**options: str):
        query = (
            read(spark, native(broker) | {"subscribe": topic} | options, streaming=True)
            .select("partition", "offset", "key", "value")
            .writeStream.format("parquet")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(QUERY_TIMEOUT_S), "availableNow query did not finish"
        assert query.exception() is None
        return query

    q = available_now(startingOffsets="earliest", maxOffsetsPerTrigger="15")
    # 15 shared by backlog size, floored per partition (spark-sql-kafka's split): 7 + 7 a batch
    assert [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]] == [14, 14, 12]
    produce(bs, topic, simple_records(2, 10, "b"))
    available_now()  # the checkpoint's offsets: the new records once each
    got = rows(spark.read.parquet(str(tmp_path / "out")))
    assert got == [(p, o, k, v) for p, o, k, v, *_ in read_log(bs, topic)]


def _wait_rows(count, want: int) -> int:
    for _ in range(WAIT_ROUNDS):
        n = count()
        if n >= want:
            return n
        time.sleep(0.2)
    return count()


def test_jvm_reader_real_time_mode(
    spark: SparkSession, broker: InProcessBroker, tmp_path: Path
) -> None:
    bs = broker.bootstrap
    topic = new_topic(bs, 2)
    produce(bs, topic, simple_records(2, 5, "before"))
    out = tmp_path / "rows"
    out.mkdir()

    class RowFiles:  # defined here: cloudpickle ships it by value to the Python workers
        """foreach sink (real-time mode's allowlist has no memory sink): a JSON line per row."""

        def __init__(self, directory: str) -> None:
            self.dir = directory

        def open(self, partition_id: int, epoch_id: int) -> bool:
            self.f = open(f"{self.dir}/{partition_id}-{epoch_id}-{os.getpid()}", "a")  # noqa: SIM115
            return True

        def process(self, row) -> None:
            self.f.write(json.dumps([row.partition, row.offset, row.value]) + "\n")
            self.f.flush()

        def close(self, error) -> None:
            self.f.close()

    query = (
        read(spark, native(broker) | {"subscribe": topic, "startingOffsets": "earliest"}, True)
        .selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
        .writeStream.foreach(RowFiles(str(out)))
        .outputMode("update")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(realTime="5 seconds")  # the least spark.sql.streaming.realTimeMode allows
        .start()
    )

    def written() -> list:
        return sorted(tuple(json.loads(line)) for p in out.iterdir() for line in p.open())

    try:
        assert _wait_rows(lambda: len(written()), 10) == 10
        produce(bs, topic, simple_records(2, 10, "during"))  # read as they come, batch after batch
        assert _wait_rows(lambda: len(written()), 30) == 30
        assert query.exception() is None
    finally:
        query.stop()
    assert written() == sorted((p, o, v.decode()) for p, o, _, v, *_ in read_log(bs, topic))


def test_jvm_reader_continuous_processing(
    spark: SparkSession, broker: InProcessBroker, tmp_path: Path
) -> None:
    bs = broker.bootstrap
    topic = new_topic(bs, 1)  # a core per partition, and one left for the count below
    produce(bs, topic, simple_records(1, 5, "before"))
    query = (
        read(spark, native(broker) | {"subscribe": topic, "startingOffsets": "earliest"}, True)
        .selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
        .writeStream.format("memory")
        .queryName("jvm_continuous")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(continuous="1 second")
        .start()
    )
    table = "jvm_continuous"
    try:
        assert _wait_rows(lambda: spark.table(table).count(), 5) == 5
        produce(bs, topic, simple_records(1, 10, "during"))
        assert _wait_rows(lambda: spark.table(table).count(), 15) == 15
        assert query.exception() is None
        got = sorted((r.partition, r.offset, r.value) for r in spark.table(table).collect())
    finally:
        query.stop()
    assert got == [(p, o, v.decode()) for p, o, _, v, *_ in read_log(bs, topic)]
