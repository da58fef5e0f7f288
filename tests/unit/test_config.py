"""Broker and topic configuration: Kafka names, defaults, synonyms, properties files, validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdmalog.config import LONG_MAX, BrokerConfig, ConfigSource, TopicConfig
from rdmalog.config_text import Listener, listener_host_port, parse_listeners, parse_properties
from rdmalog.errors import InvalidConfigError


def test_kafka_defaults() -> None:
    c = BrokerConfig.from_sources(None, {})
    assert c.log_segment_bytes == 1073741824
    assert c.log_retention_ms == 168 * 3_600_000
    assert c.log_roll_ms == 168 * 3_600_000
    assert c.log_retention_bytes == -1
    assert c.log_retention_check_interval_ms == 300000
    assert c.log_flush_interval_messages == LONG_MAX
    assert c.log_flush_interval_ms == LONG_MAX
    assert c.message_max_bytes == 1048588
    assert c.socket_request_max_bytes == 104857600
    assert c.log_index_interval_bytes == 4096
    assert c.log_message_timestamp_type == "CreateTime"
    assert c.num_partitions == 1 and c.auto_create_topics_enable is True
    assert c.default_replication_factor == 1 and c.min_insync_replicas == 1
    assert c.offsets_topic_num_partitions == 50
    assert c.group_initial_rebalance_delay_ms == 3000
    assert c.zookeeper_connect is None
    assert c.log_dirs == [Path("/tmp/kafka-logs")]
    assert c.listeners == [Listener("PLAINTEXT", "", 9092)]


def test_properties_file_syntax(tmp_path: Path) -> None:
    text = (
        "# a comment\n"
        "! another comment\n"
        "   \n"
        "broker.id=3\n"
        "log.dirs : /data/a,\\\n"
        "           /data/b\n"
        "num.partitions   4\n"
        "listeners=PLAINTEXT://127.0.0.1:9093\n"
        "log.retention.minutes=5\n"
        "zookeeper.connect=zk1:2181\\,zk2:2181\n"
        "message.max.bytes=\\u0032000\n"
        "num.network.threads=3\n"
    )
    path = tmp_path / "server.properties"
    path.write_text(text)
    c = BrokerConfig.from_sources(path, {"num.partitions": "6"})
    assert c.node_id == 3 and c.broker_id == 3
    assert c.log_dirs == [Path("/data/a"), Path("/data/b")]
    assert c.num_partitions == 6  # overrides win over the file
    assert c.log_retention_ms == 5 * 60_000
    assert c.zookeeper_connect == "zk1:2181,zk2:2181"
    assert c.message_max_bytes == 2000
    assert listener_host_port(c.get("listeners")) == ("127.0.0.1", 9093)


def test_parse_properties_separators() -> None:
    props = parse_properties("a=1\nb: 2\nc 3\nd\\=x=4\ne=\nf = spaced value \n")
    assert props == {"a": "1", "b": "2", "c": "3", "d=x": "4", "e": "", "f": "spaced value "}


def test_synonyms_order_of_precedence() -> None:
    c = BrokerConfig.from_sources(
        None, {"log.retention.hours": "1", "log.retention.minutes": "2", "log.retention.ms": "3"}
    )
    assert c.log_retention_ms == 3
    assert BrokerConfig.from_sources(None, {"log.retention.ms": "-1"}).log_retention_ms == -1
    assert BrokerConfig.from_sources(None, {"log.roll.hours": "2"}).log_roll_ms == 7_200_000
    assert BrokerConfig.from_sources(None, {"log.dir": "/x"}).log_dirs == [Path("/x")]
    assert BrokerConfig.from_sources(None, {"node.id": "7"}).node_id == 7
    with pytest.raises(InvalidConfigError):
        BrokerConfig.from_sources(None, {"node.id": "7", "broker.id": "8"})


@pytest.mark.parametrize(
    "key,value",
    [
        ("log.segment.bytes", "abc"),
        ("log.segment.bytes", "10"),
        ("num.partitions", "0"),
        ("auto.create.topics.enable", "yes"),
        ("log.message.timestamp.type", "WallTime"),
        ("message.max.bytes", "99999999999"),
        ("listeners", "127.0.0.1:9092"),
        ("rdma.consumer.slots", "0"),
        ("rdma.consumer.slots", "4097"),
    ],
)
def test_bad_values_name_the_key(key: str, value: str) -> None:
    with pytest.raises(InvalidConfigError) as e:
        BrokerConfig.from_sources(None, {key: value})
    assert key in str(e.value) or "listener" in str(e.value)
    assert e.value.error_code == 40


def test_typo_keys_raise_and_known_ignored_keys_pass() -> None:
    with pytest.raises(InvalidConfigError, match="log.segment.bytes"):
        BrokerConfig.from_sources(None, {"log.segmnt.bytes": "1000"})
    c = BrokerConfig.from_sources(None, {"num.io.threads": "8", "listener.name.x.foo": "y"})
    assert c.num_partitions == 1


def test_describe_reports_sources(tmp_path: Path) -> None:
    path = tmp_path / "s.properties"
    path.write_text("num.partitions=3\n")
    rows = {r.name: r for r in BrokerConfig.from_sources(path, {}).describe()}
    assert rows["num.partitions"] == (
        "num.partitions",
        "3",
        False,
        ConfigSource.STATIC_BROKER_CONFIG,
    )
    assert (
        rows["log.segment.bytes"].is_default
        and rows["log.segment.bytes"].source == ConfigSource.DEFAULT_CONFIG
    )
    assert rows["auto.create.topics.enable"].value == "true"


def test_listeners() -> None:
    assert parse_listeners("PLAINTEXT://127.0.0.1:9092,SSL://[::1]:9093, INTERNAL://:0") == [
        Listener("PLAINTEXT", "127.0.0.1", 9092),
        Listener("SSL", "::1", 9093),
        Listener("INTERNAL", "", 0),
    ]
    with pytest.raises(InvalidConfigError):
        parse_listeners("PLAINTEXT://host:70000")
    c = BrokerConfig.from_sources(None, {"advertised.listeners": "PLAINTEXT://example:1234"})
    assert c.advertised_listeners == [Listener("PLAINTEXT", "example", 1234)]


def test_topic_config_defaults_come_from_the_broker() -> None:
    b = BrokerConfig.from_sources(
        None,
        {
            "log.segment.bytes": "5000",
            "log.retention.hours": "2",
            "log.message.timestamp.type": "LogAppendTime",
        },
    )
    t = TopicConfig.from_overrides(
        b, {"retention.bytes": "100", "cleanup.policy": "compact,delete"}
    )
    assert t.segment_bytes == 5000 and t.retention_ms == 7_200_000 and t.retention_bytes == 100
    assert t.message_timestamp_type == "LogAppendTime" and t.log_append_time
    assert t.cleanup_policy == ["compact", "delete"]
    assert t.max_message_bytes == 1048588 and t.index_interval_bytes == 4096
    assert (
        t.segment_index_bytes == 10485760
        and t.flush_messages == LONG_MAX
        and t.flush_ms == LONG_MAX
    )
    assert t.segment_ms == 168 * 3_600_000 and t.min_insync_replicas == 1
    assert t.overrides == {"retention.bytes": "100", "cleanup.policy": "compact,delete"}
    rows = {r.name: r for r in t.describe()}
    assert (
        rows["retention.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG
        and not rows["retention.bytes"].is_default
    )
    assert (
        rows["segment.bytes"].source == ConfigSource.STATIC_BROKER_CONFIG
        and rows["segment.bytes"].value == "5000"
    )
    assert rows["retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG
    assert rows["flush.messages"].source == ConfigSource.DEFAULT_CONFIG


@pytest.mark.parametrize(
    "key,value",
    [
        ("retention.ms", "soon"),
        ("segment.bytes", "1"),
        ("message.timestamp.type", "x"),
        ("cleanup.policy", "keep"),
    ],
)
def test_topic_bad_values(key: str, value: str) -> None:
    with pytest.raises(InvalidConfigError, match=key.replace(".", r"\.")):
        TopicConfig.from_overrides(BrokerConfig.from_sources(None, {}), {key: value})


def test_topic_unknown_name_and_alter() -> None:
    b = BrokerConfig.from_sources(None, {})
    with pytest.raises(InvalidConfigError, match="retention.mss"):
        TopicConfig.from_overrides(b, {"retention.mss": "1"})
    t = TopicConfig.from_overrides(b, {"retention.ms": "10", "segment.bytes": "2000"})
    t2 = t.altered({"retention.ms": None, "flush.messages": "1"})
    assert t2.overrides == {"segment.bytes": "2000", "flush.messages": "1"}
    assert t2.retention_ms == b.log_retention_ms
    t3 = t.altered({"flush.ms": "5"}, replace=True)
    assert t3.overrides == {"flush.ms": "5"}
    with pytest.raises(InvalidConfigError):
        t.altered({"nope": "1"})


def test_topic_synonyms_most_specific_first() -> None:
    b = BrokerConfig.from_sources(None, {"log.retention.hours": "2"})
    t = TopicConfig.from_overrides(b, {"retention.ms": "5"})
    assert [(r.name, r.value, r.source) for r in t.synonyms("retention.ms")] == [
        ("retention.ms", "5", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ("log.retention.hours", "2", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    ]
    assert [r.name for r in t.synonyms("segment.bytes")] == ["log.segment.bytes"]
    with pytest.raises(InvalidConfigError):
        t.synonyms("nope")
