"""InitProducerId (key 22): producer ids for idempotent producers, and for transactional ones
through the transaction coordinator (fencing and epoch bumps, KIP-360 recovery with v3+)."""

from __future__ import annotations

import asyncio
import logging

from gateway.broker import RequestContext
from gateway.handlers.registry import api
from gateway.transactions.coordinator import TxnError
from gateway.transactions.model import for_version
from gateway.transactions.service import transaction_service
from rdmalog.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    INVALID_REQUEST,
    NOT_COORDINATOR,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    KafkaStorageError,
)
from rdmalog.security.authorizer import CLUSTER_NAME, Operation, ResourceType

log = logging.getLogger("gateway.init_producer_id")

FENCED_SINCE = 4  # KIP-588: PRODUCER_FENCED from v4


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


async def _transactional(ctx: RequestContext, request: dict, txn: str) -> dict:
    """Through the transaction coordinator (for an id it does not know, a new producer id is taken
    off the loop first: allocation may fsync)."""
    loop = asyncio.get_running_loop()
    service = transaction_service(ctx.broker)
    fresh = None
    try:
        await service.ensure_topic()
        if service.coordinator.coordinator_error is not None:  # a cluster: is it coordinated here?
            code = service.coordinator.coordinator_error(txn)
            if code:
                return _refused(code)
        if service.coordinator.describe(txn) is None:
            fresh = await loop.run_in_executor(None, ctx.broker.allocate_producer_id)
    except KafkaStorageError:
        return _refused(COORDINATOR_LOAD_IN_PROGRESS)
    except Exception as exc:
        log.error("no transaction coordinator: %s", exc)
        return _refused(COORDINATOR_NOT_AVAILABLE)
    try:
        pid, epoch = service.coordinator.init_producer_id(
            txn,
            request.get("transaction_timeout", 60000),
            request.get("producer_id", -1),
            request.get("producer_epoch", -1),
            fresh_id=fresh,
        )
    except TxnError as exc:
        return _refused(for_version(exc.code, ctx.api_version, FENCED_SINCE))
    failed = await service.durable(txn)
    if failed:  # a cluster: the ISR did not take it
        return _refused(failed if failed == NOT_COORDINATOR else COORDINATOR_NOT_AVAILABLE)
    return {"throttle_time": 0, "error_code": 0, "producer_id": pid, "producer_epoch": epoch}


@api(22, 0, 5)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """A fresh producer id at epoch 0 (idempotent producers bump epochs themselves, KIP-360), or
    a transactional id's producer id and epoch from its coordinator."""
    txn = request.get("transactional_id")
    if txn and not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn):
        return _refused(TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if txn is None and not (
        ctx.authorize(Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME)
        or _may_write_some_topic(ctx)
    ):
        return _refused(CLUSTER_AUTHORIZATION_FAILED)
    if txn == "":  # a malformed request in Kafka
        return _refused(INVALID_REQUEST)
    if txn is not None:
        return await _transactional(ctx, request, txn)
    # a new block of ids is fsync'ed before use: never on the event loop
    allocate = ctx.broker.allocate_producer_id
    try:
        producer_id = await asyncio.get_running_loop().run_in_executor(None, allocate)
    except KafkaStorageError:  # a full disk (logged): a retriable answer, clients ask again
        return _refused(COORDINATOR_LOAD_IN_PROGRESS)
    return {"throttle_time": 0, "error_code": 0, "producer_id": producer_id, "producer_epoch": 0}
