"""Topic administration in cluster mode, as Kafka's ZooKeeper mode does it: the broker that takes the
request (the controller, for CreateTopics, CreatePartitions and DeleteTopics, whose clients send
them there) writes ZooKeeper; the controller initializes or deletes partition states, and every
replica follows through its watches. Answers wait (bounded by the request's timeout) until this
broker sees the outcome, so a client's next Metadata finds the leaders."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

from kazoo.exceptions import NodeExistsError

from rdmalog.cluster import znodes as Z
from rdmalog.cluster.assignment import assign_replicas, grow_assignment
from rdmalog.cluster.registry import StaleStateError
from rdmalog.config import TopicConfig
from rdmalog.errors import KafkaError

log = logging.getLogger("gateway.cluster.admin")

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
REQUEST_TIMED_OUT = 7
COORDINATOR_NOT_AVAILABLE = 15
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_CONFIG = 40
NOT_CONTROLLER = 41
TOPIC_DELETION_DISABLED = 73
MAX_WAIT_S = 30.0


class AdminError(KafkaError):
    """A refused admin request: the Kafka error code and message to answer with."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = code


def error_code_of(exc: BaseException) -> int:
    code = getattr(exc, "error_code", None)
    return code if isinstance(code, int) else -1


def not_controller(node: Any) -> bool:
    return node.view.controller_id != node.broker_id


async def _wait(check, timeout_s: float) -> bool:
    deadline = time.monotonic() + min(max(timeout_s, 0.0), MAX_WAIT_S)
    while True:
        if check():
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.01)


def _led(node: Any, name: str, partitions) -> bool:
    tv = node.view.topic(name)
    if tv is None:
        return False
    live = node.view.live_brokers()
    return all((s := tv.states.get(p)) is not None and s.leader in live for p in partitions)


def _live_brokers(node: Any, named: set[int], at_least: int) -> list[int]:
    """The live brokers of this broker's view, or ZooKeeper's own list when the view lacks a broker
    the request names or has fewer than `at_least` (a broker that registered a moment ago: its
    watch event may not have reached this broker yet). ZooKeeper is read on that path only."""
    live = node.view.live_brokers()
    if any(b not in live for b in named) or len(live) < at_least:
        live = node.registry.brokers()
    return sorted(live)


