"""The per-partition cost of the store: index files as Kafka writes them though the head's entries live
in memory, one descriptor per partition, and topic creation that is all or nothing."""

from __future__ import annotations

import json
import os
import resource
import struct
import uuid
from pathlib import Path

import pytest

from rdmalog.errors import KafkaStorageError, PolicyViolationError
from rdmalog.store import checkpoints as ck
from rdmalog.store.log_manager import METADATA_DIR
from tests.unit.store.helpers import T0, batch, open_log, open_store

_HEADER = struct.Struct(">qi")  # baseOffset, batchLength
_LAST_DELTA_AT, _MAX_TS_AT = 23, 35


def kafka_indexes(log_bytes: bytes, base: int, interval: int) -> tuple[bytes, bytes]:
    """The .index and .timeindex Kafka writes for a segment holding `log_bytes`, appended batch by
    batch and then rolled or closed (Kafka's LogSegment.append and onBecomeInactiveSegment)."""
    offset_index, time_index = bytearray(), bytearray()
    pos = since_entry = 0
    max_ts, max_ts_offset = -1, base - 1
    last_index_offset, last_time = -1, (-1, -1)

    def time_entry(ts: int, offset: int) -> None:
        nonlocal last_time
        if ts > last_time[0] and offset - base >= last_time[1]:
            time_index.extend(struct.pack(">qi", ts, offset - base))
            last_time = (ts, offset - base)

    while pos + 61 <= len(log_bytes):
        first, length = _HEADER.unpack_from(log_bytes, pos)
        last = first + struct.unpack_from(">i", log_bytes, pos + _LAST_DELTA_AT)[0]
        ts = struct.unpack_from(">q", log_bytes, pos + _MAX_TS_AT)[0]
        if ts > max_ts:
            max_ts, max_ts_offset = ts, last
        if since_entry > interval:
            if last - base > last_index_offset:
                offset_index.extend(struct.pack(">ii", last - base, pos))
                last_index_offset = last - base
            time_entry(max_ts, max_ts_offset)
            since_entry = 0
        since_entry += length + 12
        pos += length + 12
    time_entry(max_ts, max_ts_offset)  # the final entry on roll and close
    return bytes(offset_index), bytes(time_index)


def assert_indexes_are_kafkas(d: Path, interval: int) -> int:
    """Every segment's index files equal Kafka's for its log; returns how many entries they hold."""
    entries = 0
    for log_file in sorted(d.glob("*.log")):
        base = int(log_file.name[:20])
        want_index, want_time = kafka_indexes(log_file.read_bytes(), base, interval)
        assert log_file.with_suffix(".index").read_bytes() == want_index, log_file.name
        assert log_file.with_suffix(".timeindex").read_bytes() == want_time, log_file.name
        entries += len(want_index) // 8
    return entries


