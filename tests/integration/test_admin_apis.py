"""Topic and broker administration through confluent-kafka's AdminClient, kafka-python's
KafkaAdminClient and the raw protocol: topics, partitions, configs (described with their sources,
altered incrementally and the legacy way, validated, persisted across a restart), DeleteRecords,
DescribeCluster, DescribeLogDirs and OffsetForLeaderEpoch."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("confluent_kafka")
pytest.importorskip("kafka")

import kafka  # noqa: E402
import kafka.errors as kerr  # noqa: E402
from batches import leader_epoch, log_file, split_batches  # noqa: E402
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)
from kafka.admin import ConfigResource as KpConfigResource  # noqa: E402
from kafka.admin import ConfigResourceType, KafkaAdminClient  # noqa: E402
from kafka.admin import NewPartitions as KpNewPartitions  # noqa: E402
from kafka.admin import NewTopic as KpNewTopic  # noqa: E402
from rawkafka import RawClient, list_offset, produce  # noqa: E402

from compat_tests.brokers import BrokerProcess  # noqa: E402
from compat_tests.common import TIMEOUT_S, Deadline  # noqa: E402
from rdmalog.store.records import Record, build_batch  # noqa: E402

# a broker key set on the command line: topics without an override inherit it (STATIC_BROKER_CONFIG)
OVERRIDES = {"log.retention.hours": "100", "num.partitions": "2"}
RETENTION_100H = str(100 * 3_600_000)
OFFSET_OUT_OF_RANGE = 1
MESSAGE_TOO_LARGE = 10
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_PARTITIONS = 37
INVALID_CONFIG = 40
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75


@pytest.fixture(scope="module")
def kbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module (some tests restart it; every test makes its own topics)."""
    tmp: Path = tmp_path_factory.mktemp("admin")
    broker = BrokerProcess(tmp / "data", OVERRIDES, log_dir=tmp)
    broker.start()
    yield broker
    broker.close()


@pytest.fixture
def admin(kbroker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": kbroker.bootstrap})


@pytest.fixture
def kp_admin(kbroker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=kbroker.bootstrap)
    yield client
    client.close()


def _name(prefix: str = "adm") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _create(admin: AdminClient, partitions: int = 1, config: dict | None = None) -> str:
    name = _name()
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(
        timeout=TIMEOUT_S
    )
    return name


def _describe(admin: AdminClient, rtype: ResourceType, name: str) -> dict:
    res = ConfigResource(rtype, name)
    return admin.describe_configs([res])[res].result(timeout=TIMEOUT_S)


def _produce(bootstrap: str, topic: str, n: int, partition: int = 0) -> None:
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, linger_ms=2)
    try:
        for i in range(n):
            producer.send(topic, value=b"v%d" % i, partition=partition)
        producer.flush(timeout=TIMEOUT_S)
    finally:
        producer.close(timeout=TIMEOUT_S)


def _head_batches(path: Path) -> list[bytes]:
    """The batches at the start of a segment file (preallocated to 1 GiB: read only its head)."""
    with open(path, "rb") as f:
        return split_batches(f.read(1 << 16))


def _partitions(admin: AdminClient, topic: str) -> int:
    return len(admin.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions)


# --- topics and partitions ---------------------------------------------------------------------


def test_confluent_topics_and_partitions(admin: AdminClient) -> None:
    topic = _create(admin, 1)
    fut = admin.create_partitions([NewPartitions(topic, 3)], validate_only=True)[topic]
    fut.result(timeout=TIMEOUT_S)
    assert _partitions(admin, topic) == 1
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(timeout=TIMEOUT_S)
    assert _partitions(admin, topic) == 3
    with pytest.raises(KafkaException) as info:
        admin.create_partitions([NewPartitions(topic, 2)])[topic].result(timeout=TIMEOUT_S)
    assert info.value.args[0].code() == KafkaError.INVALID_PARTITIONS
    missing = _name("missing")
    with pytest.raises(KafkaException) as info:
        admin.create_partitions([NewPartitions(missing, 2)])[missing].result(timeout=TIMEOUT_S)
    assert info.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    admin.delete_topics([topic])[topic].result(timeout=TIMEOUT_S)
    assert topic not in admin.list_topics(timeout=TIMEOUT_S).topics


