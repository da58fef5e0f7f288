"""AlterClientQuotas (key 49): set and remove quota values of user / client-id entities (what
kafka-configs.sh --entity-type users|clients --alter --add-config producer_byte_rate=... sends).

Needs ALTER_CONFIGS on the cluster. Values are stored durably before the answer and apply to the
next requests of the clients they cover.
"""

from __future__ import annotations

import asyncio

from gateway.broker import RequestContext
from gateway.handlers.client_quotas import KEYS, entity_of, format_value
from gateway.handlers.registry import api
from rdmalog.errors import CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST, error_code_of
from rdmalog.security.authorizer import CLUSTER_NAME, Operation, ResourceType
from rdmalog.security.entity_configs import Entity


def _check(entry: dict) -> tuple[Entity | None, str | None]:
    entity = entity_of(entry["entity"])
    if isinstance(entity, str):
        return None, entity
    for op in entry["ops"]:
        if op["key"] not in KEYS:
            return None, f"Invalid configuration key {op['key']}"
        if not op["remove"] and op["value"] <= 0:
            return None, f"Quota {op['key']} must be positive, not {op['value']}"
    return entity, None


@api(49, 0, 1)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """One result per entity, in order; entities with an error are left unchanged."""
    allowed = ctx.authorize(Operation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME)
    results, changes = [], {}
    for entry in request["entries"]:
        result = {"error_code": 0, "error_message": None, "entity": entry["entity"]}
        results.append(result)
        if not allowed:
            result["error_code"] = CLUSTER_AUTHORIZATION_FAILED
            continue
        entity, problem = _check(entry)
        if problem:
            result.update(error_code=INVALID_REQUEST, error_message=problem)
            continue
        ops = changes.setdefault(entity, {})
        for op in entry["ops"]:
            ops[op["key"]] = None if op["remove"] else format_value(op["value"])
    if changes and not request["validate_only"]:
        try:  # written durably (fsync): off the event loop
            await asyncio.to_thread(ctx.broker.entity_configs.alter, changes)
        except Exception as exc:
            for r in results:
                if r["error_code"] == 0:
                    r.update(error_code=error_code_of(exc), error_message=str(exc))
    return {"throttle_time": 0, "entries": results}
