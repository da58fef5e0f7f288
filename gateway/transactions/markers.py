"""Writing a transaction's markers: one control batch (COMMIT or ABORT, Kafka's format) on every
partition of the transaction, through the broker's partitions. A marker on a `__consumer_offsets`
partition also settles the offsets the transaction committed there (TxnOffsetCommit)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from gateway.groups.schema import OFFSETS_TOPIC
from rdmalog.store.transactions import marker_batch

log = logging.getLogger(__name__)


class PartitionMarkers:
    """The coordinator's `MarkerWriter` on one broker (every partition is led here), and the
    partition leader's side of WriteTxnMarkers (`mark`)."""

    def __init__(self, broker: Any, coordinator_epoch: int = 0) -> None:
        self.broker = broker
        self.coordinator_epoch = coordinator_epoch
        self.to_flush: set = set()

    def __call__(
        self, producer_id: int, epoch: int, commit: bool, partitions: Iterable[tuple[str, int]]
    ) -> None:
        for topic, partition in partitions:
            plog = self.broker.partition(topic, partition)
            if isinstance(plog, int):  # deleted meanwhile: nothing to mark, as Kafka skips it
                log.info("marker for %s-%d skipped: the partition is gone", topic, partition)
                continue
            self.mark(plog, producer_id, epoch, commit)

    def mark(
        self,
        plog: Any,
        producer_id: int,
        epoch: int,
        commit: bool,
        coordinator_epoch: int | None = None,
    ) -> int:
        """Append one marker to `plog` (a partition led here); on a `__consumer_offsets` partition
        settle the transaction's offsets there. Returns the marker's offset."""
        coordinator_epoch = (
            self.coordinator_epoch if coordinator_epoch is None else coordinator_epoch
        )
        batch = marker_batch(producer_id, epoch, commit, coordinator_epoch)
        result = plog.append(batch, allow_control=True)
        if result.flush_needed:
            self.to_flush.add(plog)
        if plog.topic == OFFSETS_TOPIC and self.broker.groups is not None:
            self.broker.groups.txn_offsets.complete(producer_id, commit, plog.partition)
        return result.last_offset

    def flush(self) -> None:
        """fsync the partitions the flush policy asked for (blocking: off the event loop)."""
        dirty, self.to_flush = self.to_flush, set()
        for plog in dirty:
            plog.flush()