def test_kafka_python_topics_and_partitions(kp_admin: KafkaAdminClient) -> None:
    topic = _name("kp")
    kp_admin.create_topics([KpNewTopic(topic, 1, 1, topic_configs={"retention.ms": "5555"})])
    kp_admin.create_partitions({topic: KpNewPartitions(4)})
    (desc,) = kp_admin.describe_topics([topic])
    assert len(desc["partitions"]) == 4
    with pytest.raises(kerr.InvalidPartitionsError):
        kp_admin.create_partitions({topic: KpNewPartitions(2)})
    kp_admin.delete_topics([topic])
    assert topic not in kp_admin.list_topics()


# --- configs -------------------------------------------------------------------------------------


def test_describe_configs_real_values_and_sources(admin: AdminClient) -> None:
    topic = _create(admin, config={"retention.ms": "12345", "cleanup.policy": "compact"})
    got = _describe(admin, ResourceType.TOPIC, topic)
    assert got["retention.ms"].value == "12345"
    assert got["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not got["retention.ms"].is_default and not got["retention.ms"].is_read_only
    assert got["cleanup.policy"].value == "compact"
    assert got["segment.bytes"].value == "1073741824"
    assert got["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert got["segment.bytes"].is_default
    # synonyms: the override, then the broker keys its default comes from
    syn = got["retention.ms"].synonyms
    assert syn["retention.ms"].value == "12345"
    assert "log.retention.hours" in syn
    # a topic without an override inherits the broker's static setting
    plain = _describe(admin, ResourceType.TOPIC, _create(admin))
    assert plain["retention.ms"].value == RETENTION_100H
    assert plain["retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value

    broker = _describe(admin, ResourceType.BROKER, "0")
    hours = broker["log.retention.hours"]
    assert hours.value == "100" and hours.source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert not hours.is_read_only  # a dynamic broker config
    assert broker["num.partitions"].value == "2" and broker["num.partitions"].is_read_only
    assert broker["message.max.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    with pytest.raises(KafkaException) as info:
        _describe(admin, ResourceType.TOPIC, _name("missing"))
    assert info.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_kafka_python_describe_configs_with_synonyms(
    admin: AdminClient, kp_admin: KafkaAdminClient
) -> None:
    topic = _create(admin, config={"retention.ms": "777"})
    res = [
        KpConfigResource(ConfigResourceType.TOPIC, topic, ["retention.ms", "segment.ms"]),
        KpConfigResource(ConfigResourceType.BROKER, "0", ["log.retention.hours"]),
    ]
    got = kp_admin.describe_configs(res, include_synonyms=True, config_filter="all")
    retention = got["topic"][topic]["retention.ms"]
    assert retention["value"] == "777" and retention["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert [(s["name"], s["value"], s["source"]) for s in retention["synonyms"]] == [
        ("retention.ms", "777", "DYNAMIC_TOPIC_CONFIG"),
        ("log.retention.hours", "100", "STATIC_BROKER_CONFIG"),
        ("log.retention.hours", "168", "DEFAULT_CONFIG"),
    ]
    assert got["topic"][topic]["segment.ms"]["config_source"] == "DEFAULT_CONFIG"
    assert got["topic"][topic]["segment.ms"]["config_type"] == "LONG"
    hours = got["broker"]["0"]["log.retention.hours"]
    assert hours["value"] == "100" and not hours["read_only"]
    assert [(s["name"], s["value"], s["source"]) for s in hours["synonyms"]] == [
        ("log.retention.hours", "100", "STATIC_BROKER_CONFIG"),
        ("log.retention.hours", "168", "DEFAULT_CONFIG"),
    ]


def _incremental(admin: AdminClient, topic: str, *entries: ConfigEntry, **kw: object) -> None:
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=list(entries))
    admin.incremental_alter_configs([res], **kw)[res].result(timeout=TIMEOUT_S)


def _op(name: str, value: str | None, op: AlterConfigOpType) -> ConfigEntry:
    return ConfigEntry(name, value, incremental_operation=op)


def test_alter_configs_validated_and_persisted(
    kbroker: BrokerProcess, admin: AdminClient, kp_admin: KafkaAdminClient
) -> None:
    topic = _create(admin, config={"segment.ms": "100000"})
    _incremental(
        admin,
        topic,
        _op("retention.ms", "999", AlterConfigOpType.SET),
        _op("cleanup.policy", "compact", AlterConfigOpType.APPEND),
        _op("segment.ms", None, AlterConfigOpType.DELETE),
    )
    got = _describe(admin, ResourceType.TOPIC, topic)
    assert got["retention.ms"].value == "999"
    assert got["cleanup.policy"].value == "delete,compact"
    assert got["segment.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    _incremental(admin, topic, _op("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT))
    assert _describe(admin, ResourceType.TOPIC, topic)["cleanup.policy"].value == "compact"

    # validate_only changes nothing; bad values and unknown keys are INVALID_CONFIG
    _incremental(admin, topic, _op("retention.ms", "1", AlterConfigOpType.SET), validate_only=True)
    for bad in (
        _op("retention.ms", "abc", AlterConfigOpType.SET),
        _op("retention.ms", "-5", AlterConfigOpType.SET),
        _op("cleanup.policy", "shred", AlterConfigOpType.APPEND),
        _op("no.such.config", "1", AlterConfigOpType.SET),
    ):
        with pytest.raises(KafkaException) as info:
            _incremental(admin, topic, bad)
        assert info.value.args[0].code() == KafkaError.INVALID_CONFIG, bad
    assert _describe(admin, ResourceType.TOPIC, topic)["retention.ms"].value == "999"

    # the legacy AlterConfigs replaces the whole set of overrides
    res = ConfigResource(ResourceType.TOPIC, topic, set_config={"max.message.bytes": "5000"})
    with pytest.warns(DeprecationWarning):
        admin.alter_configs([res])[res].result(timeout=TIMEOUT_S)
    got = _describe(admin, ResourceType.TOPIC, topic)
    assert got["max.message.bytes"].value == "5000"
    assert got["retention.ms"].value == RETENTION_100H
    assert got["cleanup.policy"].value == "delete"
    bad = ConfigResource(ResourceType.TOPIC, topic, set_config={"max.message.bytes": "x"})
    with pytest.raises(KafkaException) as info, pytest.warns(DeprecationWarning):
        admin.alter_configs([bad])[bad].result(timeout=TIMEOUT_S)
    assert info.value.args[0].code() == KafkaError.INVALID_CONFIG

    # kafka-python: incremental by default, legacy on request
    kp_res = KpConfigResource(ConfigResourceType.TOPIC, topic, {"segment.bytes": "2000000"})
    assert kp_admin.alter_configs([kp_res]) == {"topic": {topic: "OK"}}
    kp_res = KpConfigResource(ConfigResourceType.TOPIC, topic, {"flush.messages": "10"})
    assert kp_admin.alter_configs([kp_res], incremental=False) == {"topic": {topic: "OK"}}
    kp_bad = KpConfigResource(ConfigResourceType.TOPIC, topic, {"flush.messages": "0"})
    result = kp_admin.alter_configs([kp_bad], incremental=False)
    assert str(result["topic"][topic]).startswith("[Error 40] InvalidConfigurationError")
    # a broker key that cannot change at run time: refused with Kafka's code, nothing changes
    # (the dynamic ones: tests/integration/test_dynamic_broker_configs.py)
    bres = ConfigResource(
        ResourceType.BROKER,
        "0",
        incremental_configs=[
            _op("log.retention.hours", "1", AlterConfigOpType.SET),
            _op("num.partitions", "3", AlterConfigOpType.SET),
        ],
    )
    with pytest.raises(KafkaException) as info:
        admin.incremental_alter_configs([bres])[bres].result(timeout=TIMEOUT_S)
    assert info.value.args[0].code() == KafkaError.INVALID_REQUEST

    expected = {
        "max.message.bytes": "5000",
        "segment.bytes": "2000000",
        "flush.messages": "10",
        "retention.ms": RETENTION_100H,
    }
    got = _describe(admin, ResourceType.TOPIC, topic)
    assert {k: got[k].value for k in expected} == expected
    assert _raw_produce_size(kbroker, topic, 6000) == MESSAGE_TOO_LARGE  # the change applies
    assert _raw_produce_size(kbroker, topic, 1000) == 0
    kbroker.restart()
    assert _raw_produce_size(kbroker, topic, 6000) == MESSAGE_TOO_LARGE
    again = _describe(
        AdminClient({"bootstrap.servers": kbroker.bootstrap}), ResourceType.TOPIC, topic
    )
    assert {k: again[k].value for k in expected} == expected
    assert {k: again[k].source for k in expected} == {k: got[k].source for k in expected}


def _raw_produce_size(broker: BrokerProcess, topic: str, size: int) -> int:
    """The error code of producing one record of `size` bytes."""
    with RawClient(broker.bootstrap) as raw:
        return produce(raw, topic, 0, build_batch([Record(None, b"x" * size)]))["error_code"]


# --- DeleteRecords ---------------------------------------------------------------------------------


def test_delete_records_moves_the_log_start(kbroker: BrokerProcess, admin: AdminClient) -> None:
    topic = _create(admin, 2)
    _produce(kbroker.bootstrap, topic, 10, 0)
    _produce(kbroker.bootstrap, topic, 6, 1)
    tp0, tp1 = TopicPartition(topic, 0, 4), TopicPartition(topic, 1, -1)
    done = admin.delete_records([tp0, tp1])
    assert done[tp0].result(timeout=TIMEOUT_S).low_watermark == 4
    assert done[tp1].result(timeout=TIMEOUT_S).low_watermark == 6  # -1: the high watermark
    earliest = admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.earliest()})
    assert earliest[TopicPartition(topic, 0)].result(timeout=TIMEOUT_S).offset == 4
    with RawClient(kbroker.bootstrap) as raw:
        assert list_offset(raw, topic, 0, -2)["offset"] == 4
        assert list_offset(raw, topic, 0, -1)["offset"] == 10
    # beyond the high watermark: OFFSET_OUT_OF_RANGE; an earlier offset leaves it where it is
    beyond = TopicPartition(topic, 0, 11)
    with pytest.raises(KafkaException) as info:
        admin.delete_records([beyond])[beyond].result(timeout=TIMEOUT_S)
    assert info.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    back = TopicPartition(topic, 0, 2)
    assert admin.delete_records([back])[back].result(timeout=TIMEOUT_S).low_watermark == 4
    # an acknowledged deletion survives a crash of the broker
    kbroker.restart(signal.SIGKILL)
    with RawClient(kbroker.bootstrap) as raw:
        assert [list_offset(raw, topic, p, -2)["offset"] for p in (0, 1)] == [4, 6]

    # consumers seeking below the log start: reset (earliest) or OFFSET_OUT_OF_RANGE (none)
    consumer = Consumer(
        {
            "bootstrap.servers": kbroker.bootstrap,
            "group.id": _name("g"),
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 1)])
        first = _first_message(consumer)
        assert first.error() is None and first.offset() == 4
    finally:
        consumer.close()
    strict = Consumer(
        {
            "bootstrap.servers": kbroker.bootstrap,
            "group.id": _name("g"),
            "auto.offset.reset": "error",
        }
    )
    try:
        strict.assign([TopicPartition(topic, 0, 1)])
        msg = _first_message(strict)
        assert msg.error() is not None
        assert msg.error().code() == KafkaError._AUTO_OFFSET_RESET, msg.error()
    finally:
        strict.close()
    kp = kafka.KafkaConsumer(bootstrap_servers=kbroker.bootstrap, auto_offset_reset="none")
    try:
        kp.assign([kafka.TopicPartition(topic, 0)])
        kp.seek(kafka.TopicPartition(topic, 0), 2)
        with pytest.raises(kerr.OffsetOutOfRangeError):
            for _ in range(20):
                kp.poll(timeout_ms=500)
    finally:
        kp.close()


