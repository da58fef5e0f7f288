"""OffsetCommit (key 8): v0-v10; offsets go to `__consumer_offsets` before the answer.

v0 has no generation or member (a simple consumer's commit), v1 a commit timestamp per partition,
v2-v4 a retention time, v6+ a leader epoch, v7+ a group instance id, v10 topic ids. Kafka 3.9 kept
v0 commits in ZooKeeper (and refuses them in KRaft mode); here every version commits to the same
place, so an old client's v0 commits are read back by v0 fetches and by newer clients alike.
"""

from __future__ import annotations

from gateway.broker import RequestContext
from gateway.groups.model import CommitEntry
from gateway.groups.service import group_service
from gateway.handlers.answers import answer_each
from gateway.handlers.registry import api
from gateway.request_limits import Turns
from rdmalog import errors as E
from rdmalog.security.authorizer import Operation, ResourceType


@api(8, 0, 10)
async def handle(ctx: RequestContext, request: dict) -> dict:
    service = group_service(ctx.broker)
    by_id = ctx.api_version >= 10
    group_denied = not ctx.authorize(Operation.READ, ResourceType.GROUP, request["group_id"])
    readable = ctx.topic_check(Operation.READ) or (lambda _name: True)
    denied: set[str] = set()
    entries: list[CommitEntry] = []
    unknown_ids: set = set()
    # (response topic key, topic name or None, partitions) in request order
    layout: list[tuple[object, str | None, list[int]]] = []
    turns = Turns()
    for t in request.get("topics") or ():
        if turns.due():
            await turns.take()
        if by_id:
            topic = ctx.broker.topic_by_id(t.get("topic_id"))
            name = topic.name if topic is not None else None
            if name is None:
                unknown_ids.add(t.get("topic_id"))
            key: object = t.get("topic_id")
        else:
            name = key = t["name"]
        parts = []
        if name is not None and not group_denied and not readable(name):
            denied.add(name)
        for p in t.get("partitions") or ():
            parts.append(p["partition_index"])
            if name is not None and not group_denied and name not in denied:
                entries.append(
                    CommitEntry(
                        name,
                        p["partition_index"],
                        p["committed_offset"],
                        p.get("committed_leader_epoch", -1),
                        p.get("committed_metadata"),
                        p.get("commit_timestamp", -1),
                    )
                )
        layout.append((key, name, parts))
    retention = request.get("retention_time", -1) if ctx.api_version <= 4 else -1
    results = (
        {}
        if group_denied
        else service.coordinator.commit_offsets(
            request["group_id"],
            request.get("generation_id_or_member_epoch", -1),
            request.get("member_id") or "",
            entries,
            group_instance_id=request.get("group_instance_id"),
            retention_ms=retention,
        )
    )
    failed = await service.durable()  # in a cluster: the ISR has the commits, or why not

    def topic_answer(item: tuple[object, str | None, list[int]]) -> dict:
        key, name, parts = item
        codes = [
            E.GROUP_AUTHORIZATION_FAILED
            if group_denied
            else E.UNKNOWN_TOPIC_ID
            if name is None
            else E.TOPIC_AUTHORIZATION_FAILED
            if name in denied
            else results.get((name, p), E.NONE) or failed
            for p in parts
        ]
        entry = {"topic_id": key} if by_id else {"name": key}
        entry["partitions"] = [
            {"partition_index": p, "error_code": c} for p, c in zip(parts, codes, strict=True)
        ]
        return entry

    topics = await answer_each(ctx, ("topics",), layout, topic_answer)
    return {"throttle_time": 0, "topics": topics}
