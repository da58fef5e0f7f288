"""Group administration through real admin clients: list, describe, offsets, delete."""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip("confluent_kafka")
pytest.importorskip("kafka")

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

GROUP_OVERRIDES = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "2"}


@pytest.fixture
def bootstrap(broker_factory) -> str:
    return broker_factory(overrides=GROUP_OVERRIDES).bootstrap


def _topic(admin: AdminClient, partitions: int = 3) -> str:
    name = f"admin-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)
    return name


def test_confluent_admin_offsets_list_describe_delete(bootstrap: str):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = _topic(admin)
    group = f"admin-{uuid.uuid4().hex[:6]}"
    wanted = [TopicPartition(topic, p, 10 + p) for p in range(3)]
    altered = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, wanted)])
    altered[group].result(timeout=30)

    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    got = listed[group].result(timeout=30).topic_partitions
    assert sorted((tp.partition, tp.offset) for tp in got) == [(0, 10), (1, 11), (2, 12)]

    groups = admin.list_consumer_groups().result(timeout=30)
    assert group in {g.group_id for g in groups.valid}
    desc = admin.describe_consumer_groups([group])[group].result(timeout=30)
    assert desc.state.name == "EMPTY" and desc.members == []

    admin.delete_consumer_groups([group])[group].result(timeout=30)
    groups = admin.list_consumer_groups().result(timeout=30)
    assert group not in {g.group_id for g in groups.valid}
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    assert listed[group].result(timeout=30).topic_partitions == []


def test_kafka_python_admin_offset_delete_and_describe_members(bootstrap: str):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition
    from kafka.admin import KafkaAdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = _topic(admin, 2)
    other = _topic(admin, 1)
    group = f"kp-{uuid.uuid4().hex[:6]}"
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )
    kp_admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        for _ in range(30):
            consumer.poll(timeout_ms=1000)
            if consumer.assignment():
                break
        assert consumer.assignment()
        consumer.commit({KpTopicPartition(topic, 0): _meta(5)})
        consumer.commit({KpTopicPartition(other, 0): _meta(7)})

        desc = kp_admin.describe_groups([group])[group]
        assert desc["group_state"] == "Stable"
        assert len(desc["members"]) == 1

        result = kp_admin.delete_group_offsets(
            group, [KpTopicPartition(topic, 0), KpTopicPartition(other, 0)]
        )
        errors = {tp.topic: err.__name__ for tp, err in result.items()}
        assert errors == {other: "NoError", topic: "GroupSubscribedToTopicError"}
        offsets = kp_admin.list_group_offsets(group)[group]
        assert {tp.topic for tp in offsets} == {topic}
    finally:
        consumer.close()
        kp_admin.close()


def _meta(offset: int):
    from kafka.structs import OffsetAndMetadata

    try:
        return OffsetAndMetadata(offset, "", -1)
    except TypeError:
        return OffsetAndMetadata(offset, "")
