"""Kafka's transaction verification on produce (KIP-890 part 1,
`transaction.partition.verification.enable`, on by default since Kafka 3.6): a transactional batch is
appended only when its partition is in its producer's ongoing transaction. A late or stray write
(after the transaction ended, or to a partition never added) would otherwise open a transaction no
marker will ever close, holding the partition's last stable offset forever.

In a cluster (`verify`) a partition leader that is not the id's coordinator asks it, as Kafka does,
with AddPartitionsToTxn v4 `verify_only` over the inter-broker listener; only a transaction's first
batch on a partition is asked about (later ones find the transaction open in the partition's
producer state at the same epoch). A coordinator that cannot answer now is reported
NOT_ENOUGH_REPLICAS, which producers retry, as Kafka maps it."""

from __future__ import annotations

import logging
import struct
from typing import Any

from gateway.transactions.coordinator import TxnError
from gateway.transactions.schema import TRANSACTION_STATE_TOPIC
from rdmalog import errors as E
from rdmalog.store.records import ATTRIBUTES, PRODUCER_ID, TRANSACTIONAL_BIT

_ATTRIBUTES = struct.Struct(">h")
_PRODUCER = struct.Struct(">qh")
_RETRIABLE = {
    E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_COORDINATOR,
    E.COORDINATOR_LOAD_IN_PROGRESS,
    51,  # CONCURRENT_TRANSACTIONS
}

log = logging.getLogger(__name__)


def _verifying(broker: Any, records: Any) -> Any:
    """The transaction service when `records` start with a transactional batch that partition
    verification must check; None when they may be appended as they are."""
    if len(records) < PRODUCER_ID + 10:
        return None
    if not _ATTRIBUTES.unpack_from(records, ATTRIBUTES)[0] & TRANSACTIONAL_BIT:
        return None
    service = getattr(broker, "transactions", None)
    if service is None or not service.config.verify_partitions:
        return None
    return service


def refusal(broker: Any, transactional_id: str, topic: str, partition: int, records: Any) -> int:
    """The error code refusing `records` (a Produce request's partition data), or 0 when they may be
    appended: not transactional, verification off, or the partition is in the transaction."""
    service = _verifying(broker, records)
    if service is None:
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


async def verify(broker: Any, transactional_id: str, plog: Any, records: Any) -> int:
    """`refusal` in a cluster: the error code refusing `records` for partition `plog` (led here),
    asking the id's coordinator when it is another broker."""
    service = _verifying(broker, records)
    if service is None:
        return E.NONE
    coordinator = service.coordinator
    if coordinator.coordinator_error is None or not coordinator.coordinator_error(transactional_id):
        return refusal(broker, transactional_id, plog.topic, plog.partition, records)
    producer_id, epoch = _PRODUCER.unpack_from(records, PRODUCER_ID)
    state = plog.producer_state
    entry = state.producers.get(producer_id)
    if producer_id in state.ongoing and entry is not None and entry.epoch == epoch:
        return E.NONE  # its transaction is open here: its first batch was verified
    code = await _ask_coordinator(service, transactional_id, producer_id, epoch, plog)
    if code in _RETRIABLE:
        return E.NOT_ENOUGH_REPLICAS
    return E.INVALID_PRODUCER_EPOCH if code == E.PRODUCER_FENCED else code


async def _ask_coordinator(
    service: Any, transactional_id: str, producer_id: int, epoch: int, plog: Any
) -> int:
    p = service.placement.partition_of(transactional_id)
    state = None if p is None else service.broker.cluster.view.state(TRANSACTION_STATE_TOPIC, p)
    if state is None or state.leader < 0:
        return E.COORDINATOR_NOT_AVAILABLE
    try:
        link = await service.links.get(state.leader)
        return await link.verify_in_transaction(
            transactional_id, producer_id, epoch, plog.topic, plog.partition
        )
    except Exception as exc:
        log.info("verifying %s with broker %d failed: %r", transactional_id, state.leader, exc)
        service.links.drop(state.leader)
        return E.COORDINATOR_NOT_AVAILABLE
