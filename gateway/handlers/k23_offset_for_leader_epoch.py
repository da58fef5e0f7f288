"""OffsetForLeaderEpoch (key 23): where a leader epoch ends in the log, for truncation detection."""

from __future__ import annotations

from gateway.broker import UNKNOWN_TOPIC_OR_PARTITION, RequestContext, partition_of
from gateway.handlers.answers import answer_each
from gateway.handlers.registry import api

FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75


def _answer(plog, p: dict) -> dict:
    current = p.get("current_leader_epoch", -1)
    entry = {"partition": p["partition"], "error_code": 0, "leader_epoch": -1, "end_offset": -1}
    if current != -1 and current < plog.leader_epoch:
        entry["error_code"] = FENCED_LEADER_EPOCH
    elif current > plog.leader_epoch:
        entry["error_code"] = UNKNOWN_LEADER_EPOCH
    else:
        entry["leader_epoch"], entry["end_offset"] = plog.epoch_end_offset(p["leader_epoch"])
    return entry


@api(23, 2, 4)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Answer each partition from its leader epoch cache."""
    broker = ctx.broker

    async def topic_answer(t: dict) -> dict:
        topic = broker.topic(t["topic"])

        def partition_answer(p: dict) -> dict:
            plog = partition_of(topic, p["partition"])
            if plog is None:
                return {"partition": p["partition"], "error_code": UNKNOWN_TOPIC_OR_PARTITION}
            return _answer(plog, p)

        path = ("topics", "partitions")
        parts = await answer_each(ctx, path, t["partitions"], partition_answer)
        return {"topic": t["topic"], "partitions": parts}

    topics = await answer_each(ctx, ("topics",), request["topics"], topic_answer)
    return {"throttle_time": 0, "topics": topics}
