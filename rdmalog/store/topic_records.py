"""The store's own catalogue on disk: one record per topic, and the partition directories found at open.

    __rdmalog_metadata/topics/<topic id, canonical uuid>.json
        {"name", "topic_id" (canonical uuid), "partitions", "configs" (the topic's overrides, Kafka names),
         "created_ms", "deletion_suspended" (when adopted without its configs)}

A record is named by id (a 249-character topic name plus a suffix would not fit in a file name) and
renamed to `<topic id>.deleted` when its deletion is committed. Partition directories without a record
(a Kafka log dir) are adopted at open: the topic id comes from `partition.metadata` (or is new), the
partition count from the directories, the configs from the log dir's KRaft metadata log (`adoption.py`).
`Store` (log_manager.py) takes these methods as a mixin.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rdmalog.config import BrokerConfig
from rdmalog.errors import InvalidTopicError, KafkaError, KafkaStorageError
from rdmalog.store import checkpoints as ck
from rdmalog.store.adoption import adopt
from rdmalog.store.kraft_metadata import ClusterMetadata, read_cluster_metadata
from rdmalog.store.log import parse_partition_dir

log = logging.getLogger(__name__)

METADATA_DIR = "__rdmalog_metadata"
DELETED_SUFFIX = ".deleted"
MAX_TOPIC_NAME = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")
_DELETED_DIR = re.compile(r".*\.[0-9a-f]{32}-delete$")
_SKIPPED_DIRS = ("__cluster_metadata-0",)


def validate_topic_name(name: str) -> None:
    """Kafka's topic name rules; raises InvalidTopicError."""
    if not name:
        raise InvalidTopicError("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicError('Topic name cannot be "." or ".."')
    if len(name) > MAX_TOPIC_NAME:
        raise InvalidTopicError(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME} characters, topic name: {name}"
        )
    if not _LEGAL.fullmatch(name):
        raise InvalidTopicError(
            f"Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
        )


