"""AlterPartitionReassignments (key 45): move replicas between brokers (KIP-455), e.g. to drain a
broker before decommissioning it. The controller records each target in the topic's assignment
(adding/removing replicas); new replicas catch up, then leadership and the assignment move to the
target (rdmalog/cluster/controller.py). Replicas null cancels a reassignment. One broker alone has
nowhere to move replicas to."""

from __future__ import annotations

import asyncio

from gateway.broker import RequestContext
from gateway.handlers.registry import api
from rdmalog.errors import CLUSTER_AUTHORIZATION_FAILED
from rdmalog.security.authorizer import CLUSTER_NAME, Operation, ResourceType

INVALID_REPLICA_ASSIGNMENT = 39
NOT_CONTROLLER = 41
NO_REASSIGNMENT_IN_PROGRESS = 85


def _single_broker(ctx: RequestContext, topic: str, p: dict) -> tuple[int, str | None]:
    if ctx.broker.topic(topic) is None:
        return 3, "unknown topic"
    if p["replicas"] is None:
        return NO_REASSIGNMENT_IN_PROGRESS, "no reassignment in progress"
    if list(p["replicas"]) == [ctx.broker.node_id]:
        return 0, None
    return INVALID_REPLICA_ASSIGNMENT, f"a single broker ({ctx.broker.node_id}) holds every replica"


@api(45, 0, 0)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Start (or cancel) each partition's reassignment; answered per partition."""
    if not ctx.authorize(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return {
            "throttle_time": 0,
            "error_code": CLUSTER_AUTHORIZATION_FAILED,
            "error_message": "Authorization failed.",
            "responses": [],
        }
    node = ctx.broker.cluster
    results: dict[tuple[str, int], tuple[int, str | None]] = {}
    if node is None:
        for t in request["topics"]:
            for p in t["partitions"]:
                results[(t["name"], p["partition_index"])] = _single_broker(ctx, t["name"], p)
    else:
        from rdmalog.cluster.controller import Reassignment

        controller = node.controller
        if controller is None or not controller.active:
            return {
                "throttle_time": 0,
                "error_code": NOT_CONTROLLER,
                "error_message": "This is not the controller.",
                "responses": [],
            }
        asks = [
            Reassignment(
                t["name"],
                p["partition_index"],
                None if p["replicas"] is None else list(p["replicas"]),
            )
            for t in request["topics"]
            for p in t["partitions"]
        ]
        results = await asyncio.wrap_future(controller.call(lambda: controller.reassign(asks)))
    responses = []
    for t in request["topics"]:
        parts = []
        for p in t["partitions"]:
            code, message = results.get((t["name"], p["partition_index"]), (0, None))
            parts.append(
                {
                    "partition_index": p["partition_index"],
                    "error_code": code,
                    "error_message": message,
                }
            )
        responses.append({"name": t["name"], "partitions": parts})
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "responses": responses}
