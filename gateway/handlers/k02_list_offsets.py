"""ListOffsets (key 2): earliest (-2), latest (-1), max timestamp (-3) or the first offset at a time."""

from __future__ import annotations

from gateway.broker import (
    INVALID_REQUEST,
    UNKNOWN_TOPIC_OR_PARTITION,
    RequestContext,
    error_code_of,
    partition_of,
)
from gateway.handlers.answers import answer_each, duplicates
from gateway.handlers.registry import api

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4  # KIP-405: without tiered storage the same as earliest


def _lookup(plog, timestamp: int) -> tuple[int, int]:
    """(timestamp, offset) answering a ListOffsets query on one partition log."""
    if timestamp == LATEST:
        return -1, plog.high_watermark
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return -1, plog.log_start_offset
    found = (
        plog.max_timestamp() if timestamp == MAX_TIMESTAMP else plog.offset_for_timestamp(timestamp)
    )
    if found is None:
        return -1, -1
    return found.timestamp, found.offset


def _epoch_at(plog, offset: int) -> int:
    """The leader epoch of `offset` (the current one at the log end), -1 when nothing was found."""
    if offset < 0:
        return -1
    if offset >= plog.log_end_offset:
        return plog.leader_epoch
    epoch = plog.leader_epochs.epoch_for(offset)
    return epoch if epoch >= 0 else plog.leader_epoch


def _answer(topic, p: dict) -> dict:
    """One partition's answer."""
    index = p["partition_index"]
    plog = partition_of(topic, index)
    if plog is None:
        return {"partition_index": index, "error_code": UNKNOWN_TOPIC_OR_PARTITION}
    try:
        ts, offset = _lookup(plog, p["timestamp"])
    except Exception as exc:
        return {"partition_index": index, "error_code": error_code_of(exc)}
    return {
        "partition_index": index,
        "error_code": 0,
        "timestamp": ts,
        "offset": offset,
        "leader_epoch": _epoch_at(plog, offset),
    }


@api(2, 1, 8, eager=True)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Answer each partition's query with the offset and the leader epoch it was written in; a
    partition named twice gets INVALID_REQUEST (as in Kafka)."""
    broker = ctx.broker
    dup = duplicates(
        (t["name"], p["partition_index"]) for t in request["topics"] for p in t["partitions"]
    )

    async def topic_answer(t: dict) -> dict:
        name = t["name"]
        topic = broker.topic(name)

        def partition_answer(p: dict) -> dict:
            if (name, p["partition_index"]) in dup:
                return {"partition_index": p["partition_index"], "error_code": INVALID_REQUEST}
            return _answer(topic, p)

        path = ("topics", "partitions")
        return {
            "name": name,
            "partitions": await answer_each(ctx, path, t["partitions"], partition_answer),
        }

    topics = await answer_each(ctx, ("topics",), request["topics"], topic_answer)
    return {"throttle_time": 0, "topics": topics}
