"""AddOffsetsToTxn (key 25): a group's `__consumer_offsets` partition joins the producer's transaction,
so that its TxnOffsetCommit offsets are settled by the transaction's marker there."""

from __future__ import annotations

import logging

from gateway.broker import RequestContext
from gateway.groups.schema import OFFSETS_TOPIC, partition_for
from gateway.groups.service import group_service
from gateway.handlers.registry import api
from gateway.transactions.coordinator import TxnError
from gateway.transactions.model import for_version
from gateway.transactions.service import transaction_service
from rdmalog import errors as E
from rdmalog.security.authorizer import Operation, ResourceType

log = logging.getLogger("gateway.add_offsets_to_txn")

FENCED_SINCE = 2


@api(25, 0, 4)
async def handle(ctx: RequestContext, request: dict) -> dict:
    txn, group = request["transactional_id"], request["group_id"]
    if not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn):
        return {"throttle_time": 0, "error_code": E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    if not ctx.authorize(Operation.READ, ResourceType.GROUP, group):
        return {"throttle_time": 0, "error_code": E.GROUP_AUTHORIZATION_FAILED}
    groups = group_service(ctx.broker)
    service = transaction_service(ctx.broker)
    node = ctx.broker.cluster
    if node is not None:  # a cluster: the topic comes through ZooKeeper (FindCoordinator)
        count = node.replicas.partition_count(OFFSETS_TOPIC) or ctx.broker.config.get(
            "offsets.topic.num.partitions"
        )  # as Kafka, the configured count while the topic does not exist yet
        partition = (OFFSETS_TOPIC, partition_for(group, count))
    else:
        try:
            if ctx.broker.topic(OFFSETS_TOPIC) is None:  # file work: in the admin thread
                await ctx.broker.in_admin_thread(groups.offsets.ensure)
        except Exception as exc:
            log.error("cannot create %s: %s", OFFSETS_TOPIC, exc)
            return {"throttle_time": 0, "error_code": E.COORDINATOR_NOT_AVAILABLE}
        partition = (OFFSETS_TOPIC, groups.offsets.partition_of(group))
    try:
        service.coordinator.add_partitions(
            txn, request["producer_id"], request["producer_epoch"], [partition]
        )
        code = E.NONE
    except TxnError as exc:
        code = for_version(exc.code, ctx.api_version, FENCED_SINCE)
    failed = await service.durable(txn)
    if failed and not code:
        code = failed if failed == E.NOT_COORDINATOR else E.COORDINATOR_NOT_AVAILABLE
    return {"throttle_time": 0, "error_code": code}
