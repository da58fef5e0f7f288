"""Kafka's transaction verification on produce (KIP-890 part 1,
`transaction.partition.verification.enable`, on by default since Kafka 3.6): a transactional batch is
appended only when its partition is in its producer's ongoing transaction. A late or stray write
(after the transaction ended, or to a partition never added) would otherwise open a transaction no
marker will ever close, holding the partition's last stable offset forever."""

from __future__ import annotations

import struct
from typing import Any

from gateway.transactions.coordinator import TxnError
from rdmalog import errors as E
from rdmalog.store.records import ATTRIBUTES, PRODUCER_ID, TRANSACTIONAL_BIT

_ATTRIBUTES = struct.Struct(">h")
_PRODUCER = struct.Struct(">qh")


def refusal(broker: Any, transactional_id: str, topic: str, partition: int, records: Any) -> int:
    """The error code refusing `records` (a Produce request's partition data), or 0 when they may be
    appended: not transactional, verification off, or the partition is in the transaction."""
    if len(records) < PRODUCER_ID + 10:
        return E.NONE
    if not _ATTRIBUTES.unpack_from(records, ATTRIBUTES)[0] & TRANSACTIONAL_BIT:
        return E.NONE
    service = getattr(broker, "transactions", None)
    if service is None or not service.config.verify_partitions:
        return E.NONE
    coordinator = service.coordinator
    if coordinator.coordinator_error is not None and coordinator.coordinator_error(
        transactional_id
    ):
        return E.NONE  # a cluster: its coordinator is another broker (not asked: see docs)
    producer_id, epoch = _PRODUCER.unpack_from(records, PRODUCER_ID)
    try:
        service.coordinator.add_partitions(
            transactional_id, producer_id, epoch, [(topic, partition)], verify_only=True
        )
    except TxnError as exc:  # Produce knows no PRODUCER_FENCED: an old epoch is refused as such
        return E.INVALID_PRODUCER_EPOCH if exc.code == E.PRODUCER_FENCED else exc.code
    return E.NONE
