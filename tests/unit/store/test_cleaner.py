"""The clean itself (`rdmalog/store/cleaner.py`) on hand-built logs: what stays, in which bytes."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from rdmalog.store._cleaner import OffsetMap
from rdmalog.store.compression import Codec
from rdmalog.store.records import (
    DELETE_HORIZON_BIT,
    LOG_APPEND_TIME,
    Record,
    RecordBatch,
    build_batch,
    decode_records,
    encode_record,
    set_crc,
)
from rdmalog.store.transaction_index import AbortedTxn, read_aborted, write_aborted
from tests.unit.store.cleaner_helpers import (
    batch_views,
    clean,
    compacted,
    contents,
    header,
    keyed,
    latest_per_key,
    new_cleaner,
    raw_batches,
    records_batch,
)
from tests.unit.store.helpers import T0, open_log

HOUR = 3_600_000


def test_latest_value_per_key_stays_at_its_offset_and_untouched_batches_are_copied(
    tmp_path: Path, clock
) -> None:
    plog = compacted(tmp_path / "t-0", clock)
    appended = []
    for i in range(120):
        key, value = f"k{i % 7}".encode(), f"value-{i}".encode()
        r = plog.append(keyed(key, value, T0 + i))
        appended.append((r.base_offset, key, value))
    plog.roll()
    before = {RecordBatch(b).base_offset: b for b in raw_batches(plog)}
    assert len(plog.segments) > 4

    end, stats = clean(plog, new_cleaner(clock))

    assert end == 120
    assert contents(plog) == latest_per_key(appended)
    offsets = [o for o, _, _ in contents(plog)]
    assert offsets == list(range(113, 120))  # offsets kept, with the gap below them
    after = raw_batches(plog)
    assert after and all(b == before[RecordBatch(b).base_offset] for b in after)
    assert (stats.messages_read, stats.messages_written) == (120, 7)
    assert plog.log_start_offset == 0 and plog.log_end_offset == 120


def test_a_batch_losing_records_is_rebuilt_as_kafka_builds_it(tmp_path: Path, clock) -> None:
    """Same base offset, last offset delta, producer fields, leader epoch; its base timestamp
    is the first kept record's; the records are encoded again with their own offset deltas."""
    plog = compacted(tmp_path / "t-0", clock, segment_bytes=1 << 16)
    first = records_batch(
        [("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")],
        ts=T0,
        producer_id=42,
        producer_epoch=3,
        base_sequence=0,
        partition_leader_epoch=5,
    )
    first_raw = bytes(first)
    plog.append(first, leader_epoch=5)
    plog.append(records_batch([("a", "5"), ("c", "6")], ts=T0 + 10), leader_epoch=5)
    plog.roll()

    clean(plog, new_cleaner(clock))

    rebuilt, second = batch_views(plog)
    kept = [Record(b"b", b"2", timestamp=T0 + 1), Record(b"d", b"4", timestamp=T0 + 3)]
    body = encode_record(kept[0], 1, 0) + encode_record(kept[1], 3, 2)
    expected = bytearray(first_raw[:61] + body)
    struct.pack_into(">qi", expected, 0, 0, len(expected) - 12)  # base offset 0 as appended
    struct.pack_into(">i", expected, 12, 5)  # leader epoch stamped by the append
    struct.pack_into(">q", expected, 27, T0 + 1)  # base timestamp: the first kept record's
    struct.pack_into(">q", expected, 35, T0 + 3)  # max timestamp: the kept records'
    struct.pack_into(">i", expected, 57, 2)  # record count
    set_crc(expected, 0, len(expected))
    assert bytes(rebuilt.bytes()) == bytes(expected)
    assert (rebuilt.base_offset, rebuilt.last_offset, rebuilt.count) == (0, 3, 2)
    assert (rebuilt.producer_id, rebuilt.producer_epoch, rebuilt.base_sequence) == (42, 3, 0)
    assert rebuilt.is_valid() and second.is_valid()
    assert [(r.offset, r.key) for r in decode_records(rebuilt)] == [(1, b"b"), (3, b"d")]
    assert contents(plog) == [(1, b"b", b"2"), (3, b"d", b"4"), (4, b"a", b"5"), (5, b"c", b"6")]


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_a_compressed_batch_keeps_its_codec(tmp_path: Path, clock, codec: Codec) -> None:
    plog = compacted(tmp_path / "t-0", clock, segment_bytes=1 << 16)
    pairs = [(f"k{i}", f"v{i}" * 20) for i in range(50)]
    plog.append(records_batch(pairs, compression=codec))
    plog.append(records_batch([(f"k{i}", "new") for i in range(0, 50, 3)], compression=codec))
    plog.roll()
    before_second = raw_batches(plog)[1]

    clean(plog, new_cleaner(clock))

    first, second = batch_views(plog)
    assert first.codec == codec and first.is_valid()
    assert (first.base_offset, first.last_offset, first.count) == (0, 49, 50 - 17)
    assert [r.key for r in decode_records(first)] == [f"k{i}".encode() for i in range(50) if i % 3]
    assert bytes(second.bytes()) == before_second  # wholly kept: as it was


