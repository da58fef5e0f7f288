"""DeleteAcls (key 31): remove the ACL bindings matching each filter; each filter's answer lists
what it removed.

Needs ALTER on the cluster; without an authorizer every filter is answered SECURITY_DISABLED.
"""

from __future__ import annotations

import asyncio

from gateway.broker import RequestContext
from gateway.handlers.registry import api
from rdmalog.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    INVALID_REQUEST,
    SECURITY_DISABLED,
    error_code_of,
)
from rdmalog.security.acls import PATTERN_CODES, filter_error, matches, wire
from rdmalog.security.authorizer import CLUSTER_NAME, Operation, PatternType, ResourceType

_LITERAL = PATTERN_CODES[PatternType.LITERAL]  # what v0, without pattern types, means


def _failed(code: int, message: str | None) -> dict:
    return {"error_code": code, "error_message": message, "matching_acls": []}


@api(31, 0, 3)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Remove, per filter, every binding it matches (v0 has no pattern type: literal)."""
    authorizer = ctx.broker.authorizer
    filters = request["filters"]
    for f in filters:
        f.setdefault("pattern_type_filter", _LITERAL)
    if authorizer is None:
        failed = _failed(SECURITY_DISABLED, "No Authorizer is configured on the broker")
        return {"throttle_time": 0, "filter_results": [failed for _ in filters]}
    if not ctx.authorize(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        failed = _failed(CLUSTER_AUTHORIZATION_FAILED, None)
        return {"throttle_time": 0, "filter_results": [failed for _ in filters]}
    current = authorizer.acls()
    results, doomed = [], []
    for f in filters:
        problem = filter_error(f)
        if problem:
            results.append(_failed(INVALID_REQUEST, problem))
            continue
        found = [acl for acl in current if matches(f, acl)]
        doomed += found
        results.append(
            {
                "error_code": 0,
                "error_message": None,
                "matching_acls": [
                    {"error_code": 0, "error_message": None, **wire(acl)} for acl in found
                ],
            }
        )
    if doomed:
        try:
            await asyncio.to_thread(authorizer.remove, *doomed)
        except Exception as exc:
            results = [_failed(error_code_of(exc), str(exc)) for _ in filters]
    return {"throttle_time": 0, "filter_results": results}
