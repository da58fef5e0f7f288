"""What the store offers its callers (the gateway, the group coordinator): a store of topics, a topic,
and one partition's log, as Protocols.

`log_manager.Store`, its `Topic` and `log.PartitionLog` implement them. Callers that type against these
names instead of the classes leave room for something else in front of the logs (a replica manager that
answers for leader and follower replicas) without changing what they call.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from rdmalog.config import TopicConfig
from rdmalog.store.log import AppendResult, TimestampOffset
from rdmalog.store.segment import FileSlice
from rdmalog.store.transaction_index import AbortedTxn


class EpochLookup(Protocol):
    """A log's leader epoch cache, as far as readers use it."""

    def epoch_for(self, offset: int) -> int:
        """The leader epoch `offset` was written in (-1 when unknown)."""
        ...


class Log(Protocol):
    """One partition's log: appends, reads, offsets, epochs. Errors are `rdmalog.errors.KafkaError`
    subclasses carrying Kafka's error code."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def size_in_bytes(self) -> int: ...

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the earliest open transaction, else the high watermark."""
        ...

    def aborted_transactions(
        self, start: int, upper: int, fetched: FileSlice | None = None
    ) -> list[AbortedTxn]:
        """Aborted transactions overlapping [`start`, `upper`) (for read_committed fetches), bounded
        by the offset after the `fetched` slice."""
        ...

    @property
    def leader_epoch(self) -> int: ...

    @property
    def leader_epochs(self) -> EpochLookup: ...

    def append(
        self, buf: memoryview | bytearray | bytes, leader_epoch: int | None = None
    ) -> AppendResult:
        """Validate, stamp and write the record batches in `buf`."""
        ...

    def flush(self) -> None:
        """fsync what was appended (blocks: never on the event loop)."""
        ...

    def read(self, offset: int, max_bytes: int, upper_bound: int | None = None) -> FileSlice | None:
        """Whole batches from the one holding `offset`, below the high watermark (or `upper_bound`)."""
        ...

    def offset_for_timestamp(
        self, timestamp: int, upper_bound: int | None = None
    ) -> TimestampOffset | None: ...

    def max_timestamp(self) -> TimestampOffset: ...

    def legacy_offsets_before(self, timestamp: int, max_num_offsets: int) -> list[int]:
        """ListOffsets v0's offsets array (segment start offsets before `timestamp`)."""
        ...

    def epoch_end_offset(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) answering OffsetForLeaderEpoch."""
        ...

    def delete_records(self, before_offset: int) -> int:
        """Move the log start offset to `before_offset` (-1: the high watermark); the new start."""
        ...

    def add_listener(self, cb: Callable[[Any], None]) -> None:
        """Call `cb(log)` after the high watermark advances, on whatever thread advanced it."""
        ...


class LogTopic(Protocol):
    """A topic: its name, id, config and one log per partition (index = partition)."""

    @property
    def name(self) -> str: ...

    @property
    def topic_id(self) -> uuid.UUID: ...

    @property
    def config(self) -> TopicConfig: ...

    @property
    def partitions(self) -> Sequence[Log]: ...

    @property
    def is_internal(self) -> bool: ...

    @property
    def deletion_suspended(self) -> bool:
        """Adopted without its configs: retention deletes nothing until they are set."""
        ...


class IdAllocator(Protocol):
    """Producer ids that stay unique across restarts."""

    def allocate(self) -> int:
        """The next producer id (may fsync a new block: never on the event loop)."""
        ...


class LogStore(Protocol):
    """All topics of a broker: lookup, creation, deletion, configs, checkpoints."""

    @property
    def dir(self) -> Path: ...

    @property
    def cluster_id(self) -> str: ...

    @property
    def node_id(self) -> int: ...

    @property
    def topics(self) -> Mapping[str, LogTopic]: ...

    @property
    def producer_ids(self) -> IdAllocator | None: ...

    def topic_by_id(self, topic_id: uuid.UUID) -> LogTopic:
        """The topic with this id (raises `UnknownTopicIdError`)."""
        ...

    def validate_new_topic(
        self, name: str, num_partitions: int | None = None, configs: Mapping[str, Any] | None = None
    ) -> TopicConfig:
        """Check a topic creation without creating anything; the topic's config."""
        ...

    def create_topic(
        self, name: str, num_partitions: int | None = None, configs: Mapping[str, Any] | None = None
    ) -> LogTopic: ...

    def validate_new_partitions(self, name: str, total: int) -> LogTopic:
        """Check growing a topic without creating anything (the descriptor budget included)."""
        ...

    def create_partitions(self, name: str, total: int) -> LogTopic: ...

    def delete_topic(self, name: str) -> None: ...

    def alter_topic_config(
        self, name: str, configs: Mapping[str, Any], replace: bool = False
    ) -> TopicConfig: ...

    def checkpoint(self) -> None:
        """Write the offset checkpoints (blocks on fsync: never on the event loop)."""
        ...

    def close(self) -> None: ...
