"""Metadata (key 3): brokers, cluster id, controller, topics with ids and partitions (this broker leads all)."""

from __future__ import annotations

import logging

from gateway.broker import RequestContext, topic_name_error
from gateway.cluster.metadata import answer_metadata
from gateway.handlers.registry import api
from rdmalog.errors import (
    INVALID_TOPIC_EXCEPTION,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    error_code_of,
)
from rdmalog.security.authorizer import CLUSTER_NAME, Operation, ResourceType
from rdmalog.store.interface import LogTopic

log = logging.getLogger("gateway.metadata")

# Created by their coordinators with their own settings, never by Metadata auto-creation.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


def topic_entry(ctx: RequestContext, topic: LogTopic) -> dict:
    """A Metadata topic entry for an existing topic."""
    node = ctx.broker.node_id
    replicas = [node]
    return {
        "topic_authorized_operations": ctx.authorized_operations(ResourceType.TOPIC, topic.name)
        if ctx.extra.get("include_topic_authorized_operations")
        else AUTHORIZED_OPERATIONS_OMITTED,
        "error_code": 0,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.name in INTERNAL_TOPICS,
        "partitions": [
            {
                "error_code": 0,
                "partition_index": i,
                "leader_id": node,
                "leader_epoch": plog.leader_epoch,
                "replica_nodes": replicas,
                "isr_nodes": replicas,
                "offline_replicas": [],
            }
            for i, plog in enumerate(topic.partitions)
        ],
    }


def _missing(ctx: RequestContext, name: str, allow_create: bool) -> dict:
    broker = ctx.broker
    bad = topic_name_error(name)
    if bad is not None:
        return {"error_code": INVALID_TOPIC_EXCEPTION, "name": name, "partitions": []}
    if allow_create and broker.auto_create and name not in INTERNAL_TOPICS:
        if not (
            ctx.authorize(Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME)
            or ctx.authorize(Operation.CREATE, ResourceType.TOPIC, name)
        ):
            return _denied(name)
        try:
            return topic_entry(ctx, broker.auto_create_topic(name))
        except Exception as exc:  # a concurrent create, or a store refusal
            topic = broker.topic(name)
            if topic is not None:
                return topic_entry(ctx, topic)
            log.warning("auto-creating topic %s failed: %s", name, exc)
            return {"error_code": error_code_of(exc), "name": name, "partitions": []}
    return {"error_code": UNKNOWN_TOPIC_OR_PARTITION, "name": name, "partitions": []}


def _denied(name: str) -> dict:
    return {"error_code": TOPIC_AUTHORIZATION_FAILED, "name": name, "partitions": []}


@api(3, 0, 12, eager=True)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Describe the requested topics (all when `topics` is null, or empty at v0)."""
    broker = ctx.broker
    if broker.cluster is not None:  # the cluster as the ZooKeeper watches show it
        return await answer_metadata(ctx, request)
    wanted = request.get("topics")
    allow_create = request.get("allow_auto_topic_creation", True) if ctx.api_version >= 4 else True
    topics = []
    ctx.extra["include_topic_authorized_operations"] = request.get(
        "include_topic_authorized_operations", False
    )
    describable = ctx.topic_check(Operation.DESCRIBE) or (lambda _name: True)
    if wanted is None or (ctx.api_version == 0 and not wanted):
        # all topics: those the sender may not describe are left out
        topics = [topic_entry(ctx, t) for t in broker.topics() if describable(t.name)]
    else:
        for item in wanted:
            name = item.get("name")
            if name is None:
                topic = broker.topic_by_id(item.get("topic_id"))
                if topic is None or not describable(topic.name):
                    topics.append(
                        {
                            "error_code": UNKNOWN_TOPIC_ID,
                            "topic_id": item.get("topic_id"),
                            "partitions": [],
                        }
                    )
                else:
                    topics.append(topic_entry(ctx, topic))
                continue
            if not describable(name):
                topics.append(_denied(name))
                continue
            topic = broker.topic(name)
            topics.append(topic_entry(ctx, topic) if topic else _missing(ctx, name, allow_create))
    return {
        "throttle_time": 0,
        "brokers": broker.brokers(ctx.listener),
        "cluster_id": broker.cluster_id,
        "controller_id": broker.node_id,
        "topics": topics,
        "cluster_authorized_operations": ctx.authorized_operations(
            ResourceType.CLUSTER, CLUSTER_NAME
        )
        if request.get("include_cluster_authorized_operations")
        else AUTHORIZED_OPERATIONS_OMITTED,
    }
