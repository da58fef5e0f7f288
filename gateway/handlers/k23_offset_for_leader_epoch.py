"""OffsetForLeaderEpoch (key 23): where a leader epoch ends in the log, for truncation detection."""

from __future__ import annotations

from gateway.broker import UNKNOWN_TOPIC_OR_PARTITION, RequestContext, partition_of
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
    topics = []
    for t in request["topics"]:
        topic = broker.topic(t["topic"])
        parts = []
        for p in t["partitions"]:
            index = p["partition"]
            plog = partition_of(topic, index)
            if code := broker.leader_error(t["topic"], index, p.get("current_leader_epoch", -1)):
                parts.append({"partition": index, "error_code": code})
            elif plog is None:
                parts.append({"partition": index, "error_code": UNKNOWN_TOPIC_OR_PARTITION})
            else:
                parts.append(_answer(plog, p))
        topics.append({"topic": t["topic"], "partitions": parts})
    return {"throttle_time": 0, "topics": topics}
