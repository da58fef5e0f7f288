"""Fetch (key 1): record batches straight from segment files, with long polling.

Each partition's records are a store FileSlice the server sends with sendfile. max_wait/min_bytes
long polls wake as soon as a partition's high watermark advances. Limits follow KIP-74: the first
batch of the first non-empty partition is always included, even when larger than the limits.
Fetch sessions (KIP-227) are not kept: every response carries session id 0, which tells clients to
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
_BY_NAME = PartitionFields(
    topic="topic", index="partition", missing={"records": _EMPTY}, epoch="current_leader_epoch"
)
_BY_ID = _BY_NAME._replace(topic="topic_id")


def replica_id_of(request: dict, version: int) -> int:
    """The fetching replica's broker id (-1: a consumer); v15 moved it into replica_state."""
    if version >= 15:
        return (request.get("replica_state") or {}).get("replica_id", -1)
    return request.get("replica_id", -1)


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
    ctx: RequestContext, request: dict, by_id: bool, replica_id: int = -1
) -> tuple[list, int, list[Log], bool]:
    """One pass over the requested partitions -> (responses, bytes, logs, any error); a request of
    many partitions gives the event loop its turns meanwhile.

    In a cluster a follower (replica_id >= 0) reads up to the log end offset, and its fetch offset
    tells the leader how far it has come (consumers read up to the high watermark)."""
    replicas = ctx.broker.cluster.replicas if replica_id >= 0 else None
    budget = request.get("max_bytes", 0x7FFFFFFF)
    total = 0
    logs = []
    errors = False
    requested = _requested(ctx, request, by_id)
    turns = Turns()  # a request may name a hundred thousand partitions
    for p, plog, parts in requested:
        if turns.due():
            await turns.take()
        index = p["partition"]
        offset = p["fetch_offset"]
        if replicas is not None:
            code = replicas.follower_fetch(
                plog.topic, index, replica_id, offset, p.get("current_leader_epoch", -1)
            )
            if code:
                parts.append(
                    {
                        "partition_index": index,
                        "error_code": code,
                        "high_watermark": plog.high_watermark,
                        "log_start_offset": plog.log_start_offset,
                        "records": _EMPTY,
                    }
                )
                errors = True
                continue
        hw = plog.high_watermark
        start = plog.log_start_offset
        upper = hw if replicas is None else plog.log_end_offset
        entry = {
            "partition_index": index,
            "error_code": 0,
            "high_watermark": hw,
            "last_stable_offset": hw,
            "log_start_offset": start,
            "records": _EMPTY,
        }
        parts.append(entry)
        if offset < start or offset > plog.log_end_offset:
            entry["error_code"] = OFFSET_OUT_OF_RANGE
            errors = True
            continue
        if replicas is not None and replicas.pushing(plog.topic, index, replica_id):
            continue  # its records are written to it (push replication): the high watermark only
        logs.append(plog)
        if offset >= upper:
            continue
        limit = min(p["partition_max_bytes"], budget - total)
        if total and limit <= 0:
            continue
        try:
            sl = plog.read(offset, max(limit, 1), upper_bound=None if replicas is None else upper)
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
    return requested.topics, total, logs, errors or requested.missing > 0


@api(1, 4, 16, eager=True)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Answer with whatever is readable, waiting up to max_wait for min_bytes to arrive."""
    if request.get("session_id", 0) != 0:
        # We never hand out session ids (see module docstring), so an incremental fetch on one
        # cannot be ours: Kafka answers FETCH_SESSION_ID_NOT_FOUND and the client starts over.
        return {"throttle_time": 0, "error_code": FETCH_SESSION_ID_NOT_FOUND, "responses": []}
    by_id = ctx.api_version >= 13
    # in a cluster a follower's fetch (replica id >= 0); a single broker serves consumers only
    replica_id = replica_id_of(request, ctx.api_version) if ctx.broker.cluster is not None else -1
    responses, total, logs, errors = await _read_all(ctx, request, by_id, replica_id)
    min_bytes = request.get("min_bytes", 0)
    wait_ms = request.get("max_wait", 0)
    if total < min_bytes and not errors and wait_ms > 0 and logs:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_ms / 1000.0
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            if replica_id >= 0:  # followers wait for appends, consumers for the high watermark
                woke = await ctx.broker.cluster.replicas.wait_for_appends(logs, remaining)
            else:
                woke = await ctx.broker.wait_for_data(logs, remaining)
            responses, total, logs, errors = await _read_all(ctx, request, by_id, replica_id)
            if total >= min_bytes or errors or not woke or not logs:
                break
    return {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": responses}
