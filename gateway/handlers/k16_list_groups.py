"""ListGroups (key 16): v0-v5; every classic group, filtered by state (v4+) and type (v5+)."""

from __future__ import annotations

from gateway.broker import RequestContext
from gateway.groups.service import group_service
from gateway.handlers.registry import api
from rdmalog.security.authorizer import CLUSTER_NAME, Operation, ResourceType

GROUP_TYPE = "classic"


@api(16, 0, 5)
async def handle(ctx: RequestContext, request: dict) -> dict:
    coordinator = group_service(ctx.broker).coordinator
    types = {t.lower() for t in request.get("types_filter") or ()}
    if types and GROUP_TYPE not in types:
        return {"throttle_time": 0, "error_code": 0, "groups": []}
    listings = coordinator.list_groups(request.get("states_filter") or None)
    if not ctx.authorize(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        # without DESCRIBE on the cluster, only the groups the sender may describe (as Kafka)
        listings = [
            g for g in listings if ctx.authorize(Operation.DESCRIBE, ResourceType.GROUP, g.group_id)
        ]
    return {
        "throttle_time": 0,
        "error_code": 0,
        "groups": [
            {
                "group_id": g.group_id,
                "protocol_type": g.protocol_type,
                "group_state": g.state,
                "group_type": GROUP_TYPE,
            }
            for g in listings
        ],
    }
