"""`__transaction_state` in the store: where the coordinator writes each transactional id's metadata,
and its replay at start-up (the last value of each id wins; a tombstone removes it)."""

from __future__ import annotations

import logging

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

    def __init__(self, store: LogStore, num_partitions: int, segment_bytes: int) -> None:
        self.store = store
        self.num_partitions = num_partitions
        self.segment_bytes = segment_bytes
        self.dirty: set[Log] = set()

    def ensure(self) -> LogTopic:
        """The topic, created (compacted) when missing; an existing one keeps its partition count."""
        topic = self.store.topics.get(TRANSACTION_STATE_TOPIC)
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
        if plog.append(batch).flush_needed:
            self.dirty.add(plog)

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
        return found


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
