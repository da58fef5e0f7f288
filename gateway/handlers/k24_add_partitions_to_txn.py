"""AddPartitionsToTxn (key 24): partitions join a producer's transaction before it writes to them.

v0-v3 come from clients (one transactional id; PRODUCER_FENCED from v2, KIP-588); v4+ are batched
by brokers (many ids, `verify_only` to check membership, KIP-890) and need CLUSTER_ACTION. A partition
the sender may not write gets TOPIC_AUTHORIZATION_FAILED, one that does not exist
UNKNOWN_TOPIC_OR_PARTITION, and then the others OPERATION_NOT_ATTEMPTED, as Kafka answers.
"""

from __future__ import annotations

from gateway.broker import RequestContext
from gateway.handlers.registry import api
from gateway.transactions.coordinator import TxnError
from gateway.transactions.model import OPERATION_NOT_ATTEMPTED, for_version
from gateway.transactions.service import transaction_service
from rdmalog import errors as E
from rdmalog.security.authorizer import CLUSTER_NAME, Operation, ResourceType

FENCED_SINCE = 2


def _results(topics: list[dict], code_of) -> list[dict]:
    return [
        {
            "name": t["name"],
            "results_by_partition": [
                {"partition_index": p, "partition_error_code": code_of(t["name"], p)}
                for p in t["partitions"]
            ],
        }
        for t in topics
    ]


def _exists(ctx: RequestContext, topic: str, partition: int) -> bool:
    """Whether the partition exists (in a cluster: in ZooKeeper's view, led here or not)."""
    node = ctx.broker.cluster
    if node is not None:
        return node.replicas.partition_count(topic) > partition >= 0
    return not isinstance(ctx.broker.partition(topic, partition), int)


def _failed(results: list[dict], failed: int) -> list[dict]:
    """Every partition answered with `failed` (a state write the ISR did not take)."""
    code = failed if failed == E.NOT_COORDINATOR else E.COORDINATOR_NOT_AVAILABLE
    for t in results:
        for p in t["results_by_partition"]:
            if p["partition_error_code"] == E.NONE:
                p["partition_error_code"] = code
    return results


def _add(ctx: RequestContext, txn: str, pid: int, epoch: int, topics: list[dict], verify: bool):
    """Add one transaction's partitions; its per-partition results."""
    if not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn):
        return _results(topics, lambda *_: E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    problems: dict[tuple[str, int], int] = {}
    for t in topics:
        denied = not ctx.authorize(Operation.WRITE, ResourceType.TOPIC, t["name"])
        for p in t["partitions"]:
            if denied:
                problems[(t["name"], p)] = E.TOPIC_AUTHORIZATION_FAILED
            elif not _exists(ctx, t["name"], p):
                problems[(t["name"], p)] = E.UNKNOWN_TOPIC_OR_PARTITION
    if problems:
        return _results(topics, lambda n, p: problems.get((n, p), OPERATION_NOT_ATTEMPTED))
    wanted = [(t["name"], p) for t in topics for p in t["partitions"]]
    try:
        transaction_service(ctx.broker).coordinator.add_partitions(txn, pid, epoch, wanted, verify)
        code = E.NONE
    except TxnError as exc:
        code = for_version(exc.code, ctx.api_version, FENCED_SINCE)
    return _results(topics, lambda *_: code)


@api(24, 0, 5)
async def handle(ctx: RequestContext, request: dict) -> dict:
    service = transaction_service(ctx.broker)
    if ctx.api_version < 4:
        topics = [
            {"name": t["name"], "partitions": list(t["partitions"])}
            for t in request.get("v3_and_below_topics") or ()
        ]
        results = _add(
            ctx,
            request["v3_and_below_transactional_id"],
            request["v3_and_below_producer_id"],
            request["v3_and_below_producer_epoch"],
            topics,
            False,
        )
        failed = await service.durable(request["v3_and_below_transactional_id"])
        if failed:
            results = _failed(results, failed)
        return {"throttle_time": 0, "results_by_topic_v3_and_below": results}
    if not ctx.authorize(Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
        return {
            "throttle_time": 0,
            "error_code": E.CLUSTER_AUTHORIZATION_FAILED,
            "results_by_transaction": [],
        }
    answers = []
    for txn in request.get("transactions") or ():
        topics = [{"name": t["name"], "partitions": list(t["partitions"])} for t in txn["topics"]]
        answers.append(
            {
                "transactional_id": txn["transactional_id"],
                "topic_results": _add(
                    ctx,
                    txn["transactional_id"],
                    txn["producer_id"],
                    txn["producer_epoch"],
                    topics,
                    bool(txn.get("verify_only")),
                ),
            }
        )
    failed = await service.durable()
    if failed:
        for a in answers:
            _failed(a["topic_results"], failed)
    return {"throttle_time": 0, "error_code": E.NONE, "results_by_transaction": answers}
