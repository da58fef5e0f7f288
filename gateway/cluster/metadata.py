"""Metadata and DescribeCluster entries in cluster mode, from the broker's ClusterView (what the
ZooKeeper watches keep): live brokers, each partition's leader, leader epoch, replicas, ISR and
offline replicas, as Kafka's metadata cache answers them (the handlers add authorization)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rdmalog.errors import LEADER_NOT_AVAILABLE

if TYPE_CHECKING:  # kazoo (the `cluster` extra) is imported only when cluster mode runs
    from rdmalog.cluster.view import ClusterView, TopicView

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


def cluster_topic_entry(view: ClusterView, tv: TopicView) -> dict:
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
