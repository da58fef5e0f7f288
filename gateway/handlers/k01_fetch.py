"""Fetch (key 1): record batches straight from segment files, with long polling.

Each partition's records are a store FileSlice the server sends with sendfile. max_wait/min_bytes
long polls wake as soon as a partition's high watermark advances. Limits follow KIP-74: the first
batch of the first non-empty partition is always included, even when larger than the limits.
At isolation_level 1 (read_committed) reads stop at the last stable offset and each partition
carries the aborted transactions overlapping what it returns (from the log's `.txnindex`), which
the client uses to drop their records. Fetch sessions (KIP-227) are not kept: every response carries session id 0, which tells clients to
send full fetch requests (see docs/protocol.md).
"""

from __future__ import annotations

import asyncio

from gateway.broker import PartitionFields, RequestContext, RequestedPartitions
from gateway.handlers.registry import api
from gateway.request_limits import Turns
from rdmalog.errors import FETCH_SESSION_ID_NOT_FOUND, OFFSET_OUT_OF_RANGE, error_code_of
from rdmalog.security.authorizer import CLUSTER_NAME, Operation, ResourceType
from rdmalog.store.interface import Log

_EMPTY = b""
_BY_NAME = PartitionFields(topic="topic", index="partition", missing={"records": _EMPTY})
_BY_ID = _BY_NAME._replace(topic="topic_id")


def _requested(ctx: RequestContext, request: dict, by_id: bool) -> RequestedPartitions:
    """The partitions asked for: a consumer needs READ on each topic, a follower (replica id >= 0)
    CLUSTER_ACTION on the cluster, or every partition is refused (as Kafka does)."""
    fields = _BY_ID if by_id else _BY_NAME
    state = request.get("replica_state")
    replica = state["replica_id"] if state else request.get("replica_id", -1)
    if replica < 0:
        return ctx.partitions(request["topics"], fields, Operation.READ)
    if ctx.authorize(Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
        return ctx.broker.partitions(request["topics"], fields)
    return RequestedPartitions(ctx.broker, request["topics"], fields, lambda _name: False)


async def _read_all(
    ctx: RequestContext, request: dict, by_id: bool
) -> tuple[list, int, list[Log], bool]:
    """One pass over the requested partitions -> (responses, bytes, logs, any error); a request of
    many partitions gives the event loop its turns meanwhile."""
    budget = request.get("max_bytes", 0x7FFFFFFF)
    total = 0
    logs = []
    errors = False
    requested = _requested(ctx, request, by_id)
    committed = request.get("isolation_level", 0) == 1
    turns = Turns()  # a request may name a hundred thousand partitions
    for p, plog, parts in requested:
        if turns.due():
            await turns.take()
        index = p["partition"]
        hw = plog.high_watermark
        lso = plog.last_stable_offset
        start = plog.log_start_offset
        offset = p["fetch_offset"]
        entry = {
            "partition_index": index,
            "error_code": 0,
            "high_watermark": hw,
            "last_stable_offset": lso,
            "log_start_offset": start,
            "records": _EMPTY,
        }
        parts.append(entry)
        if offset < start or offset > plog.log_end_offset:
            entry["error_code"] = OFFSET_OUT_OF_RANGE
            errors = True
            continue
        logs.append(plog)
        upper = lso if committed else hw
        if offset >= upper:
            continue
        limit = min(p["partition_max_bytes"], budget - total)
        if total and limit <= 0:
            continue
        try:
            sl = plog.read(offset, max(limit, 1), upper if committed else None)
        except Exception as exc:
            entry["error_code"] = error_code_of(exc)
            errors = True
            continue
        if sl is None or sl.length == 0:
            continue
        if total and sl.length > limit:
            continue  # only the first non-empty partition may exceed the limits
        entry["records"] = sl
        total += sl.length
        if committed:
            _add_aborted(entry, plog, offset, sl, upper)
    return requested.topics, total, logs, errors or requested.missing > 0


def _add_aborted(entry: dict, plog: Log, offset: int, sl, lso: int) -> None:
    """The aborted transactions overlapping the slice read."""
    txns = plog.aborted_transactions(offset, lso, sl)
    if txns:
        entry["aborted_transactions"] = [
            {"producer_id": t.producer_id, "first_offset": t.first_offset} for t in txns
        ]


@api(1, 4, 16, eager=True)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Answer with whatever is readable, waiting up to max_wait for min_bytes to arrive."""
    if request.get("session_id", 0) != 0:
        # We never hand out session ids (see module docstring), so an incremental fetch on one
        # cannot be ours: Kafka answers FETCH_SESSION_ID_NOT_FOUND and the client starts over.
        return {"throttle_time": 0, "error_code": FETCH_SESSION_ID_NOT_FOUND, "responses": []}
    by_id = ctx.api_version >= 13
    responses, total, logs, errors = await _read_all(ctx, request, by_id)
    min_bytes = request.get("min_bytes", 0)
    wait_ms = request.get("max_wait", 0)
    if total < min_bytes and not errors and wait_ms > 0 and logs:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_ms / 1000.0
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            woke = await ctx.broker.wait_for_data(logs, remaining)
            responses, total, logs, errors = await _read_all(ctx, request, by_id)
            if total >= min_bytes or errors or not woke or not logs:
                break
    return {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": responses}
