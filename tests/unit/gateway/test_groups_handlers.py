"""The group API handlers at every version they register, through the wire codec, in-process.

Each call encodes a request, decodes it as the server does, runs the handler against a Broker over a
real store, encodes the response at the same version and decodes it again.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.groups.service import group_service
from rdmalog import errors as E
from tests.unit.gateway.handler_harness import HandlerHarness, versions

SUB = struct.pack(">hi", 0, 1) + b"\x00\x01t" + struct.pack(">i", -1)


class Harness(HandlerHarness):
    def __init__(self, tmp: Path) -> None:
        overrides = {
            "group.initial.rebalance.delay.ms": "0",
            "offsets.topic.num.partitions": "3",
            "log.segment.bytes": "1048576",
        }
        super().__init__(tmp, overrides, {})


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path)
    yield harness
    harness.close()


def join(h: Harness, version: int, group: str = "g", member_id: str = "") -> dict:
    body = {
        "group_id": group,
        "session_timeout": 10000,
        "rebalance_timeout": 10000,
        "member_id": member_id,
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": SUB}],
        "reason": None,
    }
    return h.call(11, version, body)


def joined_member(h: Harness, group: str = "g", version: int = 9) -> tuple[str, int]:
    first = join(h, version, group)
    if first["error_code"] == E.MEMBER_ID_REQUIRED:
        first = join(h, version, group, first["member_id"])
    assert first["error_code"] == E.NONE
    return first["member_id"], first["generation_id"]


def stable_member(h: Harness, group: str = "g") -> tuple[str, int]:
    member, generation = joined_member(h, group)
    body = {"group_id": group, "generation_id": generation, "member_id": member, "assignments": []}
    assert h.call(14, 5, body)["error_code"] == E.NONE
    return member, generation


@pytest.mark.parametrize("version", versions(10))
def test_find_coordinator(h: Harness, version: int):
    if version >= 4:
        r = h.call(10, version, {"key_type": 0, "coordinator_keys": ["a", "b"]})
        assert [(c["key"], c["port"], c["error_code"]) for c in r["coordinators"]] == [
            ("a", 9999, 0),
            ("b", 9999, 0),
        ]
    else:
        r = h.call(10, version, {"key": "a", "key_type": 0})
        assert (r["error_code"], r["host"], r["port"]) == (0, "127.0.0.1", 9999)
    assert "__consumer_offsets" in h.store.topics


@pytest.mark.parametrize("version", versions(11))
def test_join_group(h: Harness, version: int):
    first = join(h, version)
    if version >= 4:
        assert first["error_code"] == E.MEMBER_ID_REQUIRED and first["member_id"]
        first = join(h, version, member_id=first["member_id"])
    assert first["error_code"] == E.NONE
    assert first["generation_id"] == 1 and first["leader"] == first["member_id"]
    assert first["protocol_name"] == "range"
    assert [m["member_id"] for m in first["members"]] == [first["member_id"]]
    assert first["members"][0]["metadata"] == SUB
    unknown = join(h, version, member_id="nope")
    assert unknown["error_code"] == E.UNKNOWN_MEMBER_ID
    if version < 7:
        assert unknown["protocol_name"] == ""
    else:
        assert unknown["protocol_name"] is None


@pytest.mark.parametrize("version", versions(14))
def test_sync_group(h: Harness, version: int):
    member, generation = joined_member(h)
    body = {
        "group_id": "g",
        "generation_id": generation,
        "member_id": member,
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "assignments": [{"member_id": member, "assignment": b"ASSIGN"}],
    }
    r = h.call(14, version, body)
    assert (r["error_code"], r["assignment"]) == (0, b"ASSIGN")
    if version >= 5:
        assert (r["protocol_type"], r["protocol_name"]) == ("consumer", "range")
    r = h.call(14, version, {**body, "generation_id": generation + 1})
    assert r["error_code"] == E.ILLEGAL_GENERATION


@pytest.mark.parametrize("version", versions(12))
def test_heartbeat(h: Harness, version: int):
    member, generation = joined_member(h)
    body = {"group_id": "g", "generation_id": generation, "member_id": member}
    assert h.call(12, version, body)["error_code"] == E.NONE
    assert h.call(12, version, {**body, "member_id": "x"})["error_code"] == E.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize("version", versions(13))
def test_leave_group(h: Harness, version: int):
    member, _ = joined_member(h)
    if version < 3:
        assert h.call(13, version, {"group_id": "g", "member_id": member})["error_code"] == 0
        assert h.call(13, version, {"group_id": "g", "member_id": member})["error_code"] == (
            E.UNKNOWN_MEMBER_ID
        )
    else:
        members = [{"member_id": member, "group_instance_id": None, "reason": None}]
        members.append({"member_id": "ghost", "group_instance_id": None, "reason": None})
        r = h.call(13, version, {"group_id": "g", "members": members})
        assert r["error_code"] == 0
        assert [m["error_code"] for m in r["members"]] == [0, E.UNKNOWN_MEMBER_ID]


@pytest.mark.parametrize("version", [0, 1])
def test_simple_consumer_commits_of_old_versions(h: Harness, version: int):
    """v0 (no generation, no member) and v1 (a commit timestamp) commit for a group nobody joined:
    what Kafka 0.8 clients do; every version reads them back."""
    part = {"partition_index": 0, "committed_offset": 7, "committed_metadata": "m"}
    if version == 1:
        part["commit_timestamp"] = 1_600_000_000_000
    body = {"group_id": "old", "generation_id_or_member_epoch": -1, "member_id": "", "topics": [
        {"name": "t", "partitions": [part]}
    ]}  # fmt: skip
    assert h.call(8, version, body)["topics"][0]["partitions"][0]["error_code"] == 0
    for fetch_version in (0, 1, 5):
        got = h.call(9, fetch_version, {"group_id": "old", "topics": [
            {"name": "t", "partition_indexes": [0]}
        ]})["topics"][0]["partitions"][0]  # fmt: skip
        assert (got["committed_offset"], got["metadata"], got["error_code"]) == (7, "m", 0)
    if version == 1:
        group = group_service(h.broker).coordinator.groups["old"]
        assert group.offsets[("t", 0)].commit_timestamp == 1_600_000_000_000


@pytest.mark.parametrize("version", [v for v in versions(8) if v >= 1])
def test_offset_commit_and_fetch(h: Harness, version: int):
    member, generation = stable_member(h)
    topic_id = h.store.topics["t"].topic_id
    topic_key = {"topic_id": topic_id} if version >= 10 else {"name": "t"}
    partitions = [
        {
            "partition_index": 1,
            "committed_offset": 33,
            "committed_leader_epoch": 4,
            "committed_metadata": "meta",
        },
        {"partition_index": 9, "committed_offset": 1, "committed_metadata": None},
    ]
    body = {
        "group_id": "g",
        "generation_id_or_member_epoch": generation,
        "member_id": member,
        "group_instance_id": None,
        "retention_time": -1,
        "topics": [{**topic_key, "partitions": partitions}],
    }
    r = h.call(8, version, body)
    assert r["topics"][0]["partitions"] == [
        {"partition_index": 1, "error_code": 0},
        {"partition_index": 9, "error_code": E.UNKNOWN_TOPIC_OR_PARTITION},
    ]
    fetch = h.call(9, 8, {"groups": [{"group_id": "g", "topics": None}], "require_stable": True})
    (part,) = fetch["groups"][0]["topics"][0]["partitions"]
    assert (part["committed_offset"], part["metadata"]) == (33, "meta")
    assert part["committed_leader_epoch"] == (4 if version >= 6 else -1)


@pytest.mark.parametrize("version", versions(9))
def test_offset_fetch(h: Harness, version: int):
    coordinator_result = h.call(
        8,
        8,
        {
            "group_id": "solo",
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {"partition_index": 0, "committed_offset": 5, "committed_metadata": "x"}
                    ],
                }
            ],
        },
    )
    assert coordinator_result["topics"][0]["partitions"][0]["error_code"] == 0
    topic_id = h.store.topics["t"].topic_id
    key = {"topic_id": topic_id} if version >= 10 else {"name": "t"}
    topics = [{**key, "partition_indexes": [0, 1]}]
    if version >= 8:
        groups = [
            {"group_id": "solo", "member_id": None, "member_epoch": -1, "topics": topics},
            {"group_id": "other", "member_id": None, "member_epoch": -1, "topics": None},
        ]
        r = h.call(9, version, {"groups": groups, "require_stable": False})
        solo, other = r["groups"]
        parts = solo["topics"][0]["partitions"]
        assert other["topics"] == [] and other["error_code"] == 0
    else:
        r = h.call(9, version, {"group_id": "solo", "topics": topics})
        parts = r["topics"][0]["partitions"]
    assert [(p["partition_index"], p["committed_offset"]) for p in parts] == [(0, 5), (1, -1)]
    assert parts[0]["metadata"] == "x"


@pytest.mark.parametrize("version", versions(15))
def test_describe_groups(h: Harness, version: int):
    member, generation = joined_member(h)
    h.call(
        14,
        5,
        {
            "group_id": "g",
            "generation_id": generation,
            "member_id": member,
            "assignments": [{"member_id": member, "assignment": b"A"}],
        },
    )
    r = h.call(15, version, {"groups": ["g", "missing"], "include_authorized_operations": False})
    g, missing = r["groups"]
    assert (g["group_state"], g["protocol_type"], g["protocol_data"]) == (
        "Stable",
        "consumer",
        "range",
    )
    m = g["members"][0]
    assert (m["member_id"], m["member_metadata"], m["member_assignment"]) == (member, SUB, b"A")
    assert m["client_id"] == "tester"
    assert missing["group_state"] == "Dead"
    assert missing["error_code"] == (E.GROUP_ID_NOT_FOUND if version >= 6 else 0)


@pytest.mark.parametrize("version", versions(16))
def test_list_groups(h: Harness, version: int):
    joined_member(h, "g1")
    r = h.call(16, version, {"states_filter": [], "types_filter": []})
    assert [(g["group_id"], g["protocol_type"]) for g in r["groups"]] == [("g1", "consumer")]
    if version >= 4:
        assert r["groups"][0]["group_state"] == "CompletingRebalance"
        r = h.call(16, version, {"states_filter": ["Stable"]})
        assert r["groups"] == []


@pytest.mark.parametrize("version", versions(42))
def test_delete_groups(h: Harness, version: int):
    joined_member(h, "busy")
    h.call(
        8,
        8,
        {
            "group_id": "idle",
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "topics": [
                {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1}]}
            ],
        },
    )
    r = h.call(42, version, {"groups_names": ["busy", "idle", "none"]})
    assert [(x["group_id"], x["error_code"]) for x in r["results"]] == [
        ("busy", E.NON_EMPTY_GROUP),
        ("idle", 0),
        ("none", E.GROUP_ID_NOT_FOUND),
    ]


def test_offset_delete(h: Harness):
    member, generation = stable_member(h)
    h.call(
        8,
        8,
        {
            "group_id": "g",
            "generation_id_or_member_epoch": generation,
            "member_id": member,
            "topics": [
                {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1}]},
            ],
        },
    )
    r = h.call(
        47, 0, {"group_id": "g", "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]}
    )
    assert r["error_code"] == 0
    assert r["topics"][0]["partitions"][0]["error_code"] == E.GROUP_SUBSCRIBED_TO_TOPIC
    r = h.call(47, 0, {"group_id": "nope", "topics": []})
    assert r["error_code"] == E.GROUP_ID_NOT_FOUND
