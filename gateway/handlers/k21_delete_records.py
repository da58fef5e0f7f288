"""DeleteRecords (key 21): move a partition's log start offset forward (offset -1: the high watermark).

The new log start offsets are checkpointed before the answer, so a deletion the client saw succeed
survives a crash of the broker (Kafka checkpoints them only periodically).
"""

from __future__ import annotations

import asyncio

from gateway.broker import PartitionFields, RequestContext
from gateway.handlers.registry import api
from rdmalog.errors import error_code_of
from rdmalog.security.authorizer import Operation

FIELDS = PartitionFields(missing={"low_watermark": -1})


@api(21, 0, 2)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Delete records before each given offset; answer the new low watermark per partition."""
    broker = ctx.broker
    moved = False
    requested = ctx.partitions(request["topics"], FIELDS, Operation.DELETE)
    for p, plog, parts in requested:
        entry = {"partition_index": p["partition_index"], "low_watermark": -1, "error_code": 0}
        before = plog.log_start_offset
        try:
            entry["low_watermark"] = plog.delete_records(p["offset"])
        except Exception as exc:
            entry["error_code"] = error_code_of(exc)
        moved = moved or plog.log_start_offset != before
        parts.append(entry)
    if moved:
        await asyncio.get_running_loop().run_in_executor(None, broker.checkpoint)
    return {"throttle_time": 0, "topics": requested.topics}
