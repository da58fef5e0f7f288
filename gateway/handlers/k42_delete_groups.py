"""DeleteGroups (key 42): v0-v2; Empty groups are removed with their offsets (tombstones)."""

from __future__ import annotations

from gateway.broker import RequestContext
from gateway.groups.service import group_service
from gateway.handlers.answers import answer_each
from gateway.handlers.registry import api
from rdmalog.errors import GROUP_AUTHORIZATION_FAILED
from rdmalog.security.authorizer import Operation, ResourceType


@api(42, 0, 2)
async def handle(ctx: RequestContext, request: dict) -> dict:
    service = group_service(ctx.broker)
    names = list(request.get("groups_names") or ())
    allowed = [g for g in names if ctx.authorize(Operation.DELETE, ResourceType.GROUP, g)]
    results = dict.fromkeys(names, GROUP_AUTHORIZATION_FAILED)
    results.update(service.coordinator.delete_groups(allowed))
    await service.durable()
    answers = await answer_each(
        ctx,
        ("results",),
        list(dict.fromkeys(names)),  # each group once, as Kafka answers
        lambda g: {"group_id": g, "error_code": results[g]},
    )
    return {"throttle_time": 0, "results": answers}