def test_log_append_time_batches_keep_their_time(tmp_path: Path, clock) -> None:
    plog = compacted(tmp_path / "t-0", clock, message_timestamp_type="LogAppendTime")
    plog.append(records_batch([("a", "1"), ("b", "2")], ts=T0 - HOUR))
    clock.advance(5)
    plog.append(keyed("a", "3", T0))
    plog.roll()
    clean(plog, new_cleaner(clock))
    first = batch_views(plog)[0]
    assert first.timestamp_type == LOG_APPEND_TIME and first.max_timestamp == T0
    assert [(r.key, r.timestamp) for r in decode_records(first)] == [(b"b", T0)]


def test_tombstones_get_a_delete_horizon_then_go_after_it(tmp_path: Path, clock) -> None:
    """Kafka's two passes: the first clean keeps a tombstone and stamps its batch's delete
    horizon (now + delete.retention.ms, in the base timestamp, attribute bit 6); a clean at or
    after the horizon removes it."""
    plog = compacted(tmp_path / "t-0", clock, delete_retention_ms=HOUR)
    plog.append(keyed("a", "1", T0))
    plog.append(keyed("b", "2", T0 + 1))
    plog.append(keyed("a", None, T0 + 2))  # a tombstone
    plog.append(keyed("c", "3", T0 + 3))
    plog.roll()
    cleaner = new_cleaner(clock)

    end, _ = clean(plog, cleaner)
    assert contents(plog) == [(1, b"b", b"2"), (2, b"a", None), (3, b"c", b"3")]
    tomb = batch_views(plog)[1]
    assert tomb.attributes & DELETE_HORIZON_BIT and tomb.base_timestamp == T0 + HOUR
    assert [r.timestamp for r in decode_records(tomb)] == [T0 + 2]  # its own time stays

    clock.advance(HOUR - 1)
    plog.append(keyed("d", "4", clock()))  # something dirty: a round runs
    plog.roll()
    end, _ = clean(plog, cleaner, first_dirty=end)
    assert (2, b"a", None) in contents(plog)
    assert raw_batches(plog)[1] == bytes(tomb.bytes())  # horizon set already: copied

    clock.advance(1)
    plog.append(keyed("e", "5", clock()))
    plog.roll()
    clean(plog, cleaner, first_dirty=end)
    assert contents(plog) == [(1, b"b", b"2"), (3, b"c", b"3"), (4, b"d", b"4"), (5, b"e", b"5")]


def test_an_idempotent_producers_last_batch_stays_empty_and_its_state_survives(
    tmp_path: Path, clock
) -> None:
    """Kafka keeps the last batch of every active producer (emptied) so its sequence and epoch
    are rebuilt from the log: a retry of it is still a duplicate after an unclean restart."""
    d = tmp_path / "t-0"
    plog = compacted(d, clock)
    plog.append(keyed("k", "a", producer_id=7, producer_epoch=0, base_sequence=0))
    plog.append(keyed("k", "b", producer_id=7, producer_epoch=0, base_sequence=1))
    plog.append(keyed("k", "c", producer_id=8, producer_epoch=0, base_sequence=0))
    plog.roll()

    clean(plog, new_cleaner(clock))

    kept = [header(b) for b in batch_views(plog)]
    # (base offset, length, .., count): pid 7's last batch empty (49 bytes, no records)
    assert [(h[0], h[1], h[9], h[11], h[12]) for h in kept] == [(1, 49, 7, 1, 0), (2, 58, 8, 0, 1)]
    assert contents(plog) == [(2, b"k", b"c")]
    assert batch_views(plog)[0].is_valid()
    plog.flush()
    for seg in plog.segments:  # an unclean stop: the producer state comes from the log
        seg.close()
    again = open_log(d, clock=clock, cleanup_policy="compact", segment_bytes=1024)
    retry = again.append(keyed("k", "b", producer_id=7, producer_epoch=0, base_sequence=1))
    assert retry.duplicate and (retry.base_offset, retry.last_offset) == (1, 1)
    assert again.append(keyed("k", "d", producer_id=7, producer_epoch=0, base_sequence=2))
    again.close()


