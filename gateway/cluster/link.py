"""A broker's connection to another broker's inter-broker listener, with its security (TLS, SASL
login), on the gateway's codec: a follower's Fetch (v12) and OffsetForLeaderEpoch (v4) with its
replica id (rdmalog.cluster.fetcher.LeaderConnection), and a transaction coordinator's
WriteTxnMarkers (v1) to a partition leader."""

from __future__ import annotations

from typing import Any

from gateway.protocol.client import KafkaConnection
from rdmalog import errors as E
from rdmalog.security.inter_broker import ClientSecurity, authenticate

FETCH, FETCH_VERSION = 1, 12
OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_LEADER_EPOCH_VERSION = 23, 4
WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION = 27, 1
ADD_PARTITIONS_TO_TXN, ADD_PARTITIONS_TO_TXN_VERSION = 24, 4


class ReplicaLink:
    """Requests a broker sends to another broker."""

    def __init__(self, conn: KafkaConnection) -> None:
        self.conn = conn

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        security: ClientSecurity | None = None,
        client_id: str = "rdmalog-replica-fetcher",
    ) -> ReplicaLink:
        """Connect to a leader's inter-broker listener: TLS and a SASL login as its
        security protocol asks (rdmalog.security.inter_broker)."""
        conn = await KafkaConnection.open(
            host,
            port,
            client_id=client_id,
            ssl_context=None if security is None else security.ssl_context,
        )
        if security is not None:
            try:
                await authenticate(conn.request, security)
            except BaseException:
                conn.abort()
                raise
        return cls(conn)

    async def offsets_for_leader_epoch(
        self, replica_id: int, partitions: list[tuple[str, int, int, int]]
    ) -> dict[tuple[str, int], tuple[int, int, int]]:
        by_topic: dict[str, list[dict]] = {}
        for topic, p, current, epoch in partitions:
            by_topic.setdefault(topic, []).append(
                {"partition": p, "current_leader_epoch": current, "leader_epoch": epoch}
            )
        body = {
            "replica_id": replica_id,
            "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
        }
        resp = await self.conn.request(
            OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_LEADER_EPOCH_VERSION, body
        )
        out = {}
        for t in resp["topics"]:
            for p in t["partitions"]:
                out[(t["topic"], p["partition"])] = (
                    p["error_code"],
                    p["leader_epoch"],
                    p["end_offset"],
                )
        return out

    async def fetch(
        self,
        replica_id: int,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        partitions: list[tuple[str, int, int, int, int, int]],
    ) -> dict[tuple[str, int], tuple[int, int, int, Any]]:
        by_topic: dict[str, list[dict]] = {}
        for topic, p, offset, epoch, log_start, part_max in partitions:
            by_topic.setdefault(topic, []).append(
                {
                    "partition": p,
                    "current_leader_epoch": epoch,
                    "fetch_offset": offset,
                    "last_fetched_epoch": -1,
                    "log_start_offset": log_start,
                    "partition_max_bytes": part_max,
                }
            )
        body = {
            "replica_id": replica_id,
            "max_wait": max_wait_ms,
            "min_bytes": min_bytes,
            "max_bytes": max_bytes,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        resp = await self.conn.request(FETCH, FETCH_VERSION, body)
        out = {}
        for t in resp["responses"]:
            for p in t["partitions"]:
                out[(t["topic"], p["partition_index"])] = (
                    p["error_code"],
                    p["high_watermark"],
                    p["log_start_offset"],
                    p.get("records"),
                )
        return out

    async def write_txn_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: list[tuple[str, int]],
    ) -> dict[tuple[str, int], int]:
        """One transaction's markers on partitions the other broker leads: the error code of
        each (topic, partition)."""
        by_topic: dict[str, list[int]] = {}
        for topic, p in partitions:
            by_topic.setdefault(topic, []).append(p)
        marker = {
            "producer_id": producer_id,
            "producer_epoch": producer_epoch,
            "transaction_result": commit,
            "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()],
            "coordinator_epoch": coordinator_epoch,
        }
        resp = await self.conn.request(
            WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, {"markers": [marker]}
        )
        out = {}
        for m in resp["markers"]:
            for t in m["topics"]:
                for p in t["partitions"]:
                    out[(t["name"], p["partition_index"])] = p["error_code"]
        return out

    async def verify_in_transaction(
        self, transactional_id: str, producer_id: int, epoch: int, topic: str, partition: int
    ) -> int:
        """AddPartitionsToTxn v4 `verify_only` to the id's coordinator (KIP-890): 0 when the
        partition is in the producer's ongoing transaction, else the coordinator's error code."""
        txn = {
            "transactional_id": transactional_id,
            "producer_id": producer_id,
            "producer_epoch": epoch,
            "verify_only": True,
            "topics": [{"name": topic, "partitions": [partition]}],
        }
        resp = await self.conn.request(
            ADD_PARTITIONS_TO_TXN, ADD_PARTITIONS_TO_TXN_VERSION, {"transactions": [txn]}
        )
        if resp["error_code"]:
            return resp["error_code"]
        for t in resp["results_by_transaction"]:
            for topic_result in t["topic_results"]:
                for p in topic_result["results_by_partition"]:
                    return p["partition_error_code"]
        return E.UNKNOWN_SERVER_ERROR

    def abort(self) -> None:
        self.conn.abort()

    async def close(self) -> None:
        await self.conn.close()


class BrokerLinks:
    """One link to each other broker that a transaction coordinator or a partition leader asks
    (markers, verification), opened on first use over the inter-broker listener."""

    def __init__(self, node: Any, client_id: str) -> None:
        self.node = node
        self.client_id = client_id
        self.links: dict[int, ReplicaLink] = {}

    async def get(self, broker_id: int) -> ReplicaLink:
        link = self.links.get(broker_id)
        if link is None:
            info = self.node.view.brokers.get(broker_id)
            if info is None:
                raise ConnectionError(f"broker {broker_id} is not registered")
            ep = info.endpoint(self.node.listener)
            link = await ReplicaLink.open(ep.host, ep.port, self.node.security, self.client_id)
            if broker_id in self.links:  # another caller opened one meanwhile
                link.abort()
                return self.links[broker_id]
            self.links[broker_id] = link
        return link

    def drop(self, broker_id: int) -> None:
        """Forget a link that failed (the next `get` opens a new one)."""
        link = self.links.pop(broker_id, None)
        if link is not None:
            link.abort()

    def close(self) -> None:
        for broker_id in list(self.links):
            self.drop(broker_id)
