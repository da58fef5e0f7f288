"""A source cluster as the mirror sees it: kafka-python's admin client (in a thread) for what it does
well, metadata and committed group offsets, and connections on our own codec
(gateway/protocol/client.py) for Fetch and ListOffsets, whose record batches must arrive as they are
(bytes, not decoded records) to be appended with their offsets.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from gateway.protocol.client import KafkaConnection

log = logging.getLogger("gateway.mirror")

API_VERSIONS, FETCH, LIST_OFFSETS = 18, 1, 2
FETCH_VERSIONS = (4, 11)  # record batches (v4+); v12+ is flexible, v13+ names topics by id
LIST_OFFSETS_VERSIONS = (1, 5)
EARLIEST = -2
FETCH_MAX_BYTES = 16 << 20
PARTITION_MAX_BYTES = 1 << 20


class SourceError(Exception):
    """The source cluster cannot be reached or answers what the mirror cannot use."""


class SourceCluster:
    """Metadata, fetches and committed offsets of one Kafka-compatible cluster (`bootstrap`)."""

    def __init__(self, bootstrap: str, client_id: str = "rdmalog-mirror") -> None:
        self.bootstrap = bootstrap
        self.client_id = client_id
        self._admin: Any = None
        self.brokers: dict[int, tuple[str, int]] = {}
        self.leaders: dict[tuple[str, int], int] = {}
        self.partition_counts: dict[str, int] = {}
        self._conns: dict[int, KafkaConnection] = {}
        self._versions: dict[int, tuple[int, int]] = {}  # node -> (fetch, list offsets)

    # --- through kafka-python's admin client, off the event loop -----------------------------
    async def _admin_call(self, fn: Callable[[Any], Any]) -> Any:
        def call() -> Any:
            if self._admin is None:
                from kafka.admin import KafkaAdminClient

                self._admin = KafkaAdminClient(
                    bootstrap_servers=self.bootstrap.split(","),
                    client_id=self.client_id,
                    bootstrap_timeout_ms=10_000,
                )
            return fn(self._admin)

        return await asyncio.get_running_loop().run_in_executor(None, call)

    async def refresh(self, topics: list[str]) -> None:
        """Leaders and partition counts of `topics`, and the brokers' addresses."""
        cluster, described = await self._admin_call(
            lambda a: (a.describe_cluster(), a.describe_topics(topics))
        )
        self.brokers = {b["broker_id"]: (b["host"], b["port"]) for b in cluster["brokers"]}
        for t in described:
            if t.get("error_code"):
                log.warning("mirror: source %s has no topic %s", self.bootstrap, t["name"])
                continue
            self.partition_counts[t["name"]] = len(t["partitions"])
            for p in t["partitions"]:
                self.leaders[(t["name"], p["partition_index"])] = p["leader_id"]

    async def group_offsets(self, topics: set[str]) -> dict[str, dict[tuple[str, int], int]]:
        """Committed offsets of every source group, on `topics` only."""

        def read(admin: Any) -> dict[str, dict[tuple[str, int], int]]:
            out: dict[str, dict[tuple[str, int], int]] = {}
            for g in admin.list_groups():
                gid = g["group_id"]
                committed = admin.list_group_offsets(gid).get(gid, {})
                mine = {
                    (tp.topic, tp.partition): om.offset
                    for tp, om in committed.items()
                    if tp.topic in topics and om is not None and om.offset >= 0
                }
                if mine:
                    out[gid] = mine
            return out

        return await self._admin_call(read)

    async def topic_configs(self, topics: list[str]) -> dict[str, dict[str, str]]:
        from kafka.admin import ConfigResource, ConfigResourceType

        resources = [ConfigResource(ConfigResourceType.TOPIC, t) for t in topics]
        answer = await self._admin_call(lambda a: a.describe_configs(resources))
        found = answer.get("topic", {})
        return {t: {k: c.get("value") for k, c in found.get(t, {}).items()} for t in topics}

    # --- through our codec ---------------------------------------------------------------------
    async def _connection(self, node: int) -> KafkaConnection:
        conn = self._conns.get(node)
        if conn is not None:
            return conn
        if node not in self.brokers:
            raise SourceError(f"source broker {node} is not in the source's metadata")
        host, port = self.brokers[node]
        conn = await asyncio.wait_for(KafkaConnection.open(host, port, self.client_id), timeout=10)
        versions = await conn.request(API_VERSIONS, 0, {})
        ranges = {a["api_key"]: (a["min_version"], a["max_version"]) for a in versions["api_keys"]}
        self._versions[node] = (
            _pick(ranges, FETCH, FETCH_VERSIONS), _pick(ranges, LIST_OFFSETS, LIST_OFFSETS_VERSIONS)
        )  # fmt: skip
        self._conns[node] = conn
        return conn

    def forget(self, node: int) -> None:
        """Drop a connection that failed (the next request reconnects)."""
        conn = self._conns.pop(node, None)
        if conn is not None:
            conn.abort()

    async def fetch(
        self, node: int, wants: list[tuple[str, int, int]], max_wait_ms: int
    ) -> dict[str, Any]:
        """Fetch (topic, partition, offset) `wants` from `node`: its decoded response, whose
        record bytes are valid until the next request on that connection."""
        conn = await self._connection(node)
        version = self._versions[node][0]
        topics: dict[str, list[dict]] = {}
        for topic, partition, offset in wants:
            topics.setdefault(topic, []).append(
                {
                    "partition": partition,
                    "current_leader_epoch": -1,
                    "fetch_offset": offset,
                    "log_start_offset": -1,
                    "partition_max_bytes": PARTITION_MAX_BYTES,
                }
            )
        body = {
            "replica_id": -1,
            "max_wait": max_wait_ms,
            "min_bytes": 1,
            "max_bytes": FETCH_MAX_BYTES,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        timeout = max_wait_ms / 1000 + 30
        return await asyncio.wait_for(conn.request(FETCH, version, body), timeout)

    async def earliest(self, node: int, partitions: list[tuple[str, int]]) -> dict:
        """{(topic, partition): (error code, log start offset)} from `node`."""
        conn = await self._connection(node)
        version = self._versions[node][1]
        topics: dict[str, list[dict]] = {}
        for topic, partition in partitions:
            topics.setdefault(topic, []).append(
                {"partition_index": partition, "current_leader_epoch": -1, "timestamp": EARLIEST}
            )
        body = {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
        }
        answer = await asyncio.wait_for(conn.request(LIST_OFFSETS, version, body), 30)
        return {
            (t["name"], p["partition_index"]): (p["error_code"], p["offset"])
            for t in answer["topics"]
            for p in t["partitions"]
        }

    async def close(self) -> None:
        for node in list(self._conns):
            self.forget(node)
        admin, self._admin = self._admin, None
        if admin is not None:
            await asyncio.get_running_loop().run_in_executor(None, admin.close)


def _pick(ranges: dict[int, tuple[int, int]], api_key: int, ours: tuple[int, int]) -> int:
    lo, hi = ranges.get(api_key, (0, -1))
    version = min(hi, ours[1])
    if version < max(lo, ours[0]):
        raise SourceError(f"the source does not serve API {api_key} in versions {ours}")
    return version
