"""DescribeLogDirs (key 35): the broker's log directory, its partitions and their sizes."""

from __future__ import annotations

import shutil

from gateway.broker import Broker, RequestContext
from gateway.handlers.registry import api
from rdmalog.errors import CLUSTER_AUTHORIZATION_FAILED
from rdmalog.security.authorizer import CLUSTER_NAME, Operation, ResourceType


def _partitions(broker: Broker, wanted: list[dict] | None) -> list[dict]:
    """Topics and partitions to report: all of them (topics null) or the requested ones we host."""
    if wanted is None:
        selection = {t.name: None for t in broker.topics()}
    else:
        selection = {t["topic"]: set(t["partitions"]) for t in wanted}
    out = []
    for name, indexes in selection.items():
        topic = broker.topic(name)
        if topic is None:
            continue
        parts = [
            {
                "partition_index": i,
                "partition_size": plog.size_in_bytes,
                "offset_lag": 0,
                "is_future_key": False,
            }
            for i, plog in enumerate(topic.partitions)
            if indexes is None or i in indexes
        ]
        if parts:
            out.append({"name": name, "partitions": parts})
    return out


@api(35, 0, 4)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """One result for the broker's log directory (rdmalog keeps all logs in one)."""
    broker = ctx.broker
    if not ctx.authorize(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        code = CLUSTER_AUTHORIZATION_FAILED if ctx.api_version >= 3 else 0
        return {"throttle_time": 0, "error_code": code, "results": []}
    log_dir = str(broker.log_dir)
    usage = shutil.disk_usage(log_dir)
    return {
        "throttle_time": 0,
        "error_code": 0,
        "results": [
            {
                "error_code": 0,
                "log_dir": log_dir,
                "topics": _partitions(broker, request.get("topics")),
                "total_bytes": usage.total,
                "usable_bytes": usage.free,
            }
        ],
    }
