"""Metadata (key 3): brokers, cluster id, controller, topics with ids and partitions (this broker
leads all; in a cluster what ZooKeeper says, see gateway/cluster/metadata.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from gateway.broker import RequestContext, topic_name_error
from gateway.handlers.answers import answer_each
from gateway.handlers.registry import api
from rdmalog.errors import (
    INVALID_TOPIC_EXCEPTION,
    LEADER_NOT_AVAILABLE,
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


async def _missing(ctx: RequestContext, name: str, allow_create: bool) -> dict:
    """The entry of a topic not found: auto-created (in the admin thread), or an error."""
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
            topic = await broker.in_admin_thread(broker.auto_create_topic, name)
            return topic_entry(ctx, topic)
        except Exception as exc:  # a concurrent create, or a store refusal
            topic = broker.topic(name)
            if topic is not None:
                return topic_entry(ctx, topic)
            log.warning("auto-creating topic %s failed: %s", name, exc)
            return {"error_code": error_code_of(exc), "name": name, "partitions": []}
    return {"error_code": UNKNOWN_TOPIC_OR_PARTITION, "name": name, "partitions": []}


def _distinct(wanted: list[dict]) -> list[dict]:
    """The requested topics, each once (Kafka answers a set of topics), by name or else by id."""
    seen: dict[object, dict] = {}
    for item in wanted:
        name = item.get("name")
        seen.setdefault(("id", item.get("topic_id")) if name is None else name, item)
    return list(seen.values())


def _denied(name: str) -> dict:
    return {"error_code": TOPIC_AUTHORIZATION_FAILED, "name": name, "partitions": []}


async def _cluster_answer(
    ctx: RequestContext, request: dict, allow_create: bool, describable: Callable[[str], bool]
) -> dict:
    """Metadata in cluster mode: live brokers (on the client's listener), the controller, and per
    partition the leader, epoch, replicas, ISR and offline replicas from ZooKeeper; a missing topic
    is auto-created in ZooKeeper (LEADER_NOT_AVAILABLE until its leaders are elected)."""
    from gateway.cluster.admin import auto_create
    from gateway.cluster.metadata import brokers, cluster_topic_entry

    broker = ctx.broker
    node = broker.cluster
    view = node.view
    wanted = request.get("topics")

    def entry(tv) -> dict:
        out = cluster_topic_entry(view, tv)
        out["topic_authorized_operations"] = (
            ctx.authorized_operations(ResourceType.TOPIC, tv.name)
            if ctx.extra.get("include_topic_authorized_operations")
            else AUTHORIZED_OPERATIONS_OMITTED
        )
        return out

    async def missing(name: str) -> dict:
        if topic_name_error(name) is not None:
            return {"error_code": INVALID_TOPIC_EXCEPTION, "name": name, "partitions": []}
        if not (allow_create and broker.auto_create and name not in INTERNAL_TOPICS):
            return {"error_code": UNKNOWN_TOPIC_OR_PARTITION, "name": name, "partitions": []}
        if not (
            ctx.authorize(Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME)
            or ctx.authorize(Operation.CREATE, ResourceType.TOPIC, name)
        ):
            return _denied(name)
        code = await auto_create(node, name, -1, -1, {}) or LEADER_NOT_AVAILABLE
        return {"error_code": code, "name": name, "partitions": []}

    def describe(item: dict) -> dict | Coroutine[Any, Any, dict]:
        name = item.get("name")
        if name is None:
            tv = view.topic_by_id(item.get("topic_id"))
            if tv is None or not describable(tv.name):
                return {
                    "error_code": UNKNOWN_TOPIC_ID,
                    "topic_id": item.get("topic_id"),
                    "partitions": [],
                }
            return entry(tv)
        if not describable(name):
            return _denied(name)
        tv = view.topic(name)
        return entry(tv) if tv is not None else missing(name)

    if wanted is None or (ctx.api_version == 0 and not wanted):
        with view.lock:
            visible = [tv for tv in view.topics.values() if describable(tv.name)]
        topics = await answer_each(ctx, ("topics",), visible, entry)
    else:
        topics = await answer_each(ctx, ("topics",), _distinct(wanted), describe)
    return {
        "throttle_time": 0,
        "brokers": brokers(view, ctx.listener or node.listener),
        "cluster_id": broker.cluster_id,
        "controller_id": view.controller_id,
        "topics": topics,
        "cluster_authorized_operations": ctx.authorized_operations(
            ResourceType.CLUSTER, CLUSTER_NAME
        )
        if request.get("include_cluster_authorized_operations")
        else AUTHORIZED_OPERATIONS_OMITTED,
    }


@api(3, 0, 12, eager=True)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Describe the requested topics (all when `topics` is null, or empty at v0)."""
    broker = ctx.broker
    wanted = request.get("topics")
    allow_create = request.get("allow_auto_topic_creation", True) if ctx.api_version >= 4 else True
    ctx.extra["include_topic_authorized_operations"] = request.get(
        "include_topic_authorized_operations", False
    )
    describable = ctx.topic_check(Operation.DESCRIBE) or (lambda _name: True)
    if broker.cluster is not None:  # the cluster as the ZooKeeper watches show it
        return await _cluster_answer(ctx, request, allow_create, describable)

    def describe(item: dict) -> dict | Coroutine[Any, Any, dict]:
        name = item.get("name")
        if name is None:
            topic = broker.topic_by_id(item.get("topic_id"))
            if topic is None or not describable(topic.name):
                return {
                    "error_code": UNKNOWN_TOPIC_ID,
                    "topic_id": item.get("topic_id"),
                    "partitions": [],
                }
            return topic_entry(ctx, topic)
        if not describable(name):
            return _denied(name)
        topic = broker.topic(name)
        return topic_entry(ctx, topic) if topic else _missing(ctx, name, allow_create)

    if wanted is None or (ctx.api_version == 0 and not wanted):
        # all topics: those the sender may not describe are left out
        visible = [t for t in broker.topics() if describable(t.name)]
        topics = await answer_each(ctx, ("topics",), visible, lambda t: topic_entry(ctx, t))
    else:
        topics = await answer_each(ctx, ("topics",), _distinct(wanted), describe)
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
