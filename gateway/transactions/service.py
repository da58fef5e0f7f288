"""The transaction coordinator of one broker: bound to its store, its event loop and its groups;
loaded from `__transaction_state` at start-up, with the periodic checks of Kafka's coordinator
(timed-out transactions aborted every `transaction.abort.timed.out.transaction.cleanup.interval.ms`,
idle ids expired every `transaction.remove.expired.transaction.cleanup.interval.ms`). In a cluster
it coordinates the ids of the `__transaction_state` partitions this broker leads (`placement`) and
sends markers to the partitions' leaders (`sender`).

`transaction_service(broker)` returns it, creating it on first use where the server did not.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from gateway.cluster.link import BrokerLinks
from gateway.groups.service import group_service
from gateway.transactions.coordinator import TransactionCoordinator
from gateway.transactions.marker_sender import MarkerSender
from gateway.transactions.markers import PartitionMarkers
from gateway.transactions.model import TxnConfig
from gateway.transactions.placement import TxnPlacement
from gateway.transactions.schema import TRANSACTION_STATE_TOPIC
from gateway.transactions.state_topic import TransactionStateTopic

log = logging.getLogger(__name__)


class TransactionService:
    """A coordinator bound to a broker and an event loop."""

    def __init__(self, broker: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.broker = broker
        self.loop = loop
        self.config = TxnConfig.from_broker(broker.config)
        node = getattr(broker, "cluster", None)
        self.topic = TransactionStateTopic(
            broker.store, self.config.num_partitions, self.config.segment_bytes, node is None
        )
        self.markers = PartitionMarkers(broker)
        self.coordinator = TransactionCoordinator(
            self.topic,
            self.config,
            broker.allocate_producer_id,
            self.markers,
            _wall_ms,
        )
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self.placement: TxnPlacement | None = None
        self.sender: MarkerSender | None = None
        self.links: BrokerLinks | None = None  # to other brokers: markers, verification
        if node is not None:
            self.placement = TxnPlacement(self, node.replicas)
            self.links = BrokerLinks(node, "rdmalog-txn")
            self.sender = MarkerSender(self, node, self.placement, self.links)
            self.coordinator.defer_markers = self.sender

    def start(self) -> TransactionService:
        """Load every id from `__transaction_state` (if it exists yet; in a cluster partition by
        partition as leadership comes), start the checks."""
        if self.placement is not None:
            self.placement.start()
        elif TRANSACTION_STATE_TOPIC in self.broker.store.topics:
            count = self.coordinator.load()
            log.info("transaction coordinator loaded %d transactional id(s)", count)
        self._every("abort", self.config.abort_check_interval_ms, self.coordinator.abort_timed_out)
        self._every("expire", self.config.expire_check_interval_ms, self.coordinator.expire_ids)
        return self

    def _every(self, name: str, interval_ms: int, check: Callable[[], list[str]]) -> None:
        def tick() -> None:
            try:
                if check():
                    self.loop.create_task(self.durable())
            except Exception:
                log.exception("transaction coordinator check failed")
            finally:
                self._timers[name] = self.loop.call_later(interval_ms / 1000, tick)

        self._timers[name] = self.loop.call_later(interval_ms / 1000, tick)

    def stop(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        if self.sender is not None:
            self.sender.stop()
        if self.links is not None:
            self.links.close()

    async def durable(self, transactional_id: str | None = None) -> int:
        """Wait until what the coordinator wrote (state, markers) is as durable as the flush
        policy requires, and in a cluster replicated to the ISR (the state of `transactional_id`,
        given one); 0, or the error code of a state write the ISR did not take (NOT_COORDINATOR
        when leadership moved)."""
        await self.flushed()
        groups = self.broker.groups
        if groups is not None:
            await groups.durable()  # markers settle transactional offsets
        if self.placement is None:
            return 0
        return await self.placement.replicated(transactional_id)

    async def ended(self, transactional_id: str, timeout_s: float = 10.0) -> None:
        """In a cluster: wait (bounded) until the id's markers are written and its transaction
        complete (EndTxn answers then, so a committed transaction is readable when it returns)."""
        if self.sender is not None:
            await self.sender.completed(transactional_id, timeout_s)

    async def flushed(self) -> None:
        """fsync what the flush policy asks of the state and marker writes (off the loop)."""
        if self.topic.dirty or self.markers.to_flush:
            await self.loop.run_in_executor(None, self._flush)

    def _flush(self) -> None:
        self.topic.flush()
        self.markers.flush()

    async def ensure_topic(self) -> None:
        """Create `__transaction_state` when missing (in the admin thread: its partitions are file
        work). In a cluster it comes through ZooKeeper (FindCoordinator creates it)."""
        if self.placement is not None:
            return
        if TRANSACTION_STATE_TOPIC not in self.broker.store.topics:
            await self.broker.in_admin_thread(self.topic.ensure)


def _wall_ms() -> int:
    return int(time.time() * 1000)


def transaction_service(broker: Any) -> TransactionService:
    """The broker's transaction service, created and loaded on first use if the server did not
    start it already (the group service too: markers settle transactional offsets)."""
    if getattr(broker, "transactions", None) is None:
        group_service(broker)
        broker.transactions = TransactionService(broker, asyncio.get_running_loop()).start()
    return broker.transactions
