"""DeleteTopics (key 20): delete topics by name (and, from v6, by topic id).

Internal topics are refused with INVALID_REQUEST: `__consumer_offsets` holds every committed
offset and group, which the coordinator would go on serving from memory until a restart lost them.
(Kafka 3.9's controller deletes it; only its old command-line tool refused.) A topic named twice
gets INVALID_REQUEST, as Kafka answers duplicates.
"""

from __future__ import annotations

import logging
import uuid
from typing import NamedTuple

from gateway.broker import RequestContext
from gateway.handlers.answers import answer_each, duplicates
from gateway.handlers.k03_metadata import INTERNAL_TOPICS
from gateway.handlers.registry import api
from rdmalog.errors import (
    INVALID_REQUEST,
    TOPIC_AUTHORIZATION_FAILED,
    TOPIC_DELETION_DISABLED,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    error_code_of,
)
from rdmalog.security.authorizer import Operation, ResourceType

log = logging.getLogger("gateway.delete_topics")

ZERO_ID = uuid.UUID(int=0)


def _fail(name: str | None, topic_id, code: int, message: str) -> dict:
    return {"name": name, "topic_id": topic_id, "error_code": code, "error_message": message}


class _ClusterTopic(NamedTuple):
    name: str
    topic_id: object


def _find(broker, name: str | None, topic_id):
    """The topic by name or id: the store's, or in a cluster ZooKeeper's (any broker answers)."""
    if broker.cluster is None:
        return broker.topic(name) if name is not None else broker.topic_by_id(topic_id)
    view = broker.cluster.view
    tv = view.topic(name) if name is not None else view.topic_by_id(topic_id)
    return None if tv is None else _ClusterTopic(tv.name, tv.assignment.topic_id)


async def _delete(ctx: RequestContext, name: str | None, topic_id) -> dict:
    broker = ctx.broker
    topic = _find(broker, name, topic_id)
    if name is not None and not ctx.authorize(Operation.DELETE, ResourceType.TOPIC, name):
        return {"name": name, "topic_id": topic_id, "error_code": TOPIC_AUTHORIZATION_FAILED}
    if topic is not None and name is None:
        # by id: Kafka answers TOPIC_AUTHORIZATION_FAILED only to who may describe the topic
        if not ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, topic.name):
            topic = None
        elif not ctx.authorize(Operation.DELETE, ResourceType.TOPIC, topic.name):
            return {"name": None, "topic_id": topic_id, "error_code": TOPIC_AUTHORIZATION_FAILED}
    if topic is None:
        code = UNKNOWN_TOPIC_OR_PARTITION if name is not None else UNKNOWN_TOPIC_ID
        return _fail(name, topic_id, code, "This server does not host this topic.")
    if not broker.config.get("delete.topic.enable"):
        return _fail(
            topic.name, topic.topic_id, TOPIC_DELETION_DISABLED, "Topic deletion is disabled."
        )
    if topic.name in INTERNAL_TOPICS:
        return _fail(
            topic.name,
            topic.topic_id,
            INVALID_REQUEST,
            f"Deletion of internal topic {topic.name} is prohibited.",
        )
    try:
        if broker.cluster is not None:  # the controller deletes it through ZooKeeper
            from gateway.cluster import admin

            if admin.not_controller(broker.cluster):
                return _fail(
                    topic.name, topic.topic_id, admin.NOT_CONTROLLER, "This is not the controller."
                )
            await admin.delete_topic(broker.cluster, topic.name, ctx.extra.get("timeout_ms", 30000))
        else:
            await broker.delete_topic(topic.name)
    except Exception as exc:
        code = error_code_of(exc)
        if code == -1:
            log.exception("deleting topic %s failed", topic.name)
        return _fail(topic.name, topic.topic_id, code, str(exc) or None)
    log.info("deleted topic %s", topic.name)
    return {"name": topic.name, "topic_id": topic.topic_id, "error_code": 0}


@api(20, 0, 6, eager=True)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Delete each named (or, v6, identified) topic."""
    ctx.extra["timeout_ms"] = request.get("timeout", 30000)  # in a cluster: how long to wait
    if ctx.api_version < 6:
        names = request["topic_names"]
        dup = duplicates(names)

        async def by_name(name: str) -> dict:
            if name in dup:
                return _fail(name, None, INVALID_REQUEST, "Duplicate topic name.")
            return await _delete(ctx, name, None)

        results = await answer_each(ctx, ("responses",), names, by_name)
        return {"throttle_time": 0, "responses": results}
    topics = request["topics"]
    dup = duplicates(t.get("name") or t.get("topic_id") for t in topics)

    async def by_name_or_id(t: dict) -> dict:
        name, topic_id = t.get("name"), t.get("topic_id") or ZERO_ID
        if name is not None and topic_id != ZERO_ID:
            return _fail(
                name, topic_id, INVALID_REQUEST, "You may not specify both topic name and topic id."
            )
        if name is None and topic_id == ZERO_ID:
            return _fail(
                None, topic_id, INVALID_REQUEST, "Neither topic name nor id were specified."
            )
        if (name or topic_id) in dup:
            what = "name" if name is not None else "id"
            return _fail(name, topic_id, INVALID_REQUEST, f"Duplicate topic {what}.")
        return await _delete(ctx, name, None if name is not None else topic_id)

    results = await answer_each(ctx, ("responses",), topics, by_name_or_id)
    return {"throttle_time": 0, "responses": results}
