"""What the coordinator knows about one classic group: its state, members and committed offsets."""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from gateway.groups.clock import Timer
from gateway.groups.schema import GroupValue, MemberValue, OffsetValue


class GroupState(enum.Enum):
    """The classic group states, named as DescribeGroups and ListGroups report them."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(eq=False, slots=True)
class Member:
    """One member of a group, with the responses it is waiting for."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_waiter: Any = None
    sync_waiter: Any = None
    is_new: bool = False
    expiry: Timer | None = None

    def metadata_for(self, protocol: str | None) -> bytes:
        """The member's metadata for `protocol` (empty when it does not support it)."""
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """True when `protocols` are exactly the member's (names, order and metadata)."""
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self.protocols]

    def complete_join(self, result: Any) -> None:
        waiter, self.join_waiter = self.join_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(result)

    def complete_sync(self, result: Any) -> None:
        waiter, self.sync_waiter = self.sync_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(result)

    def cancel_expiry(self) -> None:
        if self.expiry is not None:
            self.expiry.cancel()
            self.expiry = None

    def to_value(self) -> MemberValue:
        return MemberValue(
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
            client_id=self.client_id,
            client_host=self.client_host,
            rebalance_timeout=self.rebalance_timeout_ms,
            session_timeout=self.session_timeout_ms,
            subscription=b"",  # filled by Group.to_value with the selected protocol's metadata
            assignment=self.assignment,
        )


@dataclass(eq=False)
class Group:
    """A classic group: membership, generation, selected protocol and the committed offsets."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    pending_members: dict[str, Timer] = field(default_factory=dict)
    pending_sync: set[str] = field(default_factory=set)
    offsets: dict[tuple[str, int], OffsetValue] = field(default_factory=dict)
    state_timestamp_ms: int | None = None
    new_member_added: bool = False
    join_timer: Timer | None = None
    initial_delay_remaining_ms: int | None = None
    sync_timer: Timer | None = None

    def is_(self, *states: GroupState) -> bool:
        return self.state in states

    def transition(self, state: GroupState, now_ms: int) -> None:
        self.state = state
        self.state_timestamp_ms = now_ms

    # --- membership --------------------------------------------------------------------------

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if self.leader_id is None:
            self.leader_id = member.member_id
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        member.cancel_expiry()
        if member.group_instance_id is not None:
            if self.static_members.get(member.group_instance_id) == member_id:
                del self.static_members[member.group_instance_id]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        """Give the static member `instance_id` a new member id, keeping its place and assignment."""
        member = self.members[old_id]
        self.members = {(new_id if k == old_id else k): v for k, v in self.members.items()}
        member.member_id = new_id
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        return member

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def is_static_member_fenced(self, member_id: str, instance_id: str | None) -> bool:
        """A static instance id that is now bound to another member id."""
        current = self.static_member_id(instance_id)
        return current is not None and current != member_id

    def has_all_members_joined(self) -> bool:
        return not self.pending_members and all(
            m.join_waiter is not None for m in self.members.values()
        )

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # --- protocols ---------------------------------------------------------------------------

    def supports_protocols(self, protocol_type: str, names: list[str]) -> bool:
        """Whether a member with this protocol type and protocols may join (Kafka's rule)."""
        if self.state is GroupState.EMPTY or not self.members:
            return bool(protocol_type) and bool(names)
        if self.protocol_type != protocol_type:
            return False
        counts = self._protocol_counts()
        return any(counts[n] == len(self.members) for n in names)

    def _protocol_counts(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for member in self.members.values():
            counts.update(set(member.protocol_names()))
        return counts

    def candidate_protocols(self) -> list[str]:
        counts = self._protocol_counts()
        first = next(iter(self.members.values()))
        return [n for n in first.protocol_names() if counts[n] == len(self.members)]

    def select_protocol(self) -> str:
        """Every member votes for its most preferred candidate protocol; the most votes wins."""
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError(f"no protocol supported by every member of {self.group_id}")
        votes: Counter[str] = Counter()
        for member in self.members.values():
            votes[next(n for n in member.protocol_names() if n in candidates)] += 1
        return max(candidates, key=lambda n: votes[n])

    # --- persistence -------------------------------------------------------------------------

    def to_value(self) -> GroupValue:
        members = []
        for member in self.members.values():
            value = member.to_value()
            value.subscription = member.metadata_for(self.protocol_name)
            members.append(value)
        return GroupValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation_id,
            protocol=self.protocol_name,
            leader=self.leader_id,
            current_state_timestamp=-1
            if self.state_timestamp_ms is None
            else self.state_timestamp_ms,
            members=members,
        )

    @classmethod
    def from_value(cls, group_id: str, value: GroupValue) -> Group:
        """A group loaded from `__consumer_offsets`: Stable with its members, or Empty."""
        group = cls(group_id)
        group.protocol_type = value.protocol_type or None
        group.generation_id = value.generation
        group.protocol_name = value.protocol
        group.state_timestamp_ms = (
            None if value.current_state_timestamp < 0 else value.current_state_timestamp
        )
        for mv in value.members:
            member = Member(
                member_id=mv.member_id,
                group_instance_id=mv.group_instance_id,
                client_id=mv.client_id,
                client_host=mv.client_host,
                rebalance_timeout_ms=mv.rebalance_timeout,
                session_timeout_ms=mv.session_timeout,
                protocol_type=value.protocol_type,
                protocols=[(value.protocol or "", mv.subscription)],
                assignment=mv.assignment,
            )
            group.members[member.member_id] = member
            if member.group_instance_id is not None:
                group.static_members[member.group_instance_id] = member.member_id
        group.leader_id = value.leader if value.leader in group.members else None
        if group.leader_id is None and group.members:
            group.leader_id = next(iter(group.members))
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        return group
