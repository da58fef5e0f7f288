"""InitProducerId (key 22): producer ids for idempotent producers.

Transactions are not offered yet: a request with a transactional id gets COORDINATOR_NOT_AVAILABLE, the
answer Kafka gives while no transaction coordinator can serve it (clients retry, then time out).
"""

from __future__ import annotations

import asyncio

from gateway.broker import RequestContext
from gateway.handlers.registry import api
from rdmalog.errors import COORDINATOR_NOT_AVAILABLE, INVALID_REQUEST


@api(22, 0, 5)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """A fresh producer id at epoch 0 (idempotent producers bump epochs themselves, KIP-360)."""
    txn = request.get("transactional_id")
    if txn is not None:  # an empty id is a malformed request in Kafka, any other waits for txns
        return {
            "throttle_time": 0,
            "error_code": INVALID_REQUEST if txn == "" else COORDINATOR_NOT_AVAILABLE,
            "producer_id": -1,
            "producer_epoch": -1,
        }
    # a new block of ids is fsync'ed before use: never on the event loop
    allocate = ctx.broker.allocate_producer_id
    producer_id = await asyncio.get_running_loop().run_in_executor(None, allocate)
    return {"throttle_time": 0, "error_code": 0, "producer_id": producer_id, "producer_epoch": 0}
