"""OffsetForLeaderEpoch (key 23): where a leader epoch ends in the log, for truncation detection."""

from __future__ import annotations

from gateway.broker import PartitionFields, RequestContext
from gateway.handlers.registry import api
from gateway.request_limits import Turns
from rdmalog.errors import FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH
from rdmalog.security.authorizer import Operation
from rdmalog.store.interface import Log

FIELDS = PartitionFields(
    topic="topic", index="partition", answer_index="partition", epoch="current_leader_epoch"
)


def _answer(plog: Log, p: dict) -> dict:
    current = p.get("current_leader_epoch", -1)
    entry = {"partition": p["partition"], "error_code": 0, "leader_epoch": -1, "end_offset": -1}
    if current != -1 and current < plog.leader_epoch:
        entry["error_code"] = FENCED_LEADER_EPOCH
    elif current > plog.leader_epoch:
        entry["error_code"] = UNKNOWN_LEADER_EPOCH
    else:
        entry["leader_epoch"], entry["end_offset"] = plog.epoch_end_offset(p["leader_epoch"])
    return entry


@api(23, 0, 4)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Answer each partition from its leader epoch cache."""
    requested = ctx.partitions(request["topics"], FIELDS, Operation.DESCRIBE)
    turns = Turns()  # a request may name a hundred thousand partitions
    for p, plog, parts in requested:
        if turns.due():
            await turns.take()
        parts.append(_answer(plog, p))
    return {"throttle_time": 0, "topics": requested.topics}
