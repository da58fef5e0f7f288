"""`__consumer_offsets` in the store: the coordinator's `GroupLog`, and its replay at start-up.

The topic is an ordinary rdmalog topic (compacted, `offsets.topic.num.partitions` partitions, Kafka's
`offsets.topic.segment.bytes`), created on first use. A group's records go to partition
`abs(hashCode(group)) % partitions`, one v2 batch per write, built with rdmalog's batch builder.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from gateway.groups.schema import OFFSETS_TOPIC, partition_for
from rdmalog.errors import KafkaError
from rdmalog.store.interface import Log, LogStore, LogTopic
from rdmalog.store.records import Record, build_batch, decode_records, iter_batches

log = logging.getLogger(__name__)

READ_CHUNK = 1 << 20


class CoordinatorNotAvailableError(KafkaError):
    error_code = 15  # COORDINATOR_NOT_AVAILABLE


class OffsetsTopic:
    """Writes group records to `__consumer_offsets` and reads them all back."""

    def __init__(
        self,
        store: LogStore,
        num_partitions: int = 50,
        segment_bytes: int = 104_857_600,
        create: bool = True,
    ) -> None:
        self.store = store
        self.num_partitions = num_partitions
        self.segment_bytes = segment_bytes
        self.create = create  # False in cluster mode: the topic comes through ZooKeeper
        self.dirty: set[Log] = set()
        self.open_transactions: dict[int, list[tuple[bytes, bytes | None]]] = {}
        self.appended: dict[Log, int] = {}  # log -> last offset written (cluster mode waits on it)

    def ensure(self) -> LogTopic:
        """The topic, created (compacted) when missing; an existing topic keeps its partition count."""
        topic = self.store.topics.get(OFFSETS_TOPIC)
        if topic is None and not self.create:
            raise CoordinatorNotAvailableError(f"{OFFSETS_TOPIC} has no replica on this broker")
        if topic is None:
            configs = {"cleanup.policy": "compact", "segment.bytes": str(self.segment_bytes)}
            try:
                topic = self.store.create_topic(OFFSETS_TOPIC, self.num_partitions, configs)
            except Exception:
                topic = self.store.topics.get(OFFSETS_TOPIC)
                if topic is None:
                    raise
        self.num_partitions = len(topic.partitions)
        return topic

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def append(
        self, group_id: str, records: list[tuple[bytes, bytes | None]], timestamp_ms: int
    ) -> None:
        """Append one batch of (key, value) records to the group's partition."""
        topic = self.ensure()
        plog = topic.partitions[self.partition_of(group_id)]
        batch = build_batch(
            [Record(key, value, timestamp=timestamp_ms) for key, value in records],
            now_ms=timestamp_ms,
        )
        result = plog.append(batch)
        if result.flush_needed:
            self.dirty.add(plog)
        if not self.create:
            self.appended[plog] = result.last_offset

    def flush(self) -> None:
        """fsync the partitions the flush policy asked for (blocking: run it off the event loop)."""
        dirty, self.dirty = self.dirty, set()
        for plog in dirty:
            plog.flush()

    def replay(self) -> Iterator[tuple[bytes, bytes | None]]:
        """Every committed (key, value) of every partition in log order.

        Transactional records wait for their control record: applied on COMMIT, dropped on ABORT;
        those of transactions still open at the end are left in `open_transactions` (producer id
        -> records) for the coordinator to settle when their marker comes.
        """
        self.open_transactions = {}
        topic = self.store.topics.get(OFFSETS_TOPIC)
        if topic is None:
            return
        for plog in list(topic.partitions):
            yield from self._replay_partition(plog)

    def replay_partition(self, partition: int) -> Iterator[tuple[bytes, bytes | None]]:
        """Every committed (key, value) of one partition (a coordinator taking it over)."""
        topic = self.store.topics.get(OFFSETS_TOPIC)
        if topic is not None and 0 <= partition < len(topic.partitions):
            yield from self._replay_partition(topic.partitions[partition])

    def _replay_partition(self, plog: Log) -> Iterator[tuple[bytes, bytes | None]]:
        end = plog.log_end_offset
        offset = plog.log_start_offset
        pending: dict[int, list[tuple[bytes, bytes | None]]] = {}
        while offset < end:
            chunk = plog.read(offset, READ_CHUNK, upper_bound=end)
            if chunk is None:
                break
            data = chunk.read()
            progressed = False
            for batch in iter_batches(data):
                if batch.next_offset <= offset:
                    continue
                progressed = True
                offset = batch.next_offset
                records = decode_records(batch)
                if batch.is_control:
                    committed = any(_is_commit_marker(r.key) for r in records)
                    held = pending.pop(batch.producer_id, [])
                    if committed:
                        yield from held
                    continue
                pairs = [(r.key, r.value) for r in records if r.key is not None]
                if batch.is_transactional:
                    pending.setdefault(batch.producer_id, []).extend(pairs)
                else:
                    yield from pairs
            if not progressed:
                log.warning("%s: no progress replaying at offset %d", plog, offset)
                break
        for pid, held in pending.items():
            self.open_transactions.setdefault(pid, []).extend(held)


def _is_commit_marker(key: bytes | None) -> bool:
    """A control record key is (version int16, type int16): type 1 is COMMIT, 0 ABORT."""
    return key is not None and len(key) >= 4 and int.from_bytes(key[2:4], "big", signed=True) == 1
