"""What handlers share: the broker's topics and partitions, its config and cluster view, the fetch
waiters, and the group and RDMA services.

Handlers reach topics and partition logs only through the broker (`partition`, `topic`, the topic
operations): they do not know how a partition is stored, so what stands in front of the logs (the
store today, a replica manager next) can change without them.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

from gateway.metrics import BrokerMetrics
from rdmalog.config import BrokerConfig, TopicConfig
from rdmalog.errors import (
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    InvalidRequestError,
    KafkaError,
)
from rdmalog.security.acls import OPERATION_CODES, RESOURCE_OPERATIONS
from rdmalog.security.authorizer import (
    ANONYMOUS,
    Authorizer,
    Operation,
    Principal,
    Resource,
    ResourceType,
)
from rdmalog.store.interface import Log, LogStore, LogTopic
from rdmalog.store.log import AppendResult

if TYPE_CHECKING:
    from gateway.cluster.node import ClusterNode
    from gateway.groups.service import GroupService
    from gateway.transactions.service import TransactionService

T = TypeVar("T")

log = logging.getLogger("gateway.broker")

_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")


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


class SharedAppends(Protocol):
    """What the gateway asks of the RDMA service: appends ordered with native producers' writes to
    the same head file."""

    def try_append(self, topic: str, partition: int, buf: memoryview) -> AppendResult | None:
        """Append now, or None when the append must wait for RDMA writes (then call `append` off
        the event loop)."""
        ...

    def append(self, topic: str, partition: int, buf: memoryview) -> AppendResult:
        """Append, waiting for the RDMA writes ordered before it (blocks)."""
        ...

    def stop(self) -> None: ...


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

    @property
    def principal(self) -> Principal:
        """Who sent the request (User:ANONYMOUS without authentication)."""
        return ANONYMOUS if self.connection is None else self.connection.session.principal

    @property
    def listener(self) -> str | None:
        """The name of the listener the request came in on."""
        return None if self.connection is None else self.connection.session.listener.name

    def authorize(self, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        """Whether the sender may do `operation` on the resource, as `authorizer.class.name`
        decides (always, without an authorizer)."""
        authorizer = self.broker.authorizer
        if authorizer is None:
            return True
        host = "" if self.connection is None else self.connection.address
        return authorizer.authorize(self.principal, host, operation, Resource(resource_type, name))

    def authorized_operations(self, resource_type: ResourceType, name: str) -> int:
        """Kafka's authorized-operations bit field (1 << AclOperation code) of a resource: what the
        sender may do on it (everything that applies, without an authorizer)."""
        return sum(
            1 << OPERATION_CODES[op]
            for op in RESOURCE_OPERATIONS[resource_type]
            if self.authorize(op, resource_type, name)
        )

    def topic_check(self, operation: Operation) -> Callable[[str], bool] | None:
        """`name -> allowed` for `operation` on topics (None: everything is allowed)."""
        if self.broker.authorizer is None:
            return None
        return lambda name: self.authorize(operation, ResourceType.TOPIC, name)

    def partitions(
        self, request_topics: list[dict], fields: PartitionFields, operation: Operation
    ) -> RequestedPartitions:
        """The partitions a request names with their logs, those of topics the sender may not do
        `operation` on answered TOPIC_AUTHORIZATION_FAILED (see `RequestedPartitions`)."""
        return RequestedPartitions(self.broker, request_topics, fields, self.topic_check(operation))


class PartitionFields(NamedTuple):
    """How an API names its topics and partitions, in the request and in the response."""

    topic: str = "name"  # a topic's key in both ("name", "topic" or "topic_id")
    partitions: str = "partitions"  # a topic's partition list in the request
    index: str = "partition_index"  # a partition's index in the request
    answers: str = "partitions"  # a topic's partition list in the response
    answer_index: str = "partition_index"  # a partition's index in the response
    missing: Mapping[str, object] = {}  # more fields of an answer to a partition not found
    epoch: str | None = (
        None  # a partition's current leader epoch in the request (checked in a cluster)
    )


class RequestedPartitions:
    """The partitions a request names, in order, with their logs; the response's topic entries are
    built alongside.

    Iterating yields `(partition request, log, answers)` for each partition found, the caller appending
    its answer to `answers`; a partition not found is answered here with the broker's error code (and
    counted in `missing`). `topics` is the response's topic list.
    """

    __slots__ = ("_broker", "_request", "_fields", "_allowed", "topics", "missing", "denied")

    def __init__(
        self,
        broker: Broker,
        request_topics: list[dict],
        fields: PartitionFields,
        allowed: Callable[[str], bool] | None = None,
    ) -> None:
        self._broker = broker
        self._request = request_topics
        self._fields = fields
        self._allowed = allowed
        self.topics: list[dict] = []
        self.missing = 0  # partitions answered with an error here (not found, or denied)
        self.denied = 0  # of them, those of topics the sender may not access

    def __iter__(self) -> Iterator[tuple[dict, Log, list[dict]]]:
        f = self._fields
        partition = self._broker.partition
        epoch = f.epoch
        allowed = self._allowed
        for t in self._request:
            key = t[f.topic]
            answers: list[dict] = []
            self.topics.append({f.topic: key, f.answers: answers})
            denied = False
            if allowed is not None:
                name = key if isinstance(key, str) else self._broker.topic_name(key)
                denied = name is not None and not allowed(name)
            for p in t[f.partitions]:
                found = (
                    TOPIC_AUTHORIZATION_FAILED
                    if denied
                    else partition(key, p[f.index], p.get(epoch, -1) if epoch else -1)
                )
                self.denied += denied
                if isinstance(found, int):
                    self.missing += 1
                    answers.append({f.answer_index: p[f.index], "error_code": found, **f.missing})
                else:
                    yield p, found, answers


class Broker:
    """Shared state of one gateway: topics and partitions, config, advertised endpoints, fetch
    waiters, the group coordinator and the RDMA service."""

    def __init__(self, config: BrokerConfig, store: LogStore) -> None:
        self.config = config
        self.store = store
        self.node_id: int = getattr(store, "node_id", config.node_id)
        self.host = "127.0.0.1"
        self.port = 9092
        self.endpoints: dict[str, tuple[str, int]] = {}  # listener name -> advertised endpoint
        self.authorizer: Authorizer | None = (
            None  # authorizer.class.name (rdmalog/security/acls.py)
        )
        self.entity_configs: Any = None  # SCRAM credentials and quotas of users and client ids
        self.broker_configs: Any = None  # dynamic broker configs (rdmalog/dynamic_broker_config.py)
        self.config_listeners: list[Callable[[BrokerConfig], None]] = []  # run on the loop
        self.loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._waiters: dict[int, set[asyncio.Future]] = {}
        self._listened: set[int] = set()
        self.message_max_bytes: int = config.get("message.max.bytes")
        self.auto_create: bool = config.get("auto.create.topics.enable")
        self.num_partitions: int = config.get("num.partitions")
        self._admin: ThreadPoolExecutor | None = None  # topic operations (in_admin_thread)
        self._convert: ThreadPoolExecutor | None = None  # message format conversions
        self.groups: GroupService | None = None  # started by the app (gateway/app.py)
        self.transactions: TransactionService | None = None  # likewise
        self.rdma: SharedAppends | None = None  # the RDMA service when rdma.transport is set
        self.metrics = BrokerMetrics()
        self.mirror: Any = None  # the mirror topics' links (gateway/mirror), started by the app
        self.cluster: ClusterNode | None = (
            None  # gateway/cluster/node.py when zookeeper.connect is set
        )

    # --- cluster view ------------------------------------------------------------------------

    def bind(self, loop: asyncio.AbstractEventLoop, endpoints: dict[str, tuple[str, int]]) -> None:
        """Record the loop and each listener's advertised endpoint (host, port), in the order of
        `listeners`; `host`/`port` are the first one's."""
        self.loop = loop
        self._loop_thread = threading.get_ident()
        self.endpoints = dict(endpoints)
        self.host, self.port = next(iter(self.endpoints.values()))

    def endpoint(self, listener: str | None = None) -> tuple[str, int]:
        """The advertised (host, port) of `listener`; the first listener's when None or unknown.
        Metadata answers with the listener a client connected to (Kafka's rule)."""
        return (
            self.endpoints.get(listener, (self.host, self.port))
            if listener
            else (self.host, self.port)
        )

    @property
    def cluster_id(self) -> str | None:
        return getattr(self.store, "cluster_id", None)

    def brokers(self, listener: str | None = None) -> list[dict]:
        """This broker as a Metadata/DescribeCluster broker entry, on `listener`'s endpoint."""
        host, port = self.endpoint(listener)
        return [{"node_id": self.node_id, "host": host, "port": port, "rack": None}]

    @property
    def log_dir(self) -> Path:
        """The directory holding this broker's logs."""
        return self.store.dir

    # --- topics and partitions ---------------------------------------------------------------

    def partition(self, topic: str | uuid.UUID, index: int, current_epoch: int = -1) -> Log | int:
        """Partition `index` of a topic named (or, given a UUID, identified) by `topic`: its log, or
        the Kafka error code that answers a request for it. In a cluster only the partition's
        leader answers (else NOT_LEADER_OR_FOLLOWER), in `current_epoch` when one is given (else
        FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH)."""
        if self.cluster is not None:
            if not isinstance(topic, str):
                tv = self.cluster.view.topic_by_id(topic)
                if tv is None:
                    return UNKNOWN_TOPIC_ID
                topic = tv.name
            code = self.cluster.replicas.leader_error(topic, index, current_epoch)
            if code:
                return code
        if isinstance(topic, str):
            found = self.store.topics.get(topic)
            missing = UNKNOWN_TOPIC_OR_PARTITION
        else:
            found = self.topic_by_id(topic)
            missing = UNKNOWN_TOPIC_ID
        if found is None or not 0 <= index < len(found.partitions):
            return missing
        return found.partitions[index]

    def partitions(
        self, request_topics: list[dict], fields: PartitionFields
    ) -> RequestedPartitions:
        """The partitions a request names with their logs (see `RequestedPartitions`)."""
        return RequestedPartitions(self, request_topics, fields)

    async def append(self, plog: Log, records: memoryview) -> AppendResult:
        """Append to a partition's log, or through the RDMA service when native producers may share
        its head file (a shared grant orders this append with their RDMA writes, which may wait: then
        off the loop)."""
        res = self.append_now(plog, records)
        return res if res is not None else await self.append_ordered(plog, records)

    async def append_ordered(self, plog: Log, records: memoryview) -> AppendResult:
        """The append `append_now` left: off the loop, after the RDMA writes ordered before it."""
        res = await asyncio.get_running_loop().run_in_executor(
            None, self.rdma.append, plog.topic, plog.partition, records
        )
        self._count_produced(plog, records, res)
        return res

    def append_now(self, plog: Log, records: memoryview) -> AppendResult | None:
        """`append` without waiting: its result, or None when nothing was appended because an RDMA
        grant orders the append after native writes (then `append` waits for them)."""
        if plog.config.rdmalog_mirror_source:
            raise InvalidRequestError(
                f"{plog.topic} is a mirror of {plog.config.rdmalog_mirror_source} and read-only "
                "until promoted (rdmalog mirror promote)"
            )
        rdma = self.rdma
        if rdma is None:
            res = plog.append(records)
        else:
            res = rdma.try_append(plog.topic, plog.partition, records)
            if res is None:
                return None
        if not res.duplicate:  # _count_produced, inlined: one call per produce less
            self.metrics.produced(plog.topic, len(records), res.last_offset - res.base_offset + 1)
        return res

    def _count_produced(self, plog: Log, records: memoryview, res: AppendResult) -> None:
        if not res.duplicate:
            self.metrics.produced(plog.topic, len(records), res.last_offset - res.base_offset + 1)

    def topic(self, name: str) -> LogTopic | None:
        return self.store.topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID | None) -> LogTopic | None:
        try:
            return self.store.topic_by_id(topic_id)  # type: ignore[arg-type]
        except (KafkaError, KeyError):  # UnknownTopicIdError
            return None

    def topic_name(self, topic_id: uuid.UUID | None) -> str | None:
        """The name of the topic with `topic_id`, None when there is none."""
        if self.cluster is not None:
            tv = self.cluster.view.topic_by_id(topic_id)
            return None if tv is None else tv.name
        found = self.topic_by_id(topic_id)
        return None if found is None else found.name

    def topics(self) -> list[LogTopic]:
        """Every topic (a snapshot: topics may be created and deleted meanwhile)."""
        return list(self.store.topics.values())

    def validate_new_topic(
        self, name: str, num_partitions: int, configs: dict[str, str]
    ) -> TopicConfig:
        """Check a topic creation (raises store errors carrying Kafka error codes); its config."""
        return self.store.validate_new_topic(name, num_partitions, configs)

    def create_topic(self, name: str, num_partitions: int, configs: dict[str, str] | None = None):
        """Create a topic (raises store errors carrying Kafka error codes)."""
        return self.store.create_topic(name, num_partitions, configs or {})

    def auto_create_topic(self, name: str) -> LogTopic:
        """Create `name` with the broker defaults (Metadata auto-creation)."""
        return self.create_topic(name, self.num_partitions, {})

    def validate_new_partitions(self, name: str, total: int) -> None:
        """Check growing topic `name` to `total` partitions (raises store errors)."""
        self.store.validate_new_partitions(name, total)

    def create_partitions(self, name: str, total: int) -> None:
        """Grow topic `name` to `total` partitions."""
        self.store.create_partitions(name, total)

    async def in_admin_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` in the broker's admin thread. Creating, growing and deleting topics and
        altering their configs hold the store's lock while their files are made or removed (a
        topic of 10,000 partitions takes seconds): there the event loop never waits for them, and
        they are applied one after another, as Kafka's controller applies them."""
        if self._admin is None:
            self._admin = ThreadPoolExecutor(1, thread_name_prefix="rdmalog-admin")
        return await asyncio.get_running_loop().run_in_executor(
            self._admin, functools.partial(fn, *args)
        )

    async def in_conversion_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` in the broker's conversion thread: message format conversions for clients
        older than Kafka 0.11 are per-record Python work of up to `request.max.decoded.bytes` each,
        done there one at a time, so the event loop keeps serving and together they hold about
        one such budget."""
        if self._convert is None:
            self._convert = ThreadPoolExecutor(1, thread_name_prefix="rdmalog-convert")
        return await asyncio.get_running_loop().run_in_executor(
            self._convert, functools.partial(fn, *args)
        )

    def close(self) -> None:
        """Let the admin and conversion threads go (after what they run now)."""
        for pool in (self._admin, self._convert):
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)

    async def delete_topic(self, name: str) -> None:
        """Delete topic `name` and its data; fetches waiting on its partitions return. The files of
        every partition are removed in the admin thread: other clients are served meanwhile."""
        topic = self.store.topics.get(name)
        logs = list(topic.partitions) if topic is not None else []
        await self.in_admin_thread(self.store.delete_topic, name)
        for plog in logs:
            self.forget_log(plog)

    def alter_topic_config(
        self, name: str, changes: Mapping[str, str | None], replace: bool
    ) -> TopicConfig:
        """Set (None: revert) or, with `replace`, replace topic `name`'s config overrides."""
        return self.store.alter_topic_config(name, changes, replace=replace)

    def check_config(self, config: BrokerConfig) -> None:
        """Raise InvalidConfigError if a topic's overrides conflict with `config`'s defaults, or
        the cleaner cannot take its new settings live."""
        for topic in list(self.store.topics.values()):
            TopicConfig.from_overrides(config, topic.config.overrides)
        cleaner = getattr(self.store, "cleaner", None)
        if cleaner is not None:
            cleaner.validate(config)

    def reconfigure(self, config: BrokerConfig) -> None:
        """Take a new effective config (dynamic broker configs changed; any thread): topics that
        inherit broker defaults see the new ones at once, `config_listeners` apply the rest."""
        store: Any = self.store
        with store.lock:
            self.config = store.config = config
            self.message_max_bytes = config.get("message.max.bytes")
            for topic in store.topics.values():
                try:
                    cfg = TopicConfig.from_overrides(config, topic.config.overrides)
                except KafkaError as exc:  # checked before the change when made here
                    log.warning("topic %s keeps its previous defaults: %s", topic.name, exc)
                    continue
                topic.config = cfg
                for plog in topic.partitions:
                    plog.config = cfg
            if getattr(store, "cleaner", None) is not None:
                store.cleaner.reconfigure(config)
        loop = self.loop
        for callback in list(self.config_listeners):
            if loop is None or threading.get_ident() == self._loop_thread:
                callback(config)
            elif not loop.is_closed():
                loop.call_soon_threadsafe(callback, config)

    def checkpoint(self) -> None:
        """Write the offset checkpoints (blocks on fsync: run it off the event loop)."""
        self.store.checkpoint()

    def allocate_producer_id(self) -> int:
        """A producer id unique across restarts (may fsync: run it off the event loop)."""
        ids = self.store.producer_ids
        if ids is None:
            raise KafkaError("the store is not open")
        return ids.allocate()

    # --- fetch waiters -----------------------------------------------------------------------

    def _on_advance(self, plog: Log) -> None:
        """PartitionLog listener: wake fetches waiting on this log (hops to the loop thread)."""
        if not self._waiters.get(id(plog)):
            return
        if threading.get_ident() == self._loop_thread:
            self._wake(plog)
        elif self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._wake, plog)

    def _wake(self, plog: Log) -> None:
        for fut in self._waiters.pop(id(plog), ()):
            if not fut.done():
                fut.set_result(True)

    async def wait_for_data(self, logs: list[Log], timeout: float) -> bool:
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

    def forget_log(self, plog: Log) -> None:
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