class TopicRecords:
    """Reading, writing and completing the topic records of `dir`, and adopting unrecorded
    partition directories (the attributes are the Store's)."""

    dir: Path
    config: BrokerConfig
    node_id: int
    _adoption_metadata: ClusterMetadata | None
    clock: Callable[[], int]

    def _topic_file(self, topic_id: uuid.UUID | str) -> Path:
        return self.dir / METADATA_DIR / "topics" / f"{topic_id}.json"

    def _deleted_file(self, topic_id: uuid.UUID | str) -> Path:
        """The topic record once its deletion is committed (a rename: no space needed)."""
        return self.dir / METADATA_DIR / "topics" / f"{topic_id}{DELETED_SUFFIX}"

    def _load_topic_records(self) -> dict[str, dict[str, Any]]:
        out = {}
        folder = self.dir / METADATA_DIR / "topics"
        for path in sorted([*folder.glob("*.json"), *folder.glob("*" + DELETED_SUFFIX)]):
            try:
                rec = json.loads(path.read_text(encoding="utf-8"))
                if path.suffix == DELETED_SUFFIX:  # committed deletion (see delete_topic)
                    rec["deleted"] = True
                other = out.get(rec["name"])
                if other is not None and (rec.get("deleted") or not other.get("deleted")):
                    if rec.get("deleted"):  # a live topic of the same name owns the directories
                        path.unlink()
                    continue
                if other is not None:
                    self._topic_file(other["topic_id"]).unlink(missing_ok=True)
                    self._deleted_file(other["topic_id"]).unlink(missing_ok=True)
                out[rec["name"]] = rec
            except (ValueError, KeyError) as e:
                raise KafkaStorageError(f"malformed topic record {path}: {e}") from None
        return out

    def _adopt_partition_dirs(self, records: dict[str, dict[str, Any]]) -> None:
        """Give partition directories without a topic record one (importing a Kafka log dir)."""
        found: dict[str, list[int]] = {}
        for d in sorted(self.dir.iterdir()):
            if not d.is_dir() or d.name == METADATA_DIR or d.name in _SKIPPED_DIRS:
                continue
            if _DELETED_DIR.match(d.name):  # Kafka's topic deletion in progress: finish it
                shutil.rmtree(d, ignore_errors=True)
                continue
            parsed = parse_partition_dir(d.name)
            if parsed is None:
                log.warning("ignoring %s: not a <topic>-<partition> directory", d)
                continue
            found.setdefault(parsed[0], []).append(parsed[1])
        metadata: object = None  # read when a topic needs it
        for name, parts in found.items():
            rec = records.get(name)
            if rec is not None:
                self._remove_unrecorded_partitions(rec, parts)
                continue
            try:
                validate_topic_name(name)
            except InvalidTopicError:
                log.warning("ignoring partition directories of illegal topic name %r", name)
                continue
            topic_id = None
            for p in sorted(parts):
                topic_id = topic_id or ck.read_partition_metadata(self.dir / f"{name}-{p}")
            if metadata is None:
                metadata = self._read_cluster_metadata()
            adoption = adopt(name, topic_id, *metadata, self.config, self.node_id)
            rec = {
                "name": name,
                "topic_id": str(adoption.topic_id or uuid.uuid4()),
                "partitions": max(parts) + 1,
                "configs": adoption.configs,
                "created_ms": self.clock(),
            }
            if adoption.dropped:
                log.warning(
                    "adopting topic %s: its Kafka configs %s are not applied here", name,
                    ", ".join(f"{k}={v}" for k, v in sorted(adoption.dropped.items())),
                )  # fmt: skip
            if adoption.suspended_because is None:
                log.info(
                    "adopting topic %s (%d partitions) found in %s, with its Kafka configs %s",
                    name, rec["partitions"], self.dir, adoption.configs or "(none: the defaults)",
                )  # fmt: skip
            else:
                rec["deletion_suspended"] = True
                log.warning(
                    "adopting topic %s (%d partitions) found in %s with deletion suspended: its "
                    "configs are not known (%s). Retention and compaction delete none of its "
                    "records until its configs are set, e.g. kafka-configs.sh --alter "
                    "--entity-type topics --entity-name %s --add-config retention.ms=...",
                    name, rec["partitions"], self.dir, adoption.suspended_because, name,
                )  # fmt: skip
            self._write_topic_record(rec)
            records[name] = rec

    def _read_cluster_metadata(self) -> tuple:
        """(the metadata log's content or None, why it could not be read or None)."""
        if self._adoption_metadata is not None:
            return self._adoption_metadata, None
        try:
            return read_cluster_metadata(self.dir), None
        except (OSError, ValueError, KafkaError) as e:
            log.warning("cannot read the KRaft metadata log in %s: %s", self.dir, e)
            return None, f"its KRaft metadata log cannot be read ({e})"

    def _remove_unrecorded_partitions(self, rec: Mapping[str, Any], parts: list[int]) -> None:
        """Partition directories past a topic's count: those of its topic id (or empty, without
        partition.metadata) are what a CreatePartitions interrupted by a crash left (never
        acknowledged) and are removed; others are reported."""
        topic_id, count = uuid.UUID(rec["topic_id"]), int(rec["partitions"])
        for p in sorted(q for q in parts if q >= count):
            d = self.dir / f"{rec['name']}-{p}"
            try:
                owner = ck.read_partition_metadata(d)
            except KafkaStorageError:
                owner = None
            empty = owner is None and all(f.stat().st_size == 0 for f in d.iterdir())
            if owner == topic_id or empty:  # its partition.metadata may not have been written
                log.warning("removing %s: a partition whose creation was interrupted", d)
                shutil.rmtree(d, ignore_errors=True)
            else:
                log.warning("%s: partition directory beyond the topic's %d partitions", d, count)

    def _finish_deletion(self, rec: Mapping[str, Any]) -> None:
        """Remove the partition directories of a topic record (those of its topic id), then it."""
        topic_id = uuid.UUID(rec["topic_id"])
        for p in range(int(rec["partitions"])):
            d = self.dir / f"{rec['name']}-{p}"
            try:
                owner = ck.read_partition_metadata(d)
            except KafkaStorageError:
                owner = None
            if owner in (topic_id, None):  # a directory made before its metadata file is ours too
                shutil.rmtree(d, ignore_errors=True)
        self._topic_file(topic_id).unlink(missing_ok=True)
        self._deleted_file(topic_id).unlink(missing_ok=True)

    def _write_topic_record(self, rec: Mapping[str, Any]) -> None:
        ck.write_atomic(
            self._topic_file(rec["topic_id"]), json.dumps(rec, indent=2, sort_keys=True) + "\n"
        )
