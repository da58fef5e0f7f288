"""Dynamic broker configs in a cluster: a `<default>` change made through broker 1 is stored in
ZooKeeper as Kafka lays it out (/config/brokers/<default> and a /config/changes notification) and
takes effect on broker 2 (a larger record refused by the partition broker 2 leads); a per-broker
change reaches that broker only."""

from __future__ import annotations

import json

from compat_tests.cluster import BrokerCluster, wait_for
from tests.cluster.clients import create_topic, produce_body, raw_request

BROKER = 4
SET, DELETE = 0, 1
MESSAGE_TOO_LARGE = 10


def _alter(bootstrap: str, name: str, key: str, value: str | None) -> dict:
    body = {
        "resources": [
            {
                "resource_type": BROKER,
                "resource_name": name,
                "configs": [
                    {
                        "name": key,
                        "config_operation": DELETE if value is None else SET,
                        "value": value,
                    }
                ],
            }
        ],
        "validate_only": False,
    }
    return raw_request(bootstrap, 44, 1, body)["responses"][0]


def _effective(bootstrap: str, broker_id: int, key: str) -> tuple[str, int]:
    """(value, config_source) of `key` as broker `broker_id` (at `bootstrap`) describes itself."""
    body = {
        "resources": [
            {"resource_type": BROKER, "resource_name": str(broker_id), "configuration_keys": [key]}
        ],
        "include_synonyms": False,
        "include_documentation": False,
    }
    row = raw_request(bootstrap, 32, 4, body)["results"][0]["configs"][0]
    return row["value"], row["config_source"]


def _produce_to(cluster: BrokerCluster, topic: str, partition: int, size: int) -> int:
    leader = cluster.broker(cluster.leader(topic, partition))
    body = produce_body(topic, [b"x" * size], partition=partition)
    return raw_request(leader.bootstrap, 0, 9, body)["responses"][0]["partition_responses"][0][
        "error_code"
    ]


def test_default_through_broker_1_takes_effect_on_broker_2(module_cluster: BrokerCluster) -> None:
    cluster = module_cluster
    create_topic(cluster.bootstrap, "dyn", partitions=3)
    on_2 = next(p for p in range(3) if cluster.leader("dyn", p) == 2)
    assert _produce_to(cluster, "dyn", on_2, 5000) == 0
    b1, b2, b3 = (cluster.broker(i).bootstrap for i in (1, 2, 3))

    assert _alter(b1, "", "message.max.bytes", "3000")["error_code"] == 0
    data, _ = cluster.zk.get("/config/brokers/<default>")
    assert json.loads(data) == {"version": 1, "config": {"message.max.bytes": "3000"}}
    changes = [
        json.loads(cluster.zk.get(f"/config/changes/{c}")[0])
        for c in cluster.zk.get_children("/config/changes")
    ]
    assert {"version": 2, "entity_path": "brokers/<default>"} in changes
    wait_for(
        "broker 2 applies <default>", lambda: _effective(b2, 2, "message.max.bytes")[0] == "3000"
    )
    assert _effective(b2, 2, "message.max.bytes") == ("3000", 3)  # DYNAMIC_DEFAULT_BROKER_CONFIG
    assert _produce_to(cluster, "dyn", on_2, 5000) == MESSAGE_TOO_LARGE

    # broker 2's own value: over the default there, nowhere else
    assert _alter(b2, "2", "message.max.bytes", "6000")["error_code"] == 0
    assert json.loads(cluster.zk.get("/config/brokers/2")[0])["config"] == {
        "message.max.bytes": "6000"
    }
    assert _effective(b2, 2, "message.max.bytes") == ("6000", 2)  # DYNAMIC_BROKER_CONFIG
    assert _produce_to(cluster, "dyn", on_2, 5000) == 0
    assert _effective(b3, 3, "message.max.bytes") == ("3000", 3)
    # a read-only key is refused with Kafka's code, nothing written
    refused = _alter(b1, "", "log.dirs", "/tmp/elsewhere")
    assert refused["error_code"] == 42 and "Cannot update these configs dynamically" in str(
        refused["error_message"]
    )

    assert _alter(b2, "2", "message.max.bytes", None)["error_code"] == 0
    assert _alter(b3, "", "message.max.bytes", None)["error_code"] == 0
    wait_for(
        "broker 2 back to the built-in default",
        lambda: _effective(b2, 2, "message.max.bytes") == ("1048588", 5),
    )
