"""EndTxn (key 26): commit or abort the producer's transaction; answered once the markers are on
every partition of the transaction and its completion is in `__transaction_state` (in a cluster,
where markers go to other brokers, once the prepare is replicated and the markers are written or
a bounded wait passed: Kafka answers after the prepare alone)."""

from __future__ import annotations

from gateway.broker import RequestContext
from gateway.handlers.registry import api
from gateway.transactions.coordinator import TxnError
from gateway.transactions.model import for_version
from gateway.transactions.service import transaction_service
from rdmalog import errors as E
from rdmalog.security.authorizer import Operation, ResourceType

FENCED_SINCE = 2


@api(26, 0, 5)
async def handle(ctx: RequestContext, request: dict) -> dict:
    txn = request["transactional_id"]
    answer = {"throttle_time": 0, "error_code": E.NONE, "producer_id": -1, "producer_epoch": -1}
    if not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn):
        return {**answer, "error_code": E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    service = transaction_service(ctx.broker)
    try:
        service.coordinator.end(
            txn, request["producer_id"], request["producer_epoch"], bool(request["committed"])
        )
    except TxnError as exc:
        answer["error_code"] = for_version(exc.code, ctx.api_version, FENCED_SINCE)
    failed = await service.durable(txn)
    if failed and not answer["error_code"]:
        answer["error_code"] = (
            failed if failed == E.NOT_COORDINATOR else E.COORDINATOR_NOT_AVAILABLE
        )
    elif not answer["error_code"]:
        await service.ended(txn)  # a cluster: the markers are on every partition
    return answer
