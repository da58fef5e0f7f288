"""All partition logs of a broker: topics, topic ids, configs kept with topics, checkpoints, and the
background maintenance thread (time-based flush, time-based roll, retention, checkpoints).

A data dir is a Kafka log dir and can be imported from one as it is:

    meta.properties                      version=1, cluster.id, node.id (Kafka's format)
    rdmalog-producer-id-block            end of the producer id block in use (InitProducerId)
    recovery-point-offset-checkpoint     Kafka's offset checkpoint format (also log-start-offset-,
    log-start-offset-checkpoint          replication-offset-checkpoint)
    .kafka_cleanshutdown                 present only after a clean close; without it logs are recovered
    cleaner-offset-checkpoint            where each compacted log's next cleaning starts (Kafka's)
    .lock                                flock held while a Store has the directory open
    <topic>-<partition>/                 segments (<20-digit base>.log/.index/.timeindex), partition.metadata
    __rdmalog_metadata/topics/<topic id, canonical uuid>.json
        {"name", "topic_id" (canonical uuid), "partitions", "configs" (the topic's overrides, Kafka names),
         "created_ms", "deletion_suspended" (when adopted without its configs)} -- rdmalog's own topic
         record (named by id: a 249-character topic name plus a suffix would not fit in a file
         name); renamed to <topic id>.deleted when its deletion is committed. Remove this folder
         before handing the directory back to Kafka, which refuses non-partition directories in a
         log dir.

Topic creation and deletion are all or nothing. Creation first writes the record marked "creating",
then the partitions, then the record unmarked: a failure removes what was made, and a record still
marked at open (a crash part-way) is undone. Deletion renames the record to `<topic id>.deleted`
first (a rename needs no free space, so deleting frees a full disk) and finishes at open if
interrupted. A write that fails raises KafkaStorageError and says so in the log (`disk.py`). Partitions that would not fit the descriptor limit are refused up front
(`descriptors.py`).

Partition directories without a topic record (a Kafka log dir) are adopted at open: the topic id comes
from `partition.metadata` (or is new), the partition count from the directories, the configs from the
log dir's KRaft metadata log; when those are not known, deletion (retention, compaction) is suspended
until an operator sets the topic's configs (`adoption.py`). The records and the adoption are
`topic_records.py`'s.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rdmalog.config import BrokerConfig, TopicConfig
from rdmalog.errors import (
    InvalidPartitionsError,
    InvalidTopicError,
    KafkaStorageError,
    TopicExistsError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from rdmalog.store import checkpoints as ck
from rdmalog.store import descriptors
from rdmalog.store.cleaner_manager import LogCleaner
from rdmalog.store.disk import recovered, storage_error
from rdmalog.store.kraft_metadata import ClusterMetadata
from rdmalog.store.log import PartitionLog, wall_clock_ms
from rdmalog.store.producer_ids import FILE_NAME as PRODUCER_ID_FILE
from rdmalog.store.producer_ids import ProducerIdAllocator
from rdmalog.store.topic_records import METADATA_DIR, TopicRecords, validate_topic_name

log = logging.getLogger(__name__)

FLUSH_THREADS = 32  # logs flushed or closed at once by flush_all and close (blocked in fsync)
LOCK_FILE = ".lock"


def _in_parallel(fn: Callable[[PartitionLog], None], logs: list[PartitionLog]) -> None:
    """`fn(log)` for every log, several at a time (raising the first failure): concurrent fsyncs
    share the file system's journal commits, so a broker with many partitions flushes and shuts
    down in a fraction of the serial time."""
    if len(logs) < 2:
        for plog in logs:
            fn(plog)
        return
    with ThreadPoolExecutor(FLUSH_THREADS, thread_name_prefix="rdmalog-flush") as pool:
        for _ in pool.map(fn, logs):
            pass


@dataclass
class Topic:
    """A topic: its id, config and one PartitionLog per partition."""

    name: str
    topic_id: uuid.UUID
    config: TopicConfig
    partitions: list[PartitionLog] = field(default_factory=list)
    created_ms: int = 0
    deletion_suspended: bool = False  # adopted without known configs (adoption.py)

    @property
    def is_internal(self) -> bool:
        return self.name in ("__consumer_offsets", "__transaction_state")


class Store(TopicRecords):
    """The broker's log store. Create, `open()`, use from one event loop thread, `close()`."""

    def __init__(
        self,
        data_dir: Path | None,
        config: BrokerConfig,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        adoption_metadata: ClusterMetadata | None = None,
        replicated: bool = False,
        cluster_id: str | None = None,
    ) -> None:
        """`adoption_metadata`: the topic ids and configs of partition directories to adopt, in
        place of the log dir's KRaft metadata log (`rdmalog import` passes what the operator gave:
        a configs file, or a source cluster's answers); `replicated`: cluster mode, where the
        replica manager moves every log's high watermark (from the checkpointed one at open);
        `cluster_id`: the cluster's id (from ZooKeeper), which a data dir of another cluster
        refuses."""
        self.dir = Path(data_dir) if data_dir is not None else config.log_dirs[0]
        self._adoption_metadata = adoption_metadata
        self.config = config
        self.clock = clock
        self.topics: dict[str, Topic] = {}
        self._by_id: dict[uuid.UUID, Topic] = {}
        self.lock = threading.RLock()
        self._checkpoint_lock = threading.Lock()
        self.cluster_id = ""
        self.replicated = replicated
        self._expected_cluster_id = cluster_id
        self._hw_checkpoint: dict[tuple[str, int], int] = {}
        self.producer_ids: ProducerIdAllocator | None = None
        self.node_id = config.node_id
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_retention = 0
        self._last_checkpoint = 0
        self._metadata_due: list[tuple[PartitionLog, uuid.UUID]] = []
        self.cleaner: LogCleaner | None = None  # compacted topics' cleaner, made at open
        self.opened = False
        self._lock_fd = -1

    # --- life cycle ----------------------------------------------------------------------------------

    def open(self, start_maintenance: bool = True) -> Store:
        """Recover every log (validating unflushed data after an unclean shutdown); start maintenance."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock_dir()
        try:
            self._open()
        except BaseException:
            self._unlock_dir()
            raise
        if start_maintenance:
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._maintenance_loop, name="rdmalog-maintenance", daemon=True
            )
            self._thread.start()
            self.cleaner.start()  # type: ignore[union-attr]
        return self

    def _open(self) -> None:
        (self.dir / METADATA_DIR / "topics").mkdir(parents=True, exist_ok=True)
        self._load_meta_properties()
        self.producer_ids = ProducerIdAllocator(self.dir / PRODUCER_ID_FILE)
        marker = self.dir / ck.CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        recovery = ck.read_offset_checkpoint(self.dir / ck.RECOVERY_POINT_CHECKPOINT)
        starts = ck.read_offset_checkpoint(self.dir / ck.LOG_START_OFFSET_CHECKPOINT)
        if self.replicated:
            self._hw_checkpoint = ck.read_offset_checkpoint(self.dir / ck.REPLICATION_CHECKPOINT)
        records = self._load_topic_records()
        self._adopt_partition_dirs(records)
        for rec in list(records.values()):
            if rec.get("deleted") or rec.get("creating"):  # interrupted by a crash: finish, undo
                if rec.get("creating"):
                    log.warning("removing topic %s: its creation was interrupted", rec["name"])
                self._finish_deletion(rec)
                del records[rec["name"]]
        total = sum(int(rec["partitions"]) for rec in records.values())
        free, why = descriptors.room()
        if free is not None and total > free:
            raise KafkaStorageError(
                f"{self.dir} holds {total} partitions, which need a file descriptor each, but only "
                f"{free} are free: {why}. Raise the broker's descriptor limit (ulimit -n, systemd "
                "LimitNOFILE)."
            )
        for rec in records.values():
            cfg = TopicConfig.from_overrides(self.config, rec.get("configs") or {})
            topic = Topic(
                rec["name"],
                uuid.UUID(rec["topic_id"]),
                cfg,
                created_ms=rec.get("created_ms", 0),
                deletion_suspended=bool(rec.get("deletion_suspended")),
            )
            for p in range(int(rec["partitions"])):
                key = (topic.name, p)
                topic.partitions.append(
                    self._open_log(topic, p, recovery.get(key, 0), starts.get(key, 0), clean)
                )
            self.topics[topic.name] = topic
            self._by_id[topic.topic_id] = topic
        # logs copied in (an imported Kafka log dir, mirrored topics) hold other allocators' ids
        self.producer_ids.reserve_past(
            max((pid for plog in self.logs() for pid in plog.producer_state.producers), default=-1)
        )
        marker.unlink(missing_ok=True)
        self.cleaner = LogCleaner(self, self.config)
        self.opened = True
        try:
            self.checkpoint()
        except KafkaStorageError:  # a full disk: serve what there is (the error is logged)
            log.warning(
                "starting without new checkpoints: the next start recovers from the old ones"
            )
        now = self.clock()
        self._last_retention = self._last_checkpoint = now

    def close(self) -> None:
        """Stop maintenance, flush and close every log, write checkpoints and the clean-shutdown marker."""
        if not self.opened:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.cleaner is not None:
            self.cleaner.stop()  # a round in progress stops at its next check
        failures: list[BaseException] = []

        def close_log(plog: PartitionLog) -> None:
            try:
                plog.close()
            except (OSError, KafkaStorageError) as e:  # a full disk: recovered at the next open
                failures.append(e)
                if isinstance(e, OSError):
                    storage_error(e, plog.dir, f"closing {plog.name}")

        with self.lock:
            self._write_due_metadata()  # what does not fit is written at the next open
            _in_parallel(close_log, self.logs())
            clean = not failures
            try:
                self.checkpoint()
                if clean:  # an empty file: written even on a full disk
                    ck.write_atomic(self.dir / ck.CLEAN_SHUTDOWN_FILE, "")
            except (OSError, KafkaStorageError) as e:
                clean = False
                if isinstance(e, OSError):
                    storage_error(e, self.dir, "marking the clean shutdown")
            if not clean:
                log.warning(
                    "%s closed without a clean-shutdown mark: the next start recovers its logs "
                    "from the last checkpoints (what was acknowledged is intact)",
                    self.dir,
                )
            self.opened = False
        self._unlock_dir()

    def _lock_dir(self) -> None:
        """Kafka's `.lock`: one broker process per log dir."""
        fd = os.open(self.dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise KafkaStorageError(
                f"{self.dir} is in use by another broker (its .lock is held)"
            ) from None
        self._lock_fd = fd

    def _unlock_dir(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # closing releases the flock
            self._lock_fd = -1

    def __enter__(self) -> Store:
        return self if self.opened else self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _load_meta_properties(self) -> None:
        props = ck.read_meta_properties(self.dir)
        expected = self._expected_cluster_id
        if props is None:
            self.cluster_id = expected or ck.uuid_to_kafka(uuid.uuid4())
            ck.write_meta_properties(self.dir, self.cluster_id, self.node_id)
            return
        self.cluster_id = props.get("cluster.id", "") or expected or ck.uuid_to_kafka(uuid.uuid4())
        if expected and self.cluster_id != expected:
            raise KafkaStorageError(
                f"The Cluster ID {expected} doesn't match stored clusterId {self.cluster_id} in "
                f"{self.dir / ck.META_PROPERTIES}. The broker is trying to join the wrong cluster. "
                "Configured zookeeper.connect may be wrong."
            )
        stored = props.get("node.id", props.get("broker.id"))
        explicit = self.config.is_set("node.id") or self.config.is_set("broker.id")
        if stored is not None and int(stored) != self.node_id:
            if explicit:
                raise KafkaStorageError(
                    f"{self.dir / ck.META_PROPERTIES} belongs to node {stored}, this broker is node {self.node_id}"
                )
            log.info("adopting node id %s of %s", stored, self.dir)
            self.node_id = int(stored)
        if "cluster.id" not in props:
            ck.write_meta_properties(self.dir, self.cluster_id, self.node_id)

    @contextlib.contextmanager
    def _writing(self, doing: str):
        """File system errors while `doing` become KafkaStorageError (and a line in the log)."""
        try:
            yield
        except OSError as e:
            raise storage_error(e, self.dir, doing) from e

    def _record_of(self, topic: Topic) -> dict[str, Any]:
        rec = {
            "name": topic.name,
            "topic_id": str(topic.topic_id),
            "partitions": len(topic.partitions),
            "configs": topic.config.overrides,
            "created_ms": topic.created_ms,
        }
        if topic.deletion_suspended:
            rec["deletion_suspended"] = True
        return rec

    def _open_log(
        self, topic: Topic, p: int, recovery: int, start: int, clean: bool
    ) -> PartitionLog:
        d = self.dir / f"{topic.name}-{p}"
        stored = ck.read_partition_metadata(d)
        if stored is not None and stored != topic.topic_id:
            raise KafkaStorageError(f"{d} belongs to topic id {stored}, not {topic.topic_id}")
        plog = PartitionLog(
            d, topic.name, p, topic.config,
            recovery_point=recovery, log_start_offset=start, clean_shutdown=clean, clock=self.clock,
            replicated=self.replicated, high_watermark=self._hw_checkpoint.get((topic.name, p), 0),
        ).open()  # fmt: skip
        plog.deletion_suspended = topic.deletion_suspended
        if stored is None:
            self._metadata_due.append((plog, topic.topic_id))
            self._write_due_metadata()
        return plog

    def _write_due_metadata(self) -> None:
        """Write the partition.metadata files of new partitions, after CreateTopics answered (Kafka
        writes them from a background task too): the topic record is the durable truth, and a
        missing file is written at open. One that cannot be written (a full disk) is reported and
        tried again at the next pass."""
        with self.lock:
            due, self._metadata_due = self._metadata_due, []
        for i, (plog, topic_id) in enumerate(due):
            with plog.lock:  # a deletion waits, or has closed it
                if plog.closed:
                    continue
                try:
                    ck.write_partition_metadata(plog.dir, topic_id, sync=False)
                except OSError as e:
                    storage_error(e, plog.dir, f"writing the partition.metadata of {plog.name}")
                    with self.lock:
                        self._metadata_due[:0] = due[i:]
                    return

    def _make_partitions(self, topic: Topic, total: int) -> list[PartitionLog]:
        """Create the partitions of `topic` from its count up to `total`, not yet in the topic (the
        caller publishes them, so a reader never sees part of them); on any failure remove those
        made here and raise (KafkaStorageError for a file system error). Nothing is synced here,
        and their partition.metadata files are due only once the caller has published them (the
        maintenance pass writing them meanwhile would take from the creation its disk and CPU)."""
        first = p = len(topic.partitions)
        made: list[PartitionLog] = []
        try:
            for p in range(first, total):
                d = self.dir / f"{topic.name}-{p}"
                plog = PartitionLog(
                    d, topic.name, p, topic.config, clock=self.clock, replicated=self.replicated
                )
                plog.create()  # FileExistsError: something else has the directory's name
                plog.deletion_suspended = topic.deletion_suspended
                made.append(plog)
            return made
        except BaseException as e:
            for plog in made:
                plog.delete()
            if isinstance(e, OSError):
                raise KafkaStorageError(
                    f"creating partition {p} of {topic.name} failed, so none was created: {e}"
                ) from e
            raise

    def _sync_dir(self) -> None:
        """Make new partition directories' entries durable (one fsync of the data directory)."""
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # --- topics --------------------------------------------------------------------------------------

    def validate_new_topic(
        self, name: str, num_partitions: int | None = None, configs: Mapping[str, Any] | None = None
    ) -> TopicConfig:
        """Check a CreateTopics request without creating anything; return the topic's config."""
        validate_topic_name(name)
        with self.lock:
            if name in self.topics:
                raise TopicExistsError(f"Topic '{name}' already exists.")
            collide = name.replace(".", "_")
            for other in self.topics:
                if other.replace(".", "_") == collide:
                    raise InvalidTopicError(f"Topic '{name}' collides with existing topic: {other}")
        if num_partitions is not None and num_partitions != -1 and num_partitions < 1:
            raise InvalidPartitionsError("Number of partitions must be larger than 0.")
        config = TopicConfig.from_overrides(self.config, configs or {})
        count = self._partition_count(num_partitions)
        descriptors.check_room(count, f"Topic '{name}' with {count} partitions")
        return config

    def _partition_count(self, num_partitions: int | None) -> int:
        return self.config.get("num.partitions") if num_partitions in (None, -1) else num_partitions

    def create_topic(
        self,
        name: str,
        num_partitions: int | None = None,
        configs: Mapping[str, Any] | None = None,
        *,
        topic_id: uuid.UUID | None = None,
    ) -> Topic:
        """Create a topic (`num_partitions` None or -1: `num.partitions`); its configs are persisted."""
        with self.lock, self._writing(f"creating topic {name}"):
            cfg = self.validate_new_topic(name, num_partitions, configs)
            count = self._partition_count(num_partitions)
            topic = Topic(name, topic_id or uuid.uuid4(), cfg, created_ms=self.clock())
            rec = self._record_of(topic)
            rec["partitions"] = count
            # first, marked: a crash part-way leaves a record to undo, never stray directories
            self._write_topic_record({**rec, "creating": True})
            try:
                topic.partitions.extend(self._make_partitions(topic, count))
                self._sync_dir()
                self._write_topic_record(rec)
            except BaseException:
                for plog in topic.partitions:
                    plog.delete()
                self._topic_file(topic.topic_id).unlink(missing_ok=True)
                raise
            self.topics[name] = topic
            self._by_id[topic.topic_id] = topic
            self._metadata_due += [(plog, topic.topic_id) for plog in topic.partitions]
            log.info(
                "created topic %s (id %s, %d partitions, configs %s)",
                name, topic.topic_id, count, cfg.overrides or "(defaults)",
            )  # fmt: skip
            return topic

    def validate_new_partitions(self, name: str, total: int) -> Topic:
        """Check a CreatePartitions request without creating anything; return the topic."""
        with self.lock:
            topic = self.topic(name)
            if total <= len(topic.partitions):
                raise InvalidPartitionsError(
                    f"Topic currently has {len(topic.partitions)} partitions, {total} would not be an increase."
                )
            more = total - len(topic.partitions)
            descriptors.check_room(more, f"Growing '{name}' to {total} partitions")
            return topic

    def create_partitions(self, name: str, total: int) -> Topic:
        """Grow a topic to `total` partitions (CreatePartitions), all or none of them."""
        with self.lock, self._writing(f"adding partitions to {name}"):
            topic = self.validate_new_partitions(name, total)
            made = self._make_partitions(topic, total)
            try:
                self._sync_dir()
                rec = self._record_of(topic)
                rec["partitions"] = total
                self._write_topic_record(rec)
            except BaseException:
                for plog in made:
                    plog.delete()
                raise
            topic.partitions.extend(made)  # published once recorded
            self._metadata_due += [(plog, topic.topic_id) for plog in made]
            return topic

    def delete_topic(self, name: str) -> None:
        """Delete a topic and its data (open FileSlices stay readable until released). The commit
        point renames the topic record to `<id>.deleted`, which needs no free space, so deleting a
        topic frees a full disk; the record goes last, and a crash mid-way finishes the deletion at
        open."""
        with self.lock, self._writing(f"deleting topic {name}"):
            topic = self.topic(name)
            os.rename(self._topic_file(topic.topic_id), self._deleted_file(topic.topic_id))
            del self.topics[name]
            self._by_id.pop(topic.topic_id, None)
            cleaner = self.cleaner
            if cleaner is not None:  # a round on these logs stops first, as Kafka's does
                for plog in topic.partitions:
                    cleaner.abort_and_pause(plog)
            failed: list[OSError] = []
            for plog in topic.partitions:
                tomb = self.dir / f"{plog.dir.name}.{topic.topic_id.hex}-delete"  # Kafka's marker
                try:
                    plog.dir.rename(tomb)
                    plog.dir = tomb
                except OSError:  # a 249-character name leaves no room for the suffix
                    pass
                try:
                    plog.delete()
                except OSError as e:
                    failed.append(e)
            if cleaner is not None:
                cleaner.forget(topic.partitions)
            if failed:  # deleted all the same: the next start removes what is left
                log.warning("topic %s is deleted; removing its files failed: %s", name, failed[0])
            else:
                self._deleted_file(topic.topic_id).unlink(missing_ok=True)
            log.info("deleted topic %s (id %s)", name, topic.topic_id)

    def alter_topic_config(
        self, name: str, configs: Mapping[str, Any], replace: bool = False
    ) -> TopicConfig:
        """Set (value None: revert) topic configs, or replace them all; validated, persisted, applied."""
        with self.lock, self._writing(f"altering the configs of {name}"):
            topic = self.topic(name)
            cfg = topic.config.altered(configs, replace=replace)
            suspended, topic.deletion_suspended = topic.deletion_suspended, False
            topic.config = cfg
            try:
                self._write_topic_record(self._record_of(topic))
            except BaseException:
                topic.deletion_suspended = suspended
                raise
            for plog in topic.partitions:
                plog.config = cfg
                plog.deletion_suspended = False
            if suspended:
                log.info("topic %s: its configs were set, deletion resumes", name)
            return cfg

    def topic(self, name: str) -> Topic:
        try:
            return self.topics[name]
        except KeyError:
            raise UnknownTopicOrPartitionError(f"unknown topic {name}") from None

    def topic_by_id(self, topic_id: uuid.UUID) -> Topic:
        try:
            return self._by_id[topic_id]
        except KeyError:
            raise UnknownTopicIdError(f"unknown topic id {topic_id}") from None

    def partition(self, topic: str, index: int) -> PartitionLog:
        t = self.topics.get(topic)
        if t is None or not 0 <= index < len(t.partitions):
            raise UnknownTopicOrPartitionError(f"unknown topic-partition {topic}-{index}")
        return t.partitions[index]

    def logs(self) -> list[PartitionLog]:
        with self.lock:
            return [p for t in self.topics.values() for p in t.partitions]

    # --- durability and maintenance ------------------------------------------------------------------

    def checkpoint(self) -> None:
        """Write the recovery point, log start offset and high watermark checkpoints (files are
        written outside the store lock, so the event loop never waits on their fsyncs)."""
        logs = self.logs()
        recovery = {(g.topic, g.partition): g.recovery_point for g in logs}
        starts = {
            (g.topic, g.partition): g.log_start_offset
            for g in logs
            if g.segments and g.log_start_offset > g.segments[0].base_offset
        }
        hws = {(g.topic, g.partition): g.high_watermark for g in logs}
        with self._checkpoint_lock:
            try:
                ck.write_offset_checkpoint(self.dir / ck.RECOVERY_POINT_CHECKPOINT, recovery)
                ck.write_offset_checkpoint(self.dir / ck.LOG_START_OFFSET_CHECKPOINT, starts)
                ck.write_offset_checkpoint(self.dir / ck.REPLICATION_CHECKPOINT, hws)
            except OSError as e:
                raise storage_error(e, self.dir, "writing the offset checkpoints") from e
        recovered(self.dir)

    def flush_all(self) -> None:
        _in_parallel(PartitionLog.flush, self.logs())

    def maintain_once(self, now: int | None = None, force_retention: bool = False) -> None:
        """One maintenance pass: per-log flush by `flush.ms`, time-based roll, retention (every
        `log.retention.check.interval.ms`), checkpoints (every `log.flush.offset.checkpoint.interval.ms`)."""
        now = self.clock() if now is None else now
        self._write_due_metadata()
        retention = force_retention or now - self._last_retention >= self.config.get(
            "log.retention.check.interval.ms"
        )
        cleaner = self.cleaner
        for plog in self.logs():
            try:  # a compact,delete log being cleaned is left to the next retention check
                busy = cleaner is not None and cleaner.busy(plog)
                plog.maintain(now, retention=retention and not busy)
            except OSError as e:
                storage_error(e, plog.dir, f"maintenance of {plog.name}")  # logs it
            except KafkaStorageError:
                pass  # logged where it was raised
            except Exception:
                log.exception("maintenance of %s failed", plog.name)
        if retention:
            self._last_retention = now
        if retention or now - self._last_checkpoint >= self.config.get(
            "log.flush.offset.checkpoint.interval.ms"
        ):
            self._last_checkpoint = now
            self.checkpoint()

    def _maintenance_loop(self) -> None:
        cfg = self.config
        tick_ms = min(
            1000,
            cfg.get("log.retention.check.interval.ms"),
            cfg.get("log.flush.scheduler.interval.ms"),
            cfg.get("log.flush.offset.checkpoint.interval.ms") or 1000,
        )
        tick = max(tick_ms, 10) / 1000
        while not self._stop.wait(tick):
            try:
                self.maintain_once()
            except KafkaStorageError:
                pass  # logged where it was raised, at most once a minute
            except Exception:
                log.exception("store maintenance failed")
