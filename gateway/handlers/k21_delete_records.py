"""DeleteRecords (key 21): move a partition's log start offset forward (offset -1: the high watermark).

The new log start offsets are checkpointed before the answer, so a deletion the client saw succeed
survives a crash of the broker (Kafka checkpoints them only periodically).
"""

from __future__ import annotations

import asyncio

from gateway.broker import UNKNOWN_TOPIC_OR_PARTITION, RequestContext, error_code_of, partition_of
from gateway.handlers.registry import api


@api(21, 0, 2)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Delete records before each given offset; answer the new low watermark per partition."""
    broker = ctx.broker
    topics = []
    moved = False
    for t in request["topics"]:
        topic = broker.topic(t["name"])
        parts = []
        for p in t["partitions"]:
            index = p["partition_index"]
            entry = {"partition_index": index, "low_watermark": -1, "error_code": 0}
            plog = partition_of(topic, index)
            if code := broker.leader_error(t["name"], index):
                entry["error_code"] = code
            elif plog is None:
                entry["error_code"] = UNKNOWN_TOPIC_OR_PARTITION
            else:
                before = plog.log_start_offset
                try:
                    entry["low_watermark"] = plog.delete_records(p["offset"])
                except Exception as exc:
                    entry["error_code"] = error_code_of(exc)
                moved = moved or plog.log_start_offset != before
            parts.append(entry)
        topics.append({"name": t["name"], "partitions": parts})
    if moved:
        await asyncio.get_running_loop().run_in_executor(None, broker.store.checkpoint)
    return {"throttle_time": 0, "topics": topics}
