"""Offsets committed inside a transaction (TxnOffsetCommit), as Kafka's group coordinator keeps them.

They are written to the group's `__consumer_offsets` partition at once, as a transactional batch of
the producer (its id and epoch), and held aside; the transaction's COMMIT marker on that partition
makes them the group's committed offsets, an ABORT drops them (`complete`). A replay of the topic
applies them the same way (offsets_topic.py holds transactional records until their marker).
"""

from __future__ import annotations

import logging

from gateway.groups.coordinator import GroupCoordinator
from gateway.groups.model import CommitEntry
from gateway.groups.offsets_topic import OffsetsTopic
from gateway.groups.schema import (
    OffsetKey,
    OffsetValue,
    SchemaError,
    decode_key,
    decode_offset_value,
    encode_key,
    encode_offset_value,
)
from gateway.groups.state import Group, GroupState
from rdmalog import errors as E
from rdmalog.errors import KafkaError
from rdmalog.store.records import Record, build_batch

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class TxnOffsets:
    """Pending transactional offsets: producer id -> group -> partition -> offset."""

    def __init__(self, coordinator: GroupCoordinator, offsets: OffsetsTopic) -> None:
        self.coordinator = coordinator
        self.offsets = offsets
        self.pending: dict[int, dict[str, dict[TopicPartition, OffsetValue]]] = {}

    def commit(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation_id: int,
        member_id: str,
        instance_id: str | None,
        entries: list[CommitEntry],
    ) -> dict[TopicPartition, int]:
        """Handle a TxnOffsetCommit: the error of every (topic, partition)."""
        keys = [(e.topic, e.partition) for e in entries]
        if not group_id:
            return dict.fromkeys(keys, E.INVALID_GROUP_ID)
        if error := self.coordinator._not_here(group_id):  # cluster mode: led elsewhere
            return dict.fromkeys(keys, error)
        group = self.coordinator.groups.get(group_id)
        if group is not None and generation_id >= 0:
            if group.is_(GroupState.DEAD):
                return dict.fromkeys(keys, E.COORDINATOR_NOT_AVAILABLE)
            if member_id and member_id not in group.members:
                return dict.fromkeys(keys, E.UNKNOWN_MEMBER_ID)
            if generation_id != group.generation_id:
                return dict.fromkeys(keys, E.ILLEGAL_GENERATION)
        now = self.coordinator.clock.now_ms()
        config = self.coordinator.config
        exists = self.coordinator.partition_exists
        results: dict[TopicPartition, int] = {}
        values: dict[TopicPartition, OffsetValue] = {}
        for e in entries:
            tp = (e.topic, e.partition)
            metadata = e.metadata or ""
            if len(metadata.encode()) > config.offset_metadata_max_bytes:
                results[tp] = E.OFFSET_METADATA_TOO_LARGE
            elif exists is not None and not exists(*tp):
                results[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
            else:
                values[tp] = OffsetValue(e.offset, e.leader_epoch, metadata, now)
        if values:
            try:
                self._write(group_id, producer_id, producer_epoch, values, now)
            except KafkaError as exc:  # fenced on the partition, a full disk
                log.warning("transactional offsets of group %s refused: %s", group_id, exc)
                return {**results, **dict.fromkeys(values, exc.error_code)}
            except Exception:
                log.exception("writing transactional offsets of group %s failed", group_id)
                return {**results, **dict.fromkeys(values, E.COORDINATOR_NOT_AVAILABLE)}
            self.pending.setdefault(producer_id, {}).setdefault(group_id, {}).update(values)
            results.update(dict.fromkeys(values, E.NONE))
        return results

    def _write(
        self,
        group_id: str,
        producer_id: int,
        epoch: int,
        values: dict[TopicPartition, OffsetValue],
        now: int,
    ) -> None:
        """One transactional batch of the producer on the group's partition, its sequence following
        the producer's last batch there."""
        topic = self.offsets.ensure()
        plog = topic.partitions[self.offsets.partition_of(group_id)]
        entry = plog.producer_state.producers.get(producer_id)
        seq = (
            entry.last_seq + 1
            if entry is not None and entry.epoch == epoch and entry.batches
            else 0
        )
        records = [
            Record(encode_key(OffsetKey(group_id, *tp)), encode_offset_value(v), timestamp=now)
            for tp, v in values.items()
        ]
        batch = build_batch(
            records,
            producer_id=producer_id,
            producer_epoch=epoch,
            base_sequence=seq % 2**31,
            transactional=True,
            now_ms=now,
        )
        result = plog.append(batch)
        if result.flush_needed:
            self.offsets.dirty.add(plog)
        if not self.offsets.create:  # cluster mode: answered once the ISR has it
            self.offsets.appended[plog] = result.last_offset

    def restore(self, open_transactions: dict[int, list[tuple[bytes, bytes | None]]]) -> None:
        """The offsets of transactions open when the broker stopped (from the topic's replay)."""
        for pid, records in open_transactions.items():
            for key_bytes, value_bytes in records:
                try:
                    key = decode_key(key_bytes)
                    if isinstance(key, OffsetKey) and value_bytes is not None:
                        by_group = self.pending.setdefault(pid, {}).setdefault(key.group, {})
                        by_group[(key.topic, key.partition)] = decode_offset_value(value_bytes)
                except SchemaError as exc:
                    log.warning("skipping an unreadable transactional offset: %s", exc)

    def forget(self, partition: int) -> None:
        """Drop the pending offsets of the groups of a `__consumer_offsets` partition led
        elsewhere now (its new leader restores them from its replay)."""
        for pid in list(self.pending):
            by_group = self.pending[pid]
            for group_id in [g for g in by_group if self.offsets.partition_of(g) == partition]:
                del by_group[group_id]
            if not by_group:
                del self.pending[pid]

    def complete(self, producer_id: int, commit: bool, partition: int) -> None:
        """The transaction's marker landed on `__consumer_offsets` partition `partition`: apply (on
        COMMIT) or drop the producer's pending offsets of the groups it holds."""
        by_group = self.pending.get(producer_id)
        if not by_group:
            return
        for group_id in [g for g in by_group if self.offsets.partition_of(g) == partition]:
            values = by_group.pop(group_id)
            if not commit:
                continue
            group = self.coordinator.groups.get(group_id)
            if group is None or group.is_(GroupState.DEAD):
                group = self.coordinator.groups[group_id] = Group(group_id)
                group.state_timestamp_ms = self.coordinator.clock.now_ms()
            group.offsets.update(values)
        if not by_group:
            del self.pending[producer_id]
