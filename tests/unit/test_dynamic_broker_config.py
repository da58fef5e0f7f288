"""Dynamic broker configs: Kafka's precedence across layers and synonyms, the keys that may change,
the data-dir file read back."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdmalog.config import BrokerConfig, ConfigSource, TopicConfig
from rdmalog.dynamic_broker_config import (
    DEFAULT_ENTITY,
    FileBrokerConfigs,
    check_keys,
    layered,
    merged,
)
from rdmalog.errors import InvalidConfigError, InvalidRequestError

DYN, DYN_DEFAULT, STATIC, DEFAULT = (
    ConfigSource.DYNAMIC_BROKER_CONFIG,
    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
    ConfigSource.STATIC_BROKER_CONFIG,
    ConfigSource.DEFAULT_CONFIG,
)


def test_precedence_per_broker_default_static_builtin() -> None:
    static = BrokerConfig.from_sources(overrides={"broker.id": "1", "message.max.bytes": "9000"})
    entities = {DEFAULT_ENTITY: {"message.max.bytes": "3000", "log.segment.bytes": "4096"}}
    cfg = layered(static, entities)
    assert cfg.get("message.max.bytes") == 3000 and cfg.get("log.segment.bytes") == 4096
    cfg = layered(static, {**entities, "1": {"message.max.bytes": "5000"}, "2": {"x": "y"}})
    assert cfg.get("message.max.bytes") == 5000
    assert [(r.value, r.source) for r in cfg.layer_rows("message.max.bytes")] == [
        ("5000", DYN),
        ("3000", DYN_DEFAULT),
        ("9000", STATIC),
    ]
    rows = {r.name: r for r in cfg.describe()}
    assert rows["message.max.bytes"].source == DYN
    assert rows["log.segment.bytes"].source == DYN_DEFAULT
    assert rows["num.partitions"].source == DEFAULT
    assert cfg.static is static and layered(cfg, {}).get("message.max.bytes") == 9000
    # a topic without an override inherits the most specific layer and names its source
    topic = TopicConfig.from_overrides(cfg, {})
    row = {r.name: r for r in topic.describe()}["max.message.bytes"]
    assert (row.value, row.source) == ("5000", DYN)
    assert [s.source for s in topic.synonyms("max.message.bytes")] == [
        DYN,
        DYN_DEFAULT,
        STATIC,
        DEFAULT,
    ]


def test_synonyms_keep_kafkas_order_across_layers() -> None:
    """A dynamic log.retention.hours does not beat a static log.retention.ms (as in Kafka)."""
    static = BrokerConfig.from_sources(overrides={"log.retention.ms": "60000"})
    cfg = layered(static, {"0": {"log.retention.hours": "1"}})
    assert cfg.log_retention_ms == 60000
    cfg = layered(static, {"0": {"log.retention.ms": "120000"}})
    assert cfg.log_retention_ms == 120000


def test_keys_and_values_refused() -> None:
    with pytest.raises(InvalidRequestError, match="dynamically: log.dirs, num.partitions"):
        check_keys(["message.max.bytes", "num.partitions", "log.dirs"])
    with pytest.raises(InvalidConfigError):
        check_keys(["no.such.key"])
    static = BrokerConfig.from_sources()
    with pytest.raises(InvalidConfigError, match="log.segment.bytes"):
        layered(static, {DEFAULT_ENTITY: {"log.segment.bytes": "10"}})


def test_file_store_merges_and_reads_back(tmp_path: Path) -> None:
    store = FileBrokerConfigs.in_data_dir(tmp_path)
    calls: list[int] = []
    store.add_listener(lambda: calls.append(1))
    store.alter("0", {"message.max.bytes": "3000", "max.connections": "10"}, False, lambda e: None)
    store.alter("0", {"max.connections": None}, False, lambda e: None)

    def refuse(_entities: dict) -> None:
        raise InvalidConfigError("no")

    with pytest.raises(InvalidConfigError):
        store.alter(DEFAULT_ENTITY, {"message.max.bytes": "1"}, False, refuse)
    assert calls == [1, 1]
    assert FileBrokerConfigs.in_data_dir(tmp_path).entities() == {
        "0": {"message.max.bytes": "3000"}
    }
    assert merged({"0": {"a": "1"}}, "0", {"b": "2"}, replace=True) == {"0": {"b": "2"}}
    assert merged({"0": {"a": "1"}}, "0", {"a": None}, replace=False) == {}
