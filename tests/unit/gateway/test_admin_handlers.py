"""The admin and producer-id API handlers at every version they register, through the wire codec,
in-process: each call encodes a request, decodes it as the server does, runs the handler against a
Broker over a real store, encodes the answer at the same version and decodes it again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rdmalog.store.records import Record, build_batch
from tests.unit.gateway.handler_harness import REGISTRY, HandlerHarness, versions

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


class Harness(HandlerHarness):
    def __init__(self, tmp: Path) -> None:
        overrides = {"log.retention.hours": "100", "log.segment.bytes": "1048576"}
        super().__init__(tmp, overrides, {"retention.ms": "1234"})

    def produce(self, n: int, partition: int = 0) -> None:
        plog = self.store.partition("t", partition)
        plog.append(build_batch([Record(None, b"v%d" % i) for i in range(n)]))


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path)
    yield harness
    harness.close()


def test_registered_ranges() -> None:
    ranges = {k: (REGISTRY[k].min_version, REGISTRY[k].max_version) for k in REGISTRY}
    assert ranges[21] == (0, 2) and ranges[22] == (0, 5) and ranges[23] == (0, 4)
    assert ranges[32] == (0, 4) and ranges[33] == (0, 2) and ranges[35] == (0, 4)
    assert ranges[37] == (0, 3) and ranges[44] == (0, 1) and ranges[60] == (0, 2)
    assert {k: ranges[k] for k in (24, 25, 26, 27, 28, 65, 66)} == {
        24: (0, 5), 25: (0, 4), 26: (0, 5), 27: (1, 1), 28: (0, 5), 65: (0, 0), 66: (0, 1)
    }  # fmt: skip


# --- InitProducerId, FindCoordinator for transactions -----------------------------------------------


@pytest.mark.parametrize("version", versions(22))
def test_init_producer_id(h: Harness, version: int) -> None:
    body = {"transactional_id": None, "transaction_timeout": 1000}
    first, second = h.call(22, version, body), h.call(22, version, body)
    assert first["error_code"] == 0 and first["producer_epoch"] == 0
    assert second["producer_id"] == first["producer_id"] + 1


def test_producer_ids_are_not_reused_after_a_restart(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    last = h.call(22, 4, {"transactional_id": None})["producer_id"]
    h.close()
    h = Harness(tmp_path)  # the same data dir: a restarted broker
    try:
        assert h.call(22, 4, {"transactional_id": None})["producer_id"] > last
    finally:
        h.close()


@pytest.mark.parametrize("version", versions(10))
def test_find_coordinator_of_transactional_ids(h: Harness, version: int) -> None:
    if version >= 4:
        resp = h.call(10, version, {"key_type": 1, "coordinator_keys": ["x"]})
        (answer,) = resp["coordinators"]
    else:
        answer = h.call(10, version, {"key": "x", "key_type": 1})
    assert (answer["error_code"], answer["node_id"], answer["port"]) == (0, 0, 9999)
    if version >= 1:  # v0 has no key type: the key is a group
        assert "__transaction_state" in h.store.topics


# --- DeleteRecords ------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(21))
def test_delete_records(h: Harness, version: int) -> None:
    h.produce(10)
    body = {
        "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "offset": 4}]},
            {"name": "t", "partitions": [{"partition_index": 1, "offset": 1}]},
            {"name": "nope", "partitions": [{"partition_index": 0, "offset": 0}]},
            {"name": "t", "partitions": [{"partition_index": 7, "offset": 0}]},
        ],
        "timeout": 1000,
    }
    resp = h.call(21, version, body)
    got = [(p["error_code"], p["low_watermark"]) for t in resp["topics"] for p in t["partitions"]]
    assert got == [(0, 4), (1, -1), (3, -1), (3, -1)]
    assert h.store.partition("t", 0).log_start_offset == 4
    body = {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "offset": -1}]}]}
    assert h.call(21, version, body)["topics"][0]["partitions"][0]["low_watermark"] == 10


# --- OffsetForLeaderEpoch -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [v for v in versions(23) if v >= 2])
def test_offset_for_leader_epoch(h: Harness, version: int) -> None:
    h.produce(3)
    plog = h.store.partition("t", 0)
    plog.append(build_batch([Record(None, b"x")] * 2), leader_epoch=2)  # epoch 2 starts at 3

    def ask(epoch: int, current: int = -1, topic: str = "t", partition: int = 0) -> tuple:
        part = {"partition": partition, "current_leader_epoch": current, "leader_epoch": epoch}
        body = {"replica_id": -1, "topics": [{"topic": topic, "partitions": [part]}]}
        p = h.call(23, version, body)["topics"][0]["partitions"][0]
        return p["error_code"], p["leader_epoch"], p["end_offset"]

    assert plog.leader_epoch == 2
    assert ask(0) == (0, 0, 3)
    assert ask(1) == (0, 0, 3)
    assert ask(2) == (0, 2, 5)
    assert ask(3) == (0, -1, -1)
    assert ask(0, current=2) == (0, 0, 3)
    assert ask(0, current=1)[0] == 74  # FENCED_LEADER_EPOCH
    assert ask(0, current=3)[0] == 75  # UNKNOWN_LEADER_EPOCH
    assert ask(0, topic="nope")[0] == 3
    assert ask(0, partition=5)[0] == 3
    # an empty partition is led in epoch 0 from its end (Kafka records that at leadership)
    assert ask(0, partition=1) == (0, 0, 0)
    assert ask(1, partition=1) == (0, -1, -1)


@pytest.mark.parametrize("version", [0, 1])
def test_offset_for_leader_epoch_before_current_epochs(h: Harness, version: int) -> None:
    """v0-v1 carry no current leader epoch to fence with; v0 answers no epoch either."""
    h.produce(3)
    h.store.partition("t", 0).append(build_batch([Record(None, b"x")] * 2), leader_epoch=2)
    body = {"topics": [{"topic": "t", "partitions": [{"partition": 0, "leader_epoch": 1}]}]}
    p = h.call(23, version, body)["topics"][0]["partitions"][0]
    assert (p["error_code"], p["end_offset"]) == (0, 3)
    assert p.get("leader_epoch") == (0 if version == 1 else None)


def test_metadata_and_list_offsets_report_the_logs_epoch(h: Harness) -> None:
    h.produce(3)
    h.store.partition("t", 0).append(build_batch([Record(None, b"x")]), leader_epoch=4)
    meta = h.call(3, 12, {"topics": [{"name": "t", "topic_id": None}]})
    assert [p["leader_epoch"] for p in meta["topics"][0]["partitions"]] == [4, 0]

    def listed(ts: int) -> tuple[int, int]:
        part = {"partition_index": 0, "current_leader_epoch": -1, "timestamp": ts}
        body = {"replica_id": -1, "topics": [{"name": "t", "partitions": [part]}]}
        p = h.call(2, 7, body)["topics"][0]["partitions"][0]
        return p["offset"], p["leader_epoch"]

    assert listed(-1) == (4, 4)
    assert listed(-2) == (0, 0)


# --- configs ----------------------------------------------------------------------------------------------


def _describe(h: Harness, version: int, rtype: int, name: str, keys=None, synonyms=True) -> dict:
    body = {
        "resources": [{"resource_type": rtype, "resource_name": name, "configuration_keys": keys}],
        "include_synonyms": synonyms,
        "include_documentation": False,
    }
    return h.call(32, version, body)["results"][0]


def test_describe_configs_v0_says_whether_a_value_is_the_default(h: Harness) -> None:
    rows = {c["name"]: c for c in _describe(h, 0, TOPIC, "t")["configs"]}
    assert (rows["retention.ms"]["value"], rows["retention.ms"]["is_default"]) == ("1234", False)
    assert rows["segment.jitter.ms"]["is_default"]
    assert "config_source" not in rows["retention.ms"] and "synonyms" not in rows["retention.ms"]


@pytest.mark.parametrize("version", [v for v in versions(32) if v >= 1])
def test_describe_configs(h: Harness, version: int) -> None:
    res = _describe(h, version, TOPIC, "t")
    assert res["error_code"] == 0
    rows = {c["name"]: c for c in res["configs"]}
    assert rows["retention.ms"]["value"] == "1234"
    assert rows["retention.ms"]["config_source"] == 1  # DYNAMIC_TOPIC_CONFIG
    assert [(s["name"], s["value"], s["source"]) for s in rows["retention.ms"]["synonyms"]] == [
        ("retention.ms", "1234", 1),
        ("log.retention.hours", "100", 4),
        ("log.retention.hours", "168", 5),
    ]
    assert rows["segment.bytes"]["value"] == "1048576"  # the broker's static setting
    assert rows["segment.bytes"]["config_source"] == 4
    assert rows["preallocate"]["synonyms"] == [
        {"name": "log.preallocate", "value": "false", "source": 5}
    ]
    assert rows["segment.jitter.ms"]["synonyms"] == [
        {"name": "segment.jitter.ms", "value": "0", "source": 5}
    ]
    if version >= 3:
        assert rows["retention.ms"]["config_type"] == 5  # LONG
        assert rows["cleanup.policy"]["config_type"] == 7  # LIST
    # only the requested keys; an empty list means all of them (as Kafka)
    only = _describe(h, version, TOPIC, "t", ["segment.ms", "no.such"])
    assert [c["name"] for c in only["configs"]] == ["segment.ms"]
    assert len(_describe(h, version, TOPIC, "t", [])["configs"]) == len(rows)
    plain = _describe(h, version, TOPIC, "t", ["retention.ms"], synonyms=False)
    assert plain["configs"][0]["synonyms"] == []

    broker = _describe(h, version, BROKER, "0", ["log.retention.hours", "num.partitions"])
    rows = {c["name"]: c for c in broker["configs"]}
    assert rows["log.retention.hours"]["value"] == "100"
    assert not rows["log.retention.hours"]["read_only"]  # a dynamic broker config
    assert rows["num.partitions"]["read_only"]
    assert [s["source"] for s in rows["log.retention.hours"]["synonyms"]] == [4, 5]
    assert rows["num.partitions"]["config_source"] == 5
    assert _describe(h, version, BROKER, "", ["num.partitions"])["error_code"] == 0

    assert _describe(h, version, TOPIC, "nope")["error_code"] == 3
    assert _describe(h, version, BROKER, "3")["error_code"] == 42
    assert _describe(h, version, BROKER_LOGGER, "0")["error_code"] == 42


def _alter(h: Harness, version: int, configs: list[dict], name: str = "t", **kw) -> dict:
    body = {
        "resources": [
            {"resource_type": kw.pop("rtype", TOPIC), "resource_name": name, "configs": configs}
        ],
        "validate_only": kw.pop("validate_only", False),
    }
    return h.call(33, version, body)["responses"][0]


@pytest.mark.parametrize("version", versions(33))
def test_legacy_alter_configs_replaces_the_overrides(h: Harness, version: int) -> None:
    assert (
        _alter(h, version, [{"name": "segment.ms", "value": "5000"}], validate_only=True)[
            "error_code"
        ]
        == 0
    )
    assert h.store.topics["t"].config.overrides == {"retention.ms": "1234"}
    res = _alter(h, version, [{"name": "segment.ms", "value": "5000"}])
    assert res["error_code"] == 0
    assert h.store.topics["t"].config.overrides == {"segment.ms": "5000"}
    for bad in ("abc", "0"):
        res = _alter(h, version, [{"name": "segment.ms", "value": bad}])
        assert res["error_code"] == 40 and res["error_message"], bad
    assert _alter(h, version, [{"name": "nope", "value": "1"}])["error_code"] == 40
    twice = [{"name": "segment.ms", "value": "1"}, {"name": "segment.ms", "value": "2"}]
    assert _alter(h, version, twice)["error_code"] == 42
    assert _alter(h, version, [{"name": "segment.ms", "value": None}])["error_code"] == 42
    assert _alter(h, version, [], name="nope")["error_code"] == 3
    assert _alter(h, version, [], name="0", rtype=BROKER)["error_code"] == 42
    assert h.store.topics["t"].config.overrides == {"segment.ms": "5000"}


def _incremental(h: Harness, version: int, configs: list, name: str = "t", **kw) -> dict:
    ops = [{"name": n, "config_operation": op, "value": v} for n, op, v in configs]
    body = {
        "resources": [
            {"resource_type": kw.pop("rtype", TOPIC), "resource_name": name, "configs": ops}
        ],
        "validate_only": kw.pop("validate_only", False),
    }
    return h.call(44, version, body)["responses"][0]


@pytest.mark.parametrize("version", versions(44))
def test_incremental_alter_configs(h: Harness, version: int) -> None:
    ops = [("segment.ms", SET, "5000"), ("retention.ms", DELETE, None)]
    assert _incremental(h, version, ops, validate_only=True)["error_code"] == 0
    assert h.store.topics["t"].config.overrides == {"retention.ms": "1234"}
    assert _incremental(h, version, ops)["error_code"] == 0
    assert h.store.topics["t"].config.overrides == {"segment.ms": "5000"}
    assert _incremental(h, version, [("cleanup.policy", APPEND, "compact")])["error_code"] == 0
    assert h.store.topics["t"].config.get("cleanup.policy") == ["delete", "compact"]
    assert _incremental(h, version, [("cleanup.policy", SUBTRACT, "delete")])["error_code"] == 0
    assert h.store.topics["t"].config.get("cleanup.policy") == ["compact"]
    for bad in (
        [("segment.ms", SET, "x")],
        [("segment.ms", APPEND, "1")],  # not a list
        [("cleanup.policy", APPEND, "shred")],
        [("nope", SET, "1")],
        [("segment.ms", 9, "1")],
    ):
        res = _incremental(h, version, bad)
        assert res["error_code"] in (40, 42) and res["error_message"], bad
    # a failing operation leaves the resource's other operations unapplied
    res = _incremental(h, version, [("segment.ms", SET, "7000"), ("retention.ms", SET, "x")])
    assert res["error_code"] == 40
    assert h.store.topics["t"].config.overrides == {
        "segment.ms": "5000",
        "cleanup.policy": "compact",
    }
    assert _incremental(h, version, [], name="nope")["error_code"] == 3
    twice = [("segment.ms", SET, "1"), ("segment.ms", DELETE, None)]
    assert _incremental(h, version, twice)["error_code"] == 42
    assert _incremental(h, version, [("segment.ms", SET, None)])["error_code"] == 42
    assert _incremental(h, version, [("x", SET, "1")], name="0", rtype=BROKER)["error_code"] == 42


# --- partitions, log dirs, cluster -------------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(37))
def test_create_partitions(h: Harness, version: int) -> None:
    def grow(count: int, assignments=None, validate_only=False, name: str = "t") -> dict:
        body = {
            "topics": [{"name": name, "count": count, "assignments": assignments}],
            "timeout": 1000,
            "validate_only": validate_only,
        }
        return h.call(37, version, body)["results"][0]

    assert grow(4, validate_only=True)["error_code"] == 0
    assert len(h.store.topics["t"].partitions) == 2
    assert grow(2)["error_code"] == 37
    assert grow(3, [{"broker_ids": [5]}])["error_code"] == 39
    assert grow(4, [{"broker_ids": [0]}])["error_code"] == 39  # one assignment for two partitions
    assert grow(3, [{"broker_ids": [0]}])["error_code"] == 0
    assert grow(4)["error_code"] == 0
    assert len(h.store.topics["t"].partitions) == 4
    assert grow(4, name="nope")["error_code"] == 3


@pytest.mark.parametrize("version", versions(35))
def test_describe_log_dirs(h: Harness, version: int) -> None:
    h.produce(5, partition=1)
    resp = h.call(35, version, {"topics": None})
    (result,) = resp["results"]
    assert result["error_code"] == 0 and result["log_dir"] == str(h.store.dir)
    sizes = {
        (t["name"], p["partition_index"]): p["partition_size"]
        for t in result["topics"]
        for p in t["partitions"]
    }
    assert sizes[("t", 0)] == 0 and sizes[("t", 1)] == h.store.partition("t", 1).size_in_bytes > 0
    if version >= 4:
        assert result["total_bytes"] >= result["usable_bytes"] > 0
    wanted = {
        "topics": [{"topic": "t", "partitions": [1, 9]}, {"topic": "nope", "partitions": [0]}]
    }
    (result,) = h.call(35, version, wanted)["results"]
    assert [
        (t["name"], [p["partition_index"] for p in t["partitions"]]) for t in result["topics"]
    ] == [("t", [1])]


@pytest.mark.parametrize("version", versions(60))
def test_describe_cluster(h: Harness, version: int) -> None:
    resp = h.call(60, version, {"include_cluster_authorized_operations": False, "endpoint_type": 1})
    assert resp["error_code"] == 0
    assert resp["cluster_id"] == h.store.cluster_id and resp["controller_id"] == 0
    assert [(b["broker_id"], b["host"], b["port"]) for b in resp["brokers"]] == [
        (0, "127.0.0.1", 9999)
    ]
    if version >= 1:
        other = h.call(60, version, {"endpoint_type": 2})
        assert other["error_code"] == 119 and other["brokers"] == []
