"""CreateAcls (key 30): add ACL bindings (stored durably before the answer).

Needs ALTER on the cluster; each creation is checked as Kafka checks it (INVALID_REQUEST naming the
problem); without an authorizer every creation is answered SECURITY_DISABLED.
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
from rdmalog.security.acls import PATTERN_CODES, acl_of, binding_error
from rdmalog.security.authorizer import CLUSTER_NAME, Operation, PatternType, ResourceType

_LITERAL = PATTERN_CODES[PatternType.LITERAL]  # what v0, without pattern types, means


@api(30, 0, 3)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """One result per creation, in order (v0 has no pattern type: literal, as in Kafka)."""
    authorizer = ctx.broker.authorizer
    creations = request["creations"]
    for creation in creations:
        creation.setdefault("resource_pattern_type", _LITERAL)
    if authorizer is None:
        code, message = SECURITY_DISABLED, "No Authorizer is configured on the broker"
    elif not ctx.authorize(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        code, message = CLUSTER_AUTHORIZATION_FAILED, None
    else:
        code = None
    if code is not None:
        results = [{"error_code": code, "error_message": message} for _ in creations]
        return {"throttle_time": 0, "results": results}
    results, valid = [], []
    for creation in creations:
        problem = binding_error(creation)
        results.append({"error_code": INVALID_REQUEST if problem else 0, "error_message": problem})
        if not problem:
            valid.append(acl_of(creation))
    if valid:
        try:  # written durably (fsync): off the event loop
            await asyncio.to_thread(authorizer.add, *valid)
        except Exception as exc:
            for r in results:
                if r["error_code"] == 0:
                    r.update(error_code=error_code_of(exc), error_message=str(exc))
    return {"throttle_time": 0, "results": results}