def plan_topic(
    node: Any,
    name: str,
    num_partitions: int,
    replication_factor: int,
    assignments: list[dict] | None,
    configs: dict[str, str],
) -> dict[int, list[int]]:
    """Validate a new topic and return its replica assignment (raises AdminError/KafkaError)."""
    if node.view.topic(name) is not None:
        raise AdminError(TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    try:
        TopicConfig.from_overrides(node.config, configs)
    except KafkaError as exc:
        raise AdminError(INVALID_CONFIG, str(exc)) from None
    wanted = {b for a in assignments or () for b in a["broker_ids"]}
    default_rf = node.config.get("default.replication.factor")
    rf = default_rf if replication_factor == -1 else replication_factor
    live = _live_brokers(node, wanted, 1 if assignments else rf)
    if assignments:
        out = {}
        for a in assignments:
            replicas = list(a["broker_ids"])
            if not replicas or len(set(replicas)) != len(replicas):
                raise AdminError(
                    INVALID_REPLICA_ASSIGNMENT, f"Duplicate or no replicas in {replicas}."
                )
            unknown = [b for b in replicas if b not in live]
            if unknown:
                raise AdminError(
                    INVALID_REPLICA_ASSIGNMENT,
                    f"Unknown broker(s) in replica assignment: {unknown}.",
                )
            out[a["partition_index"]] = replicas
        if sorted(out) != list(range(len(out))):
            raise AdminError(INVALID_REPLICA_ASSIGNMENT, "Partitions must be numbered from 0.")
        if len({len(r) for r in out.values()}) != 1:
            raise AdminError(
                INVALID_REPLICA_ASSIGNMENT, "All partitions must have the same number of replicas."
            )
        return out
    count = node.config.get("num.partitions") if num_partitions == -1 else num_partitions
    if count <= 0:
        raise AdminError(INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
    if rf <= 0:
        raise AdminError(INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
    if rf > len(live):
        raise AdminError(
            INVALID_REPLICATION_FACTOR,
            f"Replication factor: {rf} larger than available brokers: {len(live)}.",
        )
    return assign_replicas(count, rf, live)


async def create_topic(
    node: Any,
    name: str,
    assignment: dict[int, list[int]],
    configs: dict[str, str],
    timeout_ms: int,
) -> uuid.UUID:
    """Write the topic to ZooKeeper; wait (up to the timeout) until its partitions have leaders.
    Returns the topic id; AdminError(REQUEST_TIMED_OUT) when the leaders did not come in time."""
    topic_id = uuid.uuid4()
    try:
        await asyncio.to_thread(
            node.registry.create_topic, name, Z.TopicAssignment(topic_id, assignment), configs
        )
    except NodeExistsError:
        raise AdminError(TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.") from None
    log.info("topic %s created in ZooKeeper: %s", name, assignment)
    if not await _wait(lambda: _led(node, name, assignment), timeout_ms / 1000):
        raise AdminError(
            REQUEST_TIMED_OUT, f"Topic {name} was created; its leaders are not elected yet."
        )
    return topic_id


async def auto_create(
    node: Any, name: str, partitions: int, rf: int, configs: dict[str, str]
) -> int:
    """Create a topic without waiting for its leaders (Metadata auto-creation, the offsets
    topic); the error code (0, or why not)."""
    try:
        assignment = plan_topic(node, name, partitions, rf, None, configs)
        await asyncio.to_thread(
            node.registry.create_topic,
            name,
            Z.TopicAssignment(uuid.uuid4(), assignment),
            configs,
        )
        log.info("topic %s auto-created in ZooKeeper: %s", name, assignment)
        return NONE
    except NodeExistsError:
        return NONE
    except AdminError as exc:
        if exc.error_code == TOPIC_ALREADY_EXISTS:
            return NONE
        log.warning("cannot create topic %s: %s", name, exc)
        return exc.error_code
    except Exception as exc:
        log.warning("cannot create topic %s: %s", name, exc)
        return error_code_of(exc)


async def delete_topic(node: Any, name: str, timeout_ms: int) -> None:
    """Mark the topic for deletion; wait (up to the timeout) until it is gone from the view."""
    if node.view.topic(name) is None:
        raise AdminError(UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic.")
    await asyncio.to_thread(node.registry.mark_for_deletion, name)
    if not await _wait(lambda: node.view.topic(name) is None, timeout_ms / 1000):
        raise AdminError(
            REQUEST_TIMED_OUT, f"Topic {name} is marked for deletion; not deleted yet."
        )
    log.info("deleted topic %s", name)


async def create_partitions(
    node: Any,
    name: str,
    total: int,
    assignments: list[dict] | None,
    validate_only: bool,
    timeout_ms: int,
) -> None:
    """Grow a topic in ZooKeeper (its assignment, with a version check); wait for the leaders."""
    for _ in range(5):
        current = await asyncio.to_thread(node.registry.topic, name)
        if current is None:
            raise AdminError(UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist.")
        count = len(current.partitions)
        if total <= count:
            raise AdminError(
                INVALID_PARTITIONS,
                f"Topic currently has {count} partitions, which is higher than or equal to the "
                f"requested {total}.",
            )
        wanted = {b for a in assignments or () for b in a["broker_ids"]}
        live = _live_brokers(node, wanted, len(current.partitions[0]) if current.partitions else 1)
        if assignments is not None:
            if len(assignments) != total - count:
                raise AdminError(
                    INVALID_REPLICA_ASSIGNMENT,
                    f"{len(assignments)} assignments for {total - count} new partitions.",
                )
            added = {}
            for i, a in enumerate(assignments):
                replicas = list(a["broker_ids"])
                if any(b not in live for b in replicas) or len(set(replicas)) != len(replicas):
                    raise AdminError(INVALID_REPLICA_ASSIGNMENT, f"Invalid replicas {replicas}.")
                added[count + i] = replicas
        else:
            try:
                added = grow_assignment(current.partitions, total, live)
            except KafkaError as exc:
                raise AdminError(error_code_of(exc), str(exc)) from None
        if validate_only:
            return
        current.partitions.update(added)
        try:
            await asyncio.to_thread(node.registry.set_topic, name, current)
            break
        except StaleStateError:
            continue
    if not await _wait(lambda: _led(node, name, range(total)), timeout_ms / 1000):
        raise AdminError(REQUEST_TIMED_OUT, f"The new partitions of {name} have no leaders yet.")
