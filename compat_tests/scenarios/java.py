"""Apache Kafka's Java client (kafka-clients 4.3) beyond round trips: a consumer group that commits
and a second member that resumes from the commits, the AdminClient, and the offset lookups
spark-sql-kafka makes (seekToBeginning/seekToEnd/position, offsetsForTimes, Admin.listOffsets).
Runs in a JVM through py4j (compat_tests/java.py); skipped without java or the jars."""

from __future__ import annotations

import time
from typing import Any

from compat_tests import clients, java
from compat_tests.common import (
    TIMEOUT_S,
    Deadline,
    compare,
    create_topic,
    make_records,
    now_ms,
    unique_topic,
)
from compat_tests.scenarios import scenario

PARTITIONS = 3
COUNT = 30


def _java_error(exc: BaseException) -> str:
    """The Java exception class behind a py4j error (an ExecutionException's cause if wrapped)."""
    jexc = getattr(exc, "java_exception", None)
    if jexc is None:
        raise exc
    cause = jexc.getCause() if jexc.getClass().getSimpleName() == "ExecutionException" else None
    return (cause or jexc).getClass().getSimpleName()


@scenario("java-group-commit-resume-and-admin", "java")
def group_commit_and_resume(bootstrap: str) -> None:
    """subscribe() through the group coordinator, every record once, commitSync(); a second member
    of the group starts from the commits (only a record produced later), committed() agrees."""
    topic = unique_topic("java-group")
    create_topic(bootstrap, topic, PARTITIONS)
    sent = make_records(COUNT, PARTITIONS, "java-group")
    java.java_produce(bootstrap, topic, sent, "lz4")
    group = f"compat-java-group-{topic[-6:]}"
    first = java.consumer(bootstrap, group_id=group)
    try:
        first.subscribe([topic])
        compare(sent, java.poll(first, len(sent)))
        first.commitSync()
    finally:
        first.close()
    late = make_records(1, 1, "java-late", now_ms())[0]
    java.java_produce(bootstrap, topic, [late])
    second = java.consumer(bootstrap, group_id=group)
    try:
        second.subscribe([topic])
        got = java.poll(second, 1)
        assert [(r.partition, r.offset, r.value) for r in got] == [(0, COUNT // 3, late.value)], got
        tps = {java.tp(topic, p) for p in range(PARTITIONS)}
        committed = second.committed(tps)
        assert sorted((t.partition(), committed[t].offset()) for t in tps) == [
            (p, COUNT // PARTITIONS) for p in range(PARTITIONS)
        ]
    finally:
        second.close()
    _group_admin(bootstrap, group, topic)
    # what the Java producers wrote reads the same through librdkafka
    compare([*sent, late], clients.ck_consume(bootstrap, topic, PARTITIONS, len(sent) + 1))


def _group_admin(bootstrap: str, group: str, topic: str) -> None:
    """What kafka-consumer-groups.sh does: list groups, describe one, list its committed offsets,
    delete it (it is empty now)."""
    adm = java.admin(bootstrap)
    try:
        listed = java.wait(adm.listConsumerGroups().all())
        assert group in {g.groupId() for g in listed}, f"{group} not listed"
        desc = java.wait(adm.describeConsumerGroups([group]).all())[group]
        assert desc.groupState().toString() == "Empty" and desc.members().isEmpty(), desc.toString()
        offsets = java.wait(adm.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata())
        got = sorted((t.partition(), offsets[t].offset()) for t in offsets.keySet())
        assert got == [(p, COUNT // PARTITIONS) for p in range(PARTITIONS)], (
            got
        )  # the first commits
        java.wait(adm.deleteConsumerGroups([group]).all())
        listed = java.wait(adm.listConsumerGroups().all())
        assert group not in {g.groupId() for g in listed}, f"{group} still listed after delete"
    finally:
        adm.close()


@scenario("java-admin-client", "java")
def admin_client(bootstrap: str) -> None:
    """createTopics (with a config), TopicExistsException, describeTopics, describeConfigs,
    describeCluster, listTopics, deleteTopics."""
    j = java.jvm()
    adm = java.admin(bootstrap)
    topic = unique_topic("java-admin")
    try:
        new = j.org.apache.kafka.clients.admin.NewTopic(
            topic, PARTITIONS, j.java.lang.Short.valueOf("1")
        )
        new.configs({"retention.ms": "3600000"})
        java.wait(adm.createTopics([new]).all())
        try:
            java.wait(adm.createTopics([new]).all())
        except Exception as exc:  # py4j wraps the Java ExecutionException
            assert _java_error(exc) == "TopicExistsException", _java_error(exc)
        else:
            raise AssertionError("creating an existing topic succeeded")
        desc = java.wait(adm.describeTopics([topic]).allTopicNames())[topic]
        assert desc.partitions().size() == PARTITIONS
        res = j.org.apache.kafka.common.config.ConfigResource(
            j.org.apache.kafka.common.config.ConfigResource.Type.TOPIC, topic
        )
        cfg = java.wait(adm.describeConfigs([res]).all())[res]
        assert cfg.get("retention.ms").value() == "3600000"
        cluster = adm.describeCluster()
        assert java.wait(cluster.nodes()).size() == 1 and java.wait(cluster.clusterId())
        assert topic in set(java.wait(adm.listTopics().names()))
        java.wait(adm.deleteTopics([topic]).all())
        deadline = Deadline()
        while topic in set(java.wait(adm.listTopics().names())) and deadline:
            time.sleep(0.1)
        assert topic not in set(java.wait(adm.listTopics().names()))
    finally:
        adm.close()


@scenario("java-spark-offset-lookups", "java")
def spark_offset_lookups(bootstrap: str) -> None:
    """What spark-sql-kafka asks before reading: Admin.listOffsets earliest/latest/forTimestamp and a
    consumer's seekToBeginning/seekToEnd/position, offsetsForTimes, beginning/endOffsets."""
    j = java.jvm()
    topic = unique_topic("java-offsets")
    create_topic(bootstrap, topic, 1)
    sent = make_records(12, 1, "java-offsets")
    java.java_produce(bootstrap, topic, sent)
    t0 = java.tp(topic, 0)
    spec = j.org.apache.kafka.clients.admin.OffsetSpec
    adm = java.admin(bootstrap)
    try:

        def listed(s: Any) -> int:
            return java.wait(adm.listOffsets({t0: s}).all())[t0].offset()

        assert listed(spec.earliest()) == 0 and listed(spec.latest()) == len(sent)
        assert listed(spec.forTimestamp(sent[5].timestamp)) == 5
    finally:
        adm.close()
    cons = java.consumer(bootstrap)
    try:
        cons.assign([t0])
        cons.seekToEnd([t0])
        assert cons.position(t0) == len(sent)
        cons.seekToBeginning([t0])
        assert cons.position(t0) == 0
        found = cons.offsetsForTimes({t0: sent[7].timestamp})
        assert found[t0].offset() == 7 and found[t0].timestamp() == sent[7].timestamp
        timeout = j.java.time.Duration.ofMillis(int(TIMEOUT_S * 1000))
        assert cons.beginningOffsets([t0], timeout)[t0] == 0
        assert cons.endOffsets([t0], timeout)[t0] == len(sent)
        cons.seek(t0, 9)
        assert [r.offset for r in java.poll(cons, 3)] == [9, 10, 11]
    finally:
        cons.close()
