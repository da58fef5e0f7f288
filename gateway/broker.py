"""What handlers share: the store, the config, this broker's cluster view and the fetch waiters."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from rdmalog.config import BrokerConfig

log = logging.getLogger("gateway.broker")

_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")

# Kafka error codes the gateway itself produces (store errors carry their own `error_code`).
NONE = 0
UNKNOWN_SERVER_ERROR = -1
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
INVALID_REQUIRED_ACKS = 21
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_CONFIG = 40
INVALID_REQUEST = 42
UNSUPPORTED_COMPRESSION_TYPE = 76
UNKNOWN_TOPIC_ID = 100


def error_code_of(exc: BaseException) -> int:
    """The Kafka error code a store exception carries (UNKNOWN_SERVER_ERROR otherwise)."""
    code = getattr(exc, "error_code", None)
    return code if isinstance(code, int) else UNKNOWN_SERVER_ERROR


def topic_name_error(name: str | None) -> str | None:
    """Why `name` is not a legal Kafka topic name, or None when it is."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > 249:
        return "Topic name is illegal, it can't be longer than 249 characters"
    if not _LEGAL_TOPIC.fullmatch(name):
        return (
            f'Topic name "{name}" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'"
        )
    return None


def partition_of(topic: Any, index: int) -> Any:
    """Partition log `index` of `topic` (a store Topic or None), or None when either is missing."""
    if topic is None or not 0 <= index < len(topic.partitions):
        return None
    return topic.partitions[index]


@dataclass(slots=True)
class RequestContext:
    """One request as a handler sees it (header fields, the broker, the connection)."""

    broker: Broker
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    connection: Any = None  # the server's connection object (peer address, per-connection state)
    extra: dict = field(default_factory=dict)


class Broker:
    """Shared state of one gateway: store, config, advertised endpoints, fetch waiters."""

    def __init__(self, config: BrokerConfig, store: Any) -> None:
        self.config = config
        self.store = store
        self.node_id: int = getattr(store, "node_id", config.node_id)
        self.host = "127.0.0.1"
        self.port = 9092
        self.loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._waiters: dict[int, set[asyncio.Future]] = {}
        self._listened: set[int] = set()
        self.message_max_bytes: int = config.get("message.max.bytes")
        self.auto_create: bool = config.get("auto.create.topics.enable")
        self.num_partitions: int = config.get("num.partitions")
        self.groups: Any = None  # the GroupService (gateway/groups), started by the server
        self.rdma: Any = None  # the RdmaService (rdmalog/rdma) when rdma.transport is set
        self.cluster: Any = None  # the ClusterNode (gateway/cluster) when zookeeper.connect is set

    # --- cluster view ------------------------------------------------------------------------

    def bind(self, loop: asyncio.AbstractEventLoop, listen: tuple[str, int]) -> None:
        """Record the loop and the address actually bound; pick the advertised endpoint."""
        self.loop = loop
        self._loop_thread = threading.get_ident()
        adv = self.config.get("advertised.listeners")
        if adv:
            first = self.config.advertised_listeners[0]
            self.host, self.port = first.host or listen[0], first.port or listen[1]
        else:
            host = listen[0]
            self.host = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
            self.port = listen[1]

    @property
    def cluster_id(self) -> str | None:
        return getattr(self.store, "cluster_id", None)

    def brokers(self) -> list[dict]:
        """This broker as a Metadata/DescribeCluster broker entry."""
        return [{"node_id": self.node_id, "host": self.host, "port": self.port, "rack": None}]

    def leader_error(self, topic: str, index: int, current_epoch: int = -1) -> int:
        """0 when this broker may answer for topic-index as its leader (always, for one broker);
        in a cluster NOT_LEADER_OR_FOLLOWER, FENCED/UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION."""
        if self.cluster is None:
            return NONE
        return self.cluster.replicas.leader_error(topic, index, current_epoch)

    # --- topics ------------------------------------------------------------------------------

    def topic(self, name: str):
        return self.store.topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID):
        try:
            return self.store.topic_by_id(topic_id)
        except Exception:  # the store raises UnknownTopicOrPartitionError / KeyError
            return None

    def create_topic(self, name: str, num_partitions: int, configs: dict[str, str] | None = None):
        """Create a topic in the store (raises store errors carrying Kafka error codes)."""
        return self.store.create_topic(name, num_partitions, configs or {})

    def auto_create_topic(self, name: str):
        """Create `name` with the broker defaults (Metadata auto-creation)."""
        return self.create_topic(name, self.num_partitions, {})

    # --- fetch waiters -----------------------------------------------------------------------

    def _on_advance(self, plog: Any) -> None:
        """PartitionLog listener: wake fetches waiting on this log (hops to the loop thread)."""
        if not self._waiters.get(id(plog)):
            return
        if threading.get_ident() == self._loop_thread:
            self._wake(plog)
        elif self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._wake, plog)

    def _wake(self, plog: Any) -> None:
        for fut in self._waiters.pop(id(plog), ()):
            if not fut.done():
                fut.set_result(True)

    async def wait_for_data(self, logs: list, timeout: float) -> bool:
        """Wait until any of `logs` advances its high watermark, or `timeout` seconds pass.

        Returns True when woken by data. One listener per partition log, registered lazily.
        """
        if timeout <= 0 or not logs:
            return False
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        for plog in logs:
            key = id(plog)
            if key not in self._listened:
                plog.add_listener(self._on_advance)
                self._listened.add(key)
            self._waiters.setdefault(key, set()).add(fut)
        timer = loop.call_later(timeout, _resolve, fut, False)
        try:
            return await fut
        finally:
            timer.cancel()
            for plog in logs:
                waiters = self._waiters.get(id(plog))
                if waiters is not None:
                    waiters.discard(fut)
                    if not waiters:
                        del self._waiters[id(plog)]

    def forget_log(self, plog: Any) -> None:
        """Drop bookkeeping of a deleted partition log."""
        self._listened.discard(id(plog))
        self._wake(plog)

    def wake_all(self) -> None:
        """Release every waiting fetch (shutdown)."""
        for key in list(self._waiters):
            for fut in self._waiters.pop(key, ()):
                if not fut.done():
                    fut.set_result(False)


def _resolve(fut: asyncio.Future, value: bool) -> None:
    if not fut.done():
        fut.set_result(value)
