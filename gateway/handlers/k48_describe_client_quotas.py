"""DescribeClientQuotas (key 48): the quota entities matching a filter and their values.

Needs DESCRIBE_CONFIGS on the cluster.
"""

from __future__ import annotations

from gateway.broker import RequestContext
from gateway.handlers.client_quotas import ANY_MATCH, CLIENT_ID, KEYS, USER, components_of, matches
from gateway.handlers.registry import api
from rdmalog.errors import CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST
from rdmalog.security.authorizer import CLUSTER_NAME, Operation, ResourceType


def _refused(code: int, message: str | None) -> dict:
    return {"throttle_time": 0, "error_code": code, "error_message": message, "entries": None}


@api(48, 0, 1)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Every entity with a quota the filter matches."""
    if not ctx.authorize(Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        return _refused(CLUSTER_AUTHORIZATION_FAILED, None)
    filters = request["components"]
    for f in filters:
        if f["entity_type"] not in (USER, CLIENT_ID):
            return _refused(INVALID_REQUEST, f"Custom entity type {f['entity_type']} not supported")
        if f["match_type"] not in (0, 1, ANY_MATCH) or (
            f["match_type"] == 0 and f["match"] is None
        ):
            return _refused(INVALID_REQUEST, f"Invalid match for entity type {f['entity_type']}")
    entries = []
    for entity, config in ctx.broker.entity_configs.entities().items():
        values = [{"key": k, "value": float(v)} for k, v in sorted(config.items()) if k in KEYS]
        if values and matches(entity, filters, request["strict"]):
            entries.append({"entity": components_of(entity), "values": values})
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "entries": entries}
