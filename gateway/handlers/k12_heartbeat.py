"""Heartbeat (key 12): v0-v4; keeps a member's session alive and tells it about rebalances."""

from __future__ import annotations

from gateway.broker import RequestContext
from gateway.groups.service import group_service
from gateway.handlers.registry import api
from rdmalog.errors import GROUP_AUTHORIZATION_FAILED
from rdmalog.security.authorizer import Operation, ResourceType


@api(12, 0, 4)
async def handle(ctx: RequestContext, request: dict) -> dict:
    if not ctx.authorize(Operation.READ, ResourceType.GROUP, request["group_id"]):
        return {"throttle_time": 0, "error_code": GROUP_AUTHORIZATION_FAILED}
    coordinator = group_service(ctx.broker).coordinator
    error = coordinator.heartbeat(
        request["group_id"],
        request["generation_id"],
        request.get("member_id") or "",
        request.get("group_instance_id"),
    )
    return {"throttle_time": 0, "error_code": error}