def _first_message(consumer: Consumer):  # noqa: ANN202 (a confluent Message)
    deadline = Deadline(TIMEOUT_S)
    while deadline:
        msg = consumer.poll(0.5)
        if msg is not None:
            return msg
    raise AssertionError("no message or error within the deadline")


def test_kafka_python_delete_records(kbroker: BrokerProcess, kp_admin: KafkaAdminClient) -> None:
    topic = _name("kpdel")
    kp_admin.create_topics([KpNewTopic(topic, 1, 1)])
    _produce(kbroker.bootstrap, topic, 8)
    result = kp_admin.delete_records({kafka.TopicPartition(topic, 0): 5})
    assert result[kafka.TopicPartition(topic, 0)]["low_watermark"] == 5
    with RawClient(kbroker.bootstrap) as raw:
        assert list_offset(raw, topic, 0, -2)["offset"] == 5


# --- cluster, log dirs, leader epochs ----------------------------------------------------------------


def test_describe_cluster(
    kbroker: BrokerProcess, admin: AdminClient, kp_admin: KafkaAdminClient
) -> None:
    cluster_id = _meta_properties(kbroker)["cluster.id"]
    desc = admin.describe_cluster().result(timeout=TIMEOUT_S)
    assert desc.cluster_id == cluster_id
    assert desc.controller.id == 0
    assert [(n.id, n.host, n.port) for n in desc.nodes] == [(0, kbroker.host, kbroker.port)]
    kp = kp_admin.describe_cluster()
    assert kp["cluster_id"] == cluster_id and kp["controller_id"] == 0
    assert [(b["broker_id"], b["host"], b["port"]) for b in kp["brokers"]] == [
        (0, kbroker.host, kbroker.port)
    ]


