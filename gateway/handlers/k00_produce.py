"""Produce (key 0): append record batches as sent (any codec) to partition logs.

Batches go to the store as memoryviews of the request frame; the store validates and patches them
in place. acks=0 gets no response at all; acks=1 and -1 are answered once the append is done (and
the log flushed off the event loop when the flush policy asks for it). The store validates each
batch (CRC, sizes against max.message.bytes, codec) and its exceptions carry the error codes.
"""

from __future__ import annotations

import asyncio
import logging

from gateway.broker import (
    CORRUPT_MESSAGE,
    INVALID_REQUIRED_ACKS,
    UNKNOWN_TOPIC_OR_PARTITION,
    RequestContext,
    error_code_of,
    partition_of,
)
from gateway.handlers.registry import api

log = logging.getLogger("gateway.produce")


async def _append(broker, name: str, index: int, plog, records):
    """Append to the log, or through the RDMA service when native producers may share the head file
    (a shared grant orders this append with their RDMA writes, which may wait: off the loop)."""
    rdma = broker.rdma
    if rdma is None:
        return plog.append(records)
    res = rdma.try_append(name, index, records)
    if res is None:
        res = await asyncio.get_running_loop().run_in_executor(
            None, rdma.append, name, index, records
        )
    return res


@api(0, 3, 11, eager=True)
async def handle(ctx: RequestContext, request: dict) -> dict | None:
    """Append each partition's records; report offsets or the store's error per partition."""
    broker = ctx.broker
    store = broker.store
    acks = request["acks"]
    replicas = broker.cluster.replicas if broker.cluster is not None else None
    to_flush = []
    to_replicate = []  # acks=all in cluster mode: (answer, topic, partition, last offset)
    responses = []
    for td in request["topic_data"]:
        name = td["name"]
        topic = store.topics.get(name)
        parts = []
        for pd in td["partition_data"]:
            index = pd["index"]
            records = pd["records"]
            if acks not in (0, 1, -1):
                parts.append({"index": index, "error_code": INVALID_REQUIRED_ACKS})
                continue
            if replicas is not None:  # cluster mode: only the leader appends
                code = replicas.check_produce(name, index, acks)
                if code:
                    parts.append({"index": index, "error_code": code})
                    continue
            plog = partition_of(topic, index)
            if plog is None:
                parts.append({"index": index, "error_code": UNKNOWN_TOPIC_OR_PARTITION})
                continue
            if not records:
                parts.append(
                    {"index": index, "error_code": CORRUPT_MESSAGE, "error_message": "no records"}
                )
                continue
            try:
                res = await _append(broker, name, index, plog, records)
            except Exception as exc:
                code = error_code_of(exc)
                if code == -1:
                    log.exception("append to %s-%d failed", name, index)
                parts.append(
                    {"index": index, "error_code": code, "error_message": str(exc) or None}
                )
                continue
            if res.flush_needed:
                to_flush.append(plog)
            t = res.log_append_time
            answer = {
                "index": index,
                "error_code": 0,
                "base_offset": res.base_offset,
                "log_append_time": -1 if t is None else t,
                "log_start_offset": res.log_start_offset,
            }
            parts.append(answer)
            if replicas is not None and acks == -1:
                to_replicate.append((answer, name, index, res.last_offset))
        responses.append({"name": name, "partition_responses": parts})
    if to_flush:
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(None, plog.flush) for plog in to_flush))
    if to_replicate:  # answered once the ISR has the batches (the request's timeout bounds it)
        timeout = request.get("timeout", 30000) / 1000
        codes = await asyncio.gather(
            *(replicas.wait_replicated(n, i, last, timeout) for _, n, i, last in to_replicate)
        )
        for (answer, *_), code in zip(to_replicate, codes, strict=True):
            if code:
                answer.update(error_code=code, base_offset=-1)
    if acks == 0:
        return None
    return {"responses": responses, "throttle_time": 0}
