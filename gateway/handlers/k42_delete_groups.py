"""DeleteGroups (key 42): v0-v2; Empty groups are removed with their offsets (tombstones)."""

from __future__ import annotations

from gateway.broker import RequestContext
from gateway.groups.service import group_service
from gateway.handlers.answers import answer_each
from gateway.handlers.registry import api


@api(42, 0, 2)
async def handle(ctx: RequestContext, request: dict) -> dict:
    service = group_service(ctx.broker)
    names = list(request.get("groups_names") or ())
    results = service.coordinator.delete_groups(names)
    await service.durable()
    answers = await answer_each(
        ctx,
        ("results",),
        list(dict.fromkeys(names)),  # each group once, as Kafka answers
        lambda g: {"group_id": g, "error_code": results[g]},
    )
    return {"throttle_time": 0, "results": answers}
