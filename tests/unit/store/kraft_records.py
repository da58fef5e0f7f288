"""Kafka KRaft metadata records for the tests, framed as Kafka's MetadataRecordSerde writes them
(unsigned varints frame version 1, record type, version; then the flexible-encoded record; schemas in
apache/kafka's metadata/src/main/resources/common/metadata/)."""

from __future__ import annotations

import struct
import uuid
from pathlib import Path

from gateway.protocol.primitives import encode_uvarint as uv
from rdmalog.store.records import Record, build_batch


def _string(s: str | None) -> bytes:
    return uv(0) if s is None else uv(len(s.encode()) + 1) + s.encode()


def topic_record(name: str, topic_id: uuid.UUID) -> bytes:
    """TopicRecord v0 (type 2): name, topic id."""
    return uv(1) + uv(2) + uv(0) + _string(name) + topic_id.bytes + uv(0)


def remove_topic_record(topic_id: uuid.UUID) -> bytes:
    """RemoveTopicRecord v0 (type 9)."""
    return uv(1) + uv(9) + uv(0) + topic_id.bytes + uv(0)


def config_record(rtype: int, resource: str, key: str, value: str | None) -> bytes:
    """ConfigRecord v0 (type 4; resource type 2: a topic, 4: a broker, "" the cluster default)."""
    body = struct.pack(">b", rtype) + _string(resource) + _string(key) + _string(value)
    return uv(1) + uv(4) + uv(0) + body + uv(0)


def metadata_batches(values: list[bytes], first_offset: int = 0) -> bytes:
    """One record per batch, offsets from `first_offset`."""
    out = bytearray()
    for i, value in enumerate(values):
        out += build_batch(
            [Record(None, value)], base_offset=first_offset + i, partition_leader_epoch=1
        )
    return bytes(out)


def write_metadata_log(
    data_dir: Path, values: list[bytes], snapshot: list[bytes] | None = None
) -> None:
    """`__cluster_metadata-0` with `values` in a log segment; with `snapshot`, a snapshot of those
    records ending where the log's records begin."""
    d = Path(data_dir) / "__cluster_metadata-0"
    d.mkdir(parents=True, exist_ok=True)
    first = 0
    if snapshot is not None:
        first = len(snapshot)
        (d / f"{first:020d}-{1:010d}.checkpoint").write_bytes(metadata_batches(snapshot))
    (d / f"{0:020d}.log").write_bytes(metadata_batches(values, first))
