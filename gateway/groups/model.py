"""The coordinator's inputs and outputs: its settings, the log it writes, requests and results.

Plain data shared by the state machine (`coordinator.py`), the handlers and the tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from rdmalog import errors as E

Record = tuple[bytes, bytes | None]


class GroupLog(Protocol):
    """Where the coordinator's records go (the group's `__consumer_offsets` partition)."""

    def append(self, group_id: str, records: list[Record], timestamp_ms: int) -> None:
        """Append the records durably enough to answer; raise to fail the operation."""
        ...


class MemoryLog:
    """A `GroupLog` kept in a list (tests, and brokers without a store)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes, bytes | None]] = []

    def append(self, group_id: str, records: list[Record], timestamp_ms: int) -> None:
        self.records.extend((group_id, k, v) for k, v in records)

    def replay(self) -> list[Record]:
        return [(k, v) for _, k, v in self.records]


@dataclass(slots=True)
class GroupConfig:
    """The broker settings the coordinator obeys (Kafka's names in comments, Kafka's defaults)."""

    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    max_size: int = 2**31 - 1  # group.max.size
    offsets_retention_ms: int = 10080 * 60_000  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    new_member_join_timeout_ms: int = 300_000  # Kafka's GroupCoordinator.NewMemberJoinTimeoutMs


@dataclass(slots=True)
class JoinRequest:
    """A JoinGroup request, any version (v0 sends its session timeout as the rebalance timeout)."""

    group_id: str
    member_id: str
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int = -1
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    api_version: int = 9
    reason: str | None = None


@dataclass(slots=True)
class JoinMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(slots=True)
class JoinResult:
    error: int
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: list[JoinMember] = field(default_factory=list)
    skip_assignment: bool = False


@dataclass(slots=True)
class SyncResult:
    error: int
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(slots=True)
class CommitEntry:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    commit_timestamp: int = -1  # OffsetCommit v1's; -1: the time of the commit


@dataclass(slots=True)
class FetchedOffset:
    topic: str
    partition: int
    offset: int = -1
    leader_epoch: int = -1
    metadata: str = ""
    error: int = E.NONE


@dataclass(slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(slots=True)
class GroupDescription:
    group_id: str
    error: int = E.NONE
    state: str = "Dead"
    protocol_type: str = ""
    protocol_name: str = ""
    members: list[MemberDescription] = field(default_factory=list)


@dataclass(slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