def test_index_files_are_kafkas_after_roll_flush_truncation_and_close(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    interval = 300
    plog = open_log(d, index_interval_bytes=interval, segment_bytes=3000)
    for i in range(60):  # batches of 1 to 4 records; timestamps mostly rise, some step back
        plog.append(batch(1 + i % 4, ts=T0 + 10 * i - (25 if i % 7 == 3 else 0), size=40))
        if i == 20:
            plog.flush()  # the head's entries so far are written; later ones follow
    assert len(plog.segments) > 2
    plog.truncate_to(plog.log_end_offset - 5)  # the head's entries past it go, new ones follow
    for i in range(8):
        plog.append(batch(2, ts=T0 + 1000 + i, size=40))
    plog.close()
    assert assert_indexes_are_kafkas(d, interval) > 10

    again = open_log(d, clean=True, index_interval_bytes=interval, segment_bytes=3000)
    end = again.log_end_offset
    assert again.read(end - 1, 1 << 20) is not None  # lookups through the loaded indexes
    for i in range(30):  # the head's entries are read back, extended and written again
        again.append(batch(3, ts=T0 + 2000 + i, size=40))
    again.close()
    assert_indexes_are_kafkas(d, interval)


def open_fds(under: Path) -> int:
    """Descriptors this process holds on files under `under` (/proc/self/fd), the store's .lock
    left out; descriptors of other tests' leftovers do not count."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, or one closed meanwhile
            continue
        if target.startswith(f"{under}/") and not target.endswith("/.lock"):
            count += 1
    return count


def test_one_descriptor_per_partition_and_none_for_sealed_segments(tmp_path: Path) -> None:
    store = open_store(tmp_path, log_segment_bytes=2000)
    assert open_fds(tmp_path) == 0
    store.create_topic("many", 300)
    assert open_fds(tmp_path) == 300  # each head's log file; indexes live in memory
    for p in range(300):
        store.partition("many", p).append(batch(2, size=30))
    assert open_fds(tmp_path) == 300
    plog = store.partition("many", 0)
    while len(plog.segments) < 4:
        plog.append(batch(4, size=100))
    assert open_fds(tmp_path) == 300  # sealed segments hold nothing open
    sl = plog.read(0, 1 << 20)  # a read of a sealed segment opens it while the slice lives
    assert sl is not None and open_fds(tmp_path) == 301
    del sl
    assert open_fds(tmp_path) == 300
    store.close()
    assert open_fds(tmp_path) == 0
    store = open_store(tmp_path, log_segment_bytes=2000)
    assert open_fds(tmp_path) == 300
    store.close()


def test_failed_creation_leaves_nothing_behind(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    (tmp_path / "clash-7").write_text("not a partition")  # partition 7 cannot be made
    before = open_fds(tmp_path)
    with pytest.raises(KafkaStorageError) as e:
        store.create_topic("clash", 20)
    assert e.value.error_code == 56 and "partition 7 of clash failed, so none" in str(e.value)
    assert "clash" not in store.topics
    assert sorted(p.name for p in tmp_path.glob("clash*")) == ["clash-7"]
    assert not list((tmp_path / METADATA_DIR / "topics").iterdir())
    assert open_fds(tmp_path) == before
    store.close()
    store = open_store(tmp_path)
    assert "clash" not in store.topics
    (tmp_path / "clash-7").unlink()
    assert len(store.create_topic("clash", 20).partitions) == 20
    store.close()


def test_partition_metadata_is_due_only_once_the_topic_is_published(tmp_path: Path) -> None:
    """The maintenance pass writes new partitions' partition.metadata after CreateTopics has its
    answer, never while the creation still makes directories (nor for a creation that failed)."""
    store = open_store(tmp_path)
    (tmp_path / "clash-7").write_text("not a partition")
    with pytest.raises(KafkaStorageError):
        store.create_topic("clash", 20)
    assert store._metadata_due == []
    topic = store.create_topic("ok", 3)
    grown = store.create_partitions("ok", 5)
    assert len(store._metadata_due) == 5
    assert not list(tmp_path.glob("ok-*/partition.metadata"))
    store.maintain_once()
    assert [ck.read_partition_metadata(tmp_path / f"ok-{p}") for p in range(5)] == [
        topic.topic_id
    ] * 5
    assert grown is topic
    store.close()


def test_creation_interrupted_by_a_crash_is_undone_at_open(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.create_topic("kept", 2)
    store.close()
    topic_id = uuid.uuid4()
    rec = {"name": "half", "topic_id": str(topic_id), "partitions": 4, "configs": {}}
    (tmp_path / METADATA_DIR / "topics" / f"{topic_id}.json").write_text(
        json.dumps({**rec, "created_ms": T0, "creating": True})
    )
    for p in range(2):  # two partitions were made before the crash, one without its metadata
        (tmp_path / f"half-{p}").mkdir()
        (tmp_path / f"half-{p}" / "00000000000000000000.log").write_bytes(b"")
    ck.write_partition_metadata(tmp_path / "half-0", topic_id)
    store = open_store(tmp_path)
    assert set(store.topics) == {"kept"}
    assert not list(tmp_path.glob("half*"))
    assert len(list((tmp_path / METADATA_DIR / "topics").iterdir())) == 1
    store.close()


def test_partitions_of_an_interrupted_growth_are_removed_at_open(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    topic = store.create_topic("grow", 2)
    store.close()
    for p in (2, 3):  # CreatePartitions made these, then the broker died before recording them
        (tmp_path / f"grow-{p}").mkdir()
        (tmp_path / f"grow-{p}" / "00000000000000000000.log").write_bytes(b"")
    ck.write_partition_metadata(tmp_path / "grow-2", topic.topic_id)  # grow-3's was not written yet
    store = open_store(tmp_path)
    assert not (tmp_path / "grow-2").exists() and not (tmp_path / "grow-3").exists()
    assert len(store.create_partitions("grow", 4).partitions) == 4
    store.close()


def test_partitions_that_would_not_fit_the_descriptor_limit_are_refused(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = len(os.listdir("/proc/self/fd")) + 600
    if soft != resource.RLIM_INFINITY and soft < low:
        pytest.skip(f"the soft descriptor limit ({soft}) is already below {low}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))
    try:
        with pytest.raises(PolicyViolationError) as e:
            store.create_topic("big", 1000)
        assert e.value.error_code == 44
        assert "needs 1000 file descriptors" in str(e.value) and f"is {low}" in str(e.value)
        assert not list(tmp_path.glob("big*")) and "big" not in store.topics
        store.create_topic("small", 100)  # what fits is created
        with pytest.raises(PolicyViolationError):
            store.create_partitions("small", 1100)
        assert len(store.topics["small"].partitions) == 100
    finally:
        store.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_an_empty_partition_metadata_file_is_written_again(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    topic = store.create_topic("t", 1)
    store.close()
    (tmp_path / "t-0" / "partition.metadata").write_text("")  # a crash before its data was on disk
    store = open_store(tmp_path)
    assert ck.read_partition_metadata(tmp_path / "t-0") == topic.topic_id
    store.close()
