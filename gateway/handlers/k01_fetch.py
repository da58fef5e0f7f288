"""Fetch (key 1): record batches straight from segment files, with long polling.

Each partition's records are a store FileSlice the server sends with sendfile. max_wait/min_bytes
long polls wake as soon as a partition's high watermark advances. Limits follow KIP-74: the first
batch of the first non-empty partition is always included, even when larger than the limits.
At isolation_level 1 (read_committed) reads stop at the last stable offset and each partition
carries the aborted transactions overlapping what it returns (from the log's `.txnindex`), which
the client uses to drop their records. Fetch sessions (KIP-227) are not kept: every response
carries session id 0, which tells clients to send full fetch requests (see docs/protocol.md).

v0-v3 consumers cannot read v2 batches: their records are down-converted to message format v0 (v0-1)
or v1 (v2-3) as Kafka 3.x does (`message.downconversion.enable` false: UNSUPPORTED_VERSION). That
cannot be sendfile'd: each partition's read is converted in memory, within its byte limits (and
the broker's `fetch.max.bytes` per response). v0-v2 predate KIP-74: a first batch larger than the
partition's limit is not returned to them.
"""

from __future__ import annotations

import asyncio

from gateway.broker import PartitionFields, RequestContext, RequestedPartitions
from gateway.handlers.registry import api
from gateway.request_limits import Turns
from rdmalog.errors import (
    FETCH_SESSION_ID_NOT_FOUND,
    KAFKA_STORAGE_ERROR,
    NOT_LEADER_OR_FOLLOWER,
    OFFSET_OUT_OF_RANGE,
    UNSUPPORTED_VERSION,
    error_code_of,
)
from rdmalog.security.authorizer import CLUSTER_NAME, Operation, ResourceType
from rdmalog.store.interface import Log
from rdmalog.store.legacy_format import MAGIC_V0, MAGIC_V1, down_convert
from rdmalog.store.segment import FileSlice

_EMPTY = b""
_BY_NAME = PartitionFields(
    topic="topic", index="partition", missing={"records": _EMPTY}, epoch="current_leader_epoch"
)
_BY_ID = _BY_NAME._replace(topic="topic_id")


async def _down_converted(
    ctx: RequestContext, plog: Log, sl: FileSlice, offset: int, limit: int
) -> bytes:
    """A read for a v0-v3 fetch as a message set of format v0 (v0-1) or v1 (v2-3), converted in
    the broker's conversion thread (a compressed batch inflating within request.max.decoded.bytes)."""
    version = ctx.api_version
    if not plog.config.get("message.downconversion.enable"):
        raise _Refused(UNSUPPORTED_VERSION)
    if version <= 2 and sl.length > limit:
        return _EMPTY  # no KIP-74 before v3: nothing whole fits
    magic = MAGIC_V0 if version <= 1 else MAGIC_V1
    broker = ctx.broker
    inflated = broker.config.get("request.max.decoded.bytes")
    return await broker.in_conversion_thread(_convert_read, sl, magic, offset, limit, inflated)


def _convert_read(sl: FileSlice, magic: int, offset: int, limit: int, inflated: int) -> bytes:
    return down_convert(sl.read(), magic, offset, limit, inflated)


class _Refused(Exception):
    """A partition answered with an error code instead of records."""

    def __init__(self, code: int) -> None:
        self.error_code = code


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
    ctx: RequestContext, request: dict, by_id: bool, replica_id: int = -1, again: bool = False
) -> tuple[list, int, list[Log], bool, dict[str, int]]:
    """One pass over the requested partitions -> (responses, bytes, logs, any error, bytes per
    topic); a request of many partitions gives the event loop its turns meanwhile.

    In a cluster a follower (replica_id >= 0) reads up to the log end offset, and its fetch offset
    tells the leader how far it has come (consumers read up to the high watermark): once per
    request, as Kafka's (`again`: a read after a wait, which only checks the leadership)."""
    replicas = ctx.broker.cluster.replicas if replica_id >= 0 else None
    version = ctx.api_version
    budget = min(request.get("max_bytes", 0x7FFFFFFF), ctx.broker.config.get("fetch.max.bytes"))
    total = 0
    logs = []
    errors = False
    by_topic: dict[str, int] = {}
    requested = _requested(ctx, request, by_id)
    committed = request.get("isolation_level", 0) == 1
    turns = Turns()  # a request may name a hundred thousand partitions
    for p, plog, parts in requested:
        if turns.due():
            await turns.take()
        index = p["partition"]
        offset = p["fetch_offset"]
        if replicas is not None:
            epoch = p.get("current_leader_epoch", -1)
            code = (
                replicas.leader_error(plog.topic, index, epoch)
                if again
                else replicas.follower_fetch(plog.topic, index, replica_id, offset, epoch)
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
        lso = plog.last_stable_offset
        start = plog.log_start_offset
        # followers read to the log end, read_committed consumers to the last stable offset
        upper = plog.log_end_offset if replicas is not None else lso if committed else hw
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
        if replicas is not None and replicas.pushing(plog.topic, index, replica_id):
            continue  # its records are written to it (push replication): the high watermark only
        logs.append(plog)
        if offset >= upper:
            continue
        limit = min(p["partition_max_bytes"], budget - total)
        if total and limit <= 0:
            continue
        try:
            sl = plog.read(
                offset, max(limit, 1), upper_bound=upper if committed or replicas else None
            )
            if sl is None or sl.length == 0:
                continue
            if total and sl.length > limit:
                continue  # only the first non-empty partition may exceed the limits
            records = sl if version > 3 else await _down_converted(ctx, plog, sl, offset, limit)
        except Exception as exc:
            code = error_code_of(exc)
            if code == KAFKA_STORAGE_ERROR and version <= 5:
                code = NOT_LEADER_OR_FOLLOWER  # what clients before v6 retry on, as in Kafka
            entry["error_code"] = code
            errors = True
            continue
        entry["records"] = records
        size = len(records) if isinstance(records, bytes) else records.length
        total += size
        by_topic[plog.topic] = by_topic.get(plog.topic, 0) + size
        if committed:
            _add_aborted(entry, plog, offset, sl, upper)
    return requested.topics, total, logs, errors or requested.missing > 0, by_topic


def _add_aborted(entry: dict, plog: Log, offset: int, sl, lso: int) -> None:
    """The aborted transactions overlapping the slice read."""
    txns = plog.aborted_transactions(offset, lso, sl)
    if txns:
        entry["aborted_transactions"] = [
            {"producer_id": t.producer_id, "first_offset": t.first_offset} for t in txns
        ]


@api(1, 0, 17, eager=True)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Answer with whatever is readable, waiting up to max_wait for min_bytes to arrive."""
    if request.get("session_id", 0) != 0:
        # We never hand out session ids (see module docstring), so an incremental fetch on one
        # cannot be ours: Kafka answers FETCH_SESSION_ID_NOT_FOUND and the client starts over.
        return {"throttle_time": 0, "error_code": FETCH_SESSION_ID_NOT_FOUND, "responses": []}
    by_id = ctx.api_version >= 13
    # in a cluster a follower's fetch (replica id >= 0); a single broker serves consumers only
    replica_id = replica_id_of(request, ctx.api_version) if ctx.broker.cluster is not None else -1
    responses, total, logs, errors, by_topic = await _read_all(ctx, request, by_id, replica_id)
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
            responses, total, logs, errors, by_topic = await _read_all(
                ctx, request, by_id, replica_id, again=True
            )
            if total >= min_bytes or errors or not woke or not logs:
                break
    if by_topic:
        ctx.broker.metrics.fetched(by_topic)
    return {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": responses}
