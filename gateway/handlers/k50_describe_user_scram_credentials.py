"""DescribeUserScramCredentials (key 50): which SCRAM mechanisms (and iterations) each user has.

Needs DESCRIBE on the cluster. A null or empty user list describes every user; a user named twice
is DUPLICATE_RESOURCE, an unknown one RESOURCE_NOT_FOUND (Kafka's answers). Credentials themselves
are never sent.
"""

from __future__ import annotations

from collections import Counter

from gateway.broker import RequestContext
from gateway.handlers.registry import api
from rdmalog.errors import CLUSTER_AUTHORIZATION_FAILED, DUPLICATE_RESOURCE, RESOURCE_NOT_FOUND
from rdmalog.security.authorizer import CLUSTER_NAME, Operation, ResourceType
from rdmalog.security.entity_configs import ScramCredentials

_MECHANISM_CODES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}


@api(50, 0, 0)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """One result per user."""
    if not ctx.authorize(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return {
            "throttle_time": 0,
            "error_code": CLUSTER_AUTHORIZATION_FAILED,
            "error_message": None,
            "results": [],
        }
    users = ScramCredentials(ctx.broker.entity_configs).users()
    wanted = [u["name"] for u in request.get("users") or ()]
    counts = Counter(wanted)
    results = []
    for name in dict.fromkeys(wanted) if wanted else sorted(users):
        result = {"user": name, "error_code": 0, "error_message": None, "credential_infos": []}
        if counts[name] > 1:
            result.update(
                error_code=DUPLICATE_RESOURCE,
                error_message="Cannot describe SCRAM credentials for the same user twice in a "
                "single request",
            )
        elif name not in users:
            result.update(
                error_code=RESOURCE_NOT_FOUND,
                error_message="Attempt to describe a user credential that does not exist",
            )
        else:
            result["credential_infos"] = [
                {"mechanism": _MECHANISM_CODES[m], "iterations": i}
                for m, i in sorted(users[name].items())
            ]
        results.append(result)
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "results": results}
