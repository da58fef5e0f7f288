"""WriteTxnMarkers (key 27): a transaction coordinator asks a partition leader to write commit or
abort markers (broker to broker: CLUSTER_ACTION). In a cluster the coordinators send it to the
leaders of their transactions' partitions (gateway/transactions/marker_sender.py); each marker is
answered once the ISR has it. It also serves tools that complete hanging transactions."""

from __future__ import annotations

from gateway.broker import RequestContext
from gateway.handlers.registry import api
from gateway.transactions.marker_sender import mark_here
from gateway.transactions.service import transaction_service
from rdmalog import errors as E
from rdmalog.security.authorizer import CLUSTER_NAME, Operation, ResourceType


@api(27, 1, 1)
async def handle(ctx: RequestContext, request: dict) -> dict:
    allowed = ctx.authorize(Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
    transaction_service(ctx.broker)
    answers = []
    for marker in request.get("markers") or ():
        pid, epoch = marker["producer_id"], marker["producer_epoch"]
        wanted = [
            (t["name"], index)
            for t in marker.get("topics") or ()
            for index in t.get("partition_indexes") or ()
        ]
        if allowed:
            codes = await mark_here(
                ctx.broker,
                pid,
                epoch,
                bool(marker["transaction_result"]),
                marker.get("coordinator_epoch", 0),
                wanted,
            )
        else:
            codes = dict.fromkeys(wanted, E.CLUSTER_AUTHORIZATION_FAILED)
        topics = [
            {
                "name": t["name"],
                "partitions": [
                    {"partition_index": index, "error_code": codes[(t["name"], index)]}
                    for index in t.get("partition_indexes") or ()
                ],
            }
            for t in marker.get("topics") or ()
        ]
        answers.append({"producer_id": pid, "topics": topics})
    return {"markers": answers}
