"""DescribeTransactions (key 65): the state of transactional ids (DESCRIBE on each), with the
partitions of their ongoing transaction (those of topics the sender may describe). In a cluster an
id coordinated by another broker is answered NOT_COORDINATOR (the admin client asks its
coordinator, found with FindCoordinator)."""

from __future__ import annotations

from gateway.broker import RequestContext
from gateway.handlers.registry import api
from gateway.transactions.model import TRANSACTIONAL_ID_NOT_FOUND
from gateway.transactions.service import transaction_service
from rdmalog import errors as E
from rdmalog.security.authorizer import Operation, ResourceType


@api(65, 0, 0)
async def handle(ctx: RequestContext, request: dict) -> dict:
    coordinator = transaction_service(ctx.broker).coordinator
    states = []
    for txn in request.get("transactional_ids") or ():
        answer = {
            "error_code": E.NONE,
            "transactional_id": txn,
            "transaction_state": "",
            "transaction_timeout": 0,
            "transaction_start_time": -1,
            "producer_id": -1,
            "producer_epoch": -1,
            "topics": [],
        }
        meta = coordinator.describe(txn)
        elsewhere = coordinator.coordinator_error(txn) if coordinator.coordinator_error else 0
        if not ctx.authorize(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn):
            answer["error_code"] = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        elif elsewhere:  # a cluster: another broker coordinates it
            answer["error_code"] = elsewhere
        elif meta is None:
            answer["error_code"] = TRANSACTIONAL_ID_NOT_FOUND
        else:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(meta.partitions):
                if ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, topic):
                    by_topic.setdefault(topic, []).append(partition)
            answer.update(
                transaction_state=meta.state.kafka_name,
                transaction_timeout=meta.timeout_ms,
                transaction_start_time=meta.start_ms,
                producer_id=meta.producer_id,
                producer_epoch=meta.producer_epoch,
                topics=[{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
            )
        states.append(answer)
    return {"throttle_time": 0, "transaction_states": states}
