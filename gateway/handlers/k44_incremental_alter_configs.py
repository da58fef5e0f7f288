"""IncrementalAlterConfigs (key 44): SET, DELETE, APPEND and SUBTRACT on topic config keys."""

from __future__ import annotations

from gateway.broker import RequestContext
from gateway.handlers.registry import api
from gateway.handlers.resources import alter_each, alter_resource
from rdmalog.errors import InvalidConfigError

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _changes(topic, configs: list[dict]) -> dict[str, str | None]:
    """Turn the operations into a {key: new value or None (revert)} map."""
    changes: dict[str, str | None] = {}
    for c in configs:
        name, op, value = c["name"], c["config_operation"], c["value"]
        if op == SET:
            changes[name] = value
        elif op == DELETE:
            changes[name] = None
        elif op in (APPEND, SUBTRACT):
            current = topic.config.get(name)  # raises InvalidConfigError for unknown keys
            if not isinstance(current, list):
                raise InvalidConfigError(f"{name} is not a list config; APPEND/SUBTRACT need one")
            items = [x.strip() for x in (value or "").split(",") if x.strip()]
            if op == APPEND:
                merged = current + [x for x in items if x not in current]
            else:
                merged = [x for x in current if x not in items]
            changes[name] = ",".join(merged)
        else:
            raise InvalidConfigError(f"unknown config operation {op} for {name}")
    return changes


async def _alter(broker, res: dict, validate_only: bool) -> dict:
    null_ok = [c["config_operation"] == DELETE for c in res["configs"]]
    return await alter_resource(broker, res, validate_only, null_ok, _changes, replace=False)


@api(44, 0, 1)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Apply each resource's operations atomically per resource."""
    return await alter_each(ctx, request, _alter)
