"""ListTransactions (key 66): the transactional ids the sender may describe, filtered by state,
producer id and (v1, KIP-994) how long their transaction has been running."""

from __future__ import annotations

from gateway.broker import RequestContext
from gateway.handlers.registry import api
from gateway.transactions.model import TxnState
from gateway.transactions.service import transaction_service
from rdmalog import errors as E
from rdmalog.security.authorizer import Operation, ResourceType

STATE_NAMES = {s.kafka_name for s in TxnState}


@api(66, 0, 1)
async def handle(ctx: RequestContext, request: dict) -> dict:
    coordinator = transaction_service(ctx.broker).coordinator
    filters = list(request.get("state_filters") or ())
    unknown = [s for s in filters if s not in STATE_NAMES]
    known = [s for s in filters if s in STATE_NAMES]
    listed = []
    if not filters or known:
        for meta in coordinator.list(
            known, request.get("producer_id_filters") or (), request.get("duration_filter", -1)
        ):
            if ctx.authorize(
                Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, meta.transactional_id
            ):
                listed.append(
                    {
                        "transactional_id": meta.transactional_id,
                        "producer_id": meta.producer_id,
                        "transaction_state": meta.state.kafka_name,
                    }
                )
    return {
        "throttle_time": 0,
        "error_code": E.NONE,
        "unknown_state_filters": unknown,
        "transaction_states": listed,
    }
