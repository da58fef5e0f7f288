"""The small files Kafka keeps beside its logs, in Kafka's formats.

- offset checkpoints (`recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`,
  `replication-offset-checkpoint` in a log dir): a version line `0`, an entry count line, then one
  `topic partition offset` line per partition;
- `meta.properties` in a log dir: `version=1`, `cluster.id`, `node.id` (version 0 files use `broker.id`);
- `partition.metadata` in a partition dir: `version: 0` and `topic_id: <base64url uuid>`.

Every write is atomic: temp file, fsync, rename, fsync of the directory; except `partition.metadata`
when it is first written (after CreateTopics answered, as Kafka does): written as it is, since the
topic record is the durable truth and an empty or missing file is written again at open.
"""

from __future__ import annotations

import base64
import os
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

from rdmalog.config_text import parse_properties
from rdmalog.errors import KafkaStorageError

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_CHECKPOINT = "replication-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
META_PROPERTIES = "meta.properties"
PARTITION_METADATA = "partition.metadata"


def uuid_to_kafka(u: uuid.UUID) -> str:
    """Kafka's Uuid.toString(): URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def uuid_from_kafka(s: str) -> uuid.UUID:
    """Parse Kafka's 22-character topic/cluster id (also accepts the canonical hex form)."""
    s = s.strip()
    if len(s) == 22:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(s + "=="))
    return uuid.UUID(s)


def write_atomic(path: Path, data: str, mode: int = 0o666) -> None:
    """Replace `path` with `data` atomically and durably (a new file gets `mode`, less the
    umask: 0o600 for the security files)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a partial file would hold space a full disk has not got
        raise
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """Entries of a Kafka offset checkpoint file; {} when it is missing. Malformed -> KafkaStorageError."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return {}
    try:
        if int(lines[0]) != 0:
            raise ValueError(f"unsupported version {lines[0]}")
        count = int(lines[1])
        out = {}
        for line in lines[2 : 2 + count]:
            topic, part, off = line.split()
            out[(topic, int(part))] = int(off)
        if len(out) != count:
            raise ValueError("entry count mismatch")
        return out
    except (ValueError, IndexError) as e:
        raise KafkaStorageError(f"malformed checkpoint file {path}: {e}") from None


def write_offset_checkpoint(path: Path, entries: Mapping[tuple[str, int], int]) -> None:
    lines = ["0", str(len(entries))]
    lines += [f"{t} {p} {o}" for (t, p), o in sorted(entries.items())]
    write_atomic(Path(path), "\n".join(lines) + "\n")


def read_meta_properties(log_dir: Path) -> dict[str, str] | None:
    path = Path(log_dir) / META_PROPERTIES
    try:
        return parse_properties(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def write_meta_properties(log_dir: Path, cluster_id: str, node_id: int) -> None:
    stamp = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())
    text = f"#\n#{stamp}\ncluster.id={cluster_id}\nnode.id={node_id}\nversion=1\n"
    write_atomic(Path(log_dir) / META_PROPERTIES, text)


def read_partition_metadata(partition_dir: Path) -> uuid.UUID | None:
    """The topic id a partition directory belongs to; None when the file is missing or empty (a
    crash before its first write reached the disk)."""
    try:
        text = (Path(partition_dir) / PARTITION_METADATA).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    if not text:
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    try:
        if fields.get("version", "").strip() != "0":
            raise ValueError("unsupported version")
        return uuid_from_kafka(fields["topic_id"])
    except (KeyError, ValueError) as e:
        raise KafkaStorageError(f"malformed {partition_dir / PARTITION_METADATA}: {e}") from None


def write_partition_metadata(partition_dir: Path, topic_id: uuid.UUID, sync: bool = True) -> None:
    """Without `sync` the file is written in place, not synced (a missing one is written at open)."""
    path = Path(partition_dir) / PARTITION_METADATA
    text = f"version: 0\ntopic_id: {uuid_to_kafka(topic_id)}\n"
    if sync:
        write_atomic(path, text)
    else:
        path.write_text(text, encoding="utf-8")