def _meta_properties(broker: BrokerProcess) -> dict[str, str]:
    text = (broker.data_dir / "meta.properties").read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and line[0] != "#")


def test_kafka_python_describe_log_dirs(
    kbroker: BrokerProcess, admin: AdminClient, kp_admin: KafkaAdminClient
) -> None:
    topic = _create(admin, 2)
    _produce(kbroker.bootstrap, topic, 5, 1)
    (answer,) = kp_admin.describe_log_dirs()
    assert answer["broker"] == 0
    (log_dir,) = answer["log_dirs"]
    assert log_dir["error_code"] == 0 and Path(log_dir["log_dir"]) == kbroker.data_dir
    assert log_dir["total_bytes"] >= log_dir["usable_bytes"] > 0
    sizes = {
        p["partition_index"]: p["partition_size"]
        for t in log_dir["topics"]
        if t["name"] == topic
        for p in t["partitions"]
    }
    on_disk = _head_batches(log_file(kbroker.data_dir, topic, 1))
    assert sizes == {0: 0, 1: sum(len(b) for b in on_disk)}
    (only,) = kp_admin.describe_log_dirs({topic: [1]})
    (only_dir,) = only["log_dirs"]
    assert [
        (t["name"], [p["partition_index"] for p in t["partitions"]]) for t in only_dir["topics"]
    ] == [(topic, [1])]


