"""The group coordinator of one broker: built on first use, fed from and writing to the store.

The server starts one `GroupService` per broker at start-up (`broker.groups`): it reads the
coordinator settings from the broker config, creates/replays `__consumer_offsets` and starts the
offsets-retention timer on the running loop. `group_service(broker)` returns it (creating it on first
use where a broker was built without the server, as in handler tests).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from gateway.groups.clock import LoopClock
from gateway.groups.coordinator import GroupCoordinator
from gateway.groups.model import GroupConfig
from gateway.groups.offsets_topic import OFFSETS_TOPIC, OffsetsTopic
from gateway.groups.schema import partition_for
from gateway.groups.txn_offsets import TxnOffsets
from rdmalog.store.interface import LogStore

log = logging.getLogger(__name__)

NOT_LEADER_OR_FOLLOWER = 6
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16


def _setting(config: Any, name: str, default: int) -> int:
    """A broker setting by Kafka name, or `default` when the config does not define it."""
    try:
        value = config.get(name)
    except Exception:
        return default
    return default if value is None else int(value)


def group_config(config: Any) -> GroupConfig:
    """The coordinator's settings from a BrokerConfig (Kafka names and defaults)."""
    d = GroupConfig()
    return GroupConfig(
        min_session_timeout_ms=_setting(
            config, "group.min.session.timeout.ms", d.min_session_timeout_ms
        ),
        max_session_timeout_ms=_setting(
            config, "group.max.session.timeout.ms", d.max_session_timeout_ms
        ),
        initial_rebalance_delay_ms=_setting(
            config, "group.initial.rebalance.delay.ms", d.initial_rebalance_delay_ms
        ),
        max_size=_setting(config, "group.max.size", d.max_size),
        offsets_retention_ms=_setting(config, "offsets.retention.minutes", 10080) * 60_000,
        offsets_retention_check_interval_ms=_setting(
            config, "offsets.retention.check.interval.ms", d.offsets_retention_check_interval_ms
        ),
        offset_metadata_max_bytes=_setting(
            config, "offset.metadata.max.bytes", d.offset_metadata_max_bytes
        ),
    )


