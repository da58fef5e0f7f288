"""A log holding the old v0/v1 message formats is refused at start-up, never truncated."""

from __future__ import annotations

import struct
import zlib

import pytest

from rdmalog.errors import KafkaStorageError
from tests.unit.store.helpers import open_log


def v1_message(offset: int, value: bytes, timestamp: int = 1_700_000_000_000) -> bytes:
    """One magic-v1 message as Kafka 0.10-2.x wrote it: offset, size, crc, magic, attrs, ts, key, value."""
    body = struct.pack(">bbq", 1, 0, timestamp) + struct.pack(">i", -1)
    body += struct.pack(">i", len(value)) + value
    crc = zlib.crc32(body) & 0xFFFFFFFF
    message = struct.pack(">I", crc) + body
    return struct.pack(">qi", offset, len(message)) + message


def test_v1_messages_refuse_to_load_and_stay_on_disk(tmp_path) -> None:
    part = tmp_path / "old-0"
    part.mkdir()
    data = b"".join(v1_message(i, b"value-%d" % i) for i in range(3))
    seg = part / "00000000000000000000.log"
    seg.write_bytes(data)
    with pytest.raises(KafkaStorageError, match="v1 format"):
        open_log(part)
    assert seg.read_bytes()[: len(data)] == data  # nothing was cut
