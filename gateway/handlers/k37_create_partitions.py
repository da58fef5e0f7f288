"""CreatePartitions (key 37): grow a topic to a larger partition count."""

from __future__ import annotations

from gateway.broker import Broker, RequestContext
from gateway.handlers.registry import api
from rdmalog.errors import (
    INVALID_PARTITIONS,
    INVALID_REPLICA_ASSIGNMENT,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_OR_PARTITION,
    error_code_of,
)
from rdmalog.security.authorizer import Operation, ResourceType


def _grow(broker: Broker, t: dict, validate_only: bool) -> dict:
    name, count = t["name"], t["count"]
    out = {"name": name, "error_code": 0, "error_message": None}
    topic = broker.topic(name)
    if topic is None:
        out.update(
            error_code=UNKNOWN_TOPIC_OR_PARTITION, error_message=f"Topic {name} does not exist."
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
    try:
        if validate_only:
            broker.validate_new_partitions(name, count)
        else:
            broker.create_partitions(name, count)
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
    if ctx.broker.cluster is not None:
        timeout_ms = request.get("timeout", 30000)
        results = [
            await _grow_in_cluster(ctx, t, validate_only, timeout_ms)
            if ctx.authorize(Operation.ALTER, ResourceType.TOPIC, t["name"])
            else {
                "name": t["name"],
                "error_code": TOPIC_AUTHORIZATION_FAILED,
                "error_message": None,
            }
            for t in request["topics"]
        ]
        return {"throttle_time": 0, "results": results}
    return {
        "throttle_time": 0,
        "results": [
            _grow(ctx.broker, t, validate_only)
            if ctx.authorize(Operation.ALTER, ResourceType.TOPIC, t["name"])
            else {
                "name": t["name"],
                "error_code": TOPIC_AUTHORIZATION_FAILED,
                "error_message": None,
            }
            for t in request["topics"]
        ],
    }
