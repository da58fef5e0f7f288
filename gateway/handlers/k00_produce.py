"""Produce (key 0): append record batches as sent (any codec) to partition logs.

Batches go to the store as memoryviews of the request frame; the store validates and patches them
in place. acks=0 gets no response at all; acks=1 and -1 are answered once the append is done (and
the log flushed off the event loop when the flush policy asks for it). The store validates each
batch (CRC, sizes against max.message.bytes, codec) and its exceptions carry the error codes; a
transactional batch is first verified against its transaction (gateway/transactions/verification.py).
"""

from __future__ import annotations

import asyncio
import logging

from gateway.broker import PartitionFields, RequestContext
from gateway.handlers.registry import api
from gateway.request_limits import Turns
from gateway.transactions.verification import refusal
from rdmalog.errors import (
    CORRUPT_MESSAGE,
    INVALID_REQUIRED_ACKS,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    error_code_of,
)
from rdmalog.security.authorizer import Operation, ResourceType

log = logging.getLogger("gateway.produce")

FIELDS = PartitionFields(
    partitions="partition_data", index="index", answers="partition_responses", answer_index="index"
)


def _refuse_all(request: dict, code: int) -> dict:
    """Every partition of the request answered with `code`."""
    return {
        "responses": [
            {
                "name": td["name"],
                "partition_responses": [
                    {"index": pd["index"], "error_code": code} for pd in td["partition_data"]
                ],
            }
            for td in request["topic_data"]
        ],
        "throttle_time": 0,
    }


@api(0, 3, 11, eager=True)
async def handle(ctx: RequestContext, request: dict) -> dict | None:
    """Append each partition's records; report offsets or the store's error per partition."""
    broker = ctx.broker
    acks = request["acks"]
    if acks not in (0, 1, -1):
        return _refuse_all(request, INVALID_REQUIRED_ACKS)
    txn = request.get("transactional_id")
    if txn is not None and not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn):
        return _refuse_all(request, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    to_flush = []
    requested = ctx.partitions(request["topic_data"], FIELDS, Operation.WRITE)
    turns = Turns()  # a request may name a hundred thousand partitions
    for pd, plog, answers in requested:
        if turns.due():
            await turns.take()
        index = pd["index"]
        records = pd["records"]
        if not records:
            answers.append(
                {"index": index, "error_code": CORRUPT_MESSAGE, "error_message": "no records"}
            )
            continue
        refused = txn is not None and refusal(broker, txn, plog.topic, index, records)
        if refused:  # a transactional batch for a partition not in its transaction
            answers.append({"index": index, "error_code": refused})
            continue
        try:
            res = await broker.append(plog, records)
        except Exception as exc:
            code = error_code_of(exc)
            if code == -1:
                log.exception("append to %s-%d failed", plog.topic, index)
            answers.append({"index": index, "error_code": code, "error_message": str(exc) or None})
            continue
        if res.flush_needed:
            to_flush.append(plog)
        t = res.log_append_time
        answers.append(
            {
                "index": index,
                "error_code": 0,
                "base_offset": res.base_offset,
                "log_append_time": -1 if t is None else t,
                "log_start_offset": res.log_start_offset,
            }
        )
    if to_flush:
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(None, plog.flush) for plog in to_flush))
    if acks == 0:
        if requested.denied and ctx.connection is not None:
            ctx.connection.abort()  # no answer to carry the error: Kafka closes the connection
        return None
    return {"responses": requested.topics, "throttle_time": 0}
