"""DescribeAcls (key 29): the ACL bindings matching a filter, grouped by resource pattern.

Needs DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED otherwise); without an authorizer Kafka
answers SECURITY_DISABLED.
"""

from __future__ import annotations

from gateway.broker import RequestContext
from gateway.handlers.registry import api
from rdmalog.errors import CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST, SECURITY_DISABLED
from rdmalog.security.acls import PATTERN_CODES, filter_error, matches, wire
from rdmalog.security.authorizer import CLUSTER_NAME, Operation, PatternType, ResourceType

_LITERAL = PATTERN_CODES[PatternType.LITERAL]  # what v0, without pattern types, means


def _refused(code: int, message: str | None) -> dict:
    return {"throttle_time": 0, "error_code": code, "error_message": message, "resources": []}


@api(29, 0, 3)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Every binding the filter matches (v0 has no pattern type: literal, as in Kafka)."""
    request.setdefault("pattern_type_filter", _LITERAL)
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return _refused(SECURITY_DISABLED, "No Authorizer is configured on the broker")
    if not ctx.authorize(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return _refused(CLUSTER_AUTHORIZATION_FAILED, None)
    problem = filter_error(request)
    if problem:
        return _refused(INVALID_REQUEST, problem)
    resources: dict[tuple, list[dict]] = {}
    for acl in authorizer.acls():
        if matches(request, acl):
            b = wire(acl)
            key = (b["resource_type"], b["resource_name"], b["pattern_type"])
            resources.setdefault(key, []).append(
                {k: b[k] for k in ("principal", "host", "operation", "permission_type")}
            )
    return {
        "throttle_time": 0,
        "error_code": 0,
        "error_message": None,
        "resources": [
            {"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
            for (t, n, p), acls in resources.items()
        ],
    }