class GroupService:
    """A coordinator bound to a store and an event loop.

    In cluster mode (`replicas`, the broker's ReplicaManager) it coordinates the groups of the
    `__consumer_offsets` partitions this broker leads: it loads a partition's groups when it
    becomes leader and forgets them when it stops leading; other groups get NOT_COORDINATOR;
    what it writes is acknowledged once the ISR has it (`durable`)."""

    def __init__(
        self,
        store: LogStore,
        config: Any,
        loop: asyncio.AbstractEventLoop,
        replicas: Any = None,
    ) -> None:
        self.store = store
        self.loop = loop
        self.replicas = replicas
        self.commit_timeout_s = _setting(config, "offsets.commit.timeout.ms", 5000) / 1000
        self.offsets = OffsetsTopic(
            store,
            _setting(config, "offsets.topic.num.partitions", 50),
            _setting(config, "offsets.topic.segment.bytes", 104_857_600),
            create=replicas is None,
        )
        self._loaded: set[int] = set()  # cluster mode: partitions whose groups are here
        self.coordinator = GroupCoordinator(
            LoopClock(loop),
            self.offsets,
            group_config(config),
            new_waiter=loop.create_future,
            partition_exists=self._partition_exists,
            coordinator_error=self._coordinator_error if replicas is not None else None,
        )
        self.txn_offsets = TxnOffsets(self.coordinator, self.offsets)  # TxnOffsetCommit

    def start(self) -> GroupService:
        """Load every group from `__consumer_offsets` (if it exists yet), start retention. In
        cluster mode groups are loaded partition by partition as leadership comes."""
        if self.replicas is not None:
            self.replicas.add_leadership_listener(self._on_leadership)
        elif OFFSETS_TOPIC in self.store.topics:
            self.offsets.ensure()  # adopt its partition count
            count = self.coordinator.load(self.offsets.replay())
            self.txn_offsets.restore(self.offsets.open_transactions)
            log.info(
                "group coordinator loaded %d group(s) from %d __consumer_offsets partition(s)",
                count,
                self.offsets.num_partitions,
            )
        # otherwise the topic is created by the first FindCoordinator, as Kafka does
        self.coordinator.start_retention()
        return self

    def stop(self) -> None:
        self.coordinator.stop_retention()

    def _partition_exists(self, topic: str, partition: int) -> bool:
        if self.replicas is not None:  # a cluster: the partition may have no replica here
            return 0 <= partition < self.replicas.partition_count(topic)
        t = self.store.topics.get(topic)
        return t is not None and 0 <= partition < len(t.partitions)

    async def durable(self) -> int:
        """Wait until what the coordinator wrote is as durable as the flush policy requires, and
        in cluster mode replicated to the ISR (bounded by offsets.commit.timeout.ms); 0, or the
        Kafka error code of a write the ISR did not take (NOT_COORDINATOR when leadership moved,
        REQUEST_TIMED_OUT), which OffsetCommit answers with."""
        if self.offsets.dirty:
            await self.loop.run_in_executor(None, self.offsets.flush)
        if self.replicas is None:
            return 0
        return await wait_appended(self.replicas, self.offsets.appended, self.commit_timeout_s)

    # --- cluster mode -----------------------------------------------------------------------

    def _coordinator_error(self, group_id: str) -> int:
        count = self.replicas.partition_count(OFFSETS_TOPIC)
        if not count:
            return COORDINATOR_NOT_AVAILABLE
        p = partition_for(group_id, count)
        if p in self._loaded and not self.replicas.leader_error(OFFSETS_TOPIC, p):
            return 0
        return NOT_COORDINATOR

    def _on_leadership(self, topic: str, partition: int, leads: bool, epoch: int) -> None:
        if topic != OFFSETS_TOPIC:
            return
        count = self.replicas.partition_count(OFFSETS_TOPIC)
        if leads:
            self.offsets.ensure()
            self.offsets.open_transactions = {}
            loaded = self.coordinator.load(self.offsets.replay_partition(partition))
            self.txn_offsets.restore(self.offsets.open_transactions)  # still-open transactions
            self._loaded.add(partition)
            log.info(
                "coordinating the groups of %s-%d (epoch %d): %d loaded",
                OFFSETS_TOPIC, partition, epoch, loaded,
            )  # fmt: skip
        else:
            self._loaded.discard(partition)
            gone = self.coordinator.unload(lambda g: partition_for(g, count) == partition)
            self.txn_offsets.forget(partition)
            log.info("%s-%d led elsewhere now: %d group(s) moved", OFFSETS_TOPIC, partition, gone)


async def wait_appended(replicas: Any, appended: dict, timeout_s: float, only: Any = None) -> int:
    """Cluster mode, a coordinator's acks=all: wait (up to `timeout_s`) until the ISR has what it
    appended (`appended`: log -> last offset written, emptied of what is replicated or led
    elsewhere now), or with `only` what it appended to that log; 0, or the Kafka error code of a
    write the ISR did not take (NOT_COORDINATOR when leadership moved, REQUEST_TIMED_OUT,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND)."""
    for plog, last in list(appended.items()):
        if plog.high_watermark > last:
            del appended[plog]
    pending = [(p, last) for p, last in appended.items() if only is None or p is only]
    codes = await asyncio.gather(
        *(replicas.wait_replicated(p.topic, p.partition, last, timeout_s) for p, last in pending)
    )
    failed = 0
    for (plog, last), code in zip(pending, codes, strict=True):
        if code:
            log.warning("coordinator records in %s not replicated: error %d", plog.name, code)
            failed = NOT_COORDINATOR if code == NOT_LEADER_OR_FOLLOWER else code
            if code == NOT_LEADER_OR_FOLLOWER and appended.get(plog) == last:
                del appended[plog]  # led elsewhere: nothing more to wait for here
    return failed


def group_service(broker: Any) -> GroupService:
    """The broker's group service (`broker.groups`), created and loaded on first use if the server
    did not start it already."""
    if broker.groups is None:
        broker.groups = GroupService(
            broker.store, broker.config, asyncio.get_running_loop()
        ).start()
    return broker.groups
