"""CreatePartitions (key 37): grow a topic to a larger partition count.

Internal topics are refused with INVALID_REQUEST: a group's records go to the `__consumer_offsets`
partition its id hashes to among the partitions there are, so more partitions would send a group's
next commits to another partition than its earlier ones. A topic named twice gets INVALID_REQUEST
(as in Kafka).
"""

from __future__ import annotations

from gateway.broker import Broker, RequestContext
from gateway.handlers.answers import answer_each, duplicates
from gateway.handlers.k03_metadata import INTERNAL_TOPICS
from gateway.handlers.registry import api
from rdmalog.errors import (
    INVALID_PARTITIONS,
    INVALID_REPLICA_ASSIGNMENT,
    INVALID_REQUEST,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_OR_PARTITION,
    error_code_of,
)
from rdmalog.security.authorizer import Operation, ResourceType


async def _grow(broker: Broker, t: dict, validate_only: bool) -> dict:
    name, count = t["name"], t["count"]
    out = {"name": name, "error_code": 0, "error_message": None}
    topic = broker.topic(name)
    if topic is None:
        out.update(
            error_code=UNKNOWN_TOPIC_OR_PARTITION, error_message=f"Topic {name} does not exist."
        )
        return out
    if name in INTERNAL_TOPICS:
        out.update(
            error_code=INVALID_REQUEST,
            error_message=f"Adding partitions to internal topic {name} is prohibited.",
        )
        return out
    current = len(topic.partitions)
    if count <= current:
        out.update(
            error_code=INVALID_PARTITIONS,
            error_message=f"Topic currently has {current} partitions, which is higher than or "
            f"equal to the requested {count}.",
        )
        return out
    assignments = t.get("assignments")
    if assignments is not None and (
        len(assignments) != count - current
        or any(a["broker_ids"] != [broker.node_id] for a in assignments)
    ):
        out.update(
            error_code=INVALID_REPLICA_ASSIGNMENT,
            error_message=f"each new partition must be assigned to broker {broker.node_id} only",
        )
        return out
    try:  # in the admin thread, as every topic operation
        if validate_only:
            await broker.in_admin_thread(broker.validate_new_partitions, name, count)
        else:
            await broker.in_admin_thread(broker.create_partitions, name, count)
    except Exception as exc:
        out.update(error_code=error_code_of(exc), error_message=str(exc))
    return out


async def _grow_in_cluster(
    ctx: RequestContext, t: dict, validate_only: bool, timeout_ms: int
) -> dict:
    """Cluster mode: the controller grows the topic's assignment in ZooKeeper."""
    from gateway.cluster import admin

    node = ctx.broker.cluster
    out = {"name": t["name"], "error_code": 0, "error_message": None}
    if admin.not_controller(node):
        out.update(error_code=admin.NOT_CONTROLLER, error_message="This is not the controller.")
        return out
    try:
        await admin.create_partitions(
            node, t["name"], t["count"], t.get("assignments"), validate_only, timeout_ms
        )
    except Exception as exc:
        out.update(error_code=admin.error_code_of(exc), error_message=str(exc) or None)
    return out


@api(37, 0, 3)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Create the missing partitions of each topic (or only validate)."""
    validate_only = bool(request.get("validate_only"))
    dup = duplicates(t["name"] for t in request["topics"])

    async def grow(t: dict) -> dict:
        if not ctx.authorize(Operation.ALTER, ResourceType.TOPIC, t["name"]):
            return {
                "name": t["name"],
                "error_code": TOPIC_AUTHORIZATION_FAILED,
                "error_message": None,
            }
        if t["name"] in dup:
            return {
                "name": t["name"],
                "error_code": INVALID_REQUEST,
                "error_message": "Duplicate topic name.",
            }
        if ctx.broker.cluster is not None:
            if t["name"] in INTERNAL_TOPICS:
                return {
                    "name": t["name"],
                    "error_code": INVALID_REQUEST,
                    "error_message": f"Adding partitions to internal topic {t['name']} is prohibited.",
                }
            return await _grow_in_cluster(ctx, t, validate_only, request.get("timeout", 30000))
        return await _grow(ctx.broker, t, validate_only)

    results = await answer_each(ctx, ("results",), request["topics"], grow)
    return {"throttle_time": 0, "results": results}
