"""DescribeGroups (key 15): v0-v6; state, protocol and members (metadata only when Stable).

A group named again gets INVALID_REQUEST instead of its members a second time (Kafka answers every
copy; here naming one large group a hundred thousand times cannot make a gigabyte answer).
"""

from __future__ import annotations

from gateway.broker import RequestContext
from gateway.groups.service import group_service
from gateway.handlers.answers import answer_each
from gateway.handlers.registry import api
from rdmalog import errors as E
from rdmalog.security.authorizer import Operation, ResourceType

AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
# READ, DESCRIBE, DELETE (Kafka's AclOperation codes 3, 8 and 6) as a bit field.


@api(15, 0, 6)
async def handle(ctx: RequestContext, request: dict) -> dict:
    coordinator = group_service(ctx.broker).coordinator
    include_ops = bool(request.get("include_authorized_operations"))
    seen: set[str] = set()

    def describe(group_id: str) -> dict:
        if group_id in seen:
            return {
                "error_code": E.INVALID_REQUEST,
                "error_message": "Duplicate group id in request.",
                "group_id": group_id,
                "group_state": "",
                "protocol_type": "",
                "protocol_data": "",
                "members": [],
                "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
            }
        seen.add(group_id)
        if not ctx.authorize(Operation.DESCRIBE, ResourceType.GROUP, group_id):
            return {"error_code": E.GROUP_AUTHORIZATION_FAILED, "group_id": group_id}
        d = coordinator.describe(group_id)
        error, message = d.error, None
        if ctx.api_version >= 6 and error == E.NONE and d.state == "Dead":
            error, message = E.GROUP_ID_NOT_FOUND, f"Group {group_id} not found."
        return {
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

    groups = await answer_each(ctx, ("groups",), request.get("groups") or (), describe)
    return {"throttle_time": 0, "groups": groups}
