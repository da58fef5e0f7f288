"""The classic group coordinator as a sans-io state machine.

Inputs are the group requests (join, sync, heartbeat, leave, commit, fetch, describe, list, delete),
timer expiries and records replayed from `__consumer_offsets`; outputs are responses, records handed to
a `GroupLog` and timers asked of a `Clock`. JoinGroup and SyncGroup answers are waiters (futures from
the injected factory) that the state machine completes when the rebalance decides. Nothing here does
I/O, so the whole protocol is unit-tested with a `ManualClock` and an in-memory log.

The rules follow Kafka's classic `GroupCoordinator`: states Empty -> PreparingRebalance ->
CompletingRebalance -> Stable (and Dead), generation fencing, MEMBER_ID_REQUIRED from JoinGroup v4
(KIP-394), static membership (KIP-345), the initial rebalance delay for Empty groups, pending-sync
expiry, offsets retention for Empty groups (KIP-211).

By job: the group state machine (`membership.py`), committed offsets with their retention and
loading (`offsets.py`), and here the coordinator composed with its group-level requests
(DescribeGroups, ListGroups, DeleteGroups).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from gateway.groups.clock import Clock
from gateway.groups.membership import DEAD, EMPTY, STABLE
from gateway.groups.model import (
    GroupConfig,
    GroupDescription,
    GroupListing,
    GroupLog,
    MemberDescription,
    MemoryLog,
)
from gateway.groups.offsets import GroupOffsets
from gateway.groups.pending import Pending
from gateway.groups.state import Group
from rdmalog import errors as E

log = logging.getLogger(__name__)


class GroupCoordinator(GroupOffsets):
    """Every classic group of this broker, driven by requests, timers and the replayed log."""

    def __init__(
        self,
        clock: Clock,
        log: GroupLog | None = None,
        config: GroupConfig | None = None,
        new_waiter: Callable[[], Any] = Pending,
        partition_exists: Callable[[str, int], bool] | None = None,
        coordinator_error: Callable[[str], int] | None = None,
    ) -> None:
        self.clock = clock
        self.log: GroupLog = log if log is not None else MemoryLog()
        self.config = config or GroupConfig()
        self.new_waiter = new_waiter
        self.partition_exists = partition_exists
        # cluster mode: NOT_COORDINATOR for a group whose __consumer_offsets partition another
        # broker leads (0 when this one does)
        self.coordinator_error = coordinator_error
        self.groups: dict[str, Group] = {}
        self._retention_timer = None

    # =============================================================================================
    # DescribeGroups, ListGroups, DeleteGroups
    # =============================================================================================

    def describe(self, group_id: str) -> GroupDescription:
        """Handle one group of a DescribeGroups; unknown groups are reported Dead."""
        if not group_id:
            return GroupDescription(group_id, error=E.INVALID_GROUP_ID)
        if error := self._not_here(group_id):
            return GroupDescription(group_id, error=error)
        group = self.groups.get(group_id)
        if group is None:
            return GroupDescription(group_id, error=E.NONE, state=DEAD.value)
        stable = group.is_(STABLE)
        members = [
            MemberDescription(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.metadata_for(group.protocol_name) if stable else b"",
                m.assignment if stable else b"",
            )
            for m in group.members.values()
        ]
        return GroupDescription(
            group_id,
            state=group.state.value,
            protocol_type=group.protocol_type or "",
            protocol_name=(group.protocol_name or "") if stable else "",
            members=members,
        )

    def list_groups(self, states: Iterable[str] | None = None) -> list[GroupListing]:
        """Every live group, optionally only those in `states` (case-insensitive names)."""
        wanted = {s.lower() for s in states} if states else None
        return [
            GroupListing(g.group_id, g.protocol_type or "", g.state.value)
            for g in self.groups.values()
            if not g.is_(DEAD) and (wanted is None or g.state.value.lower() in wanted)
        ]

    def delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        """Handle a DeleteGroups: only Empty groups go, with all their offsets."""
        results = {}
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if not group_id:
                results[group_id] = E.INVALID_GROUP_ID
            elif error := self._not_here(group_id):
                results[group_id] = error
            elif group is None or group.is_(DEAD):
                results[group_id] = E.GROUP_ID_NOT_FOUND
            elif not group.is_(EMPTY):
                results[group_id] = E.NON_EMPTY_GROUP
            else:
                try:
                    self._remove_group(group)
                    results[group_id] = E.NONE
                except Exception:
                    log.exception("deleting group %s failed", group_id)
                    results[group_id] = E.COORDINATOR_NOT_AVAILABLE
        return results
