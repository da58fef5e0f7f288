"""DeleteRecords (key 21): move a partition's log start offset forward (offset -1: the high watermark).

The new log start offsets are checkpointed before the answer, so a deletion the client saw succeed
survives a crash of the broker (Kafka checkpoints them only periodically).
"""

from __future__ import annotations

import asyncio
import logging

from gateway.broker import PartitionFields, RequestContext
from gateway.handlers.k03_metadata import INTERNAL_TOPICS
from gateway.handlers.registry import api
from gateway.request_limits import Turns
from rdmalog.errors import (
    INVALID_TOPIC_EXCEPTION,
    KAFKA_STORAGE_ERROR,
    KafkaStorageError,
    error_code_of,
)
from rdmalog.security.authorizer import Operation

log = logging.getLogger("gateway.delete_records")

FIELDS = PartitionFields(missing={"low_watermark": -1})


@api(21, 0, 2)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Delete records before each given offset; answer the new low watermark per partition."""
    broker = ctx.broker
    moved = []
    requested = ctx.partitions(request["topics"], FIELDS, Operation.DELETE)
    turns = Turns()  # a request may name a hundred thousand partitions
    for p, plog, parts in requested:
        if turns.due():
            await turns.take()
        entry = {"partition_index": p["partition_index"], "low_watermark": -1, "error_code": 0}
        parts.append(entry)
        if plog.topic in INTERNAL_TOPICS:
            entry["error_code"] = INVALID_TOPIC_EXCEPTION
            continue
        before = plog.log_start_offset
        try:
            entry["low_watermark"] = plog.delete_records(p["offset"])
        except Exception as exc:
            entry["error_code"] = error_code_of(exc)
        if plog.log_start_offset != before:
            moved.append(entry)
    if moved:
        try:
            await asyncio.get_running_loop().run_in_executor(None, broker.checkpoint)
        except (OSError, KafkaStorageError) as exc:
            log.error(
                "DeleteRecords: the log start offsets of %d partitions moved but cannot be "
                "checkpointed in %s: %s",
                len(moved),
                broker.log_dir,
                exc,
            )
            for entry in moved:
                entry["error_code"], entry["low_watermark"] = KAFKA_STORAGE_ERROR, -1
    return {"throttle_time": 0, "topics": requested.topics}
