"""CreateTopics (key 19): validate names, partition counts, replication factors and configs; create."""

from __future__ import annotations

import logging

from gateway.broker import RequestContext, topic_name_error
from gateway.handlers.answers import answer_each, duplicates
from gateway.handlers.k03_metadata import INTERNAL_TOPICS
from gateway.handlers.registry import api
from rdmalog.config import TopicConfig
from rdmalog.errors import (
    INVALID_CONFIG,
    INVALID_PARTITIONS,
    INVALID_REPLICATION_FACTOR,
    INVALID_REQUEST,
    INVALID_TOPIC_EXCEPTION,
    TOPIC_ALREADY_EXISTS,
    TOPIC_AUTHORIZATION_FAILED,
    error_code_of,
)
from rdmalog.security.authorizer import CLUSTER_NAME, Operation, ResourceType

log = logging.getLogger("gateway.create_topics")


def _fail(name: str, code: int, message: str) -> dict:
    return {"name": name, "error_code": code, "error_message": message}


def _config_entries(config: TopicConfig) -> list[dict]:
    return [
        {
            "name": e.name,
            "value": e.value,
            "read_only": False,
            "config_source": int(e.source),
            "is_sensitive": False,
        }
        for e in config.describe()
    ]


async def _create_one(ctx: RequestContext, t: dict, validate_only: bool) -> dict:
    broker = ctx.broker
    name = t["name"]
    bad = topic_name_error(name)
    if bad is not None:
        return _fail(name, INVALID_TOPIC_EXCEPTION, bad)
    if name in INTERNAL_TOPICS:
        return _fail(name, INVALID_REQUEST, f"Creation of internal topic {name} is prohibited.")
    if broker.topic(name) is not None:
        return _fail(name, TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    count = t["num_partitions"]
    rf = t["replication_factor"]
    assignments = t.get("assignments") or []
    if assignments:
        if count != -1 or rf != -1:
            return _fail(
                name,
                INVALID_REQUEST,
                "Both numPartitions or replicationFactor and replicasAssignments were set. "
                "Both cannot be used at the same time.",
            )
        count, rf = len(assignments), len(assignments[0]["broker_ids"])
        for a in assignments:
            if list(a["broker_ids"]) != [broker.node_id]:
                return _fail(
                    name,
                    INVALID_REPLICATION_FACTOR,
                    f"Replica assignment {a['broker_ids']} names brokers other than {broker.node_id}.",
                )
    if count == -1:
        count = broker.num_partitions
    if count <= 0:
        return _fail(
            name,
            INVALID_PARTITIONS,
            "Number of partitions was set to an invalid non-positive value.",
        )
    if rf == -1:
        rf = 1
    if rf <= 0:
        return _fail(
            name,
            INVALID_REPLICATION_FACTOR,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        )
    if rf > 1:
        return _fail(
            name,
            INVALID_REPLICATION_FACTOR,
            f"Unable to replicate the partition {rf} time(s): The target replication factor of "
            f"{rf} cannot be reached because only 1 broker(s) are registered.",
        )
    configs = {c["name"]: c["value"] for c in t.get("configs") or [] if c["value"] is not None}
    try:
        config = await broker.in_admin_thread(broker.validate_new_topic, name, count, configs)
    except Exception as exc:
        code = error_code_of(exc)
        return _fail(name, INVALID_CONFIG if code == -1 else code, str(exc) or None)
    topic_id = None
    if not validate_only:
        try:
            # the files of every partition, in the admin thread (the store publishes the topic
            # once all its partitions exist)
            topic = await broker.in_admin_thread(broker.create_topic, name, count, configs)
        except Exception as exc:
            code = error_code_of(exc)
            if code == -1:
                log.exception("creating topic %s failed", name)
            return _fail(name, code, str(exc) or None)
        topic_id, config = topic.topic_id, topic.config
    return {
        "name": name,
        "topic_id": topic_id,
        "error_code": 0,
        "error_message": None,
        "num_partitions": count,
        "replication_factor": rf,
        **_configs(ctx, name, config),
    }


def _configs(ctx: RequestContext, name: str, config: TopicConfig) -> dict:
    """The new topic's configs, when the sender may describe them (Kafka's DESCRIBE_CONFIGS)."""
    if ctx.authorize(Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, name):
        return {"configs": _config_entries(config)}
    return {"configs": None, "topic_config_error_code": TOPIC_AUTHORIZATION_FAILED}


async def _create_in_cluster(
    ctx: RequestContext, t: dict, validate_only: bool, timeout_ms: int
) -> dict:
    """Cluster mode: the controller writes the topic to ZooKeeper (gateway/cluster/admin.py)."""
    from gateway.cluster import admin

    node = ctx.broker.cluster
    name = t["name"]
    bad = topic_name_error(name)
    if bad is not None:
        return _fail(name, INVALID_TOPIC_EXCEPTION, bad)
    if name in INTERNAL_TOPICS:
        return _fail(name, INVALID_REQUEST, f"Creation of internal topic {name} is prohibited.")
    if admin.not_controller(node):
        return _fail(
            name, admin.NOT_CONTROLLER, "This is not the correct controller for this cluster."
        )
    assignments = t.get("assignments") or []
    if assignments and (t["num_partitions"] != -1 or t["replication_factor"] != -1):
        return _fail(
            name,
            INVALID_REQUEST,
            "Both numPartitions or replicationFactor and replicasAssignments were set. "
            "Both cannot be used at the same time.",
        )
    configs = {c["name"]: c["value"] for c in t.get("configs") or [] if c["value"] is not None}
    try:
        plan = admin.plan_topic(
            node, name, t["num_partitions"], t["replication_factor"], assignments, configs
        )
        config = TopicConfig.from_overrides(ctx.broker.config, configs)
        topic_id = None
        if not validate_only:
            topic_id = await admin.create_topic(node, name, plan, configs, timeout_ms)
    except Exception as exc:
        code = admin.error_code_of(exc)
        if code == -1:
            log.exception("creating topic %s failed", name)
        return _fail(name, code, str(exc) or None)
    return {
        "name": name,
        "topic_id": topic_id,
        "error_code": 0,
        "error_message": None,
        "num_partitions": len(plan),
        "replication_factor": len(plan[0]),
        **_configs(ctx, name, config),
    }


@api(19, 0, 7, eager=True)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Create every requested topic (or only validate); one result per topic."""
    topics = request["topics"]
    dup = duplicates(t["name"] for t in topics)
    validate_only = bool(request.get("validate_only"))
    cluster_create = ctx.authorize(Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME)

    async def create(t: dict) -> dict:
        if not cluster_create and not ctx.authorize(
            Operation.CREATE, ResourceType.TOPIC, t["name"]
        ):
            return _fail(t["name"], TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
        if t["name"] in dup:
            return _fail(
                t["name"],
                INVALID_REQUEST,
                "Create topics request from client contains duplicate topic name.",
            )
        if ctx.broker.cluster is not None:
            return await _create_in_cluster(ctx, t, validate_only, request.get("timeout", 30000))
        return await _create_one(ctx, t, validate_only)

    results = await answer_each(ctx, ("topics",), topics, create)
    return {"throttle_time": 0, "topics": results}
