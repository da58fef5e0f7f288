"""DescribeProducers (key 61, KIP-664): the active producers of partitions this broker leads, from
each partition's producer state (producer id and epoch, last sequence and timestamp, the coordinator
epoch of its last marker, the first offset of its open transaction). READ on the topic is needed, as
Kafka asks; a partition led elsewhere is answered NOT_LEADER_OR_FOLLOWER (the admin client asks each
partition's leader)."""

from __future__ import annotations

from gateway.broker import PartitionFields, RequestContext
from gateway.handlers.registry import api
from gateway.request_limits import Turns
from rdmalog.security.authorizer import Operation
from rdmalog.store.interface import Log

FIELDS = PartitionFields(missing={"error_message": None, "active_producers": []})


def _producers(plog: Log) -> list[dict]:
    state = plog.producer_state
    with plog.lock:
        return [
            {
                "producer_id": pid,
                "producer_epoch": entry.epoch,
                "last_sequence": entry.last_seq,
                "last_timestamp": entry.batches[-1].timestamp if entry.batches else -1,
                "coordinator_epoch": entry.coordinator_epoch,
                "current_txn_start_offset": state.ongoing.get(pid, -1),
            }
            for pid, entry in state.producers.items()
        ]


@api(61, 0, 0)
async def handle(ctx: RequestContext, request: dict) -> dict:
    topics = [
        {"name": t["name"], "partitions": [{"partition_index": i} for i in t["partition_indexes"]]}
        for t in request.get("topics") or ()
    ]
    requested = ctx.partitions(topics, FIELDS, Operation.READ)
    turns = Turns()  # a request may name a hundred thousand partitions
    for p, plog, parts in requested:
        if turns.due():
            await turns.take()
        parts.append(
            {
                "partition_index": p["partition_index"],
                "error_code": 0,
                "error_message": None,
                "active_producers": _producers(plog),
            }
        )
    return {"throttle_time": 0, "topics": requested.topics}
