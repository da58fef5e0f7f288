"""AlterUserScramCredentials (key 51): add, replace and delete users' SCRAM credentials (what
kafka-configs.sh --alter --add-config 'SCRAM-SHA-256=[password=...]' and the admin clients send).

The client sends the salt and the salted password; the broker keeps the salt, stored key, server key
and iterations (Kafka's format) durably before answering. Needs ALTER on the cluster. Each user is
checked as Kafka checks it: UNACCEPTABLE_CREDENTIAL, UNSUPPORTED_SASL_MECHANISM, DUPLICATE_RESOURCE,
RESOURCE_NOT_FOUND; a user with any error is left unchanged.
"""

from __future__ import annotations

import asyncio

from gateway.broker import RequestContext
from gateway.handlers.registry import api
from rdmalog.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    DUPLICATE_RESOURCE,
    RESOURCE_NOT_FOUND,
    UNACCEPTABLE_CREDENTIAL,
    UNSUPPORTED_SASL_MECHANISM,
    error_code_of,
)
from rdmalog.security.authorizer import CLUSTER_NAME, Operation, ResourceType
from rdmalog.security.entity_configs import (
    Entity,
    ScramCredential,
    ScramCredentials,
    iterations_error,
)

MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}


def _problem(
    item: dict, upsert: bool, existing: dict[str, dict[str, int]]
) -> tuple[int, str] | None:
    name, mechanism = item["name"], MECHANISMS.get(item["mechanism"])
    if not name:
        return UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism is None:
        return UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if upsert:
        problem = iterations_error(mechanism, item["iterations"])
        if problem:
            return UNACCEPTABLE_CREDENTIAL, problem
        if not item["salt"] or not item["salted_password"]:
            return UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty"
    elif mechanism not in existing.get(name, {}):
        return RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
    return None


@api(51, 0, 0)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """One result per user named, in order."""
    items = [(d, False) for d in request.get("deletions") or ()]
    items += [(u, True) for u in request.get("upsertions") or ()]
    users = list(dict.fromkeys(item["name"] for item, _ in items))
    if not ctx.authorize(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return {
            "throttle_time": 0,
            "results": [
                {"user": u, "error_code": CLUSTER_AUTHORIZATION_FAILED, "error_message": None}
                for u in users
            ],
        }
    credentials = ScramCredentials(ctx.broker.entity_configs)
    existing = credentials.users()
    errors: dict[str, tuple[int, str]] = {}
    seen: set[tuple[str, int]] = set()
    for item, upsert in items:
        key = (item["name"], item["mechanism"])
        problem = _problem(item, upsert, existing)
        if key in seen:
            problem = (
                DUPLICATE_RESOURCE,
                "A user credential cannot be altered twice in the same request",
            )
        seen.add(key)
        if problem and item["name"] not in errors:
            errors[item["name"]] = problem
    changes: dict[Entity, dict[str, str | None]] = {}
    for item, upsert in items:
        if item["name"] in errors:
            continue
        mechanism = MECHANISMS[item["mechanism"]]
        value = None
        if upsert:
            value = ScramCredential.from_salted_password(
                mechanism, bytes(item["salt"]), bytes(item["salted_password"]), item["iterations"]
            ).encode()
        changes.setdefault(Entity(item["name"]), {})[mechanism] = value
    if changes:
        try:  # written durably (fsync): off the event loop
            await asyncio.to_thread(credentials.configs.alter, changes)
        except Exception as exc:
            for entity in changes:
                errors[entity.user] = (error_code_of(exc), str(exc))
    return {
        "throttle_time": 0,
        "results": [
            {
                "user": u,
                "error_code": errors[u][0] if u in errors else 0,
                "error_message": errors[u][1] if u in errors else None,
            }
            for u in users
        ],
    }
