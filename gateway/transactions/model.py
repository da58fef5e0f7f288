"""What the transaction coordinator keeps of a transactional id, its settings and the error codes it
answers with (those rdmalog.errors does not name)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

CONCURRENT_TRANSACTIONS = 51
INVALID_TRANSACTION_TIMEOUT = 50
OPERATION_NOT_ATTEMPTED = 55
TRANSACTIONAL_ID_NOT_FOUND = 105

NO_PRODUCER_ID = -1
NO_EPOCH = -1
MAX_EPOCH = 32767  # Short.MaxValue: a producer id is replaced before its epoch reaches it


class TxnState(enum.IntEnum):
    """Kafka's TransactionState with the ids `__transaction_state` stores."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions and ListTransactions use (Kafka's `stateName`)."""
        return "".join(w.capitalize() for w in self.name.split("_"))


COMPLETE = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
PREPARING = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE)


@dataclass
class TxnMetadata:
    """One transactional id: its producer id and epoch and the transaction it is in."""

    transactional_id: str
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_EPOCH
    timeout_ms: int = 60000
    state: TxnState = TxnState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    last_update_ms: int = -1
    start_ms: int = -1
    last_producer_id: int = NO_PRODUCER_ID  # before an epoch exhaustion moved it to a new id
    last_producer_epoch: int = NO_EPOCH  # before the coordinator bumped it (fencing, timeouts)


@dataclass(frozen=True)
class TxnConfig:
    """The coordinator's settings (Kafka's names and defaults)."""

    num_partitions: int = 50
    segment_bytes: int = 104857600
    max_timeout_ms: int = 900000
    id_expiration_ms: int = 604800000
    abort_check_interval_ms: int = 10000
    expire_check_interval_ms: int = 3600000
    verify_partitions: bool = True  # transaction.partition.verification.enable

    @classmethod
    def from_broker(cls, config) -> TxnConfig:
        get = config.get
        return cls(
            num_partitions=get("transaction.state.log.num.partitions"),
            max_timeout_ms=get("transaction.max.timeout.ms"),
            id_expiration_ms=get("transactional.id.expiration.ms"),
            abort_check_interval_ms=get(
                "transaction.abort.timed.out.transaction.cleanup.interval.ms"
            ),
            expire_check_interval_ms=get(
                "transaction.remove.expired.transaction.cleanup.interval.ms"
            ),
            verify_partitions=get("transaction.partition.verification.enable"),
        )


def for_version(code: int, version: int, fenced_since: int) -> int:
    """`code` as a client of this request version knows it: PRODUCER_FENCED exists from the
    version that KIP-588 gave each API (`fenced_since`); older ones get INVALID_PRODUCER_EPOCH, and
    newer ones PRODUCER_FENCED for an epoch a partition refused."""
    if code == 90 and version < fenced_since:
        return 47
    if code == 47 and version >= fenced_since:
        return 90
    return code
