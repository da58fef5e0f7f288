"""ListPartitionReassignments (key 46): the reassignments in progress (adding/removing replicas in the
topics' assignments); none with one broker."""

from __future__ import annotations

from gateway.broker import RequestContext
from gateway.handlers.registry import api
from rdmalog.errors import CLUSTER_AUTHORIZATION_FAILED
from rdmalog.security.authorizer import CLUSTER_NAME, Operation, ResourceType


@api(46, 0, 0)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Every ongoing reassignment, or those of the named partitions."""
    if not ctx.authorize(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return {
            "throttle_time": 0,
            "error_code": CLUSTER_AUTHORIZATION_FAILED,
            "error_message": "Authorization failed.",
            "topics": [],
        }
    node = ctx.broker.cluster
    topics = []
    if node is not None:
        wanted = request.get("topics")
        only = None if wanted is None else {t["name"]: set(t["partition_indexes"]) for t in wanted}
        with node.view.lock:
            tvs = list(node.view.topics.values())
        for tv in tvs:
            a = tv.assignment
            moving = sorted(set(a.adding) | set(a.removing))
            if only is not None:
                moving = [p for p in moving if p in only.get(tv.name, ())]
            if moving:
                topics.append(
                    {
                        "name": tv.name,
                        "partitions": [
                            {
                                "partition_index": p,
                                "replicas": a.partitions.get(p, []),
                                "adding_replicas": a.adding.get(p, []),
                                "removing_replicas": a.removing.get(p, []),
                            }
                            for p in moving
                        ],
                    }
                )
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "topics": topics}
