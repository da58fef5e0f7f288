"""Spark's own Kafka connector (`format("kafka")`, spark-sql-kafka-0-10) against the broker.

Needs the connector jars: set SPARK_KAFKA_JARS to their paths, comma-separated
(spark-sql-kafka-0-10_2.13 and spark-token-provider-kafka-0-10_2.13; see docs/spark.md). The
kafka-clients and commons-pool2 jars they need come from compat_tests/java/jars (the Java client
scenarios' pinned jars) unless SPARK_KAFKA_JARS names a kafka-clients jar itself. Skipped without
the connector: Maven Central serves it, and these machines cannot reach it.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

JARS_ENV = "SPARK_KAFKA_JARS"
JARS = [p.strip() for p in os.environ.get(JARS_ENV, "").split(",") if p.strip()]
QUERY_TIMEOUT_S = 180

pytestmark = pytest.mark.skipif(
    not JARS,
    reason=f"{JARS_ENV} is not set: format('kafka') needs the spark-sql-kafka-0-10_2.13 and "
    "spark-token-provider-kafka-0-10_2.13 jars, which Maven Central serves and these machines "
    "cannot reach; set it to their comma-separated paths",
)


def _classpath() -> list[str]:
    """The connector jars plus the Java client's (kafka-clients, commons-pool2, codecs)."""
    if any("kafka-clients" in Path(p).name for p in JARS):
        return JARS
    from compat_tests import java

    return JARS + java.jars()


pyspark = pytest.importorskip("pyspark", minversion="4.0")

from kafka import KafkaAdminClient, KafkaProducer  # noqa: E402
from kafka.admin import NewTopic  # noqa: E402
from pyspark import SparkContext  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402


def _fresh_jvm() -> None:
    """spark.jars reach the driver's classpath only when the JVM starts: drop an earlier one."""
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    if SparkContext._gateway is not None:  # started by another test module of this process
        SparkContext._gateway.shutdown()
        SparkContext._gateway = None
        SparkContext._jvm = None


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    from compat_tests.common import ScenarioSkip

    try:
        jars = _classpath()
    except ScenarioSkip as e:  # no kafka-clients jar to go with the connector
        pytest.skip(str(e))
    missing = [p for p in jars if not Path(p).is_file()]
    assert not missing, f"jars that do not exist: {missing}"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    _fresh_jvm()
    session = (
        SparkSession.builder.master("local[2]")
        .appName("spark-sql-kafka-compat")
        .config("spark.jars", ",".join(jars))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def topic(bootstrap: str) -> str:
    """A 2-partition topic holding 40 records written by kafka-python."""
    name = f"spark-kafka-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, 2, 1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        for i in range(40):
            producer.send(name, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 2)
        producer.flush(timeout=30)
    finally:
        producer.close()
    return name


def kafka_read(spark: SparkSession, bootstrap: str, topic: str):
    return (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )


def test_batch_read(spark: SparkSession, bootstrap: str, topic: str) -> None:
    rows = kafka_read(spark, bootstrap, topic).collect()
    assert sorted(r.value for r in rows) == sorted(f"v{i}".encode() for i in range(40))
    for p in (0, 1):
        assert sorted(r.offset for r in rows if r.partition == p) == list(range(20))


def test_batch_write_then_read(spark: SparkSession, bootstrap: str) -> None:
    name = f"spark-kafka-w-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, 2, 1)])
    finally:
        admin.close()
    data = [(f"k{i}", f"written {i}") for i in range(30)]
    spark.createDataFrame(data, "key string, value string").write.format("kafka").option(
        "kafka.bootstrap.servers", bootstrap
    ).option("topic", name).save()
    rows = kafka_read(spark, bootstrap, name).collect()
    assert sorted((r.key, r.value) for r in rows) == sorted(
        (k.encode(), v.encode()) for k, v in data
    )


def test_streaming_read_available_now(
    spark: SparkSession, bootstrap: str, topic: str, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "15")
        .load()
        .select("partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_TIMEOUT_S), "availableNow query did not finish"
    assert query.exception() is None
    rows = spark.read.parquet(str(out)).collect()
    assert sorted((r.partition, r.offset) for r in rows) == [
        (p, o) for p in (0, 1) for o in range(20)
    ]
