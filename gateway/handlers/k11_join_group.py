"""JoinGroup (key 11): v0-v9; the response waits for the rebalance the coordinator decides."""

from __future__ import annotations

from gateway.broker import RequestContext
from gateway.groups.model import JoinRequest, JoinResult
from gateway.groups.service import group_service
from gateway.handlers.registry import api
from rdmalog.errors import GROUP_AUTHORIZATION_FAILED
from rdmalog.security.authorizer import Operation, ResourceType


def client_host(ctx: RequestContext) -> str:
    """The peer's address as Kafka reports it ("/127.0.0.1")."""
    peer = getattr(ctx.connection, "peer", "") or ""
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer
    return "/" + host.strip("[]") if host else ""


def response(result: JoinResult, version: int) -> dict:
    """A JoinGroup response body for `version` from the coordinator's result."""
    legacy_name = version < 7
    return {
        "throttle_time": 0,
        "error_code": result.error,
        "generation_id": result.generation_id,
        "protocol_type": result.protocol_type,
        "protocol_name": (result.protocol_name or "") if legacy_name else result.protocol_name,
        "leader": result.leader_id,
        "skip_assignment": result.skip_assignment,
        "member_id": result.member_id,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "metadata": m.metadata,
            }
            for m in result.members
        ],
    }


@api(11, 0, 9)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Join (or rejoin) a group; answered when the rebalance completes."""
    if not ctx.authorize(Operation.READ, ResourceType.GROUP, request["group_id"]):
        return {"throttle_time": 0, "error_code": GROUP_AUTHORIZATION_FAILED, "member_id": ""}
    service = group_service(ctx.broker)
    session_timeout = request["session_timeout"]
    rebalance_timeout = request.get("rebalance_timeout", -1) if ctx.api_version >= 1 else -1
    req = JoinRequest(
        group_id=request["group_id"],
        member_id=request.get("member_id") or "",
        protocol_type=request.get("protocol_type") or "",
        protocols=[(p["name"], bytes(p["metadata"])) for p in request.get("protocols") or ()],
        session_timeout_ms=session_timeout,
        rebalance_timeout_ms=rebalance_timeout,
        group_instance_id=request.get("group_instance_id"),
        client_id=ctx.client_id or "",
        client_host=client_host(ctx),
        api_version=ctx.api_version,
        reason=request.get("reason"),
    )
    result = await service.coordinator.join(req)
    await service.durable()
    return response(result, ctx.api_version)
