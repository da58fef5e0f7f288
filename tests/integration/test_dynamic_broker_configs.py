"""Dynamic broker configs through real clients: confluent-kafka's AdminClient and kafka-python's
KafkaAdminClient alter a BROKER resource (this broker, and the cluster-wide `<default>` named ""),
the change takes effect at once (a lowered message.max.bytes refuses a larger record, a retention
default reaches a topic without an override), DescribeConfigs shows each value's source and synonyms,
the configs survive a restart, and read-only keys and bad values get Kafka's error codes."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("confluent_kafka")
pytest.importorskip("kafka")

from confluent_kafka import KafkaError, KafkaException, TopicPartition  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    OffsetSpec,
    ResourceType,
)
from kafka.admin import ConfigResource as KpConfigResource  # noqa: E402
from kafka.admin import ConfigResourceType, KafkaAdminClient  # noqa: E402
from rawkafka import RawClient, produce  # noqa: E402

from compat_tests.brokers import BrokerProcess  # noqa: E402
from compat_tests.common import TIMEOUT_S, Deadline  # noqa: E402
from rdmalog.store.records import Record, build_batch  # noqa: E402

MESSAGE_TOO_LARGE = 10
OVERRIDES = {"log.retention.check.interval.ms": "200", "log.retention.hours": "100"}


@pytest.fixture(scope="module")
def kbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    tmp: Path = tmp_path_factory.mktemp("dynconf")
    broker = BrokerProcess(tmp / "data", OVERRIDES, log_dir=tmp)
    broker.start()
    yield broker
    broker.close()


@pytest.fixture
def admin(kbroker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": kbroker.bootstrap})


def _create(admin: AdminClient, config: dict | None = None) -> str:
    name = f"dyn-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, 1, 1, config=config or {})])[name].result(timeout=TIMEOUT_S)
    return name


def _set_default(bootstrap: str, key: str, value: str | None) -> None:
    """The `<default>` entity (a BROKER resource named "", as kafka-configs.sh --entity-default
    sends it: neither client library can name it) through IncrementalAlterConfigs v1."""
    body = {
        "resources": [
            {
                "resource_type": 4,
                "resource_name": "",
                "configs": [{"name": key, "config_operation": int(value is None), "value": value}],
            }
        ],
        "validate_only": False,
    }
    with RawClient(bootstrap) as raw:
        answer = raw.call(44, 1, body)["responses"][0]
    assert answer["error_code"] == 0, answer


def _describe_default(bootstrap: str) -> dict[str, tuple[str, int]]:
    body = {
        "resources": [{"resource_type": 4, "resource_name": "", "configuration_keys": None}],
        "include_synonyms": True,
        "include_documentation": False,
    }
    with RawClient(bootstrap) as raw:
        result = raw.call(32, 4, body)["results"][0]
    assert result["error_code"] == 0, result
    return {c["name"]: (c["value"], c["config_source"]) for c in result["configs"]}


def _set(admin: AdminClient, broker: str, key: str, value: str | None, **kw: object) -> None:
    """SET (value None: DELETE) one key of a BROKER resource; raises KafkaException when refused."""
    op = AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET
    res = ConfigResource(
        ResourceType.BROKER,
        broker,
        incremental_configs=[ConfigEntry(key, value, incremental_operation=op)],
    )
    admin.incremental_alter_configs([res], **kw)[res].result(timeout=TIMEOUT_S)


def _describe(admin: AdminClient, rtype: ResourceType, name: str) -> dict:
    res = ConfigResource(rtype, name)
    return admin.describe_configs([res])[res].result(timeout=TIMEOUT_S)


def _produce_size(broker: BrokerProcess, topic: str, size: int) -> int:
    with RawClient(broker.bootstrap) as raw:
        return produce(raw, topic, 0, build_batch([Record(None, b"x" * size)]))["error_code"]


def _code(exc: pytest.ExceptionInfo) -> int:
    return exc.value.args[0].code()


def test_message_max_bytes_per_broker_and_default(
    kbroker: BrokerProcess, admin: AdminClient
) -> None:
    topic = _create(admin)
    assert _produce_size(kbroker, topic, 5000) == 0
    _set(admin, "0", "message.max.bytes", "4000")
    assert _produce_size(kbroker, topic, 5000) == MESSAGE_TOO_LARGE  # live, no restart
    row = _describe(admin, ResourceType.BROKER, "0")["message.max.bytes"]
    assert (row.value, row.source) == ("4000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert not row.is_read_only
    inherited = _describe(admin, ResourceType.TOPIC, topic)["max.message.bytes"]
    assert (inherited.value, inherited.source) == ("4000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)

    # the cluster-wide default: below the per-broker value until that is deleted
    _set_default(kbroker.bootstrap, "message.max.bytes", "3000")
    assert _describe(admin, ResourceType.BROKER, "0")["message.max.bytes"].value == "4000"
    assert _describe_default(kbroker.bootstrap) == {"message.max.bytes": ("3000", 3)}
    _set(admin, "0", "message.max.bytes", None)
    row = _describe(admin, ResourceType.BROKER, "0")["message.max.bytes"]
    assert (row.value, row.source) == ("3000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    assert _produce_size(kbroker, topic, 3500) == MESSAGE_TOO_LARGE

    kbroker.restart()  # kept in the data dir and read back before the store opens
    admin = AdminClient({"bootstrap.servers": kbroker.bootstrap})
    assert _produce_size(kbroker, topic, 3500) == MESSAGE_TOO_LARGE
    row = _describe(admin, ResourceType.BROKER, "0")["message.max.bytes"]
    assert (row.value, row.source) == ("3000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    _set_default(kbroker.bootstrap, "message.max.bytes", None)
    assert _produce_size(kbroker, topic, 5000) == 0
    row = _describe(admin, ResourceType.BROKER, "0")["message.max.bytes"]
    assert (row.value, row.source) == ("1048588", ConfigSource.DEFAULT_CONFIG.value)


def test_refused_keys_and_values(kbroker: BrokerProcess, admin: AdminClient) -> None:
    before = _describe(admin, ResourceType.BROKER, "0")
    # a key Kafka cannot change at run time, together with one it can: nothing changes
    res = ConfigResource(
        ResourceType.BROKER,
        "0",
        incremental_configs=[
            ConfigEntry("message.max.bytes", "2000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("num.partitions", "3", incremental_operation=AlterConfigOpType.SET),
        ],
    )
    with pytest.raises(KafkaException) as info:
        admin.incremental_alter_configs([res])[res].result(timeout=TIMEOUT_S)
    assert _code(info) == KafkaError.INVALID_REQUEST
    assert "Cannot update these configs dynamically: num.partitions" in str(info.value)
    with pytest.raises(KafkaException) as info:
        _set(admin, "0", "message.max.bytes", "lots")
    assert _code(info) == KafkaError.INVALID_CONFIG
    with pytest.raises(KafkaException) as info:
        _set(admin, "0", "log.segment.bytes", "10")  # below Kafka's minimum
    assert _code(info) == KafkaError.INVALID_CONFIG
    _set(admin, "0", "message.max.bytes", "2000", validate_only=True)  # checked, not applied
    after = _describe(admin, ResourceType.BROKER, "0")
    assert {k: c.value for k, c in after.items()} == {k: c.value for k, c in before.items()}


def test_kafka_python_incremental_and_legacy(kbroker: BrokerProcess) -> None:
    client = KafkaAdminClient(bootstrap_servers=kbroker.bootstrap)
    try:
        res = KpConfigResource(ConfigResourceType.BROKER, "0", {"max.connections.per.ip": "500"})
        assert client.alter_configs([res], raise_on_unknown=False) == {"broker": {"0": "OK"}}
        res = KpConfigResource(
            ConfigResourceType.BROKER, "0", {"log.cleaner.io.max.bytes.per.second": "1000000"}
        )
        assert client.alter_configs([res], raise_on_unknown=False, incremental=False) == {
            "broker": {"0": "OK"}
        }
        got = client.describe_configs(
            [KpConfigResource(ConfigResourceType.BROKER, "0")], include_synonyms=True
        )
        dynamic = {k: c["value"] for k, c in got["broker"]["0"].items()}
        synonyms = got["broker"]["0"]["max.connections.per.ip"]["synonyms"]
        assert [(s["value"], s["source"]) for s in synonyms] == [
            ("500", "DYNAMIC_BROKER_CONFIG"),  # the most specific first
            (str(2**31 - 1), "DEFAULT_CONFIG"),
        ]
        # legacy AlterConfigs replaces the entity's keys; kafka-python re-sends the others
        assert dynamic["max.connections.per.ip"] == "500"
        assert float(dynamic["log.cleaner.io.max.bytes.per.second"]) == 1e6
        bad = KpConfigResource(ConfigResourceType.BROKER, "0", {"log.dirs": "/tmp/x"})
        result = client.alter_configs([bad], raise_on_unknown=False)
        assert str(result["broker"]["0"]).startswith("[Error 42]")
        reset = KpConfigResource(ConfigResourceType.BROKER, "0", {})
        assert client.alter_configs([reset], raise_on_unknown=False, incremental=False) == {
            "broker": {"0": "OK"}
        }
    finally:
        client.close()


def test_retention_default_reaches_an_inheriting_topic(
    kbroker: BrokerProcess, admin: AdminClient
) -> None:
    topic = _create(admin, {"segment.bytes": "1024"})  # retention inherited from the broker
    with RawClient(kbroker.bootstrap) as raw:
        for _ in range(20):
            batch = build_batch([Record(None, b"y" * 200)])
            assert produce(raw, topic, 0, batch)["error_code"] == 0
    tp = TopicPartition(topic, 0)

    def log_start() -> int:
        found = admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(timeout=TIMEOUT_S)
        return found.offset

    assert log_start() == 0
    _set_default(kbroker.bootstrap, "log.retention.bytes", "1000")
    try:
        deadline = Deadline(TIMEOUT_S)
        while log_start() == 0 and deadline:
            time.sleep(0.1)
        assert log_start() > 0, "retention of the inheriting topic did not apply"
        row = _describe(admin, ResourceType.TOPIC, topic)["retention.bytes"]
        assert (row.value, row.source) == (
            "1000",
            ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value,
        )
    finally:
        _set_default(kbroker.bootstrap, "log.retention.bytes", None)
