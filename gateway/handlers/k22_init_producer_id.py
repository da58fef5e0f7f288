"""InitProducerId (key 22): producer ids for idempotent producers.

Transactions are not offered yet: a request with a transactional id gets COORDINATOR_NOT_AVAILABLE, the
answer Kafka gives while no transaction coordinator can serve it (clients retry, then time out).
"""

from __future__ import annotations

import asyncio

from gateway.broker import RequestContext
from gateway.handlers.registry import api
from rdmalog.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    INVALID_REQUEST,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    KafkaStorageError,
)
from rdmalog.security.authorizer import CLUSTER_NAME, Operation, ResourceType


def _refused(code: int) -> dict:
    return {"throttle_time": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}


def _may_write_some_topic(ctx: RequestContext) -> bool:
    """Kafka 3's rule: an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on
    some topic (an ACL allowing WRITE to some topic for this principal, or an existing topic it
    may write)."""
    authorizer = ctx.broker.authorizer
    principal = str(ctx.principal)
    for acl in authorizer.acls() if hasattr(authorizer, "acls") else ():
        if (
            acl.allow
            and acl.resource_type == ResourceType.TOPIC
            and acl.operation in (Operation.WRITE, Operation.ALL)
            and acl.principal in (principal, f"{ctx.principal.type}:*")
            and ctx.authorize(Operation.WRITE, ResourceType.TOPIC, _a_name_of(acl))
        ):
            return True
    return any(
        ctx.authorize(Operation.WRITE, ResourceType.TOPIC, t.name) for t in ctx.broker.topics()
    )


def _a_name_of(acl) -> str:
    """A topic name the ACL's pattern covers (what a prefixed or wildcard pattern grants)."""
    return acl.name if acl.name != "*" else "_"


@api(22, 0, 5)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """A fresh producer id at epoch 0 (idempotent producers bump epochs themselves, KIP-360)."""
    txn = request.get("transactional_id")
    if txn and not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn):
        return _refused(TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if txn is None and not (
        ctx.authorize(Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME)
        or _may_write_some_topic(ctx)
    ):
        return _refused(CLUSTER_AUTHORIZATION_FAILED)
    if txn is not None:  # an empty id is a malformed request in Kafka, any other waits for txns
        return {
            "throttle_time": 0,
            "error_code": INVALID_REQUEST if txn == "" else COORDINATOR_NOT_AVAILABLE,
            "producer_id": -1,
            "producer_epoch": -1,
        }
    # a new block of ids is fsync'ed before use: never on the event loop
    allocate = ctx.broker.allocate_producer_id
    try:
        producer_id = await asyncio.get_running_loop().run_in_executor(None, allocate)
    except KafkaStorageError:  # a full disk (logged): a retriable answer, clients ask again
        return _refused(COORDINATOR_LOAD_IN_PROGRESS)
    return {"throttle_time": 0, "error_code": 0, "producer_id": producer_id, "producer_epoch": 0}
