"""LeaveGroup (key 13): v0-v2 one member by id, v3+ a batch of members (static ones by instance id)."""

from __future__ import annotations

from gateway.broker import RequestContext
from gateway.groups.service import group_service
from gateway.handlers.registry import api
from rdmalog.errors import GROUP_AUTHORIZATION_FAILED
from rdmalog.security.authorizer import Operation, ResourceType


@api(13, 0, 5)
async def handle(ctx: RequestContext, request: dict) -> dict:
    if not ctx.authorize(Operation.READ, ResourceType.GROUP, request["group_id"]):
        return {"throttle_time": 0, "error_code": GROUP_AUTHORIZATION_FAILED}
    service = group_service(ctx.broker)
    if ctx.api_version < 3:
        leaving = [(request.get("member_id") or "", None)]
    else:
        leaving = [
            (m.get("member_id") or "", m.get("group_instance_id"))
            for m in request.get("members") or ()
        ]
    error, results = service.coordinator.leave(request["group_id"], leaving)
    await service.durable()
    if ctx.api_version < 3:
        if error == 0 and results:
            error = results[0]
        return {"throttle_time": 0, "error_code": error}
    members = []
    if error == 0:
        members = [
            {"member_id": mid, "group_instance_id": iid, "error_code": code}
            for (mid, iid), code in zip(leaving, results, strict=True)
        ]
    return {"throttle_time": 0, "error_code": error, "members": members}
