"""OffsetFetch (key 9): v1-v10; one group until v7, a batch of groups from v8, topic ids in v10.

Partitions without a committed offset answer offset -1; a null topic list asks for all of them.
A group named again in a batch gets INVALID_REQUEST instead of its offsets a second time.
"""

from __future__ import annotations

from gateway.broker import RequestContext
from gateway.groups.coordinator import GroupCoordinator
from gateway.groups.service import group_service
from gateway.handlers.answers import answer_each
from gateway.handlers.registry import api
from rdmalog import errors as E
from rdmalog.security.authorizer import Operation, ResourceType


def _fetch_group(ctx: RequestContext, coordinator: GroupCoordinator, group_id: str, topics) -> dict:
    """One group's answer: {"error_code", "topics"} in the request's (or the group's) topic order."""
    by_id = ctx.api_version >= 10
    broker = ctx.broker
    if not ctx.authorize(Operation.DESCRIBE, ResourceType.GROUP, group_id):
        return {"error_code": E.GROUP_AUTHORIZATION_FAILED, "topics": []}
    describable = ctx.topic_check(Operation.DESCRIBE) or (lambda _name: True)
    if topics is None:
        wanted = None
    else:
        wanted, names = [], []
        for t in topics:
            if by_id:
                topic = broker.topic_by_id(t.get("topic_id"))
                name = topic.name if topic is not None else None
            else:
                name = t["name"]
            names.append((t, name))
            if name is not None and describable(name):
                wanted += [(name, p) for p in t.get("partition_indexes") or ()]
    error, fetched = coordinator.fetch_offsets(group_id, wanted)
    grouped: dict[str, list[dict]] = {}
    for f in fetched:
        grouped.setdefault(f.topic, []).append(
            {
                "partition_index": f.partition,
                "committed_offset": f.offset,
                "committed_leader_epoch": f.leader_epoch,
                "metadata": f.metadata,
                "error_code": f.error if error == E.NONE else error,
            }
        )
    out = []
    if topics is None:
        for name, parts in grouped.items():
            if not describable(name):
                continue  # all topics asked for: those the sender may not describe are left out
            if by_id:
                topic = broker.topic(name)
                if topic is None:
                    continue
                out.append({"topic_id": topic.topic_id, "partitions": parts})
            else:
                out.append({"name": name, "partitions": parts})
    else:
        for t, name in names:
            if name is None:
                parts = [
                    {
                        "partition_index": p,
                        "committed_offset": -1,
                        "committed_leader_epoch": -1,
                        "metadata": "",
                        "error_code": E.UNKNOWN_TOPIC_ID,
                    }
                    for p in t.get("partition_indexes") or ()
                ]
            elif not describable(name):
                parts = [
                    {
                        "partition_index": p,
                        "committed_offset": -1,
                        "committed_leader_epoch": -1,
                        "metadata": "",
                        "error_code": E.TOPIC_AUTHORIZATION_FAILED,
                    }
                    for p in t.get("partition_indexes") or ()
                ]
            else:
                wanted_parts = set(t.get("partition_indexes") or ())
                parts = [p for p in grouped.get(name, []) if p["partition_index"] in wanted_parts]
            key = {"topic_id": t.get("topic_id")} if by_id else {"name": t["name"]}
            out.append({**key, "partitions": parts})
    return {"error_code": error, "topics": out}


@api(9, 0, 10)
async def handle(ctx: RequestContext, request: dict) -> dict:
    coordinator = group_service(ctx.broker).coordinator
    if ctx.api_version >= 8:
        seen: set[str] = set()

        def group_answer(g: dict) -> dict:
            group_id = g["group_id"]
            if group_id in seen:
                return {"group_id": group_id, "error_code": E.INVALID_REQUEST, "topics": []}
            seen.add(group_id)
            return {
                "group_id": group_id,
                **_fetch_group(ctx, coordinator, group_id, g.get("topics")),
            }

        groups = await answer_each(ctx, ("groups",), request.get("groups") or (), group_answer)
        return {"throttle_time": 0, "groups": groups}
    topics = request.get("topics")
    if ctx.api_version < 2 and topics is None:
        topics = []
    answer = _fetch_group(ctx, coordinator, request["group_id"], topics)
    return {"throttle_time": 0, **answer}
