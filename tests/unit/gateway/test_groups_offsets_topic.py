"""`__consumer_offsets` in a real rdmalog store: Kafka-format batches in, the same records back."""

from __future__ import annotations

from pathlib import Path

from gateway.groups.clock import ManualClock
from gateway.groups.coordinator import GroupCoordinator
from gateway.groups.model import CommitEntry, GroupConfig
from gateway.groups.offsets_topic import OffsetsTopic
from gateway.groups.schema import (
    OFFSETS_TOPIC,
    OffsetKey,
    OffsetValue,
    decode_key,
    encode_key,
    encode_offset_value,
    partition_for,
)
from rdmalog.config import BrokerConfig
from rdmalog.store.log_manager import Store
from rdmalog.store.records import build_batch, decode_records, iter_batches


def open_store(path: Path) -> Store:
    config = BrokerConfig.from_sources(None, {"log.dirs": str(path), "log.segment.bytes": "65536"})
    return Store(path, config).open()


def test_created_compacted_and_written_to_the_group_partition(tmp_path: Path):
    store = open_store(tmp_path)
    try:
        topic_log = OffsetsTopic(store, num_partitions=5, segment_bytes=65536)
        topic = topic_log.ensure()
        assert len(topic.partitions) == 5
        assert topic.config.get("cleanup.policy") == ["compact"]
        gc = GroupCoordinator(ManualClock(), topic_log, GroupConfig())
        gc.commit_offsets("my-group", -1, "", [CommitEntry("t", 0, 42, 1, "m")])
        part = partition_for("my-group", 5)
        plog = store.partition(OFFSETS_TOPIC, part)
        assert plog.log_end_offset == 1
        data = plog.read(0, 1 << 20, upper_bound=1).read()
        (batch,) = list(iter_batches(data))
        assert batch.magic == 2 and batch.is_valid()
        (record,) = decode_records(batch)
        assert decode_key(record.key) == OffsetKey("my-group", "t", 0)
        assert record.timestamp == gc.clock.now_ms()
        for other in range(5):
            if other != part:
                assert store.partition(OFFSETS_TOPIC, other).log_end_offset == 0
    finally:
        store.close()


def test_replay_after_reopen(tmp_path: Path):
    store = open_store(tmp_path)
    clock = ManualClock()
    topic_log = OffsetsTopic(store, num_partitions=3, segment_bytes=65536)
    gc = GroupCoordinator(clock, topic_log, GroupConfig())
    for i in range(200):  # several segments
        gc.commit_offsets("g", -1, "", [CommitEntry("t", i % 4, i)])
    gc.commit_offsets("h", -1, "", [CommitEntry("t", 0, 1)])
    gc.delete_groups(["h"])
    store.close()

    store = open_store(tmp_path)
    try:
        topic_log = OffsetsTopic(store, num_partitions=50)
        topic_log.ensure()
        assert topic_log.num_partitions == 3  # an existing topic keeps its partition count
        fresh = GroupCoordinator(clock, topic_log, GroupConfig())
        assert fresh.load(topic_log.replay()) == 1
        offsets = {tp: v.offset for tp, v in fresh.groups["g"].offsets.items()}
        assert offsets == {
            ("t", 0): 196,
            ("t", 1): 197,
            ("t", 2): 198,
            ("t", 3): 199,
        }
        assert "h" not in fresh.groups
    finally:
        store.close()


class _Slice:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self) -> bytes:
        return self.data


class _FakeLog:
    """Just enough of a PartitionLog to replay batches the store's append path refuses (markers)."""

    def __init__(self, batches: list[bytearray]) -> None:
        self.data = b"".join(bytes(b) for b in batches)
        self.log_start_offset = 0
        self.log_end_offset = len(batches)

    def read(self, offset: int, max_bytes: int, upper_bound: int | None = None) -> _Slice | None:
        return _Slice(self.data) if offset < self.log_end_offset else None


def test_replay_applies_committed_transactions_only():
    def txn(base: int, pid: int, offset: int) -> bytearray:
        k = encode_key(OffsetKey("g", "txn", pid))
        v = encode_offset_value(OffsetValue(offset, -1, "", 1))
        return build_batch(
            [(k, v)], base_offset=base, producer_id=pid, producer_epoch=0, transactional=True
        )

    def marker(base: int, pid: int, commit: bool) -> bytearray:
        ctrl = (0).to_bytes(2, "big") + (1 if commit else 0).to_bytes(2, "big")
        value = (0).to_bytes(6, "big")
        return build_batch(
            [(ctrl, value)],
            base_offset=base,
            producer_id=pid,
            producer_epoch=0,
            transactional=True,
            control=True,
        )

    plain = build_batch(
        [(encode_key(OffsetKey("g", "t", 0)), encode_offset_value(OffsetValue(5)))], base_offset=4
    )
    fake = _FakeLog([txn(0, 7, 70), txn(1, 8, 80), marker(2, 7, True), marker(3, 8, False), plain])
    topic = OffsetsTopic(store=None)
    replayed = [decode_key(k) for k, _ in topic._replay_partition(fake)]
    assert replayed == [OffsetKey("g", "txn", 7), OffsetKey("g", "t", 0)]
