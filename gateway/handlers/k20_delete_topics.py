"""DeleteTopics (key 20): delete topics by name (and, from v6, by topic id)."""

from __future__ import annotations

import logging

from gateway.broker import RequestContext
from gateway.handlers.registry import api
from rdmalog.errors import (
    TOPIC_AUTHORIZATION_FAILED,
    TOPIC_DELETION_DISABLED,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    error_code_of,
)
from rdmalog.security.authorizer import Operation, ResourceType

log = logging.getLogger("gateway.delete_topics")


def _delete(ctx: RequestContext, name: str | None, topic_id) -> dict:
    broker = ctx.broker
    topic = broker.topic(name) if name is not None else broker.topic_by_id(topic_id)
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
        return {
            "name": name,
            "topic_id": topic_id,
            "error_code": code,
            "error_message": "This server does not host this topic.",
        }
    if not broker.config.get("delete.topic.enable"):
        return {
            "name": topic.name,
            "topic_id": topic.topic_id,
            "error_code": TOPIC_DELETION_DISABLED,
            "error_message": "Topic deletion is disabled.",
        }
    try:
        broker.delete_topic(topic.name)
    except Exception as exc:
        code = error_code_of(exc)
        if code == -1:
            log.exception("deleting topic %s failed", topic.name)
        return {
            "name": topic.name,
            "topic_id": topic.topic_id,
            "error_code": code,
            "error_message": str(exc) or None,
        }
    log.info("deleted topic %s", topic.name)
    return {"name": topic.name, "topic_id": topic.topic_id, "error_code": 0}


@api(20, 1, 6, eager=True)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Delete each named (or, v6, identified) topic."""
    if ctx.api_version >= 6:
        results = [_delete(ctx, t.get("name"), t.get("topic_id")) for t in request["topics"]]
    else:
        results = [_delete(ctx, name, None) for name in request["topic_names"]]
    return {"throttle_time": 0, "responses": results}
