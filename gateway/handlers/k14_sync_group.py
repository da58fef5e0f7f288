"""SyncGroup (key 14): v0-v5; the leader's assignment reaches every member of the generation."""

from __future__ import annotations

from gateway.broker import RequestContext
from gateway.groups.service import group_service
from gateway.handlers.registry import api
from rdmalog.errors import GROUP_AUTHORIZATION_FAILED
from rdmalog.security.authorizer import Operation, ResourceType


@api(14, 0, 5)
async def handle(ctx: RequestContext, request: dict) -> dict:
    if not ctx.authorize(Operation.READ, ResourceType.GROUP, request["group_id"]):
        return {"throttle_time": 0, "error_code": GROUP_AUTHORIZATION_FAILED}
    service = group_service(ctx.broker)
    assignments = {a["member_id"]: bytes(a["assignment"]) for a in request.get("assignments") or ()}
    result = await service.coordinator.sync(
        request["group_id"],
        request["generation_id"],
        request.get("member_id") or "",
        assignments,
        group_instance_id=request.get("group_instance_id"),
        protocol_type=request.get("protocol_type"),
        protocol_name=request.get("protocol_name"),
    )
    await service.durable()
    return {
        "throttle_time": 0,
        "error_code": result.error,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol_name,
        "assignment": result.assignment,
    }
