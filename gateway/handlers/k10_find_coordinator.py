"""FindCoordinator (key 10): this single broker coordinates every group.

Transactions are not offered yet: a transactional id gets COORDINATOR_NOT_AVAILABLE, what Kafka answers
while no transaction coordinator can serve it."""

from __future__ import annotations

import asyncio

from gateway.broker import RequestContext
from gateway.groups.schema import OFFSETS_TOPIC, partition_for
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


async def _cluster_answer(ctx: RequestContext, key: str, key_type: int) -> dict:
    """Cluster mode: the leader of the group's `__consumer_offsets` partition coordinates it; the
    topic is created through ZooKeeper on first use (COORDINATOR_NOT_AVAILABLE meanwhile)."""
    answer = _answer(ctx, key, key_type)
    if answer["error_code"]:
        return answer
    node = ctx.broker.cluster
    tv = node.view.topic(OFFSETS_TOPIC)
    leader = None
    if tv is None:
        from gateway.cluster.admin import auto_create

        cfg = ctx.broker.config
        configs = {
            "cleanup.policy": "compact",
            "segment.bytes": str(cfg.get("offsets.topic.segment.bytes")),
        }
        await auto_create(
            node,
            OFFSETS_TOPIC,
            cfg.get("offsets.topic.num.partitions"),
            cfg.get("offsets.topic.replication.factor"),
            configs,
        )
    else:
        state = tv.states.get(partition_for(key, len(tv.assignment.partitions)))
        live = node.view.live_brokers()
        if state is not None and state.leader in live:
            leader = live[state.leader].endpoint(ctx.listener or node.listener)
            answer.update(node_id=state.leader, host=leader.host, port=leader.port)
    if leader is None:
        answer.update(
            error_code=E.COORDINATOR_NOT_AVAILABLE,
            error_message="The coordinator is not available.",
            node_id=-1,
            host="",
            port=-1,
        )
    return answer


@api(10, 0, 6)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Point every key at this broker (creating and loading `__consumer_offsets` on first use); in
    a cluster at the leader of the group's `__consumer_offsets` partition."""
    key_type = request.get("key_type", KEY_GROUP) if ctx.api_version >= 1 else KEY_GROUP
    if ctx.broker.cluster is not None:
        if ctx.api_version >= 4:
            keys = request.get("coordinator_keys") or []
            answers = [await _cluster_answer(ctx, k, key_type) for k in keys]
            return {"throttle_time": 0, "coordinators": answers}
        answer = await _cluster_answer(ctx, request.get("key") or "", key_type)
        del answer["key"]
        answer["throttle_time"] = 0
        return answer
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
