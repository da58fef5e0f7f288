"""ElectLeaders (key 43): preferred (0) or unclean (1) leader election, as kafka-leader-election.sh
asks it. In a cluster the controller answers: a partition's first replica leads again when it is
live and in sync (ELECTION_NOT_NEEDED when it leads already); unclean elections are refused (turn
`unclean.leader.election.enable` on for the topic instead). One broker leads everything already."""

from __future__ import annotations

import asyncio

from gateway.broker import RequestContext
from gateway.handlers.registry import api
from rdmalog.errors import CLUSTER_AUTHORIZATION_FAILED
from rdmalog.security.authorizer import CLUSTER_NAME, Operation, ResourceType

PREFERRED, UNCLEAN = 0, 1
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_CONTROLLER = 41
INVALID_REQUEST = 42
ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
ELECTION_NOT_NEEDED = 84


@api(43, 0, 2)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Elect the preferred leaders of the named partitions (all of them when null)."""
    broker = ctx.broker
    if not ctx.authorize(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return {
            "throttle_time": 0,
            "error_code": CLUSTER_AUTHORIZATION_FAILED,
            "replica_election_results": [],
        }
    node = broker.cluster
    kind = request.get("election_type", PREFERRED) if ctx.api_version >= 1 else PREFERRED
    named = request.get("topic_partitions")
    wanted = None if named is None else [(t["topic"], p) for t in named for p in t["partitions"]]
    if node is None:
        if wanted is None:
            wanted = [
                (t.name, p) for t in broker.store.topics.values() for p in range(len(t.partitions))
            ]
        results = {
            (t, p): (ELECTION_NOT_NEEDED, "a single broker leads every partition")
            if broker.topic(t) is not None and p < len(broker.topic(t).partitions)
            else (UNKNOWN_TOPIC_OR_PARTITION, "unknown topic or partition")
            for t, p in wanted
        }
    else:
        controller = node.controller
        if controller is None or not controller.active:
            return {
                "throttle_time": 0,
                "error_code": NOT_CONTROLLER,
                "replica_election_results": [],
            }
        if kind != PREFERRED:
            results = {
                k: (ELIGIBLE_LEADERS_NOT_AVAILABLE, "unclean elections are not offered; set "
                    "unclean.leader.election.enable on the topic")
                for k in wanted or []
            }  # fmt: skip
        else:
            results = await asyncio.wrap_future(
                controller.call(lambda: controller.elect_preferred(wanted))
            )
    by_topic: dict[str, list[dict]] = {}
    for (topic, p), (code, message) in results.items():
        by_topic.setdefault(topic, []).append(
            {"partition_id": p, "error_code": code, "error_message": message}
        )
    return {
        "throttle_time": 0,
        "error_code": 0,
        "replica_election_results": [
            {"topic": t, "partition_result": parts} for t, parts in by_topic.items()
        ],
    }
