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


async def _delete_in_cluster(
    ctx: RequestContext, name: str | None, topic_id, timeout_ms: int
) -> dict:
    """Cluster mode: the controller marks the topic for deletion in ZooKeeper and deletes it."""
    from gateway.cluster import admin

    node = ctx.broker.cluster
    tv = node.view.topic(name) if name is not None else node.view.topic_by_id(topic_id)
    out = {"name": name, "topic_id": topic_id, "error_code": 0}
    if name is not None and not ctx.authorize(Operation.DELETE, ResourceType.TOPIC, name):
        out["error_code"] = TOPIC_AUTHORIZATION_FAILED
        return out
    if tv is None:
        out["error_code"] = UNKNOWN_TOPIC_OR_PARTITION if name is not None else UNKNOWN_TOPIC_ID
        out["error_message"] = "This server does not host this topic."
        return out
    out.update(name=tv.name, topic_id=tv.assignment.topic_id)
    if not ctx.authorize(Operation.DELETE, ResourceType.TOPIC, tv.name):
        out["error_code"] = TOPIC_AUTHORIZATION_FAILED
    elif not ctx.broker.config.get("delete.topic.enable"):
        out.update(error_code=TOPIC_DELETION_DISABLED, error_message="Topic deletion is disabled.")
    elif admin.not_controller(node):
        out.update(error_code=admin.NOT_CONTROLLER, error_message="This is not the controller.")
    else:
        try:
            await admin.delete_topic(node, tv.name, timeout_ms)
        except Exception as exc:
            out.update(error_code=admin.error_code_of(exc), error_message=str(exc) or None)
    return out


@api(20, 1, 6, eager=True)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Delete each named (or, v6, identified) topic."""
    if ctx.broker.cluster is not None:
        timeout_ms = request.get("timeout", 30000)
        if ctx.api_version >= 6:
            named = [(t.get("name"), t.get("topic_id")) for t in request["topics"]]
        else:
            named = [(name, None) for name in request["topic_names"]]
        results = [await _delete_in_cluster(ctx, n, i, timeout_ms) for n, i in named]
        return {"throttle_time": 0, "responses": results}
    if ctx.api_version >= 6:
        results = [_delete(ctx, t.get("name"), t.get("topic_id")) for t in request["topics"]]
    else:
        results = [_delete(ctx, name, None) for name in request["topic_names"]]
    return {"throttle_time": 0, "responses": results}
