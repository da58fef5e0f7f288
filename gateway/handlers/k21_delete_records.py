"""DeleteRecords (key 21): move a partition's log start offset forward (offset -1: the high watermark).

The new log start offsets are checkpointed before the answer, so a deletion the client saw succeed
survives a crash of the broker (Kafka checkpoints them only periodically); when the checkpoint
cannot be written (a full disk) the moved partitions answer KAFKA_STORAGE_ERROR. Records of internal
topics are not deleted (INVALID_TOPIC_EXCEPTION, as in Kafka).
"""

from __future__ import annotations

import asyncio
import logging

from gateway.broker import (
    INVALID_TOPIC_EXCEPTION,
    UNKNOWN_TOPIC_OR_PARTITION,
    RequestContext,
    error_code_of,
    partition_of,
)
from gateway.handlers.answers import take_turns
from gateway.handlers.k03_metadata import INTERNAL_TOPICS
from gateway.handlers.registry import api
from rdmalog.errors import KafkaStorageError

log = logging.getLogger("gateway.delete_records")

KAFKA_STORAGE_ERROR = 56


def _delete(topic, name: str, p: dict) -> tuple[dict, bool]:
    """One partition's answer, and whether its log start offset moved."""
    index = p["partition_index"]
    entry = {"partition_index": index, "low_watermark": -1, "error_code": 0}
    plog = partition_of(topic, index)
    if plog is None:
        entry["error_code"] = UNKNOWN_TOPIC_OR_PARTITION
        return entry, False
    if name in INTERNAL_TOPICS:
        entry["error_code"] = INVALID_TOPIC_EXCEPTION
        return entry, False
    before = plog.log_start_offset
    try:
        entry["low_watermark"] = plog.delete_records(p["offset"])
    except Exception as exc:
        entry["error_code"] = error_code_of(exc)
    return entry, plog.log_start_offset != before


@api(21, 0, 2)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Delete records before each given offset; answer the new low watermark per partition."""
    broker = ctx.broker
    topics = []
    moved = []
    async for t in take_turns(request["topics"]):
        topic = broker.topic(t["name"])
        parts = []
        for p in t["partitions"]:
            entry, did_move = _delete(topic, t["name"], p)
            parts.append(entry)
            if did_move:
                moved.append(entry)
        topics.append({"name": t["name"], "partitions": parts})
    if moved:
        try:
            await asyncio.get_running_loop().run_in_executor(None, broker.store.checkpoint)
        except (OSError, KafkaStorageError) as exc:
            log.error(
                "DeleteRecords: the log start offsets of %d partitions moved but cannot be "
                "checkpointed in %s: %s",
                len(moved),
                broker.store.dir,
                exc,
            )
            for entry in moved:
                entry["error_code"], entry["low_watermark"] = KAFKA_STORAGE_ERROR, -1
    return {"throttle_time": 0, "topics": topics}
