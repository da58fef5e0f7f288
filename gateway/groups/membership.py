"""The group state machine of the classic coordinator: JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
session expiry and the life of a group (its record in `__consumer_offsets`, its removal).

The rules follow Kafka's classic `GroupCoordinator`: states Empty -> PreparingRebalance ->
CompletingRebalance -> Stable (and Dead), generation fencing, MEMBER_ID_REQUIRED from JoinGroup v4
(KIP-394), static membership (KIP-345), the initial rebalance delay for Empty groups, pending-sync
expiry. Sans-io: inputs are requests and timer expiries, outputs are waiters completed, records
handed to a `GroupLog` and timers asked of a `Clock`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from gateway.groups.clock import Clock
from gateway.groups.model import (
    GroupConfig,
    GroupLog,
    JoinMember,
    JoinRequest,
    JoinResult,
    Record,
    SyncResult,
)
from gateway.groups.schema import GroupKey, OffsetKey, encode_group_value, encode_key
from gateway.groups.state import Group, GroupState, Member
from rdmalog import errors as E

log = logging.getLogger("gateway.groups.coordinator")

EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD


class GroupMembership:
    """Members joining, syncing, beating and leaving the groups of `self.groups` (the state is
    set up by `GroupCoordinator.__init__`)."""

    clock: Clock
    log: GroupLog
    config: GroupConfig
    new_waiter: Callable[[], Any]
    coordinator_error: Callable[[str], int] | None
    groups: dict[str, Group]

    def _not_here(self, group_id: str) -> int:
        """NOT_COORDINATOR when another broker coordinates `group_id` (cluster mode), else 0."""
        return self.coordinator_error(group_id) if self.coordinator_error is not None else 0

    # =============================================================================================
    # JoinGroup
    # =============================================================================================

    def join(self, req: JoinRequest) -> Any:
        """Handle a JoinGroup; the returned waiter completes with a `JoinResult`."""
        waiter = self.new_waiter()
        if req.rebalance_timeout_ms < 0:
            req.rebalance_timeout_ms = req.session_timeout_ms
        error = self._validate_join(req)
        if error is not None:
            waiter.set_result(JoinResult(error, member_id=req.member_id))
            return waiter
        group = self.groups.get(req.group_id)
        if group is None:
            if req.member_id:
                waiter.set_result(JoinResult(E.UNKNOWN_MEMBER_ID, member_id=req.member_id))
                return waiter
            group = self.groups[req.group_id] = Group(req.group_id)
            group.state_timestamp_ms = self.clock.now_ms()
        if req.member_id:
            self._join_current_member(group, req, waiter)
        else:
            self._join_new_member(group, req, waiter)
        return waiter

    def _validate_join(self, req: JoinRequest) -> int | None:
        if not req.group_id:
            return E.INVALID_GROUP_ID
        if error := self._not_here(req.group_id):
            return error
        cfg = self.config
        if not cfg.min_session_timeout_ms <= req.session_timeout_ms <= cfg.max_session_timeout_ms:
            return E.INVALID_SESSION_TIMEOUT
        group = self.groups.get(req.group_id)
        if group is not None and req.member_id not in group.members:
            known_static = group.static_member_id(req.group_instance_id) is not None
            if (
                not known_static
                and req.member_id not in group.pending_members
                and len(group.members) + len(group.pending_members) >= cfg.max_size
            ):
                return E.GROUP_MAX_SIZE_REACHED
        return None

    def _join_new_member(self, group: Group, req: JoinRequest, waiter: Any) -> None:
        if group.is_(DEAD):
            waiter.set_result(JoinResult(E.COORDINATOR_NOT_AVAILABLE))
            return
        names = [n for n, _ in req.protocols]
        if not group.supports_protocols(req.protocol_type, names):
            waiter.set_result(JoinResult(E.INCONSISTENT_GROUP_PROTOCOL))
            return
        prefix = req.group_instance_id if req.group_instance_id is not None else req.client_id
        member_id = f"{prefix}-{uuid.uuid4()}"
        if req.group_instance_id is not None:
            if group.static_member_id(req.group_instance_id) is not None:
                self._rejoin_static_member(group, req, member_id, waiter)
            else:
                self._add_member_and_rebalance(group, req, member_id, waiter)
        elif req.api_version >= 4:
            # KIP-394: hand out the id first, the member joins for real with it.
            timer = self.clock.call_later(
                req.session_timeout_ms, lambda: self._expire_pending_member(group, member_id)
            )
            group.pending_members[member_id] = timer
            waiter.set_result(JoinResult(E.MEMBER_ID_REQUIRED, member_id=member_id))
        else:
            self._add_member_and_rebalance(group, req, member_id, waiter)

    def _join_current_member(self, group: Group, req: JoinRequest, waiter: Any) -> None:
        member_id = req.member_id
        if group.is_(DEAD):
            waiter.set_result(JoinResult(E.COORDINATOR_NOT_AVAILABLE, member_id=member_id))
            return
        names = [n for n, _ in req.protocols]
        if not group.supports_protocols(req.protocol_type, names):
            waiter.set_result(JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id))
            return
        if member_id in group.pending_members and req.group_instance_id is None:
            self._add_member_and_rebalance(group, req, member_id, waiter)
            return
        if group.is_static_member_fenced(member_id, req.group_instance_id):
            waiter.set_result(JoinResult(E.FENCED_INSTANCE_ID, member_id=member_id))
            return
        unknown_static = (
            req.group_instance_id is not None
            and group.static_member_id(req.group_instance_id) is None
        )
        member = group.members.get(member_id)
        if member is None or unknown_static:
            waiter.set_result(JoinResult(E.UNKNOWN_MEMBER_ID, member_id=member_id))
            return
        if group.is_(PREPARING):
            self._update_member_and_rebalance(group, member, req, waiter)
        elif group.is_(COMPLETING):
            if member.matches(req.protocols):
                # The member lost its JoinGroup response: repeat the current generation's.
                is_leader = group.leader_id == member_id
                waiter.set_result(self._join_result(group, member, with_members=is_leader))
            else:
                self._update_member_and_rebalance(group, member, req, waiter)
        elif group.is_(STABLE):
            if group.leader_id == member_id or not member.matches(req.protocols):
                self._update_member_and_rebalance(group, member, req, waiter)
            else:
                waiter.set_result(self._join_result(group, member, with_members=False))
        else:
            waiter.set_result(JoinResult(E.UNKNOWN_MEMBER_ID, member_id=member_id))

    def _rejoin_static_member(
        self, group: Group, req: JoinRequest, new_member_id: str, waiter: Any
    ) -> None:
        """A known group.instance.id joins with no member id: it replaces its old incarnation."""
        instance_id = req.group_instance_id
        assert instance_id is not None
        old_member_id = group.static_members[instance_id]
        old_leader = group.leader_id
        member = group.members[old_member_id]
        member.complete_join(JoinResult(E.FENCED_INSTANCE_ID, member_id=old_member_id))
        member.complete_sync(SyncResult(E.FENCED_INSTANCE_ID))
        old_protocols = member.protocols
        group.replace_static_member(instance_id, old_member_id, new_member_id)
        self._update_member(member, req, waiter)
        if group.is_(STABLE):
            if group.protocol_name == group.select_protocol():
                # Same protocol next generation: persist the new member id, no rebalance.
                log.info(
                    "group %s: static member %s rejoined as %s without a rebalance",
                    group.group_id,
                    instance_id,
                    new_member_id,
                )
                try:
                    self._store_group(group)
                except Exception:
                    log.exception("storing group %s failed", group.group_id)
                    group.replace_static_member(instance_id, new_member_id, old_member_id)
                    member.protocols = old_protocols
                    member.complete_join(JoinResult(E.COORDINATOR_NOT_AVAILABLE))
                    return
                self._schedule_expiry(group, member, member.session_timeout_ms)
                is_leader = group.leader_id == new_member_id
                if req.api_version >= 9:
                    result = self._join_result(group, member, with_members=is_leader)
                    result.skip_assignment = is_leader
                else:
                    # Report the old leader id so that a rejoining leader does not assign again:
                    # a Stable group would not pass its new assignment on.
                    result = self._join_result(group, member, with_members=False)
                    result.leader_id = old_leader or ""
                member.complete_join(result)
            else:
                self._prepare_rebalance(group, f"static member {instance_id} changed protocols")
        elif group.is_(COMPLETING):
            # Its old id may be in the leader's assignment already: start over.
            self._prepare_rebalance(group, f"static member {instance_id} rejoined")
        elif group.is_(PREPARING):
            self._try_complete_join(group)

    def _add_member_and_rebalance(
        self, group: Group, req: JoinRequest, member_id: str, waiter: Any
    ) -> None:
        member = Member(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            session_timeout_ms=req.session_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=[(n, bytes(m)) for n, m in req.protocols],
            join_waiter=waiter,
            is_new=True,
        )
        pending = group.pending_members.pop(member_id, None)
        if pending is not None:
            pending.cancel()
        if group.is_(PREPARING) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member)
        # A new member cannot heartbeat while its JoinGroup waits; bound the wait instead.
        self._schedule_expiry(group, member, self.config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance(group, _why(f"adding member {member_id}", req.reason))
        if group.is_(PREPARING):
            self._try_complete_join(group)

    def _update_member(self, member: Member, req: JoinRequest, waiter: Any) -> None:
        member.protocols = [(n, bytes(m)) for n, m in req.protocols]
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        member.client_id = req.client_id or member.client_id
        member.client_host = req.client_host or member.client_host
        if member.join_waiter is not None and member.join_waiter is not waiter:
            # A duplicate JoinGroup: the older request gets the same answer as a fenced retry.
            member.complete_join(JoinResult(E.UNKNOWN_MEMBER_ID, member_id=member.member_id))
        member.join_waiter = waiter

    def _update_member_and_rebalance(
        self, group: Group, member: Member, req: JoinRequest, waiter: Any
    ) -> None:
        self._update_member(member, req, waiter)
        self._maybe_prepare_rebalance(
            group, _why(f"member {member.member_id} rejoining", req.reason)
        )
        if group.is_(PREPARING):
            self._try_complete_join(group)

    def _join_result(self, group: Group, member: Member, with_members: bool) -> JoinResult:
        members = []
        if with_members:
            members = [
                JoinMember(m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name))
                for m in group.members.values()
            ]
        return JoinResult(
            E.NONE,
            member_id=member.member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader_id=group.leader_id or "",
            members=members,
        )

    # --- rebalance -------------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.is_(STABLE, COMPLETING, EMPTY):
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        log.info("group %s: preparing rebalance (%s)", group.group_id, reason)
        if group.is_(COMPLETING):
            self._reset_and_propagate_assignment_error(group, E.REBALANCE_IN_PROGRESS)
        self._cancel_sync_timer(group)
        self._cancel_join_timer(group)
        initial = group.is_(EMPTY)
        group.transition(PREPARING, self.clock.now_ms())
        rebalance_timeout = group.rebalance_timeout_ms()
        delay = self.config.initial_rebalance_delay_ms
        if initial and delay > 0:
            first = min(delay, rebalance_timeout)
            group.initial_delay_remaining_ms = rebalance_timeout - first
            self._set_join_timer(group, first, self._on_initial_delay)
        else:
            group.initial_delay_remaining_ms = None
            self._set_join_timer(group, rebalance_timeout, self._on_join_timeout)
        self._try_complete_join(group)

    def _set_join_timer(self, group: Group, delay_ms: int, fire: Callable[[Group], None]) -> None:
        """Arm the group's one join timer; a timer replaced meanwhile does nothing when it fires."""
        armed: list[Any] = []

        def run() -> None:
            if armed and group.join_timer is armed[0]:
                group.join_timer = None
                fire(group)

        group.join_timer = self.clock.call_later(delay_ms, run)
        armed.append(group.join_timer)

    def _on_initial_delay(self, group: Group) -> None:
        """KIP-134: an Empty group waits for more members; each newcomer extends the wait."""
        if not group.is_(PREPARING):
            return
        remaining = group.initial_delay_remaining_ms or 0
        if group.new_member_added and remaining > 0:
            group.new_member_added = False
            step = min(self.config.initial_rebalance_delay_ms, remaining)
            group.initial_delay_remaining_ms = remaining - step
            self._set_join_timer(group, step, self._on_initial_delay)
            return
        group.initial_delay_remaining_ms = None
        self._complete_join(group)

    def _on_join_timeout(self, group: Group) -> None:
        self._complete_join(group)

    def _try_complete_join(self, group: Group) -> None:
        """Finish the rebalance as soon as every member has rejoined (never during the initial delay)."""
        if not group.is_(PREPARING) or group.initial_delay_remaining_ms is not None:
            return
        if group.has_all_members_joined():
            self._cancel_join_timer(group)
            self._complete_join(group)

    def _cancel_join_timer(self, group: Group) -> None:
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        group.initial_delay_remaining_ms = None

    def _complete_join(self, group: Group) -> None:
        if not group.is_(PREPARING):
            return
        group.new_member_added = False
        for member in [m for m in group.members.values() if m.join_waiter is None]:
            log.info(
                "group %s: removing member %s, it did not rejoin", group.group_id, member.member_id
            )
            self._remove_member(group, member, E.UNKNOWN_MEMBER_ID)
        group.generation_id += 1
        now = self.clock.now_ms()
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            group.transition(EMPTY, now)
            try:
                self._store_group(group)
            except Exception:
                log.exception("storing empty group %s failed", group.group_id)
            log.info("group %s: empty at generation %d", group.group_id, group.generation_id)
            return
        group.protocol_name = group.select_protocol()
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.transition(COMPLETING, now)
        log.info(
            "group %s: generation %d with %d members, protocol %s",
            group.group_id,
            group.generation_id,
            len(group.members),
            group.protocol_name,
        )
        group.pending_sync = set(group.members)
        for member in list(group.members.values()):
            result = self._join_result(
                group, member, with_members=member.member_id == group.leader_id
            )
            member.is_new = False
            member.complete_join(result)
            self._schedule_expiry(group, member, member.session_timeout_ms)
        generation = group.generation_id
        group.sync_timer = self.clock.call_later(
            group.rebalance_timeout_ms(), lambda: self._on_sync_timeout(group, generation)
        )

    # =============================================================================================
    # SyncGroup
    # =============================================================================================

    def sync(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        assignments: dict[str, bytes],
        group_instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> Any:
        """Handle a SyncGroup; the returned waiter completes with a `SyncResult`."""
        waiter = self.new_waiter()
        group = self.groups.get(group_id)
        if not group_id:
            waiter.set_result(SyncResult(E.INVALID_GROUP_ID))
            return waiter
        if error := self._not_here(group_id):
            waiter.set_result(SyncResult(error))
            return waiter
        if group is None:
            waiter.set_result(SyncResult(E.UNKNOWN_MEMBER_ID))
            return waiter
        error = self._validate_member(group, member_id, group_instance_id, generation_id)
        if error is None and (
            (protocol_type is not None and protocol_type != group.protocol_type)
            or (protocol_name is not None and protocol_name != group.protocol_name)
        ):
            error = E.INCONSISTENT_GROUP_PROTOCOL
        if error is not None:
            waiter.set_result(SyncResult(error))
            return waiter
        member = group.members[member_id]
        if group.is_(EMPTY):
            waiter.set_result(SyncResult(E.UNKNOWN_MEMBER_ID))
        elif group.is_(PREPARING):
            waiter.set_result(SyncResult(E.REBALANCE_IN_PROGRESS))
        elif group.is_(COMPLETING):
            if member.sync_waiter is not None:
                member.complete_sync(SyncResult(E.REBALANCE_IN_PROGRESS))
            member.sync_waiter = waiter
            self._remove_pending_sync(group, member_id)
            self._schedule_expiry(group, member, member.session_timeout_ms)
            if member_id == group.leader_id:
                self._complete_sync(group, assignments)
        else:  # Stable: the assignment is settled; hand it out again
            self._remove_pending_sync(group, member_id)
            self._schedule_expiry(group, member, member.session_timeout_ms)
            waiter.set_result(self._sync_result(group, member))
        return waiter

    def _complete_sync(self, group: Group, assignments: dict[str, bytes]) -> None:
        """The leader's assignment arrived: persist it, then answer every waiting member."""
        previous = {mid: m.assignment for mid, m in group.members.items()}
        for member_id, member in group.members.items():
            member.assignment = bytes(assignments.get(member_id, b""))
        try:
            self._store_group(group)
        except Exception:
            log.exception("storing group %s failed", group.group_id)
            for member_id, member in group.members.items():
                member.assignment = previous[member_id]
            self._reset_and_propagate_assignment_error(group, E.COORDINATOR_NOT_AVAILABLE)
            self._prepare_rebalance(group, "storing the assignment failed")
            return
        group.transition(STABLE, self.clock.now_ms())
        for member in group.members.values():
            member.complete_sync(self._sync_result(group, member))

    def _sync_result(self, group: Group, member: Member) -> SyncResult:
        return SyncResult(E.NONE, member.assignment, group.protocol_type, group.protocol_name)

    def _reset_and_propagate_assignment_error(self, group: Group, error: int) -> None:
        for member in group.members.values():
            member.assignment = b""
            member.complete_sync(SyncResult(error))

    def _remove_pending_sync(self, group: Group, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self._cancel_sync_timer(group)

    def _cancel_sync_timer(self, group: Group) -> None:
        if group.sync_timer is not None:
            group.sync_timer.cancel()
            group.sync_timer = None

    def _on_sync_timeout(self, group: Group, generation: int) -> None:
        """Members that never sent SyncGroup after a rebalance are removed (and rebalance again)."""
        group.sync_timer = None
        if generation != group.generation_id or not group.is_(COMPLETING, STABLE):
            return
        late = [group.members[mid] for mid in group.pending_sync if mid in group.members]
        group.pending_sync.clear()
        if not late:
            return
        for member in late:
            log.info(
                "group %s: removing member %s, it did not sync", group.group_id, member.member_id
            )
            self._remove_member(group, member, E.UNKNOWN_MEMBER_ID)
        self._after_member_removed(group, "members did not sync")

    # =============================================================================================
    # Heartbeat, LeaveGroup, session expiry
    # =============================================================================================

    def heartbeat(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None = None,
    ) -> int:
        """Handle a Heartbeat; returns the error code."""
        group = self.groups.get(group_id)
        if not group_id:
            return E.INVALID_GROUP_ID
        if error := self._not_here(group_id):
            return error
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        error = self._validate_member(group, member_id, group_instance_id, generation_id)
        if error is not None:
            return error
        if group.is_(EMPTY):
            return E.UNKNOWN_MEMBER_ID
        member = group.members[member_id]
        self._schedule_expiry(group, member, member.session_timeout_ms)
        return E.REBALANCE_IN_PROGRESS if group.is_(PREPARING) else E.NONE

    def _validate_member(
        self, group: Group, member_id: str, instance_id: str | None, generation_id: int
    ) -> int | None:
        if group.is_(DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        error = self._check_member(group, member_id, instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        return None

    @staticmethod
    def _check_member(group: Group, member_id: str, instance_id: str | None) -> int | None:
        """Kafka's member validation: a static instance must map to this member id."""
        if instance_id is not None:
            current = group.static_member_id(instance_id)
            if current is None:
                return E.UNKNOWN_MEMBER_ID
            if current != member_id:
                return E.FENCED_INSTANCE_ID
        elif member_id not in group.members:
            return E.UNKNOWN_MEMBER_ID
        return None

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[int, list[int]]:
        """Handle a LeaveGroup of (member id, group instance id) pairs: (top error, per-member)."""
        group = self.groups.get(group_id)
        if not group_id:
            return E.INVALID_GROUP_ID, []
        if error := self._not_here(group_id):
            return error, []
        if group is None:
            return E.NONE, [E.UNKNOWN_MEMBER_ID for _ in members]
        if group.is_(DEAD):
            return E.COORDINATOR_NOT_AVAILABLE, []
        results = []
        for member_id, instance_id in members:
            if member_id and group.is_static_member_fenced(member_id, instance_id):
                results.append(E.FENCED_INSTANCE_ID)
            elif member_id in group.pending_members:
                group.pending_members.pop(member_id).cancel()
                self._try_complete_join(group)
                results.append(E.NONE)
            else:
                static_id = group.static_member_id(instance_id)
                member = group.members.get(static_id or member_id)
                if member is None:
                    results.append(E.UNKNOWN_MEMBER_ID)
                    continue
                log.info("group %s: member %s left", group.group_id, member.member_id)
                self._remove_member(group, member, E.UNKNOWN_MEMBER_ID)
                self._after_member_removed(group, f"member {member.member_id} left")
                results.append(E.NONE)
        return E.NONE, results

    def _schedule_expiry(self, group: Group, member: Member, timeout_ms: int) -> None:
        member.cancel_expiry()
        member.expiry = self.clock.call_later(
            timeout_ms, lambda: self._on_member_expired(group, member)
        )

    def _on_member_expired(self, group: Group, member: Member) -> None:
        member.expiry = None
        if group.members.get(member.member_id) is not member or group.is_(DEAD):
            return
        if not member.is_new and (member.join_waiter is not None or member.sync_waiter is not None):
            return  # waiting on a rebalance: the join/sync deadlines bound it
        log.info("group %s: member %s session expired", group.group_id, member.member_id)
        self._remove_member(group, member, E.UNKNOWN_MEMBER_ID)
        self._after_member_removed(group, f"member {member.member_id} expired")

    def _expire_pending_member(self, group: Group, member_id: str) -> None:
        if group.pending_members.pop(member_id, None) is not None:
            self._try_complete_join(group)

    def _remove_member(self, group: Group, member: Member, error: int) -> None:
        member.complete_join(JoinResult(error, member_id=member.member_id))
        member.complete_sync(SyncResult(error))
        group.remove(member.member_id)

    def _after_member_removed(self, group: Group, reason: str) -> None:
        if group.is_(STABLE, COMPLETING):
            self._prepare_rebalance(group, reason)
        elif group.is_(PREPARING):
            self._try_complete_join(group)

    # =============================================================================================
    # A group's record and its removal
    # =============================================================================================

    def _remove_group(self, group: Group) -> None:
        """Tombstone the group and its offsets, then forget it."""
        records: list[Record] = [
            (encode_key(OffsetKey(group.group_id, t, p)), None) for t, p in group.offsets
        ]
        records.append((encode_key(GroupKey(group.group_id)), None))
        self.log.append(group.group_id, records, self.clock.now_ms())
        group.offsets.clear()
        self._cancel_join_timer(group)
        self._cancel_sync_timer(group)
        for timer in group.pending_members.values():
            timer.cancel()
        group.pending_members.clear()
        group.transition(DEAD, self.clock.now_ms())
        self.groups.pop(group.group_id, None)

    def _store_group(self, group: Group) -> None:
        record = (encode_key(GroupKey(group.group_id)), encode_group_value(group.to_value()))
        self.log.append(group.group_id, [record], self.clock.now_ms())


def _why(what: str, reason: str | None) -> str:
    """A rebalance reason for the log, with the client's own (JoinGroup v8+) when it gave one."""
    return f"{what}: {reason}" if reason else what
