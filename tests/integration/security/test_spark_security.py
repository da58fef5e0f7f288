"""The Spark source with spark-sql-kafka's security options (`kafka.security.protocol`,
`kafka.sasl.*`, `kafka.ssl.*` with the Java client's names) reads and writes a SASL_SSL listener;
options with no equivalent are refused by name."""

from __future__ import annotations

import os
import sys
import uuid

import pytest

from rdmalog.spark.options import OptionError, parse_connection
from tests.integration.security.conftest import ADMIN

BS = {"kafka.bootstrap.servers": "127.0.0.1:9093"}
JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="s3";'


def test_java_names_become_librdkafka_settings():
    conf = parse_connection(
        BS
        | {
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": JAAS,
            "kafka.ssl.truststore.type": "PEM",
            "kafka.ssl.truststore.location": "/etc/kafka/ca.pem",
            "kafka.ssl.keystore.type": "PEM",
            "kafka.ssl.keystore.location": "/etc/kafka/client.pem",
            "kafka.ssl.key.password": "k",
            "kafka.ssl.endpoint.identification.algorithm": "",
        }
    ).client_conf
    assert conf == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": "s3",
        "ssl.ca.location": "/etc/kafka/ca.pem",
        "ssl.certificate.location": "/etc/kafka/client.pem",
        "ssl.key.location": "/etc/kafka/client.pem",
        "ssl.key.password": "k",
        "ssl.endpoint.identification.algorithm": "none",
    }


@pytest.mark.parametrize(
    "options,named",
    [
        ({"kafka.ssl.truststore.location": "/x.jks", "kafka.ssl.truststore.type": "JKS"}, "kafka.ssl.truststore.location"),
        ({"kafka.sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required;"}, "kafka.sasl.jaas.config"),
        ({"kafka.sasl.jaas.config": "not jaas"}, "kafka.sasl.jaas.config"),
        ({"kafka.sasl.kerberos.service.name": "kafka"}, "kafka.sasl.kerberos.service.name"),
    ],
)  # fmt: skip
def test_no_equivalent_is_refused_by_name(options, named):
    with pytest.raises(OptionError, match=named):
        parse_connection(BS | options)


def test_spark_reads_and_writes_sasl_ssl(secure_broker, tmp_path):
    pytest.importorskip("pyspark", minversion="4.2")
    pytest.importorskip("pyarrow")
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from pyspark.sql import SparkSession

    import rdmalog.spark

    broker = secure_broker
    topic = f"spark-sec-{uuid.uuid4().hex[:6]}"
    settings = broker.sasl("SASL_SSL", ADMIN)
    admin = AdminClient(settings)
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    producer = Producer(settings)
    for i in range(10):
        producer.produce(topic, f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    producer.close()

    options = {
        "kafka.bootstrap.servers": broker.listeners["SASL_SSL"],
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        f'required username="{ADMIN[0]}" password="{ADMIN[1]}";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(broker.pki.ca.pem),
    }
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("rdmalog-security-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    try:
        rdmalog.spark.register(spark)
        reader = spark.read.format("rdmalog").option("subscribe", topic)
        for k, v in options.items():
            reader = reader.option(k, v)
        values = sorted(bytes(r.value) for r in reader.load().select("value").collect())
        assert values == sorted(f"v{i}".encode() for i in range(10))
        out_topic = f"{topic}-out"
        admin.create_topics([NewTopic(out_topic, 1, 1)])[out_topic].result(30)
        writer = spark.createDataFrame([(b"w1",), (b"w2",)], "value binary").write.format("rdmalog")
        for k, v in options.items():
            writer = writer.option(k, v)
        writer.option("topic", out_topic).mode("append").save()
        reader = spark.read.format("rdmalog").option("subscribe", out_topic)
        for k, v in options.items():
            reader = reader.option(k, v)
        assert sorted(bytes(r.value) for r in reader.load().select("value").collect()) == [
            b"w1",
            b"w2",
        ]
    finally:
        spark.stop()
