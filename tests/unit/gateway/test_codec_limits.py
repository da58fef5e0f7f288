"""The codec bounds what a request may claim before taking memory for it (issue 20 item 2)."""

from __future__ import annotations

import struct

import pytest

from gateway.protocol import (
    DecodeBudgetExceeded,
    DecodeError,
    EncodedArray,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    parse_request_header,
    response_element_encoder,
)
from gateway.protocol.primitives import encode_uvarint as uv


def _decode(frame: bytes, memory: int = 1 << 62, work: int = 1 << 62) -> dict:
    mv = memoryview(frame)[4:]
    return decode_request(parse_request_header(mv), mv, memory, work)


def _list_offsets_v1(count: int, present: int) -> bytes:
    """ListOffsets v1 claiming `count` partitions of 12 bytes, with `present` of them there."""
    body = struct.pack(">ii", -1, 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", count)
    body += struct.pack(">iq", 0, -1) * present
    head = struct.pack(">hhih", 2, 1, 1, 0)
    return struct.pack(">i", len(head) + len(body)) + head + body


def test_array_count_needs_its_smallest_elements_in_the_bytes_left() -> None:
    assert len(_decode(_list_offsets_v1(10, 10))["topics"][0]["partitions"]) == 10
    # 10 partitions need 120 bytes; 10 bytes more than one partition is not enough
    frame = _list_offsets_v1(10, 1) + b"\0" * 10
    frame = struct.pack(">i", len(frame) - 4) + frame[4:]
    with pytest.raises(DecodeError, match="truncated"):
        _decode(frame)


def test_huge_count_refused_without_allocating() -> None:
    with pytest.raises(DecodeError, match="truncated"):
        _decode(_list_offsets_v1(2**31 - 1, 1))


def test_memory_budget() -> None:
    frame = _list_offsets_v1(1000, 1000)
    assert _decode(frame, memory=1 << 20)
    with pytest.raises(DecodeBudgetExceeded) as exc:
        _decode(frame, memory=64 * 1024)
    assert not exc.value.work


def test_work_budget_counts_elements() -> None:
    frame = _list_offsets_v1(1000, 1000)
    assert _decode(frame, work=1003)  # 1 topic, 1000 partitions, each array one more
    with pytest.raises(DecodeBudgetExceeded) as exc:
        _decode(frame, work=1000)
    assert exc.value.work


def test_strings_are_charged() -> None:
    """FindCoordinator v4 keys: 1-character keys are shared objects, longer ones are charged."""
    short = encode_request(10, 4, 1, {"key_type": 0, "coordinator_keys": ["k"] * 1000})
    long = encode_request(
        10, 4, 1, {"key_type": 0, "coordinator_keys": [f"key-{i}" for i in range(1000)]}
    )
    assert _decode(short, memory=32 * 1024)
    with pytest.raises(DecodeBudgetExceeded):
        _decode(long, memory=32 * 1024)


def test_encoded_array_is_the_same_answer() -> None:
    """An EncodedArray of elements encoded one by one equals the plain list's encoding."""
    coordinators = [
        {
            "key": f"g{i}",
            "error_code": 0,
            "error_message": None,
            "node_id": 1,
            "host": "h",
            "port": 9,
        }
        for i in range(100)
    ]
    plain, _ = encode_response(10, 4, 5, {"throttle_time": 0, "coordinators": coordinators})
    encode = response_element_encoder(10, 4, ("coordinators",))
    data = bytearray()
    for c in coordinators:
        encode(data, c, [])
    pre, parts = encode_response(
        10, 4, 5, {"throttle_time": 0, "coordinators": EncodedArray(100, data, [])}
    )
    assert pre == plain and parts == []
    assert decode_response(10, 4, bytes(pre[4:]))[1]["coordinators"] == coordinators


def test_large_encoded_array_is_a_part_of_its_own() -> None:
    encode = response_element_encoder(10, 4, ("coordinators",))
    data = bytearray()
    count = 0
    while len(data) < 1 << 20:
        encode(data, {"key": "g" * 100, "node_id": 1, "host": "h", "port": 9}, [])
        count += 1
    buf, parts = encode_response(
        10, 4, 5, {"throttle_time": 0, "coordinators": EncodedArray(count, data, [])}
    )
    ((at, part),) = parts
    assert part is data and at == len(buf) - 1  # the response's tagged fields follow it
    assert struct.unpack_from(">i", buf)[0] == len(buf) - 4 + len(data)
    _, body = decode_response(10, 4, bytes(buf[4:at]) + bytes(data) + bytes(buf[at:]))
    assert len(body["coordinators"]) == count


def test_flexible_array_counts_are_checked_too() -> None:
    """A compact array count (uvarint) of 2**30 empty keys in a few bytes."""
    body = b"\0" + uv(2**30 + 1) + b"\1" * 10 + b"\0"
    head = struct.pack(">hhih", 10, 4, 1, 0) + b"\0"
    frame = struct.pack(">i", len(head) + len(body)) + head + body
    with pytest.raises(DecodeError, match="truncated"):
        _decode(frame)
