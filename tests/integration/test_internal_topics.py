"""Internal topics stay: DeleteTopics and CreatePartitions of `__consumer_offsets` are refused, and
its records are not deleted (issue 20 item 5). The committed offsets survive a restart."""

from __future__ import annotations

import uuid

from rdmalog.store.records import Record, build_batch
from tests.integration.rawkafka import RawClient

OFFSETS = "__consumer_offsets"
INVALID_TOPIC_EXCEPTION = 17
INVALID_REQUEST = 42


def _commit(c: RawClient, group: str, topic: str, offset: int) -> None:
    body = {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "group_instance_id": None,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": offset,
                        "committed_leader_epoch": -1,
                        "committed_metadata": None,
                    }
                ],
            }
        ],
    }
    resp = c.call(8, 8, body)
    assert resp["topics"][0]["partitions"][0]["error_code"] == 0


def _committed(c: RawClient, group: str, topic: str) -> int:
    body = {
        "group_id": group,
        "topics": [{"name": topic, "partition_indexes": [0]}],
        "require_stable": False,
    }
    return c.call(9, 7, body)["topics"][0]["partitions"][0]["committed_offset"]


def test_offsets_topic_cannot_be_deleted_or_grown(broker_factory) -> None:
    broker = broker_factory(local=True)
    with RawClient(broker.bootstrap) as c:
        topics = {"topics": [{"name": "orders", "num_partitions": 1, "replication_factor": 1}]}
        assert c.call(19, 7, {**topics, "timeout_ms": 30000})["topics"][0]["error_code"] == 0
        assert c.call(10, 4, {"key_type": 0, "coordinator_keys": ["g"]})  # creates the topic
        _commit(c, "g", "orders", 42)
        offsets_id = c.call(3, 12, {"topics": [{"name": OFFSETS, "topic_id": None}]})["topics"][0][
            "topic_id"
        ]

        for version in (1, 4, 5):
            (res,) = c.call(20, version, {"topic_names": [OFFSETS], "timeout_ms": 30000})[
                "responses"
            ]
            assert res["error_code"] == INVALID_REQUEST, version
        zero = uuid.UUID(int=0)
        by_name = {"name": OFFSETS, "topic_id": zero}
        by_id = {"name": None, "topic_id": offsets_id}
        for entry in (by_name, by_id):
            (res,) = c.call(20, 6, {"topics": [entry], "timeout_ms": 30000})["responses"]
            assert res["error_code"] == INVALID_REQUEST
            assert "internal" in res["error_message"]

        grow = {"topics": [{"name": OFFSETS, "count": 60, "assignments": None}]}
        (res,) = c.call(37, 3, {**grow, "timeout_ms": 30000, "validate_only": False})["results"]
        assert res["error_code"] == INVALID_REQUEST and "internal" in res["error_message"]

        records = {
            "topics": [{"name": OFFSETS, "partitions": [{"partition_index": 0, "offset": -1}]}]
        }
        (topic,) = c.call(21, 2, {**records, "timeout_ms": 30000})["topics"]
        assert topic["partitions"][0]["error_code"] == INVALID_TOPIC_EXCEPTION

    broker.restart()
    with RawClient(broker.bootstrap) as c:
        assert c.call(10, 4, {"key_type": 0, "coordinator_keys": ["g"]})
        assert _committed(c, "g", "orders") == 42
        metadata = c.call(3, 12, {"topics": [{"name": OFFSETS, "topic_id": None}]})
        assert len(metadata["topics"][0]["partitions"]) == 50


def _produce(c: RawClient, version: int, topic: str) -> dict:
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout": 10000,
        "topic_data": [
            {
                "name": topic,
                "partition_data": [
                    {"index": 0, "records": bytes(build_batch([Record(b"k", b"v")]))}
                ],
            }
        ],
    }
    return c.call(0, version, body)["responses"][0]["partition_responses"][0]


def _end_offset(c: RawClient, topic: str) -> int:
    part = {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [{"name": topic, "partitions": [part]}],
    }
    return c.call(2, 7, body)["topics"][0]["partitions"][0]["offset"]


def test_produce_to_internal_topic_refused(broker) -> None:
    """A client's produce to __consumer_offsets is refused as Kafka 3.9's ReplicaManager refuses it
    (INVALID_TOPIC_EXCEPTION, nothing appended); only Kafka's admin client id may append."""
    with RawClient(broker.bootstrap) as c:
        assert c.call(10, 4, {"key_type": 0, "coordinator_keys": ["g"]})  # creates the topic
        before = _end_offset(c, OFFSETS)
        for version in (3, 9):
            res = _produce(c, version, OFFSETS)
            assert res["error_code"] == INVALID_TOPIC_EXCEPTION, version
            if version >= 8:
                assert res["error_message"] == f"Cannot append to internal topic {OFFSETS}"
        assert _end_offset(c, OFFSETS) == before
    with RawClient(broker.bootstrap, client_id="__admin_client") as admin:
        assert _produce(admin, 9, OFFSETS)["error_code"] == 0
        assert _end_offset(admin, OFFSETS) == before + 1


def test_duplicate_topics_in_delete_and_create_partitions(broker) -> None:
    with RawClient(broker.bootstrap) as c:
        topics = {"topics": [{"name": "dup", "num_partitions": 1, "replication_factor": 1}]}
        assert c.call(19, 7, {**topics, "timeout_ms": 30000})["topics"][0]["error_code"] == 0
        grow = {"topics": [{"name": "dup", "count": 2, "assignments": None}] * 2}
        results = c.call(37, 3, {**grow, "timeout_ms": 30000, "validate_only": False})["results"]
        assert [r["error_code"] for r in results] == [INVALID_REQUEST] * 2
        resp = c.call(20, 4, {"topic_names": ["dup", "dup"], "timeout_ms": 30000})
        assert [r["error_code"] for r in resp["responses"]] == [INVALID_REQUEST] * 2
        metadata = c.call(3, 12, {"topics": [{"name": "dup", "topic_id": None}] * 3})
        assert [t["name"] for t in metadata["topics"]] == ["dup"]  # each topic once, as Kafka
        assert len(metadata["topics"][0]["partitions"]) == 1
