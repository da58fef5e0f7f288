"""ListOffsets (key 2): earliest (-2), latest (-1), max timestamp (-3) or the first offset at a time.

v0 answers with Kafka's old offsets array (segment start offsets before a time, `max_num_offsets` of
them, newest first); v9 adds latest-tiered (-5), which without tiered storage finds nothing.
"""

from __future__ import annotations

from gateway.broker import PartitionFields, RequestContext
from gateway.handlers.answers import duplicates
from gateway.handlers.registry import api
from gateway.request_limits import Turns
from rdmalog.errors import INVALID_REQUEST, UNSUPPORTED_VERSION, error_code_of
from rdmalog.security.authorizer import Operation
from rdmalog.store.interface import Log

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4  # KIP-405: without tiered storage the same as earliest
LATEST_TIERED = -5  # KIP-1005: without tiered storage, no offset (-1, epoch -1)


def _lookup(plog: Log, timestamp: int, read_committed: bool = False) -> tuple[int, int]:
    """(timestamp, offset) answering a ListOffsets query on one partition log (latest is the last
    stable offset for read_committed consumers)."""
    if timestamp == LATEST:
        return -1, plog.last_stable_offset if read_committed else plog.high_watermark
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return -1, plog.log_start_offset
    if timestamp == LATEST_TIERED:
        return -1, -1
    found = (
        plog.max_timestamp() if timestamp == MAX_TIMESTAMP else plog.offset_for_timestamp(timestamp)
    )
    if found is None:
        return -1, -1
    return found.timestamp, found.offset


def _epoch_at(plog: Log, offset: int) -> int:
    """The leader epoch of `offset` (the current one at the log end), -1 when nothing was found."""
    if offset < 0:
        return -1
    if offset >= plog.log_end_offset:
        return plog.leader_epoch
    epoch = plog.leader_epochs.epoch_for(offset)
    return epoch if epoch >= 0 else plog.leader_epoch


def _old_style(plog: Log, p: dict, from_consumer: bool) -> dict:
    """A v0 answer: Kafka's legacy offsets, capped at the high watermark for consumers."""
    timestamp = p["timestamp"]
    if timestamp < EARLIEST:  # v0 knows only latest and earliest among the special values
        return {"partition_index": p["partition_index"], "error_code": UNSUPPORTED_VERSION}
    offsets = plog.legacy_offsets_before(timestamp, p["max_num_offsets"])
    hw = plog.high_watermark
    if from_consumer and any(o > hw for o in offsets):
        offsets = [hw] + [o for o in offsets if o <= hw]
    return {"partition_index": p["partition_index"], "error_code": 0, "old_style_offsets": offsets}


@api(2, 0, 9, eager=True)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Answer each partition's query with the offset and the leader epoch it was written in; a
    partition named twice gets INVALID_REQUEST (as in Kafka)."""
    twice = duplicates(
        (t["name"], p["partition_index"]) for t in request["topics"] for p in t["partitions"]
    )
    requested = ctx.partitions(
        request["topics"], PartitionFields(epoch="current_leader_epoch"), Operation.DESCRIBE
    )
    v0 = ctx.api_version == 0
    turns = Turns()  # a request may name a hundred thousand partitions
    for p, plog, parts in requested:
        if turns.due():
            await turns.take()
        index = p["partition_index"]
        if twice and (plog.topic, index) in twice:
            parts.append({"partition_index": index, "error_code": INVALID_REQUEST})
            continue
        try:
            if v0:
                parts.append(_old_style(plog, p, request["replica_id"] == -1))
                continue
            ts, offset = _lookup(plog, p["timestamp"], request.get("isolation_level") == 1)
        except Exception as exc:
            parts.append({"partition_index": index, "error_code": error_code_of(exc)})
            continue
        parts.append(
            {
                "partition_index": index,
                "error_code": 0,
                "timestamp": ts,
                "offset": offset,
                "leader_epoch": _epoch_at(plog, offset),
            }
        )
    return {"throttle_time": 0, "topics": requested.topics}
