"""Topic administration through confluent-kafka's AdminClient and kafka-python's
KafkaAdminClient: create, list, describe partitions, delete, and the errors for duplicates,
invalid names and unknown topics."""

from __future__ import annotations

import time

import kafka.errors as kerr
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewTopic
from kafka.admin import KafkaAdminClient

from compat_tests.common import TIMEOUT_S, Deadline, admin, unique_topic, wait_for_topic
from compat_tests.scenarios import scenario

# invalid per Kafka's Topic.validate: illegal characters, longer than 249, "." and ".."
INVALID_NAMES = ("bad name", "bad/name", "bad*name", "a" * 250, ".", "..")


def ck_error(future: object) -> KafkaError | None:
    try:
        future.result(timeout=TIMEOUT_S)  # type: ignore[attr-defined]
    except KafkaException as e:
        return e.args[0]
    return None


@scenario("confluent-admin-topics", "admin")
def confluent_admin_topics(bootstrap: str) -> None:
    client = admin(bootstrap)
    name = unique_topic("adm-ck")
    err = ck_error(client.create_topics([NewTopic(name, 2, 1)], request_timeout=15)[name])
    assert err is None, f"create_topics: {err}"
    wait_for_topic(client, name, 2)
    assert name in client.list_topics(timeout=10).topics, "created topic not listed"

    err = ck_error(client.create_topics([NewTopic(name, 2, 1)], request_timeout=15)[name])
    assert err is not None and err.code() == KafkaError.TOPIC_ALREADY_EXISTS, (
        f"duplicate create: {err}"
    )
    # still 2 partitions
    wait_for_topic(client, name, 2)

    for bad in INVALID_NAMES:
        err = ck_error(client.create_topics([NewTopic(bad, 1, 1)], request_timeout=15)[bad])
        assert err is not None and err.code() == KafkaError.TOPIC_EXCEPTION, (
            f"create {bad[:20]!r}: {err}"
        )
    listed = client.list_topics(timeout=10).topics
    assert not set(INVALID_NAMES) & set(listed), "an invalid topic was created"

    err = ck_error(client.delete_topics([name], request_timeout=15)[name])
    assert err is None, f"delete_topics: {err}"
    deadline = Deadline()
    while name in client.list_topics(timeout=10).topics and deadline:
        time.sleep(0.1)
    assert name not in client.list_topics(timeout=10).topics, "deleted topic still listed"

    err = ck_error(client.delete_topics([name], request_timeout=15)[name])
    assert err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART, (
        f"delete of a deleted topic: {err}"
    )


@scenario("kafka-python-admin-topics", "admin")
def kafka_python_admin_topics(bootstrap: str) -> None:
    client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(TIMEOUT_S * 1000))
    try:
        name = unique_topic("adm-kp")
        client.create_topics({name: {"num_partitions": 3, "replication_factor": 1}})
        deadline = Deadline()
        while name not in client.list_topics() and deadline:
            time.sleep(0.1)
        assert name in client.list_topics(), "created topic not listed"
        [desc] = client.describe_topics([name])
        assert desc["error_code"] == 0, desc
        assert sorted(p["partition_index"] for p in desc["partitions"]) == [0, 1, 2], desc

        try:
            client.create_topics({name: {"num_partitions": 3, "replication_factor": 1}})
        except kerr.TopicAlreadyExistsError:
            pass
        else:
            raise AssertionError("duplicate create_topics did not raise TopicAlreadyExistsError")

        for bad in INVALID_NAMES:
            try:
                client.create_topics({bad: {"num_partitions": 1, "replication_factor": 1}})
            except kerr.InvalidTopicError:
                pass
            else:
                raise AssertionError(f"create_topics({bad[:20]!r}) did not raise InvalidTopicError")
        assert not set(INVALID_NAMES) & set(client.list_topics()), "an invalid topic was created"

        client.delete_topics([name])
        deadline = Deadline()
        while name in client.list_topics() and deadline:
            time.sleep(0.1)
        assert name not in client.list_topics(), "deleted topic still listed"
        try:
            client.delete_topics([name])
        except kerr.UnknownTopicOrPartitionError:
            pass
        else:
            raise AssertionError("deleting a deleted topic did not raise UnknownTopicOrPartition")
    finally:
        client.close()
