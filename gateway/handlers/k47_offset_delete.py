"""OffsetDelete (key 47): v0; drops committed offsets of topics the group no longer consumes."""

from __future__ import annotations

from gateway.broker import RequestContext
from gateway.groups.service import group_service
from gateway.handlers.registry import api


@api(47, 0, 0)
async def handle(ctx: RequestContext, request: dict) -> dict:
    service = group_service(ctx.broker)
    wanted = [
        (t["name"], p["partition_index"])
        for t in request.get("topics") or ()
        for p in t.get("partitions") or ()
    ]
    error, results = service.coordinator.delete_offsets(request["group_id"], wanted)
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
