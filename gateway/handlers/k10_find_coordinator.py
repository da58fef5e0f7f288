"""FindCoordinator (key 10): this single broker coordinates every group.

Transactions are not offered yet: a transactional id gets COORDINATOR_NOT_AVAILABLE, what Kafka answers
while no transaction coordinator can serve it."""

from __future__ import annotations

import asyncio

from gateway.broker import RequestContext
from gateway.groups.schema import OFFSETS_TOPIC
from gateway.groups.service import group_service
from gateway.handlers.registry import api
from rdmalog import errors as E
from rdmalog.security.authorizer import Operation, ResourceType

KEY_GROUP, KEY_TRANSACTION = 0, 1


def _answer(ctx: RequestContext, key: str, key_type: int) -> dict:
    broker = ctx.broker
    if key_type not in (KEY_GROUP, KEY_TRANSACTION):
        return {
            "key": key,
            "error_code": E.INVALID_REQUEST,
            "error_message": f"unsupported coordinator key type {key_type}",
            "node_id": -1,
            "host": "",
            "port": -1,
        }
    kind = ResourceType.GROUP if key_type == KEY_GROUP else ResourceType.TRANSACTIONAL_ID
    if not ctx.authorize(Operation.DESCRIBE, kind, key):
        return {
            "key": key,
            "error_code": E.GROUP_AUTHORIZATION_FAILED
            if key_type == KEY_GROUP
            else E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "error_message": None,
            "node_id": -1,
            "host": "",
            "port": -1,
        }
    if key_type == KEY_TRANSACTION:
        return {
            "key": key,
            "error_code": E.COORDINATOR_NOT_AVAILABLE,
            "error_message": "transactions are not supported by this broker yet",
            "node_id": -1,
            "host": "",
            "port": -1,
        }
    if key_type == KEY_GROUP and not key:
        return {
            "key": key,
            "error_code": E.INVALID_GROUP_ID,
            "error_message": "the group id must not be empty",
            "node_id": -1,
            "host": "",
            "port": -1,
        }
    host, port = broker.endpoint(ctx.listener)
    return {
        "key": key,
        "error_code": E.NONE,
        "error_message": None,
        "node_id": broker.node_id,
        "host": host,
        "port": port,
    }


@api(10, 0, 6)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Point every key at this broker (creating and loading `__consumer_offsets` on first use)."""
    key_type = request.get("key_type", KEY_GROUP) if ctx.api_version >= 1 else KEY_GROUP
    if key_type == KEY_GROUP and ctx.broker.topic(OFFSETS_TOPIC) is None:
        # Kafka creates __consumer_offsets here. Its 50 partitions are tens to hundreds of ms of
        # file work: done in a thread so other connections are served meanwhile (the store
        # publishes the topic only once all its partitions exist).
        await asyncio.to_thread(group_service(ctx.broker).offsets.ensure)
    if ctx.api_version >= 4:
        keys = request.get("coordinator_keys") or []
        return {"throttle_time": 0, "coordinators": [_answer(ctx, k, key_type) for k in keys]}
    answer = _answer(ctx, request.get("key") or "", key_type)
    del answer["key"]
    answer["throttle_time"] = 0
    return answer
