"""The transaction coordinator in a cluster, as Kafka's ZooKeeper mode places it: the leader of
`__transaction_state` partition `abs(hashCode(id)) % partitions` coordinates a transactional id.

The mechanism is the group coordinator's (gateway/groups/service.py): the replica manager's
leadership events load a partition's ids when this broker comes to lead it (prepared transactions
are resumed: their markers sent again) and unload them when it stops; an id of a partition not
loaded here is answered NOT_COORDINATOR; what the coordinator writes is answered once the ISR has
it (`replicated`, acks=all).
"""

from __future__ import annotations

import logging
from typing import Any

from gateway.groups.service import wait_appended
from gateway.transactions.schema import TRANSACTION_STATE_TOPIC, partition_for
from rdmalog import errors as E

log = logging.getLogger(__name__)

STATE_WRITE_TIMEOUT_S = 30.0  # Kafka's coordinator appends within request.timeout.ms (30 s)


class TxnPlacement:
    """Which transactional ids this broker coordinates, kept in step with its leaderships."""

    def __init__(self, service: Any, replicas: Any) -> None:
        self.service = service
        self.replicas = replicas
        self.loaded: dict[int, int] = {}  # partition -> leader epoch (the coordinator epoch)

    def start(self) -> TxnPlacement:
        self.service.coordinator.coordinator_error = self.coordinator_error
        self.replicas.add_leadership_listener(self._on_leadership)
        return self

    def partition_of(self, transactional_id: str) -> int | None:
        """The id's `__transaction_state` partition (None while the topic does not exist)."""
        count = self.replicas.partition_count(TRANSACTION_STATE_TOPIC)
        return partition_for(transactional_id, count) if count else None

    def coordinator_error(self, transactional_id: str) -> int:
        """0 when this broker coordinates the id, else NOT_COORDINATOR (COORDINATOR_NOT_AVAILABLE
        while the topic does not exist)."""
        p = self.partition_of(transactional_id)
        if p is None:
            return E.COORDINATOR_NOT_AVAILABLE
        return 0 if self.leads(p) else E.NOT_COORDINATOR

    def leads(self, partition: int) -> bool:
        return partition in self.loaded and not self.replicas.leader_error(
            TRANSACTION_STATE_TOPIC, partition
        )

    def coordinator_epoch(self, transactional_id: str) -> int:
        """The epoch markers carry: the leader epoch of the id's partition here."""
        p = self.partition_of(transactional_id)
        return self.loaded.get(p, 0) if p is not None else 0

    async def replicated(self, transactional_id: str | None = None) -> int:
        """Wait until the ISR has what the coordinator wrote (to the id's partition, given one);
        0 or the error code."""
        only = None
        if transactional_id is not None:
            p = self.partition_of(transactional_id)
            topic = self.service.broker.store.topics.get(TRANSACTION_STATE_TOPIC)
            if p is None or topic is None or p >= len(topic.partitions):
                return 0
            only = topic.partitions[p]
        return await wait_appended(
            self.replicas, self.service.topic.appended, STATE_WRITE_TIMEOUT_S, only
        )

    def _on_leadership(self, topic: str, partition: int, leads: bool, epoch: int) -> None:
        if topic != TRANSACTION_STATE_TOPIC:
            return
        coordinator = self.service.coordinator
        if leads:
            self.service.topic.ensure()
            self.loaded[partition] = epoch
            loaded = coordinator.load_partition(partition)
            log.info(
                "coordinating the transactional ids of %s-%d (epoch %d): %d loaded",
                TRANSACTION_STATE_TOPIC, partition, epoch, loaded,
            )  # fmt: skip
        else:
            self.loaded.pop(partition, None)
            count = self.replicas.partition_count(TRANSACTION_STATE_TOPIC)
            gone = coordinator.unload(lambda t: partition_for(t, count) == partition)
            log.info(
                "%s-%d led elsewhere now: %d transactional id(s) moved",
                TRANSACTION_STATE_TOPIC, partition, gone,
            )  # fmt: skip
