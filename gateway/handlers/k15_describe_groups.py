"""DescribeGroups (key 15): v0-v6; state, protocol and members (metadata only when Stable)."""

from __future__ import annotations

from gateway.broker import RequestContext
from gateway.groups.service import group_service
from gateway.handlers.registry import api
from rdmalog import errors as E
from rdmalog.security.authorizer import Operation, ResourceType

AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
# READ, DESCRIBE, DELETE (Kafka's AclOperation codes 3, 8 and 6) as a bit field.


@api(15, 0, 6)
async def handle(ctx: RequestContext, request: dict) -> dict:
    coordinator = group_service(ctx.broker).coordinator
    include_ops = bool(request.get("include_authorized_operations"))
    groups = []
    for group_id in request.get("groups") or ():
        if not ctx.authorize(Operation.DESCRIBE, ResourceType.GROUP, group_id):
            groups.append({"error_code": E.GROUP_AUTHORIZATION_FAILED, "group_id": group_id})
            continue
        d = coordinator.describe(group_id)
        error, message = d.error, None
        if ctx.api_version >= 6 and error == E.NONE and d.state == "Dead":
            error, message = E.GROUP_ID_NOT_FOUND, f"Group {group_id} not found."
        groups.append(
            {
                "error_code": error,
                "error_message": message,
                "group_id": group_id,
                "group_state": d.state,
                "protocol_type": d.protocol_type,
                "protocol_data": d.protocol_name,
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata,
                        "member_assignment": m.assignment,
                    }
                    for m in d.members
                ],
                "authorized_operations": ctx.authorized_operations(ResourceType.GROUP, group_id)
                if include_ops
                else AUTHORIZED_OPERATIONS_OMITTED,
            }
        )
    return {"throttle_time": 0, "groups": groups}
