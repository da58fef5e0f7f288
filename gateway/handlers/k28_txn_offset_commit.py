"""TxnOffsetCommit (key 28): a transactional producer commits a group's offsets inside its
transaction (`sendOffsetsToTransaction`); they become the group's offsets when the transaction
commits (gateway/groups/txn_offsets.py). PRODUCER_FENCED from v3 (KIP-588); v3 adds the group's
generation and member, checked as OffsetCommit checks them."""

from __future__ import annotations

from gateway.broker import RequestContext
from gateway.groups.model import CommitEntry
from gateway.groups.service import group_service
from gateway.handlers.registry import api
from gateway.transactions.model import for_version
from rdmalog import errors as E
from rdmalog.security.authorizer import Operation, ResourceType

FENCED_SINCE = 3


@api(28, 0, 5)
async def handle(ctx: RequestContext, request: dict) -> dict:
    group, txn = request["group_id"], request["transactional_id"]
    topics = request.get("topics") or ()
    if not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn):
        denied_all = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not ctx.authorize(Operation.READ, ResourceType.GROUP, group):
        denied_all = E.GROUP_AUTHORIZATION_FAILED
    else:
        denied_all = None
    denied = {
        t["name"]
        for t in topics
        if denied_all is None and not ctx.authorize(Operation.READ, ResourceType.TOPIC, t["name"])
    }
    entries = [
        CommitEntry(
            t["name"],
            p["partition_index"],
            p["committed_offset"],
            p.get("committed_leader_epoch", -1),
            p.get("committed_metadata"),
        )
        for t in topics
        if denied_all is None and t["name"] not in denied
        for p in t["partitions"]
    ]
    results = {}
    groups = group_service(ctx.broker)
    if entries:
        results = groups.txn_offsets.commit(
            group,
            request["producer_id"],
            request["producer_epoch"],
            request.get("generation_id", -1),
            request.get("member_id") or "",
            request.get("group_instance_id"),
            entries,
        )
        failed = await groups.durable()
        if failed:  # a cluster: the ISR did not take them
            results = {tp: code or failed for tp, code in results.items()}

    def code(name: str, index: int) -> int:
        if denied_all is not None:
            return denied_all
        if name in denied:
            return E.TOPIC_AUTHORIZATION_FAILED
        return for_version(results.get((name, index), E.NONE), ctx.api_version, FENCED_SINCE)

    return {
        "throttle_time": 0,
        "topics": [
            {
                "name": t["name"],
                "partitions": [
                    {
                        "partition_index": p["partition_index"],
                        "error_code": code(t["name"], p["partition_index"]),
                    }
                    for p in t["partitions"]
                ],
            }
            for t in topics
        ],
    }
