"""AlterConfigs (key 33): replace a topic's config overrides (the legacy, non-incremental form)."""

from __future__ import annotations

from gateway.broker import RequestContext
from gateway.handlers.registry import api
from gateway.handlers.resources import alter_each, alter_resource


async def _alter(broker, res: dict, validate_only: bool) -> dict:
    return await alter_resource(
        broker,
        res,
        validate_only,
        [False] * len(res["configs"]),
        lambda _topic, configs: {c["name"]: c["value"] for c in configs},
        replace=True,
    )


@api(33, 0, 2)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Set each topic's overrides to exactly the given configs (unlisted keys revert to defaults)."""
    return await alter_each(ctx, request, _alter)
