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
from gateway.groups.txn_offsets import TxnOffsets
from rdmalog.store.interface import LogStore

log = logging.getLogger(__name__)


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
    """A coordinator bound to a store and an event loop."""

    def __init__(self, store: LogStore, config: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.store = store
        self.loop = loop
        self.offsets = OffsetsTopic(
            store,
            _setting(config, "offsets.topic.num.partitions", 50),
            _setting(config, "offsets.topic.segment.bytes", 104_857_600),
        )
        self.coordinator = GroupCoordinator(
            LoopClock(loop),
            self.offsets,
            group_config(config),
            new_waiter=loop.create_future,
            partition_exists=self._partition_exists,
        )
        self.txn_offsets = TxnOffsets(self.coordinator, self.offsets)  # TxnOffsetCommit

    def start(self) -> GroupService:
        """Load every group from `__consumer_offsets` (if it exists yet), start retention."""
        if OFFSETS_TOPIC in self.store.topics:
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
        t = self.store.topics.get(topic)
        return t is not None and 0 <= partition < len(t.partitions)

    async def durable(self) -> None:
        """Wait until what the coordinator wrote is as durable as the flush policy requires."""
        if self.offsets.dirty:
            await self.loop.run_in_executor(None, self.offsets.flush)


def group_service(broker: Any) -> GroupService:
    """The broker's group service (`broker.groups`), created and loaded on first use if the server
    did not start it already."""
    if broker.groups is None:
        broker.groups = GroupService(
            broker.store, broker.config, asyncio.get_running_loop()
        ).start()
    return broker.groups
