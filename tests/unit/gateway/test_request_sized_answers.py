"""Answers that grow with the request (issue 20 item 2): encoded as built past a few dozen
elements, the same on the wire as a list; names repeated in one request answered as Kafka does, or
once where one repeated name would multiply a large answer."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.broker import RequestContext
from gateway.protocol import EncodedArray
from gateway.request_limits import Turns
from rdmalog.errors import INVALID_REQUEST
from tests.unit.gateway.handler_harness import REGISTRY, HandlerHarness


@pytest.fixture
def h(tmp_path: Path) -> Iterator[HandlerHarness]:
    harness = HandlerHarness(tmp_path, {}, {})
    yield harness
    harness.close()


def test_many_keys_are_encoded_as_built(h: HandlerHarness) -> None:
    keys = [f"group-{i}" for i in range(2000)]
    request = {"key_type": 0, "coordinator_keys": keys}
    ctx = RequestContext(h.broker, 10, 4, 7, "tester", None)
    raw = h.loop.run_until_complete(REGISTRY[10].handler(ctx, request))
    assert isinstance(raw["coordinators"], EncodedArray) and raw["coordinators"].count == 2000
    answer = h.call(10, 4, request)
    assert [c["key"] for c in answer["coordinators"]] == keys
    assert {c["error_code"] for c in answer["coordinators"]} == {0}


def test_list_offsets_duplicates_are_invalid(h: HandlerHarness) -> None:
    part = {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}
    body = {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": "t", "partitions": [part, {**part, "partition_index": 1}, part]}
    ]}  # fmt: skip
    codes = [p["error_code"] for p in h.call(2, 7, body)["topics"][0]["partitions"]]
    assert codes == [INVALID_REQUEST, 0, INVALID_REQUEST]


def test_metadata_names_each_topic_once(h: HandlerHarness) -> None:
    body = {"topics": [{"name": "t", "topic_id": None}] * 500, "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}  # fmt: skip
    assert [t["name"] for t in h.call(3, 12, body)["topics"]] == ["t"]


def test_describe_configs_answers_a_resource_once(h: HandlerHarness) -> None:
    res = {"resource_type": 2, "resource_name": "t", "configuration_keys": None}
    body = {"resources": [res] * 3, "include_synonyms": False, "include_documentation": False}
    results = h.call(32, 4, body)["results"]
    assert results[0]["error_code"] == 0 and len(results[0]["configs"]) > 10
    assert [r["error_code"] for r in results[1:]] == [INVALID_REQUEST] * 2
    assert results[1]["configs"] == []


def test_describe_groups_answers_a_group_once(h: HandlerHarness) -> None:
    groups = h.call(15, 5, {"groups": ["g", "g"], "include_authorized_operations": False})["groups"]
    assert [g["error_code"] for g in groups] == [0, INVALID_REQUEST]


def test_turns_give_the_loop_a_turn() -> None:
    """A long loop with Turns lets a callback scheduled meanwhile run before it ends."""

    async def main() -> tuple[int, int]:
        ran_at: list[int] = []
        loop = asyncio.get_running_loop()
        done = 0
        loop.call_soon(lambda: ran_at.append(done))
        turns = Turns()
        for i in range(2_000_000):
            done = i
            if turns.due():
                await turns.take()
                if ran_at:
                    break
        return ran_at[0], done

    ran, stopped = asyncio.run(main())
    assert ran < 2_000_000 - 1 and stopped < 2_000_000 - 1