def _offset_for_epoch(raw: RawClient, topic: str, epoch: int, current: int = -1, version: int = 4):
    body = {
        "replica_id": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {"partition": 0, "current_leader_epoch": current, "leader_epoch": epoch}
                ],
            }
        ],
    }
    return raw.call(23, version, body)["topics"][0]["partitions"][0]


def _metadata_epoch(raw: RawClient, topic: str) -> int:
    resp = raw.call(3, 12, {"topics": [{"name": topic, "topic_id": None}]})
    return resp["topics"][0]["partitions"][0]["leader_epoch"]


def test_offset_for_leader_epoch(kbroker: BrokerProcess, admin: AdminClient) -> None:
    topic = _create(admin)
    _produce(kbroker.bootstrap, topic, 5)
    with RawClient(kbroker.bootstrap) as raw:
        assert _metadata_epoch(raw, topic) == 0
        for version in (2, 3, 4):
            got = _offset_for_epoch(raw, topic, 0, version=version)
            assert (got["error_code"], got["leader_epoch"], got["end_offset"]) == (0, 0, 5)
        missing = raw.call(
            23,
            4,
            {
                "replica_id": -1,
                "topics": [{"topic": _name("missing"), "partitions": [{"partition": 0}]}],
            },
        )
        assert missing["topics"][0]["partitions"][0]["error_code"] == UNKNOWN_TOPIC_OR_PARTITION

    # a log imported from Kafka brings its epochs: epoch 3 started at offset 3 here
    kbroker.stop()
    checkpoint = kbroker.data_dir / f"{topic}-0" / "leader-epoch-checkpoint"
    checkpoint.write_text("0\n2\n0 0\n3 3\n")
    kbroker.start()
    _produce(kbroker.bootstrap, topic, 4)  # offsets 5..8, written in epoch 3
    batches = _head_batches(log_file(kbroker.data_dir, topic))
    assert {leader_epoch(b) for b in batches[-1:]} == {3}
    with RawClient(kbroker.bootstrap) as raw:
        assert _metadata_epoch(raw, topic) == 3
        answers = {e: _offset_for_epoch(raw, topic, e, current=3) for e in (0, 1, 2, 3, 4)}
        assert {e: (a["leader_epoch"], a["end_offset"]) for e, a in answers.items()} == {
            0: (0, 3),
            1: (0, 3),
            2: (0, 3),
            3: (3, 9),
            4: (-1, -1),
        }
        assert _offset_for_epoch(raw, topic, 0, current=2)["error_code"] == FENCED_LEADER_EPOCH
        assert _offset_for_epoch(raw, topic, 0, current=4)["error_code"] == UNKNOWN_LEADER_EPOCH
        # ListOffsets reports the epoch each answer belongs to
        assert list_offset(raw, topic, 0, -1)["leader_epoch"] == 3
        assert list_offset(raw, topic, 0, -2)["leader_epoch"] == 0
    # clients that track epochs keep consuming
    consumer = Consumer(
        {
            "bootstrap.servers": kbroker.bootstrap,
            "group.id": _name("g"),
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = []
        deadline = Deadline(TIMEOUT_S)
        while len(got) < 9 and deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append((msg.offset(), msg.leader_epoch()))
        assert [o for o, _ in got] == list(range(9))
        assert {e for o, e in got if o >= 5} == {3}
    finally:
        consumer.close()
    kp = kafka.KafkaConsumer(bootstrap_servers=kbroker.bootstrap, auto_offset_reset="none")
    try:
        tp = kafka.TopicPartition(topic, 0)
        kp.assign([tp])
        kp.seek(tp, 2)
        offsets: list[int] = []
        deadline = Deadline(TIMEOUT_S)
        while len(offsets) < 7 and deadline:
            offsets += [r.offset for r in kp.poll(timeout_ms=500).get(tp, [])]
        assert offsets == list(range(2, 9))
    finally:
        kp.close()
