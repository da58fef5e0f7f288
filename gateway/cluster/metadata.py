"""Metadata and DescribeCluster in cluster mode, answered from the broker's ClusterView (what the
ZooKeeper watches keep): live brokers, the controller, each partition's leader, leader epoch,
replicas, ISR and offline replicas, as Kafka's metadata cache answers them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # kazoo (the `cluster` extra) is imported only when cluster mode runs
    from rdmalog.cluster.view import ClusterView, TopicView

LEADER_NOT_AVAILABLE = 5

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


def brokers(view: ClusterView, listener: str | None = None) -> list[dict]:
    """Live brokers as Metadata broker entries (their client endpoint)."""
    out = []
    for broker_id, info in sorted(view.live_brokers().items()):
        if not info.endpoints:
            continue
        ep = info.endpoint(listener)
        out.append({"node_id": broker_id, "host": ep.host, "port": ep.port, "rack": info.rack})
    return out


def topic_entry(view: ClusterView, tv: TopicView) -> dict:
    """A Metadata topic entry: per partition the leader (or LEADER_NOT_AVAILABLE), its epoch, the
    replicas, the ISR and the replicas on brokers that are not live."""
    live = view.live_brokers()
    parts = []
    for p in sorted(tv.assignment.partitions):
        replicas = tv.replicas(p)
        state = tv.states.get(p)
        entry: dict[str, Any] = {
            "error_code": 0,
            "partition_index": p,
            "leader_id": -1,
            "leader_epoch": -1,
            "replica_nodes": replicas,
            "isr_nodes": [],
            "offline_replicas": [r for r in replicas if r not in live],
        }
        if state is not None:
            entry["leader_epoch"] = state.leader_epoch
            entry["isr_nodes"] = list(state.isr)
            if state.leader in live:
                entry["leader_id"] = state.leader
        if entry["leader_id"] == -1:
            entry["error_code"] = LEADER_NOT_AVAILABLE
        parts.append(entry)
    return {
        "error_code": 0,
        "name": tv.name,
        "topic_id": tv.assignment.topic_id,
        "is_internal": tv.name in INTERNAL_TOPICS,
        "partitions": parts,
    }


def describe_cluster_brokers(view: ClusterView, listener: str | None = None) -> list[dict]:
    return [
        {
            "broker_id": b["node_id"],
            "host": b["host"],
            "port": b["port"],
            "rack": b["rack"],
            "is_fenced": False,
        }
        for b in brokers(view, listener)
    ]


async def answer_metadata(ctx: Any, request: dict) -> dict:
    """Metadata (key 3) in cluster mode: the view's brokers, controller and topics; a missing topic
    is auto-created in ZooKeeper (LEADER_NOT_AVAILABLE until its leaders are elected)."""
    from gateway.broker import topic_name_error
    from gateway.cluster.admin import auto_create
    from rdmalog.errors import (
        INVALID_TOPIC_EXCEPTION,
        UNKNOWN_TOPIC_ID,
        UNKNOWN_TOPIC_OR_PARTITION,
    )

    broker = ctx.broker
    node = broker.cluster
    view = node.view
    wanted = request.get("topics")
    allow_create = request.get("allow_auto_topic_creation", True) if ctx.api_version >= 4 else True
    topics = []
    if wanted is None or (ctx.api_version == 0 and not wanted):
        with view.lock:
            tvs = list(view.topics.values())
        topics = [topic_entry(view, tv) for tv in tvs]
    else:
        for item in wanted:
            name = item.get("name")
            if name is None:
                tv = view.topic_by_id(item.get("topic_id"))
                if tv is None:
                    topics.append(
                        {
                            "error_code": UNKNOWN_TOPIC_ID,
                            "topic_id": item.get("topic_id"),
                            "partitions": [],
                        }
                    )
                else:
                    topics.append(topic_entry(view, tv))
                continue
            tv = view.topic(name)
            if tv is not None:
                topics.append(topic_entry(view, tv))
                continue
            code = UNKNOWN_TOPIC_OR_PARTITION
            if topic_name_error(name) is not None:
                code = INVALID_TOPIC_EXCEPTION
            elif allow_create and broker.auto_create and name not in INTERNAL_TOPICS:
                code = await auto_create(node, name, -1, -1, {}) or LEADER_NOT_AVAILABLE
            topics.append({"error_code": code, "name": name, "partitions": []})
    return {
        "throttle_time": 0,
        "brokers": brokers(view, ctx.listener or node.listener),
        "cluster_id": broker.cluster_id,
        "controller_id": view.controller_id,
        "topics": topics,
        "cluster_authorized_operations": -2147483648,
    }
