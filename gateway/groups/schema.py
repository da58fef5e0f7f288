"""Keys and values of `__consumer_offsets` records, byte for byte as Kafka writes them.

Every key starts with an int16 record type: 0 and 1 are offset commits (`OffsetCommitKey`: group,
topic, partition), 2 is group metadata (`GroupMetadataKey`: group). Values start with an int16 version:
`OffsetCommitValue` v0-v4 (v1 carries an expire timestamp, v3 adds the leader epoch, v4 is flexible)
and `GroupMetadataValue` v0-v4 (v3 adds group instance ids, v4 is flexible). We write offset values v3
(v1 when the commit carries a retention time, as Kafka does) and group values v3, and read every
version. A null value is a tombstone. Other record types (KIP-848 groups) decode to None.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

OFFSETS_TOPIC = "__consumer_offsets"

OFFSET_KEY_TYPES = (0, 1)
GROUP_KEY_TYPE = 2


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(slots=True)
class OffsetValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1


@dataclass(slots=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(slots=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: list[MemberValue] = field(default_factory=list)


def java_string_hash(text: str) -> int:
    """Java's `String.hashCode()`: over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group: str, num_partitions: int) -> int:
    """The `__consumer_offsets` partition of a group: Kafka's `Utils.abs(hashCode) % partitions`."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


# --- writing -------------------------------------------------------------------------------------


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def _nullable_string(text: str | None) -> bytes:
    return struct.pack(">h", -1) if text is None else _string(text)


def _bytes(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + bytes(data)


def encode_key(key: OffsetKey | GroupKey) -> bytes:
    """The record key: offset commit keys as type 1, group metadata keys as type 2."""
    if isinstance(key, OffsetKey):
        return (
            struct.pack(">h", 1)
            + _string(key.group)
            + _string(key.topic)
            + struct.pack(">i", key.partition)
        )
    return struct.pack(">h", GROUP_KEY_TYPE) + _string(key.group)


def encode_offset_value(value: OffsetValue) -> bytes:
    """`OffsetCommitValue` v1 when an expire timestamp is set, else v3."""
    if value.expire_timestamp >= 0:
        return (
            struct.pack(">hq", 1, value.offset)
            + _string(value.metadata)
            + struct.pack(">qq", value.commit_timestamp, value.expire_timestamp)
        )
    return (
        struct.pack(">hqi", 3, value.offset, value.leader_epoch)
        + _string(value.metadata)
        + struct.pack(">q", value.commit_timestamp)
    )


def encode_group_value(value: GroupValue) -> bytes:
    """`GroupMetadataValue` v3."""
    parts = [
        struct.pack(">h", 3),
        _string(value.protocol_type),
        struct.pack(">i", value.generation),
        _nullable_string(value.protocol),
        _nullable_string(value.leader),
        struct.pack(">qi", value.current_state_timestamp, len(value.members)),
    ]
    for m in value.members:
        parts += [
            _string(m.member_id),
            _nullable_string(m.group_instance_id),
            _string(m.client_id),
            _string(m.client_host),
            struct.pack(">ii", m.rebalance_timeout, m.session_timeout),
            _bytes(m.subscription),
            _bytes(m.assignment),
        ]
    return b"".join(parts)


# --- reading -------------------------------------------------------------------------------------


class SchemaError(ValueError):
    """A `__consumer_offsets` key or value that does not parse."""


class _Reader:
    """Reads Kafka primitives, classic or compact (flexible) encodings."""

    def __init__(self, data: bytes, flexible: bool = False) -> None:
        self.data = memoryview(data)
        self.pos = 0
        self.flexible = flexible

    def _take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise SchemaError("truncated")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def _unpack(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self._take(size))[0]

    def int16(self) -> int:
        return self._unpack(">h")

    def int32(self) -> int:
        return self._unpack(">i")

    def int64(self) -> int:
        return self._unpack(">q")

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self._take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise SchemaError("varint too long")

    def _length(self, classic_fmt: str) -> int:
        return self.uvarint() - 1 if self.flexible else self._unpack(classic_fmt)

    def nullable_string(self) -> str | None:
        n = self._length(">h")
        return None if n < 0 else bytes(self._take(n)).decode()

    def string(self) -> str:
        text = self.nullable_string()
        if text is None:
            raise SchemaError("null string")
        return text

    def bytes_(self) -> bytes:
        n = self._length(">i")
        return b"" if n < 0 else bytes(self._take(n))

    def array_length(self) -> int:
        return self._length(">i")

    def tagged_fields(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                self._take(self.uvarint())


def decode_key(data: bytes) -> OffsetKey | GroupKey | None:
    """Parse a record key; None for record types this coordinator does not keep."""
    r = _Reader(data)
    kind = r.int16()
    if kind in OFFSET_KEY_TYPES:
        return OffsetKey(r.string(), r.string(), r.int32())
    if kind == GROUP_KEY_TYPE:
        return GroupKey(r.string())
    return None


def decode_offset_value(data: bytes) -> OffsetValue:
    """Parse `OffsetCommitValue` v0-v4."""
    version = _Reader(data).int16()
    if not 0 <= version <= 4:
        raise SchemaError(f"unknown OffsetCommitValue version {version}")
    r = _Reader(data, flexible=version >= 4)
    r.pos = 2
    value = OffsetValue(offset=r.int64())
    if version >= 3:
        value.leader_epoch = r.int32()
    value.metadata = r.string()
    value.commit_timestamp = r.int64()
    if version == 1:
        value.expire_timestamp = r.int64()
    r.tagged_fields()
    return value


def decode_group_value(data: bytes) -> GroupValue:
    """Parse `GroupMetadataValue` v0-v4."""
    version = _Reader(data).int16()
    if not 0 <= version <= 4:
        raise SchemaError(f"unknown GroupMetadataValue version {version}")
    r = _Reader(data, flexible=version >= 4)
    r.pos = 2
    value = GroupValue(
        protocol_type=r.string(),
        generation=r.int32(),
        protocol=r.nullable_string(),
        leader=r.nullable_string(),
    )
    if version >= 2:
        value.current_state_timestamp = r.int64()
    for _ in range(max(r.array_length(), 0)):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.int32() if version >= 1 else -1
        session_timeout = r.int32()
        if rebalance_timeout < 0:
            rebalance_timeout = session_timeout
        value.members.append(
            MemberValue(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                r.bytes_(),
                r.bytes_(),
            )
        )
        r.tagged_fields()
    r.tagged_fields()
    return value
