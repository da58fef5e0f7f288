"""`__consumer_offsets` record encoding: Kafka's bytes, every value version, the partitioner."""

from __future__ import annotations

import struct

import pytest

from gateway.groups.consumer_protocol import subscribed_topics
from gateway.groups.schema import (
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    SchemaError,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_value,
    encode_key,
    encode_offset_value,
    java_string_hash,
    partition_for,
)


def test_java_string_hash_matches_java():
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert java_string_hash("\U0001f600") == 1772899  # a surrogate pair hashes as two code units


def test_partition_for_uses_kafka_abs():
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) is 0
    negative = "Aa" * 7 + "z"
    h = java_string_hash(negative)
    assert partition_for(negative, 7) == abs(h) % 7


def test_offset_key_bytes():
    assert encode_key(OffsetKey("g", "t", 3)) == b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x03"
    assert decode_key(encode_key(OffsetKey("grp", "topic", 7))) == OffsetKey("grp", "topic", 7)
    legacy = b"\x00\x00\x00\x01g\x00\x01t\x00\x00\x00\x01"
    assert decode_key(legacy) == OffsetKey("g", "t", 1)


def test_group_key_bytes_and_unknown_types():
    assert encode_key(GroupKey("g")) == b"\x00\x02\x00\x01g"
    assert decode_key(b"\x00\x02\x00\x02gg") == GroupKey("gg")
    assert decode_key(b"\x00\x03\x00\x01g") is None  # a KIP-848 record type


def test_offset_value_v3_bytes():
    value = OffsetValue(offset=42, leader_epoch=5, metadata="m", commit_timestamp=1000)
    data = encode_offset_value(value)
    assert data == struct.pack(">hqih", 3, 42, 5, 1) + b"m" + struct.pack(">q", 1000)
    assert decode_offset_value(data) == value


def test_offset_value_v1_when_expiring():
    value = OffsetValue(offset=1, metadata="", commit_timestamp=10, expire_timestamp=20)
    data = encode_offset_value(value)
    assert data[:2] == b"\x00\x01"
    decoded = decode_offset_value(data)
    assert (decoded.offset, decoded.leader_epoch, decoded.expire_timestamp) == (1, -1, 20)


def test_offset_value_v0_and_flexible_v4():
    v0 = struct.pack(">hqh", 0, 9, 2) + b"md" + struct.pack(">q", 77)
    assert decode_offset_value(v0) == OffsetValue(9, -1, "md", 77)
    # v4: compact string (length + 1 as uvarint) and an empty tagged-field section
    v4 = struct.pack(">hqi", 4, 9, 3) + b"\x03md" + struct.pack(">q", 77) + b"\x00"
    assert decode_offset_value(v4) == OffsetValue(9, 3, "md", 77)
    with pytest.raises(SchemaError):
        decode_offset_value(struct.pack(">hq", 9, 1))


def _group() -> GroupValue:
    return GroupValue(
        protocol_type="consumer",
        generation=4,
        protocol="range",
        leader="m1",
        current_state_timestamp=123,
        members=[
            MemberValue("m1", None, "c1", "/127.0.0.1", 300000, 10000, b"sub1", b"asg1"),
            MemberValue("m2", "static-2", "c2", "/127.0.0.2", 60000, 6000, b"sub2", b""),
        ],
    )


def test_group_value_v3_roundtrip_and_layout():
    data = encode_group_value(_group())
    assert data[:2] == b"\x00\x03"
    assert data[2:12] == b"\x00\x08consumer"
    assert decode_group_value(data) == _group()


def test_group_value_empty_group_has_null_protocol_and_leader():
    value = GroupValue("consumer", 7, None, None, 5, [])
    data = encode_group_value(value)
    assert b"\xff\xff\xff\xff" in data  # two null strings
    assert decode_group_value(data) == value


def test_group_value_v0_defaults_rebalance_timeout_to_session_timeout():
    member = b"\x00\x02m1\x00\x02c1\x00\x01h" + struct.pack(">i", 6000)
    member += struct.pack(">i", 1) + b"s" + struct.pack(">i", 1) + b"a"
    data = struct.pack(">h", 0) + b"\x00\x08consumer" + struct.pack(">i", 2)
    data += b"\x00\x05range\x00\x02m1" + struct.pack(">i", 1) + member
    value = decode_group_value(data)
    assert value.members[0].rebalance_timeout == 6000
    assert value.members[0].group_instance_id is None
    assert value.current_state_timestamp == -1


def test_subscribed_topics():
    sub = struct.pack(">hi", 1, 2) + b"\x00\x01a\x00\x02bb" + struct.pack(">i", -1)
    assert subscribed_topics(sub) == {"a", "bb"}
    assert subscribed_topics(b"\x00") is None