def test_records_without_a_key_are_removed(tmp_path: Path, clock) -> None:
    """An imported log may hold them (produce refuses them on compacted topics): Kafka's cleaner
    counts them invalid and drops them; the batch ending the round stays, empty."""
    d = tmp_path / "t-0"
    plog = open_log(d, clock=clock, segment_bytes=1024)  # a delete topic when written
    plog.append(keyed("a", "1"))
    plog.append(keyed(None, "x"))
    plog.append(keyed("b", "2"))
    plog.append(keyed(None, "y"))
    plog.roll()
    plog.config = plog.config.altered({"cleanup.policy": "compact"})
    _, stats = clean(plog, new_cleaner(clock))
    assert stats.invalid_messages == 2
    assert contents(plog) == [(0, b"a", b"1"), (2, b"b", b"2")]
    last = batch_views(plog)[-1]
    assert (last.base_offset, last.count) == (3, 0)  # KAFKA-17076: the round's last batch


def test_a_full_map_ends_the_round_early_and_the_next_goes_on(tmp_path: Path, clock) -> None:
    plog = compacted(tmp_path / "t-0", clock, segment_bytes=4096)
    appended = []
    for i in range(400):
        key, value = f"key-{i % 150}".encode(), f"{i}".encode()
        appended.append((plog.append(keyed(key, value)).base_offset, key, value))
    plog.roll()
    cleaner = new_cleaner(clock, map_entries=110)  # 99 keys per round at load factor 0.9
    ends = []
    dirty = 0
    while dirty < 400:
        dirty, _ = clean(plog, cleaner, first_dirty=dirty)
        ends.append(dirty)
    assert len(ends) > 2 and ends == sorted(ends)
    # each round kept the last value of every key it mapped; the log now holds one per key
    assert contents(plog) == latest_per_key(appended)


def test_aborted_transactions_go_and_their_markers_follow(tmp_path: Path, clock) -> None:
    """An imported log with an aborted transaction (its .txnindex as Kafka writes it): its
    records go whatever their keys, except that the producer's last batch stays (empty) while
    the producer is active; the ABORT marker stays while any batch of the transaction does,
    then gets a horizon, then goes - the rounds Kafka's cleaner takes."""
    d = tmp_path / "t-0"
    plog = compacted(d, clock, delete_retention_ms=1000, segment_bytes=1 << 16)
    txn = {"producer_id": 9, "producer_epoch": 0, "transactional": True}
    plog.append(keyed("a", "committed-before"))
    plog.append(keyed("a", "aborted", base_sequence=0, **txn))
    plog.append(keyed("z", "aborted-too", base_sequence=1, **txn))
    abort = build_batch(
        [Record(struct.pack(">hh", 0, 0), struct.pack(">hi", 0, 1))],
        producer_id=9,
        producer_epoch=0,
        transactional=True,
        control=True,
    )
    plog.append(abort, allow_control=True)
    plog.append(keyed("b", "after"))
    plog.roll()
    write_aborted(plog.segments[0].txn_index_path, [AbortedTxn(9, 1, 3, 1)])
    cleaner = new_cleaner(clock)

    def round_(key: str) -> int:
        plog.append(keyed(key, "more"))  # something dirty: a round runs
        plog.roll()
        return clean(plog, cleaner, first_dirty=end)[0]

    def shape() -> list[tuple[int, int, bool]]:
        return [(b.base_offset, b.count, b.is_control) for b in batch_views(plog)]

    end, _ = clean(plog, cleaner)
    assert contents(plog) == [(0, b"a", b"committed-before"), (4, b"b", b"after")]
    # the producer's last batch, emptied; the marker, kept with the index entry
    assert shape() == [(0, 1, False), (2, 0, False), (3, 1, True), (4, 1, False)]
    assert read_aborted(plog.segments[0].txn_index_path) == [AbortedTxn(9, 1, 3, 1)]
    # what read_committed fetches are told: the index as the swap left it (reloaded)
    assert plog.aborted_transactions(0, plog.log_end_offset) == [AbortedTxn(9, 1, 3, 1)]

    plog.producer_state.expire(clock(), 0)  # producer.id.expiration.ms passed
    end = round_("c")  # the empty batch goes; it was there, so the marker stays once more
    assert shape()[:3] == [(0, 1, False), (3, 1, True), (4, 1, False)]

    end = round_("d")  # nothing of the transaction left: the marker gets its delete horizon
    marker = [b for b in batch_views(plog) if b.is_control][0]
    assert marker.attributes & DELETE_HORIZON_BIT and marker.base_timestamp == clock() + 1000
    assert not plog.segments[0].txn_index_path.exists()
    # its marker goes next: no client may be told of the transaction any more
    assert plog.aborted_transactions(0, plog.log_end_offset) == []

    clock.advance(1000)
    round_("e")  # past it: gone
    assert not [b for b in batch_views(plog) if b.is_control]
    assert [o for o, _, _ in contents(plog)] == [0, 4, 5, 6, 7]


