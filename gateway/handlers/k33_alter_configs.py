"""AlterConfigs (key 33): replace a topic's config overrides (the legacy, non-incremental form)."""

from __future__ import annotations

from gateway.broker import RequestContext, error_code_of
from gateway.handlers.registry import api
from gateway.handlers.resources import (
    BROKER,
    TOPIC,
    broker_resource_error,
    dynamic_broker_refusal,
    request_error,
    unknown_resource,
)


def _alter(broker, res: dict, validate_only: bool) -> dict:
    rtype, name = res["resource_type"], res["resource_name"]
    out = {"resource_type": rtype, "resource_name": name, "error_code": 0, "error_message": None}
    if rtype == BROKER:
        out.update(broker_resource_error(broker, name) or dynamic_broker_refusal())
        return out
    if rtype != TOPIC:
        out.update(error_code=42, error_message=f"resource type {rtype} is not supported")
        return out
    configs = res["configs"]
    invalid = request_error(
        [c["name"] for c in configs], [c["value"] for c in configs], [False] * len(configs)
    )
    if invalid:
        out.update(invalid)
        return out
    topic = broker.topic(name)
    if topic is None:
        out.update(unknown_resource(name))
        return out
    changes = {c["name"]: c["value"] for c in configs}
    try:
        if validate_only:
            topic.config.altered(changes, replace=True)
        else:
            broker.store.alter_topic_config(name, changes, replace=True)
    except Exception as exc:
        out.update(error_code=error_code_of(exc), error_message=str(exc))
    return out


@api(33, 0, 2)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Set each topic's overrides to exactly the given configs (unlisted keys revert to defaults)."""
    validate_only = bool(request.get("validate_only"))
    return {
        "throttle_time": 0,
        "responses": [_alter(ctx.broker, r, validate_only) for r in request["resources"]],
    }
