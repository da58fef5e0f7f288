"""`__transaction_state` in the store: where the coordinator writes each transactional id's metadata,
and its replay at start-up (the last value of each id wins; a tombstone removes it). In a cluster the
topic comes through ZooKeeper (`create=False`) and a partition is replayed when this broker comes to
lead it; `appended` says what the coordinator must see replicated before it answers."""

from __future__ import annotations

import logging

from gateway.groups.offsets_topic import CoordinatorNotAvailableError
from gateway.transactions.model import TxnMetadata
from gateway.transactions.schema import (
    TRANSACTION_STATE_TOPIC,
    SchemaError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for,
)
from rdmalog.store.interface import Log, LogStore, LogTopic
from rdmalog.store.records import Record, build_batch, decode_records, iter_batches

log = logging.getLogger(__name__)

READ_CHUNK = 1 << 20


class TransactionStateTopic:
    """Writes transaction metadata records and reads them all back."""

    def __init__(
        self, store: LogStore, num_partitions: int, segment_bytes: int, create: bool = True
    ) -> None:
        self.store = store
        self.num_partitions = num_partitions
        self.segment_bytes = segment_bytes
        self.create = create  # False in cluster mode: the topic comes through ZooKeeper
        self.dirty: set[Log] = set()
        self.appended: dict[Log, int] = {}  # log -> last offset written (cluster mode waits on it)

    def ensure(self) -> LogTopic:
        """The topic, created (compacted) when missing; an existing one keeps its partition count."""
        topic = self.store.topics.get(TRANSACTION_STATE_TOPIC)
        if topic is None and not self.create:
            raise CoordinatorNotAvailableError(f"{TRANSACTION_STATE_TOPIC} has no replica here")
        if topic is None:
            configs = {"cleanup.policy": "compact", "segment.bytes": str(self.segment_bytes)}
            try:
                topic = self.store.create_topic(
                    TRANSACTION_STATE_TOPIC, self.num_partitions, configs
                )
            except Exception:
                topic = self.store.topics.get(TRANSACTION_STATE_TOPIC)
                if topic is None:
                    raise
        self.num_partitions = len(topic.partitions)
        return topic

    def log_of(self, transactional_id: str) -> Log:
        """The partition holding `transactional_id` (Kafka's hash of the id)."""
        topic = self.ensure()
        return topic.partitions[partition_for(transactional_id, self.num_partitions)]

    def write(self, meta: TxnMetadata, timestamp_ms: int, tombstone: bool = False) -> None:
        """Append the metadata of one id (a tombstone when `tombstone`)."""
        value = None if tombstone else encode_value(meta)
        batch = build_batch(
            [Record(encode_key(meta.transactional_id), value, timestamp=timestamp_ms)],
            now_ms=timestamp_ms,
        )
        plog = self.log_of(meta.transactional_id)
        result = plog.append(batch)
        if result.flush_needed:
            self.dirty.add(plog)
        if not self.create:
            self.appended[plog] = result.last_offset

    def flush(self) -> None:
        """fsync the partitions the flush policy asked for (blocking: off the event loop)."""
        dirty, self.dirty = self.dirty, set()
        for plog in dirty:
            plog.flush()

    def replay(self) -> dict[str, TxnMetadata]:
        """The metadata of every transactional id the topic holds."""
        topic = self.store.topics.get(TRANSACTION_STATE_TOPIC)
        found: dict[str, TxnMetadata] = {}
        if topic is None:
            return found
        self.num_partitions = len(topic.partitions)
        for plog in list(topic.partitions):
            _replay_log(plog, found)
        return found

    def replay_partition(self, partition: int) -> dict[str, TxnMetadata]:
        """The metadata of the ids of one partition (a coordinator taking it over)."""
        topic = self.store.topics.get(TRANSACTION_STATE_TOPIC)
        found: dict[str, TxnMetadata] = {}
        if topic is not None and 0 <= partition < len(topic.partitions):
            self.num_partitions = len(topic.partitions)
            _replay_log(topic.partitions[partition], found)
        return found


def _replay_log(plog: Log, found: dict[str, TxnMetadata]) -> None:
    end = plog.log_end_offset
    offset = plog.log_start_offset
    while offset < end:
        chunk = plog.read(offset, READ_CHUNK, upper_bound=end)
        if chunk is None:
            break
        before = offset
        for batch in iter_batches(chunk.read()):
            if batch.next_offset <= offset:
                continue
            offset = batch.next_offset
            if batch.is_control:
                continue
            for rec in decode_records(batch):
                _apply(found, rec.key, rec.value)
        if offset == before:
            log.warning("%s: no progress replaying at offset %d", plog, offset)
            break


def _apply(found: dict[str, TxnMetadata], key: bytes | None, value: bytes | None) -> None:
    if key is None:
        return
    try:
        txn_id = decode_key(key)
        if txn_id is None:
            return
        if value is None:
            found.pop(txn_id, None)
        else:
            found[txn_id] = decode_value(txn_id, value)
    except SchemaError as exc:
        log.warning("skipping unreadable %s record: %s", TRANSACTION_STATE_TOPIC, exc)
