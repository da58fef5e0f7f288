"""DescribeCluster (key 60): the cluster id, the controller and the brokers."""

from __future__ import annotations

from gateway.broker import RequestContext
from gateway.cluster.metadata import describe_cluster_brokers
from gateway.handlers.registry import api
from rdmalog.errors import UNSUPPORTED_ENDPOINT_TYPE
from rdmalog.security.authorizer import CLUSTER_NAME, Operation, ResourceType

BROKERS_ENDPOINT = 1
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


@api(60, 0, 2)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Describe this cluster (one broker, or the brokers registered in ZooKeeper)."""
    broker = ctx.broker
    endpoint_type = request.get("endpoint_type", BROKERS_ENDPOINT)
    response = {
        "throttle_time": 0,
        "error_code": 0,
        "error_message": None,
        "endpoint_type": endpoint_type,
        "cluster_id": broker.cluster_id or "",
        "controller_id": broker.node_id,
        "brokers": [
            {
                "broker_id": b["node_id"],
                "host": b["host"],
                "port": b["port"],
                "rack": b["rack"],
                "is_fenced": False,
            }
            for b in broker.brokers(ctx.listener)
        ],
        "cluster_authorized_operations": ctx.authorized_operations(
            ResourceType.CLUSTER, CLUSTER_NAME
        )
        if request.get("include_cluster_authorized_operations")
        and ctx.authorize(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
        else AUTHORIZED_OPERATIONS_OMITTED,
    }
    if broker.cluster is not None:  # the cluster as ZooKeeper has it
        view = broker.cluster.view
        response["controller_id"] = view.controller_id
        response["brokers"] = describe_cluster_brokers(
            view, ctx.listener or broker.cluster.listener
        )
    if endpoint_type != BROKERS_ENDPOINT:
        response.update(
            error_code=UNSUPPORTED_ENDPOINT_TYPE,
            error_message="only the brokers endpoint type is served",
            brokers=[],
        )
    return response
