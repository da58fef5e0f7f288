"""FindCoordinator (key 10): this single broker coordinates every group and every transactional id
(key type 1), creating `__consumer_offsets` or `__transaction_state` on first use as Kafka does. In
a cluster the leader of the key's partition of that topic coordinates it (the topic created through
ZooKeeper once its replication factor's brokers are live)."""

from __future__ import annotations

import logging

from gateway.broker import RequestContext
from gateway.groups.schema import OFFSETS_TOPIC, partition_for
from gateway.groups.service import group_service
from gateway.handlers.answers import answer_each
from gateway.handlers.registry import api
from gateway.transactions.schema import TRANSACTION_STATE_TOPIC
from gateway.transactions.service import transaction_service
from rdmalog import errors as E
from rdmalog.security.authorizer import Operation, ResourceType

log = logging.getLogger("gateway.find_coordinator")

KEY_GROUP, KEY_TRANSACTION = 0, 1


def _refusal(key: str, code: int, message: str) -> dict:
    return {
        "key": key,
        "error_code": code,
        "error_message": message,
        "node_id": -1,
        "host": "",
        "port": -1,
    }


def _answer(ctx: RequestContext, key: str, key_type: int, unavailable: str | None) -> dict:
    """One key's coordinator; `unavailable` says why the group coordinator cannot serve now."""
    broker = ctx.broker
    if key_type not in (KEY_GROUP, KEY_TRANSACTION):
        return _refusal(key, E.INVALID_REQUEST, f"unsupported coordinator key type {key_type}")
    kind = ResourceType.GROUP if key_type == KEY_GROUP else ResourceType.TRANSACTIONAL_ID
    if not ctx.authorize(Operation.DESCRIBE, kind, key):
        denied = (
            E.GROUP_AUTHORIZATION_FAILED
            if key_type == KEY_GROUP
            else E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        )
        return {**_refusal(key, denied, ""), "error_message": None}
    if not key:
        if key_type == KEY_TRANSACTION:
            return _refusal(key, E.INVALID_REQUEST, "the transactional id must not be empty")
        return _refusal(key, E.INVALID_GROUP_ID, "the group id must not be empty")
    if unavailable is not None:
        return _refusal(key, E.COORDINATOR_NOT_AVAILABLE, unavailable)
    if broker.cluster is not None:
        return _cluster_answer(
            ctx, key, OFFSETS_TOPIC if key_type == KEY_GROUP else TRANSACTION_STATE_TOPIC
        )
    host, port = broker.endpoint(ctx.listener)
    return {
        "key": key,
        "error_code": E.NONE,
        "error_message": None,
        "node_id": broker.node_id,
        "host": host,
        "port": port,
    }


def _cluster_answer(ctx: RequestContext, key: str, topic: str) -> dict:
    """Cluster mode: the leader of the key's partition of `topic` (`__consumer_offsets` for a
    group, `__transaction_state` for a transactional id) coordinates it."""
    node = ctx.broker.cluster
    tv = node.view.topic(topic)
    state = None if tv is None else tv.states.get(partition_for(key, len(tv.assignment.partitions)))
    live = node.view.live_brokers()
    if state is None or state.leader not in live:
        return _refusal(key, E.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.")
    leader = live[state.leader].endpoint(ctx.listener or node.listener)
    return {
        "key": key,
        "error_code": E.NONE,
        "error_message": None,
        "node_id": state.leader,
        "host": leader.host,
        "port": leader.port,
    }


async def _offsets_topic_problem(ctx: RequestContext) -> str | None:
    """Create `__consumer_offsets` when missing; why it cannot be, or None. In a cluster it is
    created through ZooKeeper (offsets.topic.replication.factor live brokers needed)."""
    if ctx.broker.cluster is not None:
        cfg = ctx.broker.config
        return await _cluster_topic_problem(
            ctx,
            OFFSETS_TOPIC,
            cfg.get("offsets.topic.num.partitions"),
            cfg.get("offsets.topic.replication.factor"),
            {"segment.bytes": str(cfg.get("offsets.topic.segment.bytes"))},
        )
    if ctx.broker.topic(OFFSETS_TOPIC) is not None:
        return None
    # Kafka creates __consumer_offsets here. Its 50 partitions are tens to hundreds of ms of file
    # work: done in the admin thread so other connections are served meanwhile (the store
    # publishes the topic only once all its partitions exist).
    try:
        await ctx.broker.in_admin_thread(group_service(ctx.broker).offsets.ensure)
    except Exception as exc:  # a full disk, too few descriptors: Kafka's answer is "not yet"
        log.error("cannot create %s, so no group has a coordinator: %s", OFFSETS_TOPIC, exc)
        return f"the offsets topic cannot be created: {exc}"
    return None


async def _cluster_topic_problem(
    ctx: RequestContext, topic: str, partitions: int, rf: int, configs: dict[str, str]
) -> str | None:
    """Cluster mode: create a coordinator's topic (compacted) through ZooKeeper when missing;
    None once it exists, else why there is no coordinator yet."""
    node = ctx.broker.cluster
    if node.view.topic(topic) is not None:
        return None
    from gateway.cluster.admin import auto_create

    await auto_create(node, topic, partitions, rf, {"cleanup.policy": "compact", **configs})
    return f"{topic} is being created"


async def _transaction_topic_problem(ctx: RequestContext) -> str | None:
    """Create `__transaction_state` when missing; why it cannot be, or None. In a cluster it is
    created through ZooKeeper (transaction.state.log.replication.factor live brokers needed, its
    min.insync.replicas from transaction.state.log.min.isr, as Kafka creates it)."""
    if ctx.broker.cluster is not None:
        cfg = ctx.broker.config
        return await _cluster_topic_problem(
            ctx,
            TRANSACTION_STATE_TOPIC,
            cfg.get("transaction.state.log.num.partitions"),
            cfg.get("transaction.state.log.replication.factor"),
            {
                "segment.bytes": str(transaction_service(ctx.broker).config.segment_bytes),
                "min.insync.replicas": str(cfg.get("transaction.state.log.min.isr")),
            },
        )
    try:
        await transaction_service(ctx.broker).ensure_topic()
    except Exception as exc:
        log.error("cannot create __transaction_state, so no transaction coordinator: %s", exc)
        return f"the transaction state topic cannot be created: {exc}"
    return None


@api(10, 0, 6)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Point every key at this broker (creating and loading `__consumer_offsets` on first use)."""
    key_type = request.get("key_type", KEY_GROUP) if ctx.api_version >= 1 else KEY_GROUP
    unavailable = (
        await _offsets_topic_problem(ctx)
        if key_type == KEY_GROUP
        else await _transaction_topic_problem(ctx)
        if key_type == KEY_TRANSACTION
        else None
    )
    if ctx.api_version >= 4:
        keys = request.get("coordinator_keys") or []

        def batched(key: str) -> dict:
            answer = _answer(ctx, key, key_type, unavailable)
            answer["error_message"] = None  # Kafka's batched answers carry codes only
            return answer

        # every key is answered, duplicates too (as Kafka does)
        coordinators = await answer_each(ctx, ("coordinators",), keys, batched)
        return {"throttle_time": 0, "coordinators": coordinators}
    answer = _answer(ctx, request.get("key") or "", key_type, unavailable)
    del answer["key"]
    answer["throttle_time"] = 0
    return answer
