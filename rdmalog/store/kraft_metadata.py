"""Topic configs from a Kafka log directory's KRaft metadata log (`__cluster_metadata-0`).

A KRaft broker keeps its cluster metadata as records in ordinary record batches: the latest snapshot
(`<end offset>-<epoch>.checkpoint`) holds the state up to its end offset, the log segments (`.log`)
what came after. Each record's value is a metadata record framed as Kafka's MetadataRecordSerde
writes it: unsigned varints frame version (1), record type (api key) and version, then the record in
the flexible encoding (compact strings, 16-byte uuids, tagged fields). Three records matter here,
from apache/kafka's metadata/src/main/resources/common/metadata/: TopicRecord (type 2: name, topic
id), ConfigRecord (type 4: resource type, resource name, config name, nullable value: null removes
it) and RemoveTopicRecord (type 9: topic id).

`read_cluster_metadata` replays them into the topics Kafka knew, each with its config overrides, and
the dynamic broker-level defaults (cluster-wide, or for one node) that topics without an override
of their own followed.
"""

from __future__ import annotations

import logging
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from rdmalog.store.records import CONTROL_BIT, decode_records, iter_batches

log = logging.getLogger(__name__)

METADATA_DIR = "__cluster_metadata-0"
TOPIC_RECORD, CONFIG_RECORD, REMOVE_TOPIC_RECORD = 2, 4, 9
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
_SNAPSHOT = re.compile(r"(\d{20})-(\d{10})\.checkpoint")
_SEGMENT = re.compile(r"(\d{20})\.log")


class MetadataParseError(ValueError):
    """A metadata record that does not parse."""


@dataclass
class ClusterMetadata:
    """What the metadata log says: live topics (name -> id), their config overrides, and dynamic
    broker configs by resource name ("" is the cluster-wide default, else a node id)."""

    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    topic_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)

    def broker_defaults(self, node_id: int) -> dict[str, str]:
        """Dynamic broker configs in effect for `node_id` (its own over the cluster-wide ones)."""
        return {**self.broker_configs.get("", {}), **self.broker_configs.get(str(node_id), {})}


class _Reader:
    """The flexible-version primitives of a metadata record body."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            if self.pos >= len(self.data) or shift > 63:
                raise MetadataParseError("truncated varint")
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise MetadataParseError("truncated record")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def int8(self) -> int:
        return int.from_bytes(self.take(1), "big", signed=True)

    def string(self) -> str | None:
        n = self.uvarint() - 1
        return None if n < 0 else self.take(n).decode("utf-8")

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self.take(16))


def _apply(meta: ClusterMetadata, by_id: dict[uuid.UUID, str], value: bytes) -> None:
    """Apply one metadata record (others than the three read here are skipped)."""
    r = _Reader(value)
    if r.uvarint() != 1:
        raise MetadataParseError("unknown frame version")
    kind = r.uvarint()
    r.uvarint()  # record version: the fields read here are in every version
    if kind == TOPIC_RECORD:
        name, topic_id = r.string(), r.uuid()
        if name is None:
            raise MetadataParseError("TopicRecord without a name")
        meta.topic_ids[name] = topic_id
        by_id[topic_id] = name
    elif kind == REMOVE_TOPIC_RECORD:
        name = by_id.pop(r.uuid(), None)
        if name is not None:
            meta.topic_ids.pop(name, None)
            meta.topic_configs.pop(name, None)
    elif kind == CONFIG_RECORD:
        rtype, resource, key, config_value = r.int8(), r.string(), r.string(), r.string()
        if rtype == TOPIC_RESOURCE:
            configs = meta.topic_configs.setdefault(resource or "", {})
        elif rtype == BROKER_RESOURCE:
            configs = meta.broker_configs.setdefault(resource or "", {})
        else:
            return
        if config_value is None:
            configs.pop(key or "", None)
        else:
            configs[key or ""] = config_value


def _batches_of(path: Path, from_offset: int):
    """(offset, value) of every data record at or past `from_offset` in one file."""
    data = path.read_bytes()
    for batch in iter_batches(data):
        if batch.attributes & CONTROL_BIT or batch.last_offset < from_offset:
            continue
        for rec in decode_records(batch):  # absolute offsets
            if rec.offset >= from_offset and rec.value is not None:
                yield rec.offset, bytes(rec.value)


def read_cluster_metadata(log_dir: Path) -> ClusterMetadata | None:
    """Replay `log_dir/__cluster_metadata-0`: the latest snapshot, then the log after it. None when
    there is no metadata log; raises MetadataParseError (or OSError, CorruptRecordError) when it
    cannot be read."""
    directory = Path(log_dir) / METADATA_DIR
    if not directory.is_dir():
        return None
    snapshots = sorted(
        (int(m.group(1)), p) for p in directory.iterdir() if (m := _SNAPSHOT.fullmatch(p.name))
    )
    segments = sorted(
        (int(m.group(1)), p) for p in directory.iterdir() if (m := _SEGMENT.fullmatch(p.name))
    )
    meta, by_id = ClusterMetadata(), {}
    start = 0
    if snapshots:
        start, snapshot = snapshots[-1]
        for _, value in _batches_of(snapshot, 0):
            _apply(meta, by_id, value)
    for _, segment in segments:
        for _, value in _batches_of(segment, start):
            _apply(meta, by_id, value)
    return meta
