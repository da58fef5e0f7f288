"""Partition directories the broker did not create are adopted with their Kafka configs, or with
deletion suspended while those are not known (issue 20 item 7)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from rdmalog.store import checkpoints as ck
from rdmalog.store.kraft_metadata import read_cluster_metadata
from tests.unit.store.helpers import T0, Clock, batch, open_store
from tests.unit.store.kraft_records import (
    config_record,
    remove_topic_record,
    topic_record,
    write_metadata_log,
)

DAY_MS = 86_400_000


def _kafka_partition(data: Path, topic: str, topic_id: uuid.UUID | None, old: int) -> None:
    """`topic-0` holding two segments of records written at `old` (ms)."""
    d = data / f"{topic}-0"
    d.mkdir(parents=True)
    (d / f"{0:020d}.log").write_bytes(batch(5, ts=old))
    (d / f"{5:020d}.log").write_bytes(batch(5, ts=old, base_offset=5))
    if topic_id is not None:
        ck.write_partition_metadata(d, topic_id)


def test_metadata_log_replay(tmp_path: Path) -> None:
    """A snapshot, then the log after it: topics, their overrides, removals, broker defaults."""
    a, b, c = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    snapshot = [
        topic_record("a", a),
        config_record(2, "a", "retention.ms", "100"),
        topic_record("b", b),
        config_record(4, "", "log.retention.hours", "1000"),
    ]
    later = [
        config_record(2, "a", "retention.ms", None),  # removed
        config_record(2, "a", "retention.bytes", "5"),
        remove_topic_record(b),
        topic_record("c", c),
        config_record(4, "3", "log.cleanup.policy", "compact"),
    ]
    write_metadata_log(tmp_path, later, snapshot=snapshot)
    meta = read_cluster_metadata(tmp_path)
    assert meta.topic_ids == {"a": a, "c": c}
    assert meta.topic_configs["a"] == {"retention.bytes": "5"}
    assert "b" not in meta.topic_configs
    assert meta.broker_defaults(3) == {
        "log.retention.hours": "1000",
        "log.cleanup.policy": "compact",
    }
    assert meta.broker_defaults(1) == {"log.retention.hours": "1000"}
    assert read_cluster_metadata(tmp_path / "nothing-here") is None


def test_without_metadata_log_deletion_is_suspended(tmp_path: Path, caplog) -> None:
    clock = Clock(T0)
    _kafka_partition(tmp_path, "old", uuid.uuid4(), T0 - 30 * DAY_MS)
    store = open_store(tmp_path, clock=clock)
    try:
        topic = store.topics["old"]
        assert topic.deletion_suspended and topic.partitions[0].deletion_suspended
        assert "no KRaft metadata log" in caplog.text
        store.maintain_once(force_retention=True)
        assert topic.partitions[0].log_start_offset == 0
        assert len(topic.partitions[0].segments) == 2
    finally:
        store.close()
    store = open_store(tmp_path, clock=clock)  # kept across restarts
    try:
        assert store.topics["old"].deletion_suspended
        store.alter_topic_config("old", {"retention.ms": str(7 * DAY_MS)})
        assert not store.topics["old"].partitions[0].deletion_suspended
        store.maintain_once(force_retention=True)
        assert store.topics["old"].partitions[0].log_start_offset == 10
    finally:
        store.close()
    store = open_store(tmp_path, clock=clock)
    try:
        assert not store.topics["old"].deletion_suspended
    finally:
        store.close()


def test_records_below_a_deleted_records_offset_still_go(tmp_path: Path) -> None:
    """Suspension stops retention, not what DeleteRecords released."""
    _kafka_partition(tmp_path, "old", None, T0)
    store = open_store(tmp_path, clock=Clock(T0))
    try:
        plog = store.topics["old"].partitions[0]
        assert plog.deletion_suspended
        plog.delete_records(5)
        store.maintain_once(force_retention=True)
        assert [s.base_offset for s in plog.segments] == [5]
    finally:
        store.close()


@pytest.mark.parametrize(
    "records,retention_ms,suspended",
    [
        ([config_record(2, "t", "retention.ms", str(90 * DAY_MS))], 90 * DAY_MS, False),
        ([], 7 * DAY_MS, False),  # known, no override: the broker's default, as in Kafka
        # Kafka's dynamic cluster default applies to the topic without an override of its own
        ([config_record(4, "", "log.retention.hours", "2400")], 2400 * 3_600_000, False),
        ([config_record(2, "t", "cleanup.policy", "bogus")], 7 * DAY_MS, True),
    ],
)
def test_configs_from_the_metadata_log(tmp_path: Path, records, retention_ms, suspended) -> None:
    topic_id = uuid.uuid4()
    _kafka_partition(tmp_path, "t", topic_id, T0 - 30 * DAY_MS)
    write_metadata_log(tmp_path, [topic_record("t", topic_id), *records])
    store = open_store(tmp_path, clock=Clock(T0))
    try:
        topic = store.topics["t"]
        assert topic.topic_id == topic_id
        assert topic.config.retention_ms == retention_ms
        assert topic.deletion_suspended is suspended
    finally:
        store.close()


def test_topic_id_disagreement_suspends(tmp_path: Path, caplog) -> None:
    _kafka_partition(tmp_path, "t", uuid.uuid4(), T0)
    write_metadata_log(tmp_path, [topic_record("t", uuid.uuid4())])
    store = open_store(tmp_path, clock=Clock(T0))
    try:
        assert store.topics["t"].deletion_suspended
        assert "names topic id" in caplog.text
    finally:
        store.close()


def test_unreadable_metadata_log_suspends(tmp_path: Path, caplog) -> None:
    _kafka_partition(tmp_path, "t", None, T0)
    d = tmp_path / "__cluster_metadata-0"
    d.mkdir()
    bad = bytearray(batch(1, key=None))
    (d / f"{0:020d}.log").write_bytes(bad)  # a record that is no metadata record
    store = open_store(tmp_path, clock=Clock(T0))
    try:
        assert store.topics["t"].deletion_suspended
        assert "cannot be read" in caplog.text
    finally:
        store.close()
