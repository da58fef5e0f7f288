"""OffsetDelete (key 47): v0; drops committed offsets of topics the group no longer consumes."""

from __future__ import annotations

from gateway.broker import RequestContext
from gateway.groups.service import group_service
from gateway.handlers.registry import api
from rdmalog.errors import GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED
from rdmalog.security.authorizer import Operation, ResourceType


@api(47, 0, 0)
async def handle(ctx: RequestContext, request: dict) -> dict:
    service = group_service(ctx.broker)
    if not ctx.authorize(Operation.DELETE, ResourceType.GROUP, request["group_id"]):
        return {"error_code": GROUP_AUTHORIZATION_FAILED, "throttle_time": 0, "topics": []}
    readable = ctx.topic_check(Operation.READ) or (lambda _name: True)
    requested = [
        (t["name"], p["partition_index"])
        for t in request.get("topics") or ()
        for p in t.get("partitions") or ()
    ]
    wanted = [tp for tp in requested if readable(tp[0])]
    error, results = service.coordinator.delete_offsets(request["group_id"], wanted)
    if error == 0:
        denied = {tp: TOPIC_AUTHORIZATION_FAILED for tp in requested if not readable(tp[0])}
        results = {**denied, **results}
    await service.durable()
    topics: dict[str, list[dict]] = {}
    if error == 0:
        for (topic, partition), code in results.items():
            topics.setdefault(topic, []).append({"partition_index": partition, "error_code": code})
    return {
        "error_code": error,
        "throttle_time": 0,
        "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
    }
