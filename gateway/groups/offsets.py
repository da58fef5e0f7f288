"""Committed offsets of the classic groups: OffsetCommit, OffsetFetch, OffsetDelete, offsets
retention (KIP-211), and the groups loaded from (or handed off with) their `__consumer_offsets`
partition. Sans-io, as the state machine it extends (`membership.py`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from gateway.groups.consumer_protocol import subscribed_topics
from gateway.groups.membership import (
    COMPLETING,
    DEAD,
    EMPTY,
    PREPARING,
    STABLE,
    GroupMembership,
)
from gateway.groups.model import CommitEntry, FetchedOffset, JoinResult, Record, SyncResult
from gateway.groups.schema import (
    GroupKey,
    OffsetKey,
    OffsetValue,
    SchemaError,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_key,
    encode_offset_value,
)
from gateway.groups.state import Group
from rdmalog import errors as E

log = logging.getLogger("gateway.groups.coordinator")


class GroupOffsets(GroupMembership):
    """The groups' committed offsets: commits, fetches, deletions, retention, loading."""

    partition_exists: Callable[[str, int], bool] | None
    _retention_timer: Any

    # =============================================================================================
    # Offsets
    # =============================================================================================

    def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        entries: list[CommitEntry],
        group_instance_id: str | None = None,
        retention_ms: int = -1,
    ) -> dict[tuple[str, int], int]:
        """Handle an OffsetCommit; returns the error of every (topic, partition)."""
        keys = [(e.topic, e.partition) for e in entries]
        if not group_id:
            return dict.fromkeys(keys, E.INVALID_GROUP_ID)
        if error := self._not_here(group_id):
            return dict.fromkeys(keys, error)
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return dict.fromkeys(keys, E.ILLEGAL_GENERATION)
            group = self.groups[group_id] = Group(group_id)
            group.state_timestamp_ms = self.clock.now_ms()
        error = self._validate_commit(group, member_id, group_instance_id, generation_id)
        if error is not None:
            return dict.fromkeys(keys, error)
        if member_id in group.members and group.is_(STABLE, PREPARING):
            member = group.members[member_id]
            self._schedule_expiry(group, member, member.session_timeout_ms)
        now = self.clock.now_ms()
        results: dict[tuple[str, int], int] = {}
        records = []
        values: dict[tuple[str, int], OffsetValue] = {}
        for e in entries:
            tp = (e.topic, e.partition)
            metadata = e.metadata or ""
            if len(metadata.encode()) > self.config.offset_metadata_max_bytes:
                results[tp] = E.OFFSET_METADATA_TOO_LARGE
            elif self.partition_exists is not None and not self.partition_exists(*tp):
                results[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
            else:
                value = OffsetValue(
                    offset=e.offset,
                    leader_epoch=e.leader_epoch,
                    metadata=metadata,
                    commit_timestamp=now if e.commit_timestamp == -1 else e.commit_timestamp,
                    expire_timestamp=now + retention_ms if retention_ms > 0 else -1,
                )
                values[tp] = value
                records.append((encode_key(OffsetKey(group_id, *tp)), encode_offset_value(value)))
        if records:
            try:
                self.log.append(group_id, records, now)
            except Exception:
                log.exception("writing offsets of group %s failed", group_id)
                for tp in values:
                    results[tp] = E.COORDINATOR_NOT_AVAILABLE
                return results
            group.offsets.update(values)
            results.update(dict.fromkeys(values, E.NONE))
        return results

    def _validate_commit(
        self, group: Group, member_id: str, instance_id: str | None, generation_id: int
    ) -> int | None:
        if group.is_(DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.is_(EMPTY):
            return None  # a consumer without group management, or the admin client
        if generation_id >= 0 or member_id or instance_id is not None:
            error = self._check_member(group, member_id, instance_id)
            if error is not None:
                return error
            if generation_id != group.generation_id:
                return E.ILLEGAL_GENERATION
        elif not group.is_(EMPTY):
            return E.UNKNOWN_MEMBER_ID
        if group.is_(COMPLETING):
            return E.REBALANCE_IN_PROGRESS
        return None

    def fetch_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None
    ) -> tuple[int, list[FetchedOffset]]:
        """Handle one group of an OffsetFetch: (group error, offsets); None asks for all of them."""
        if not group_id:
            return E.INVALID_GROUP_ID, []
        if error := self._not_here(group_id):
            return error, []
        group = self.groups.get(group_id)
        offsets = {} if group is None or group.is_(DEAD) else group.offsets
        if partitions is None:
            wanted = sorted(offsets)
        else:
            wanted = list(partitions)
        out = []
        for topic, partition in wanted:
            value = offsets.get((topic, partition))
            if value is None:
                out.append(FetchedOffset(topic, partition))
            else:
                out.append(
                    FetchedOffset(
                        topic, partition, value.offset, value.leader_epoch, value.metadata
                    )
                )
        return E.NONE, out

    def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> tuple[int, dict[tuple[str, int], int]]:
        """Handle an OffsetDelete: offsets of topics the group still consumes stay."""
        if not group_id:
            return E.INVALID_GROUP_ID, {}
        if error := self._not_here(group_id):
            return error, {}
        group = self.groups.get(group_id)
        if group is None or group.is_(DEAD):
            return E.GROUP_ID_NOT_FOUND, {}
        subscribed: set[str] = set()
        if not group.is_(EMPTY):
            if group.protocol_type != "consumer":
                return E.NON_EMPTY_GROUP, {}
            for member in group.members.values():
                topics = subscribed_topics(member.metadata_for(group.protocol_name))
                subscribed |= topics or set()
        results: dict[tuple[str, int], int] = {}
        doomed = []
        for tp in partitions:
            if tp[0] in subscribed:
                results[tp] = E.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                results[tp] = E.NONE
                if tp in group.offsets:
                    doomed.append(tp)
        if doomed:
            try:
                self._delete_offsets(group, doomed)
            except Exception:
                log.exception("deleting offsets of group %s failed", group_id)
                return E.COORDINATOR_NOT_AVAILABLE, {}
        return E.NONE, results

    def _delete_offsets(self, group: Group, partitions: list[tuple[str, int]]) -> None:
        records = [(encode_key(OffsetKey(group.group_id, t, p)), None) for t, p in partitions]
        self.log.append(group.group_id, records, self.clock.now_ms())
        for tp in partitions:
            group.offsets.pop(tp, None)

    # =============================================================================================
    # Retention
    # =============================================================================================

    def start_retention(self) -> None:
        """Check offsets retention every `offsets.retention.check.interval.ms` from now on."""
        self.stop_retention()

        def tick() -> None:
            try:
                self.expire_offsets()
            finally:
                self._retention_timer = self.clock.call_later(
                    self.config.offsets_retention_check_interval_ms, tick
                )

        self._retention_timer = self.clock.call_later(
            self.config.offsets_retention_check_interval_ms, tick
        )

    def stop_retention(self) -> None:
        if self._retention_timer is not None:
            self._retention_timer.cancel()
            self._retention_timer = None

    def expire_offsets(self) -> int:
        """Drop offsets past retention; Empty groups left without offsets die. Returns the count."""
        now = self.clock.now_ms()
        retention = self.config.offsets_retention_ms
        removed = 0
        for group in list(self.groups.values()):
            if group.is_(DEAD):
                continue
            subscribed: set[str] | None = None
            if group.is_(STABLE) and group.protocol_type == "consumer":
                subscribed = set()
                for member in group.members.values():
                    topics = subscribed_topics(member.metadata_for(group.protocol_name))
                    if topics is None:
                        subscribed = None
                        break
                    subscribed |= topics
            expired = []
            for tp, value in group.offsets.items():
                if value.expire_timestamp >= 0:
                    due = now >= value.expire_timestamp
                elif group.is_(EMPTY):
                    base = value.commit_timestamp
                    if group.protocol_type is not None and group.state_timestamp_ms is not None:
                        base = group.state_timestamp_ms
                    due = now - base >= retention
                elif subscribed is not None and tp[0] not in subscribed:
                    due = now - value.commit_timestamp >= retention
                else:
                    due = False
                if due:
                    expired.append(tp)
            try:
                if expired:
                    self._delete_offsets(group, expired)
                    removed += len(expired)
                if group.is_(EMPTY) and not group.offsets and not group.pending_members:
                    log.info("group %s: empty without offsets, removing it", group.group_id)
                    self._remove_group(group)
            except Exception:
                log.exception("expiring offsets of group %s failed", group.group_id)
        return removed

    # =============================================================================================
    # Loading
    # =============================================================================================

    def unload(self, moved: Callable[[str], bool]) -> int:
        """Forget the groups `moved(group_id)` selects (their partition now led elsewhere, Kafka's
        coordinator emigration): timers cancelled, waiting members answered NOT_COORDINATOR so
        they find the new coordinator; nothing is written. Returns how many went."""
        gone = [g for g in self.groups.values() if moved(g.group_id)]
        for group in gone:
            self._cancel_join_timer(group)
            self._cancel_sync_timer(group)
            for timer in group.pending_members.values():
                timer.cancel()
            group.pending_members.clear()
            for member in group.members.values():
                member.cancel_expiry()
                member.complete_join(JoinResult(E.NOT_COORDINATOR, member_id=member.member_id))
                member.complete_sync(SyncResult(E.NOT_COORDINATOR))
            self.groups.pop(group.group_id, None)
        return len(gone)

    def load(self, records: Iterable[Record]) -> int:
        """Rebuild groups and offsets by replaying `__consumer_offsets` records in log order.

        Loaded members are Stable with their last assignment; their sessions start now, so members
        that do not come back expire as Kafka's do after a coordinator move. Returns the group count.
        """
        offsets: dict[str, dict[tuple[str, int], OffsetValue]] = {}
        metadata: dict[str, Any] = {}
        for key_bytes, value_bytes in records:
            try:
                key = decode_key(key_bytes)
                if isinstance(key, OffsetKey):
                    group_offsets = offsets.setdefault(key.group, {})
                    tp = (key.topic, key.partition)
                    if value_bytes is None:
                        group_offsets.pop(tp, None)
                    else:
                        group_offsets[tp] = decode_offset_value(value_bytes)
                elif isinstance(key, GroupKey):
                    metadata[key.group] = (
                        None if value_bytes is None else decode_group_value(value_bytes)
                    )
            except SchemaError as exc:
                log.warning("skipping unreadable __consumer_offsets record: %s", exc)
        for group_id in list(dict.fromkeys([*metadata, *offsets])):
            value = metadata.get(group_id)
            group_offsets = offsets.get(group_id, {})
            if value is None and not group_offsets:
                continue
            group = Group.from_value(group_id, value) if value is not None else Group(group_id)
            group.offsets = group_offsets
            self.groups[group_id] = group
            for member in group.members.values():
                self._schedule_expiry(group, member, member.session_timeout_ms)
        return len(self.groups)
