"""ListOffsets (key 2): earliest (-2), latest (-1), max timestamp (-3) or the first offset at a time."""

from __future__ import annotations

from gateway.broker import UNKNOWN_TOPIC_OR_PARTITION, RequestContext, error_code_of, partition_of
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


@api(2, 1, 8, eager=True)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Answer each partition's query with the offset and the leader epoch it was written in."""
    broker = ctx.broker
    topics = []
    for t in request["topics"]:
        topic = broker.topic(t["name"])
        parts = []
        for p in t["partitions"]:
            index = p["partition_index"]
            code = broker.leader_error(t["name"], index, p.get("current_leader_epoch", -1))
            if code:
                parts.append({"partition_index": index, "error_code": code})
                continue
            plog = partition_of(topic, index)
            if plog is None:
                parts.append({"partition_index": index, "error_code": UNKNOWN_TOPIC_OR_PARTITION})
                continue
            try:
                ts, offset = _lookup(plog, p["timestamp"])
            except Exception as exc:
                parts.append({"partition_index": index, "error_code": error_code_of(exc)})
                continue
            parts.append(
                {
                    "partition_index": index,
                    "error_code": 0,
                    "timestamp": ts,
                    "offset": offset,
                    "leader_epoch": _epoch_at(topic.partitions[index], offset),
                }
            )
        topics.append({"name": t["name"], "partitions": parts})
    return {"throttle_time": 0, "topics": topics}
