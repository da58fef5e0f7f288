"""Store: topics kept with their ids and configs, reopening, crash recovery, Kafka log dir import,
checkpoints in Kafka's formats, deletion, maintenance."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from rdmalog.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    KafkaStorageError,
    TopicExistsError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from rdmalog.store import checkpoints as ck
from rdmalog.store.log_manager import METADATA_DIR, Store
from rdmalog.store.records import decode_all
from tests.unit.store.helpers import T0, Clock, batch, broker_config, crash, open_store


def values(plog, start: int = 0) -> list[bytes]:
    s = plog.read(start, 1 << 20)
    return [] if s is None else [r.value for r in decode_all(s.read())]


def test_create_append_reopen(tmp_path: Path) -> None:
    store = open_store(tmp_path, num_partitions=2)
    t = store.create_topic("orders", 3, {"retention.ms": "123456", "segment.bytes": "5000"})
    store.create_topic("defaults", None, {})
    assert len(store.topics["defaults"].partitions) == 2
    for p in range(3):
        store.partition("orders", p).append(batch(p + 1))
    topic_id = t.topic_id
    store.close()
    assert (tmp_path / ck.CLEAN_SHUTDOWN_FILE).exists()

    store = open_store(tmp_path)
    assert not (tmp_path / ck.CLEAN_SHUTDOWN_FILE).exists()
    t = store.topics["orders"]
    assert t.topic_id == topic_id and store.topic_by_id(topic_id) is t
    assert t.config.retention_ms == 123456 and t.config.segment_bytes == 5000
    assert t.config.overrides == {"retention.ms": "123456", "segment.bytes": "5000"}
    assert [store.partition("orders", p).log_end_offset for p in range(3)] == [1, 2, 3]
    assert ck.read_partition_metadata(tmp_path / "orders-2") == topic_id
    store.close()


def test_files_are_kafkas(tmp_path: Path) -> None:
    store = open_store(tmp_path, node_id=4)
    t = store.create_topic("a", 2, {})
    store.partition("a", 1).append(batch(5))
    store.close()
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == "0\n2\na 0 0\na 1 5\n"
    assert (tmp_path / "log-start-offset-checkpoint").read_text() == "0\n0\n"
    assert (tmp_path / "replication-offset-checkpoint").read_text() == "0\n2\na 0 0\na 1 5\n"
    meta = ck.read_meta_properties(tmp_path)
    assert meta["node.id"] == "4" and meta["version"] == "1" and len(meta["cluster.id"]) == 22
    text = (tmp_path / "a-1" / "partition.metadata").read_text()
    assert text == f"version: 0\ntopic_id: {ck.uuid_to_kafka(t.topic_id)}\n"
    assert sorted(p.name for p in (tmp_path / "a-1").iterdir()) == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
        "leader-epoch-checkpoint",
        "partition.metadata",
        "rdmalog-producer-state.json",
    ]
    assert (tmp_path / "a-1" / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"
    rec = json.loads((tmp_path / METADATA_DIR / "topics" / f"{t.topic_id}.json").read_text())
    assert rec["partitions"] == 2 and uuid.UUID(rec["topic_id"]) == t.topic_id


def test_kafka_uuid_text_form() -> None:
    u = uuid.UUID("4bddda4a-3ecf-4545-87a7-721f5c2dddac")
    assert ck.uuid_to_kafka(u) == "S93aSj7PRUWHp3IfXC3drA"
    assert ck.uuid_from_kafka("S93aSj7PRUWHp3IfXC3drA") == u


def test_node_id_mismatch(tmp_path: Path) -> None:
    open_store(tmp_path, node_id=1).close()
    with pytest.raises(KafkaStorageError):
        open_store(tmp_path, node_id=2)
    s = open_store(tmp_path)  # no explicit id: adopt the directory's
    assert s.node_id == 1
    s.close()


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "bad name", "ü", "a/b"])
def test_illegal_topic_names(tmp_path: Path, name: str) -> None:
    store = open_store(tmp_path)
    with pytest.raises(InvalidTopicError) as e:
        store.create_topic(name, 1, {})
    assert e.value.error_code == 17
    store.close()


def test_create_topic_errors(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.create_topic("a.b", 1, {})
    store.create_topic("x" * 249, 1, {})
    with pytest.raises(TopicExistsError) as e:
        store.create_topic("a.b", 1, {})
    assert e.value.error_code == 36
    with pytest.raises(InvalidTopicError):
        store.create_topic("a_b", 1, {})  # collides with a.b in metric names, as Kafka refuses
    with pytest.raises(InvalidPartitionsError):
        store.create_topic("zero", 0, {})
    with pytest.raises(InvalidConfigError, match="retention.mss"):
        store.create_topic("c", 1, {"retention.mss": "1"})
    with pytest.raises(InvalidConfigError, match="segment.bytes"):
        store.validate_new_topic("c", 1, {"segment.bytes": "x"})
    assert "c" not in store.topics and not (tmp_path / "c-0").exists()
    with pytest.raises(UnknownTopicOrPartitionError):
        store.partition("a.b", 1)
    with pytest.raises(UnknownTopicOrPartitionError):
        store.partition("nope", 0)
    with pytest.raises(UnknownTopicIdError):
        store.topic_by_id(uuid.uuid4())
    store.close()


def test_alter_topic_config_persists_and_applies(tmp_path: Path, clock: Clock) -> None:
    store = open_store(tmp_path, clock=clock)
    store.create_topic("t", 1, {"segment.bytes": "1000"})
    plog = store.partition("t", 0)
    for _ in range(30):
        plog.append(batch(1, size=100))
    store.alter_topic_config("t", {"retention.bytes": "1500"})
    store.maintain_once(force_retention=True)
    assert plog.size_in_bytes <= 1500 + 1000 and plog.log_start_offset > 0
    with pytest.raises(InvalidConfigError):
        store.alter_topic_config("t", {"retention.bytes": "lots"})
    store.close()
    store = open_store(tmp_path, clock=clock)
    cfg = store.topics["t"].config
    assert cfg.overrides == {"segment.bytes": "1000", "retention.bytes": "1500"}
    assert store.partition("t", 0).log_start_offset == plog.log_start_offset  # checkpointed
    cfg = store.alter_topic_config("t", {"retention.bytes": None})
    assert cfg.retention_bytes == -1
    store.close()


def test_create_partitions(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.create_topic("t", 1, {})
    with pytest.raises(InvalidPartitionsError):
        store.create_partitions("t", 1)
    store.create_partitions("t", 3)
    store.partition("t", 2).append(batch(1))
    store.close()
    store = open_store(tmp_path)
    assert len(store.topics["t"].partitions) == 3
    store.close()


def test_delete_topic_keeps_open_slices_readable(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.create_topic("gone", 2, {})
    store.partition("gone", 0).append(batch(3, size=5))
    s = store.partition("gone", 0).read(0, 1 << 20)
    record = tmp_path / METADATA_DIR / "topics" / f"{store.topics['gone'].topic_id}.json"
    assert record.exists()
    store.delete_topic("gone")
    assert "gone" not in store.topics
    assert not any(p.name.startswith("gone") for p in tmp_path.iterdir())
    assert not record.exists()
    assert len(decode_all(s.read())) == 3
    with pytest.raises(UnknownTopicOrPartitionError):
        store.delete_topic("gone")
    store.close()
    store = open_store(tmp_path)
    assert "gone" not in store.topics
    store.close()


def test_crash_recovery_through_the_store(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.create_topic("t", 1, {})
    plog = store.partition("t", 0)
    for i in range(10):
        plog.append(batch(1, ts=T0 + i))
    store.checkpoint()
    seg = plog.active_segment
    torn_at = seg.size
    seg.mmap[torn_at : torn_at + 30] = b"\x01" * 30
    crash(plog)  # no close: no clean-shutdown marker
    store._unlock_dir()  # the dead process's flock goes with it
    store = open_store(tmp_path)
    plog = store.partition("t", 0)
    assert plog.log_end_offset == 10 and plog.active_segment.size == torn_at
    assert plog.append(batch(1)).base_offset == 10
    store.close()


def kafka_batch(base: int, values_: list[bytes], ts: int) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=1, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)  # fmt: skip
    for i, v in enumerate(values_):
        b.append(i, ts + i, None, v * 20, [])
    raw = bytearray(b.build())
    raw[0:8] = base.to_bytes(8, "big")  # baseOffset is outside the CRC, as the broker sets it
    return bytes(raw)


def test_import_of_a_kafka_log_dir(tmp_path: Path) -> None:
    kid = uuid.uuid4()
    (tmp_path / "meta.properties").write_text(
        "#\n#Mon Jan 01 00:00:00 UTC 2024\nnode.id=1\ndirectory.id=abc\nversion=1\ncluster.id=MkU3OEVBNTcwNTJENDM2Qk\n"
    )
    (tmp_path / ".kafka_cleanshutdown").write_text("")
    (tmp_path / "recovery-point-offset-checkpoint").write_text("0\n2\nclicks 0 3\nclicks 1 7\n")
    (tmp_path / "log-start-offset-checkpoint").write_text("0\n0\n")
    p0 = tmp_path / "clicks-0"
    p0.mkdir()
    (p0 / "00000000000000000000.log").write_bytes(kafka_batch(0, [b"a", b"b", b"c"], T0))
    (p0 / "partition.metadata").write_text(f"version: 0\ntopic_id: {ck.uuid_to_kafka(kid)}\n")
    (p0 / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")
    p1 = tmp_path / "clicks-1"
    p1.mkdir()  # two segments, no index files (Kafka rebuilds them; so do we)
    (p1 / "00000000000000000000.log").write_bytes(
        kafka_batch(0, [b"d", b"e"], T0) + kafka_batch(2, [b"f"], T0 + 5)
    )
    (p1 / "00000000000000000003.log").write_bytes(kafka_batch(3, [b"g", b"h", b"i", b"j"], T0 + 10))
    tomb = tmp_path / f"old-0.{uuid.uuid4().hex}-delete"
    tomb.mkdir()
    (tomb / "00000000000000000000.log").write_bytes(b"")

    store = Store(tmp_path, broker_config()).open(start_maintenance=False)
    assert store.cluster_id == "MkU3OEVBNTcwNTJENDM2Qk" and store.node_id == 1
    t = store.topics["clicks"]
    assert t.topic_id == kid and len(t.partitions) == 2
    assert not tomb.exists()
    assert values(store.partition("clicks", 0)) == [b"a" * 20, b"b" * 20, b"c" * 20]
    p = store.partition("clicks", 1)
    assert (p.log_start_offset, p.log_end_offset, p.high_watermark) == (0, 7, 7)
    assert values(p, 4) == [v * 20 for v in (b"g", b"h", b"i", b"j")]
    assert p.offset_for_timestamp(T0 + 5) == (T0 + 5, 2)
    assert p.append(batch(1)).base_offset == 7
    assert (p1 / "00000000000000000003.index").exists()
    store.close()
    store = open_store(tmp_path)
    assert (
        store.topics["clicks"].topic_id == kid and store.partition("clicks", 1).log_end_offset == 8
    )
    store.close()


def test_maintenance_thread_flushes_by_time(tmp_path: Path) -> None:
    store = Store(tmp_path, broker_config(log_flush_scheduler_interval_ms=10)).open()
    try:
        store.create_topic("t", 1, {"flush.ms": "0"})
        plog = store.partition("t", 0)
        plog.append(batch(3))
        deadline = (
            time.monotonic() + 20
        )  # bounded wait for the background thread, not a speed check
        while plog.recovery_point < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert plog.recovery_point == 3
    finally:
        store.close()


def test_retention_by_time_in_maintenance(tmp_path: Path, clock: Clock) -> None:
    store = open_store(tmp_path, clock=clock, log_retention_ms=60_000, log_segment_bytes=1000)
    store.create_topic("t", 1, {})
    plog = store.partition("t", 0)
    for i in range(20):
        plog.append(batch(1, ts=T0 + i * 1000, size=150))
    clock.now = T0 + 70_000
    store.maintain_once()  # a retention check is due only every log.retention.check.interval.ms
    assert plog.log_start_offset == 0
    clock.advance(300_000)
    store.maintain_once()
    assert plog.log_start_offset == plog.log_end_offset == 20
    store.close()


def test_producer_ids_are_unique_across_restarts(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    first = [store.producer_ids.allocate() for _ in range(3)]
    store.close()
    store = open_store(tmp_path)
    again = store.producer_ids.allocate()
    store.close()
    assert len(set(first)) == 3 and again > max(first)


def test_interrupted_topic_deletion_is_finished_at_open(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    t = store.create_topic("half", 2, {})
    store.partition("half", 0).append(batch(2))
    store.close()
    # A crash inside delete_topic: the record is marked, one partition directory is still there.
    path = tmp_path / METADATA_DIR / "topics" / f"{t.topic_id}.json"
    rec = json.loads(path.read_text())
    rec["deleted"] = True
    path.write_text(json.dumps(rec))
    (tmp_path / "half-1").rename(tmp_path / f"half-1.{t.topic_id.hex}-delete")
    store = open_store(tmp_path)
    assert "half" not in store.topics
    assert not any(p.name.startswith("half") for p in tmp_path.iterdir())
    assert not path.exists()
    store.close()


def test_one_store_per_directory(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    with pytest.raises(KafkaStorageError, match="in use"):
        open_store(tmp_path)
    store.close()
    open_store(tmp_path).close()  # released by close