def test_the_head_and_records_past_the_dirty_section_are_not_touched(tmp_path: Path, clock) -> None:
    plog = compacted(tmp_path / "t-0", clock)
    for i in range(30):
        plog.append(keyed("k", f"{i}"))
    head_before = raw_batches(plog)[-3:]
    clean(plog, new_cleaner(clock))
    assert plog.active_segment.size and raw_batches(plog)[-3:] == head_before
    tail = [o for o, _, _ in contents(plog) if o >= plog.active_segment.base_offset]
    assert tail == list(range(plog.active_segment.base_offset, 30))


def test_offset_map_is_kafkas_skimpy_map() -> None:
    m = OffsetMap(24 * 4)
    assert (m.slots, m.size, m.latest_offset) == (4, 0, -1)
    for i, key in enumerate([b"a", b"b", b"c", b"a"]):
        m.put(key, i)
    assert (m.get(b"a"), m.get(b"b"), m.get(b"zz"), m.size, m.latest_offset) == (3, 1, -1, 3, 3)
    m.put(b"d", 9)
    with pytest.raises(ValueError, match="full offset map"):
        m.put(b"e", 10)
    m.clear()
    assert (m.size, m.get(b"a"), m.latest_offset) == (0, -1, -1)


def test_malformed_records_raise_instead_of_reading_past_them() -> None:
    m = OffsetMap(24 * 100)
    good = bytes(keyed("k", "v"))[61:]
    with pytest.raises(ValueError):
        m.add_records(good[:-1], 0, 1, 0, 90)  # cut short
    with pytest.raises(ValueError, match="record count"):
        m.filter_records(good, 2**31 - 1, 0, T0, T0, 0, -1, T0, T0)  # no 2 GiB scratch
    with pytest.raises(ValueError, match="remaining"):
        m.add_records(good + good, 0, 1, 0, 90)  # more bytes than records
    assert m.add_records(good, 0, 1, 0, 90) == (False, 1)


def test_reads_find_the_next_batch_across_gaps_and_emptied_segments(tmp_path: Path, clock) -> None:
    """Kafka's reading rules on a cleaned log: a fetch at an offset the cleaner removed returns
    the next batch (past segments left empty too), offsets by time skip what is gone, and an
    in-place reader starts at the next batch as well."""
    plog = compacted(tmp_path / "t-0", clock, segment_bytes=512)
    for i in range(60):
        plog.append(keyed(f"k{i % 3}" if i < 57 else f"last{i}", f"v{i}", T0 + i))
    plog.roll()
    clean(plog, new_cleaner(clock))
    kept = [o for o, _, _ in contents(plog)]
    assert kept[0] > 20 and any(seg.size == 0 for seg in plog.segments[:-1])
    for offset in (0, 1, kept[0]):
        got = RecordBatch(plog.read(offset, 1 << 20).read())
        assert got.last_offset == kept[0]
    assert plog.offset_for_timestamp(T0) == (T0 + kept[0], kept[0])
    with plog.file_for_reading(0) as at:
        assert at.file.base_offset <= kept[0] < at.file.next_offset and at.file.size
        head = bytes(at.file.mmap[at.position : at.position + 61])
        assert RecordBatch(head).base_offset == kept[0]
    plog.close()
