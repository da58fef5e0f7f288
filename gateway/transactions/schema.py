"""Keys and values of `__transaction_state` records, byte for byte as Kafka writes them.

Key (`TransactionLogKey` v0): int16 version 0, string transactional id. Value (`TransactionLogValue`):
int16 version, then producer id int64, producer epoch int16, timeout int32, status int8, partitions
(nullable array of topic string + int32 array), last update and start timestamps int64. Version 1 is
flexible (compact lengths, tagged fields: 0 previous producer id, 1 next producer id, 2 client
transaction version). We write version 0, as Kafka 3.x does for clients without transaction version 2,
and read both. A null value is a tombstone (an expired transactional id).
"""

from __future__ import annotations

import struct

from gateway.groups.schema import SchemaError, _Reader, partition_for
from gateway.transactions.model import TxnMetadata, TxnState

TRANSACTION_STATE_TOPIC = "__transaction_state"

__all__ = [
    "TRANSACTION_STATE_TOPIC",
    "SchemaError",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "partition_for",
]


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def encode_key(transactional_id: str) -> bytes:
    return struct.pack(">h", 0) + _string(transactional_id)


def decode_key(data: bytes) -> str | None:
    """The transactional id of a key; None for a key version this coordinator does not know."""
    r = _Reader(data)
    if r.int16() != 0:
        return None
    return r.string()


def encode_value(meta: TxnMetadata) -> bytes:
    """`TransactionLogValue` v0 of the metadata (partitions grouped by topic, sorted)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(meta.partitions):
        by_topic.setdefault(topic, []).append(partition)
    parts = [
        struct.pack(
            ">hqhib", 0, meta.producer_id, meta.producer_epoch, meta.timeout_ms, int(meta.state)
        ),
        struct.pack(">i", len(by_topic)),
    ]
    for topic, partitions in by_topic.items():
        parts.append(_string(topic))
        parts.append(struct.pack(f">i{len(partitions)}i", len(partitions), *partitions))
    parts.append(struct.pack(">qq", meta.last_update_ms, meta.start_ms))
    return b"".join(parts)


def decode_value(transactional_id: str, data: bytes) -> TxnMetadata:
    """Parse `TransactionLogValue` v0 or v1."""
    version = _Reader(data).int16()
    if version not in (0, 1):
        raise SchemaError(f"unknown TransactionLogValue version {version}")
    r = _Reader(data, flexible=version >= 1)
    r.pos = 2
    producer_id = r.int64()
    epoch = r.int16()
    timeout = r.int32()
    status = struct.unpack("b", r._take(1))[0]
    partitions: set[tuple[str, int]] = set()
    for _ in range(max(r.array_length(), 0)):
        topic = r.string()
        for _ in range(max(r.array_length(), 0)):
            partitions.add((topic, r.int32()))
        r.tagged_fields()
    last_update = r.int64()
    start = r.int64()
    previous_id = -1
    if version >= 1:
        for _ in range(r.uvarint()):
            tag, size = r.uvarint(), r.uvarint()
            field = bytes(r._take(size))
            if tag == 0 and size == 8:
                previous_id = struct.unpack(">q", field)[0]
    try:
        state = TxnState(status)
    except ValueError as exc:
        raise SchemaError(f"unknown transaction status {status}") from exc
    return TxnMetadata(
        transactional_id,
        producer_id=producer_id,
        producer_epoch=epoch,
        timeout_ms=timeout,
        state=state,
        partitions=partitions,
        last_update_ms=last_update,
        start_ms=start,
        last_producer_id=previous_id,
    )
