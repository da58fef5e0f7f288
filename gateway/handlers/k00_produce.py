"""Produce (key 0): append record batches as sent (any codec) to partition logs.

Batches go to the store as memoryviews of the request frame; the store validates and patches them
in place. acks=0 gets no response at all; acks=1 and -1 are answered once the append is done (and
the log flushed off the event loop when the flush policy asks for it). The store validates each
batch (CRC, sizes against max.message.bytes, codec, every record as Kafka's LogValidator does) and
its exceptions carry the error codes, and per-record errors (`record_errors`, v8+).

v0-v2 may carry message sets of the old formats (magic 0 and 1): they are up-converted to one v2
batch first, as Kafka 3.x does, in the broker's conversion thread (a compressed set inflating
within `request.max.decoded.bytes`, else MESSAGE_TOO_LARGE). From v3 each partition's records must be exactly one v2 batch, and
zstd needs v7 (Kafka's ProduceRequest rules); a client's v2 batch starts at offset 0. Internal
topics take no produced records: INVALID_TOPIC_EXCEPTION unless the client id is Kafka's
`__admin_client` (as Kafka's ReplicaManager refuses them).
A transactional batch is first verified against its transaction
(gateway/transactions/verification.py).
"""

from __future__ import annotations

import asyncio
import logging

from gateway.broker import PartitionFields, RequestContext
from gateway.handlers.k03_metadata import INTERNAL_TOPICS
from gateway.handlers.registry import api
from gateway.request_limits import Turns
from gateway.transactions.verification import refusal, verify
from rdmalog.errors import (
    CORRUPT_MESSAGE,
    INVALID_RECORD,
    INVALID_REQUIRED_ACKS,
    INVALID_TOPIC_EXCEPTION,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    UNSUPPORTED_COMPRESSION_TYPE,
    error_code_of,
)
from rdmalog.security.authorizer import Operation, ResourceType
from rdmalog.store.compression import Codec
from rdmalog.store.legacy_format import is_legacy, up_convert
from rdmalog.store.records import (
    ATTRIBUTES,
    BATCH_OVERHEAD,
    CODEC_MASK,
    MAGIC,
    MAGIC_POS,
    read_header,
)

log = logging.getLogger("gateway.produce")

# Kafka's AdminUtils.ADMIN_CLIENT_ID: the one client id whose produce may append to internal topics
ADMIN_CLIENT_ID = "__admin_client"

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


def refusal_of(version: int, records: memoryview) -> tuple[int, str] | None:
    """Kafka's checks of a produce request's records before they reach the log: (code, message)
    when they fail one. A truncated batch is left to the store, which refuses it."""
    if len(records) <= MAGIC_POS:
        return None
    if records[MAGIC_POS] != MAGIC:
        if version < 3:
            return None  # a message set of the old formats: up-converted
        return INVALID_RECORD, (
            f"Produce requests with version {version} are only allowed to contain record "
            "batches with magic version 2"
        )
    if len(records) < BATCH_OVERHEAD:
        return None
    base_offset, size = read_header(records)
    if base_offset != 0:
        return INVALID_RECORD, (
            f"The baseOffset of the record batch should be 0, but it is {base_offset}"
        )
    if version >= 3:
        if version < 7 and records[ATTRIBUTES + 1] & CODEC_MASK == Codec.ZSTD:
            return UNSUPPORTED_COMPRESSION_TYPE, (
                f"Produce requests with version {version} are not allowed to use ZStandard "
                "compression"
            )
        if size < len(records):
            return INVALID_RECORD, (
                f"Produce requests with version {version} are only allowed to contain exactly "
                "one record batch per partition"
            )
    return None


def failed_append(plog, index: int, exc: Exception) -> dict:
    """The answer to a partition whose append raised `exc` (the store's error code and message,
    per-record errors from v8)."""
    code = error_code_of(exc)
    if code == -1:
        log.exception("append to %s-%d failed", plog.topic, index)
    return {
        "index": index,
        "error_code": code,
        "error_message": str(exc) or None,
        "record_errors": [
            {"batch_index": i, "batch_index_error_message": m}
            for i, m in getattr(exc, "record_errors", ())
        ],
    }


@api(0, 0, 11, eager=True)
async def handle(ctx: RequestContext, request: dict) -> dict | None:
    """Append each partition's records; report offsets or the store's error per partition."""
    broker = ctx.broker
    acks = request["acks"]
    if acks not in (0, 1, -1):
        return _refuse_all(request, INVALID_REQUIRED_ACKS)
    txn = request.get("transactional_id")
    if txn is not None and not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn):
        return _refuse_all(request, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    replicas = broker.cluster.replicas if broker.cluster is not None else None
    to_flush = []
    internal_allowed = ctx.client_id == ADMIN_CLIENT_ID
    to_replicate = []  # acks=all in a cluster: (answer, topic, partition, last offset)
    requested = ctx.partitions(request["topic_data"], FIELDS, Operation.WRITE)
    turns = Turns()  # a request may name a hundred thousand partitions
    for pd, plog, answers in requested:
        if turns.due():
            await turns.take()
        index = pd["index"]
        if plog.topic in INTERNAL_TOPICS and not internal_allowed:
            answers.append(
                {
                    "index": index,
                    "error_code": INVALID_TOPIC_EXCEPTION,
                    "error_message": f"Cannot append to internal topic {plog.topic}",
                }
            )
            continue
        records = pd["records"]
        if not records:
            answers.append(
                {"index": index, "error_code": CORRUPT_MESSAGE, "error_message": "no records"}
            )
            continue
        refused = refusal_of(ctx.api_version, records)
        if refused is not None:
            answers.append({"index": index, "error_code": refused[0], "error_message": refused[1]})
            continue
        if replicas is not None and acks == -1:  # enough replicas in sync (min.insync.replicas)
            code = replicas.check_produce(plog.topic, index, acks)
            if code:
                answers.append({"index": index, "error_code": code})
                continue
        refused_txn = txn is not None and (
            refusal(broker, txn, plog.topic, index, records)
            if replicas is None
            else await verify(broker, txn, plog, records)  # the coordinator may be elsewhere
        )
        if refused_txn:  # a transactional batch for a partition not in its transaction
            answers.append({"index": index, "error_code": refused_txn})
            continue
        try:
            if ctx.api_version < 3 and is_legacy(records):
                records = await broker.in_conversion_thread(
                    up_convert,
                    records,
                    plog.config.max_message_bytes,
                    broker.config.get("request.max.decoded.bytes"),
                )
            res = await broker.append(plog, records)
        except Exception as exc:
            answers.append(failed_append(plog, index, exc))
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
        answers.append(answer)
        if replicas is not None and acks == -1:
            to_replicate.append((answer, plog.topic, index, res.last_offset))
    if to_flush:
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(None, plog.flush) for plog in to_flush))
    if to_replicate:  # answered once the ISR has the batches (the request's timeout bounds it)
        timeout = request.get("timeout", 30000) / 1000
        codes = await replicas.wait_all_replicated(
            [(n, i, last) for _, n, i, last in to_replicate], timeout
        )
        for (answer, *_), code in zip(to_replicate, codes, strict=True):
            if code:
                answer.update(error_code=code, base_offset=-1)
    if acks == 0:
        if requested.denied and ctx.connection is not None:
            ctx.connection.abort()  # no answer to carry the error: Kafka closes the connection
        return None
    return {"responses": requested.topics, "throttle_time": 0}
