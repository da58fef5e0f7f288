"""WriteTxnMarkers (key 27): a transaction coordinator asks a partition leader to write commit or
abort markers (broker to broker: CLUSTER_ACTION). rdmalog's own coordinator writes its markers
directly; this serves a coordinator elsewhere and tools that complete hanging transactions."""

from __future__ import annotations

from gateway.broker import RequestContext
from gateway.handlers.registry import api
from gateway.transactions.service import transaction_service
from rdmalog import errors as E
from rdmalog.errors import error_code_of
from rdmalog.security.authorizer import CLUSTER_NAME, Operation, ResourceType


@api(27, 1, 1)
async def handle(ctx: RequestContext, request: dict) -> dict:
    allowed = ctx.authorize(Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
    service = transaction_service(ctx.broker)
    answers = []
    for marker in request.get("markers") or ():
        pid, epoch = marker["producer_id"], marker["producer_epoch"]
        commit = bool(marker["transaction_result"])
        topics = []
        for t in marker.get("topics") or ():
            parts = []
            for index in t.get("partition_indexes") or ():
                plog = ctx.broker.partition(t["name"], index)
                if not allowed:
                    code = E.CLUSTER_AUTHORIZATION_FAILED
                elif isinstance(plog, int):
                    code = plog
                else:
                    try:
                        service.markers(pid, epoch, commit, [(t["name"], index)])
                        code = E.NONE
                    except Exception as exc:
                        code = error_code_of(exc)
                parts.append({"partition_index": index, "error_code": code})
            topics.append({"name": t["name"], "partitions": parts})
        answers.append({"producer_id": pid, "topics": topics})
    await service.durable()
    return {"markers": answers}
