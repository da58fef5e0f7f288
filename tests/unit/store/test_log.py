"""PartitionLog: offsets, reads, roll, LogAppendTime, time lookups, retention, flush policy, recovery."""

from __future__ import annotations

import os
import struct
import threading
from pathlib import Path

import pytest

from rdmalog.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaStorageError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordListTooLargeError,
)
from rdmalog.store.compression import Codec
from rdmalog.store.log import PartitionLog
from rdmalog.store.records import (
    LOG_APPEND_TIME,
    Record,
    RecordBatch,
    build_batch,
    decode_all,
    iter_batches,
)
from rdmalog.store.segment import FileHandle
from tests.unit.store.helpers import T0, Clock, batch, crash, open_log, topic_config


def offsets(plog, start: int = 0, max_bytes: int = 1 << 30) -> list[int]:
    s = plog.read(start, max_bytes)
    return [] if s is None else [r.offset for r in decode_all(s.read())]


def all_offsets(plog) -> list[int]:
    """Every offset readable below the high watermark, fetching segment by segment like a consumer."""
    out: list[int] = []
    pos = plog.log_start_offset
    while (s := plog.read(pos, 1 << 20)) is not None:
        out += [r.offset for r in decode_all(s.read())]
        pos = out[-1] + 1
    return out


def test_append_assigns_offsets_and_patches_in_place(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    buf = batch(3) + batch(2)
    r = plog.append(memoryview(buf), leader_epoch=7)
    assert (r.base_offset, r.last_offset, r.log_append_time, r.log_start_offset) == (0, 4, -1, 0)
    assert not r.flush_needed
    r = plog.append(
        bytes(batch(4))
    )  # read-only input is copied once; stamped with log.leader_epoch
    assert (r.base_offset, r.last_offset) == (5, 8) and plog.leader_epoch == 7
    assert plog.log_end_offset == plog.high_watermark == 9
    batches = list(iter_batches(plog.read(0, 1 << 20).read()))
    assert [(b.base_offset, b.partition_leader_epoch) for b in batches] == [(0, 7), (3, 7), (5, 7)]
    assert all(b.is_valid() for b in batches)
    assert RecordBatch(buf).base_offset == 0 and RecordBatch(buf, len(batch(3))).base_offset == 3
    plog.close()


def test_invalid_appends_write_nothing(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", max_message_bytes=500, segment_bytes=2000)
    good = batch(1)
    bad = bytearray(batch(2))
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        plog.append(good + bad)  # one bad batch rejects the whole set
    with pytest.raises(MessageTooLargeError):
        plog.append(batch(1, size=600))
    with pytest.raises(RecordListTooLargeError):
        plog.append(b"".join(batch(1, size=300) for _ in range(8)))
    with pytest.raises(InvalidRecordError):
        plog.append(build_batch([Record(b"\0\0\0\0", b"\0" * 6)], control=True, producer_id=1))
    assert plog.log_end_offset == 0 and plog.active_segment.size == 0
    plog.close()


def test_read_from_the_middle_of_a_batch_and_limits(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", index_interval_bytes=0)
    for _ in range(10):
        plog.append(batch(10))
    s = plog.read(57, 1)  # max_bytes smaller than a batch: still the whole batch holding 57
    assert [r.offset for r in decode_all(s.read())] == list(range(50, 60))
    assert offsets(plog, 99) == list(range(90, 100))
    assert plog.read(100, 1000) is None  # at the log end: nothing yet, not an error
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(101, 1000)
    assert offsets(plog, 0)[-1] == 99
    s = plog.read(0, 1 << 20, upper_bound=35)
    assert [r.offset for r in decode_all(s.read())][-1] == 39  # whole batches below the bound
    plog.close()


def test_roll_by_size_and_reads_across_segments(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", segment_bytes=1000)
    size = len(batch(2, size=100))
    for _ in range(20):
        plog.append(batch(2, size=100))
    per_seg = 1000 // size
    assert len(plog.segments) == -(-20 // per_seg)
    names = sorted(p.name for p in (tmp_path / "t-0").glob("*.log"))
    assert names[1] == f"{2 * per_seg:020d}.log"
    for seg in plog.segments[:-1]:
        assert os.path.getsize(seg.path) == seg.size <= 1000  # trimmed on roll
    assert os.path.getsize(plog.active_segment.path) == 1000  # head preallocated
    assert offsets(plog, 2 * per_seg) == list(
        range(2 * per_seg, 4 * per_seg)
    )  # one segment per read
    plog.close()


@pytest.mark.parametrize("preallocate", [False, True])
def test_preallocate_allocates_the_head_segment_blocks(tmp_path: Path, preallocate: bool) -> None:
    """Kafka's `preallocate`: the head file gets its blocks up front (a full disk is an error at
    roll, never a SIGBUS under an RDMA write); sparse otherwise. Both trim to the data on roll."""
    seg_bytes = 1 << 20
    plog = open_log(tmp_path / "t-0", segment_bytes=seg_bytes, preallocate=str(preallocate).lower())
    for _ in range(3):
        plog.append(batch(2, size=100))
    head = plog.active_segment.path
    allocated = os.stat(head).st_blocks * 512
    assert os.path.getsize(head) == seg_bytes
    if preallocate:
        assert allocated >= seg_bytes
    else:
        assert allocated < seg_bytes // 4
    plog.roll()
    assert os.path.getsize(head) == plog.segments[0].size  # trimmed to its data
    assert os.stat(plog.active_segment.path).st_blocks * 512 >= (seg_bytes if preallocate else 0)
    assert offsets(plog) == list(range(6))
    plog.close()


def test_standby_head_file_is_taken_by_the_next_roll(tmp_path: Path) -> None:
    """With `preallocate`, the next head file can be allocated ahead of the roll; the roll renames
    it into place (same inode, blocks already there). Close removes an unused one, and a leftover
    from a crash is removed at open. Without `preallocate` there is none."""
    seg_bytes = 1 << 20
    d = tmp_path / "t-0"
    plog = open_log(d, segment_bytes=seg_bytes, preallocate="true")
    plog.append(batch(2, size=100))
    path = plog.prepare_standby()
    assert path is not None and path.name == "standby.log.tmp"
    assert os.stat(path).st_blocks * 512 >= seg_bytes and plog.prepare_standby() is None
    inode = os.stat(path).st_ino
    new = plog.roll()
    assert not path.exists() and os.stat(new.path).st_ino == inode
    plog.append(batch(3, size=100))
    assert all_offsets(plog) == list(range(5))
    assert plog.prepare_standby() is not None
    plog.close()
    assert not (d / "standby.log.tmp").exists()
    (d / "standby.log.tmp").write_bytes(b"\0" * 100)  # as a crash would leave it
    plog = open_log(d, segment_bytes=seg_bytes, preallocate="true")
    assert not (d / "standby.log.tmp").exists() and all_offsets(plog) == list(range(5))
    plog.close()
    sparse = open_log(tmp_path / "s-0", segment_bytes=seg_bytes)
    assert sparse.prepare_standby() is None
    sparse.close()


def test_roll_by_segment_ms_uses_batch_timestamps(tmp_path: Path, clock: Clock) -> None:
    plog = open_log(tmp_path / "t-0", clock=clock, segment_ms=1000)
    plog.append(batch(1, ts=T0))
    plog.append(batch(1, ts=T0 + 1000))
    assert len(plog.segments) == 1
    plog.append(batch(1, ts=T0 + 1001))  # more than segment.ms after the segment's first batch
    assert [s.base_offset for s in plog.segments] == [0, 2]
    # A quiet partition rolls from the maintenance pass.
    clock.advance(5000)
    plog.maintain(retention=False)
    assert [s.base_offset for s in plog.segments] == [0, 2, 3]
    # Replayed old record timestamps do not roll the head on every maintenance pass.
    plog.append(batch(1, ts=T0 - 10**9))
    plog.maintain(retention=False)
    assert [s.base_offset for s in plog.segments] == [0, 2, 3]
    plog.close()


def test_log_append_time(tmp_path: Path, clock: Clock) -> None:
    plog = open_log(tmp_path / "t-0", clock=clock, message_timestamp_type="LogAppendTime")
    r = plog.append(
        batch(3, ts=5) + build_batch([Record(b"a", b"b", timestamp=7)], compression=Codec.GZIP)
    )
    assert r.log_append_time == T0
    batches = list(iter_batches(plog.read(0, 1 << 20).read()))
    assert all(
        b.timestamp_type == LOG_APPEND_TIME and b.max_timestamp == T0 and b.is_valid()
        for b in batches
    )
    assert {r.timestamp for r in decode_all(plog.read(0, 1 << 20).read())} == {T0}
    assert plog.offset_for_timestamp(T0) == (T0, 0)
    assert plog.max_timestamp() == (T0, 0)
    plog.close()


def test_offset_for_timestamp_is_exact_to_the_record(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", index_interval_bytes=100, segment_bytes=3000)
    for i in range(30):  # batches of 5 records, ts = T0 + 10*i + j, across several segments
        plog.append(build_batch([Record(None, b"v" * 20, timestamp=T0 + 10 * i + j) for j in range(5)],
                                compression=Codec.SNAPPY if i % 2 else Codec.NONE))  # fmt: skip
    assert len(plog.segments) > 1
    assert plog.offset_for_timestamp(T0 + 123) == (T0 + 123, 63)
    assert plog.offset_for_timestamp(T0 + 125) == (T0 + 130, 65)
    assert plog.offset_for_timestamp(0) == (T0, 0)
    assert plog.offset_for_timestamp(T0 + 294) == (T0 + 294, 149)
    assert plog.offset_for_timestamp(T0 + 295) is None
    assert plog.max_timestamp() == (T0 + 294, 149)
    plog.close()


def test_offset_for_timestamp_with_out_of_order_timestamps(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", index_interval_bytes=0)
    stamps = [50, 10, 70, 20, 70, 90, 30]
    for ts in stamps:
        plog.append(build_batch([Record(None, b"x", timestamp=T0 + ts)]))
    assert plog.offset_for_timestamp(T0 + 60) == (T0 + 70, 2)
    assert plog.offset_for_timestamp(T0 + 15) == (T0 + 50, 0)
    assert plog.offset_for_timestamp(T0 + 80) == (T0 + 90, 5)
    assert plog.max_timestamp() == (T0 + 90, 5)
    plog.close()


def test_max_timestamp_picks_the_first_record_carrying_it(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    assert plog.max_timestamp() == (-1, -1)
    plog.append(build_batch([Record(None, b"a", timestamp=T0 + t) for t in (1, 9, 3, 9)]))
    assert plog.max_timestamp() == (T0 + 9, 1)
    plog.close()


def test_retention_by_size(tmp_path: Path, clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    plog = open_log(tmp_path / "t-0", clock=clock, segment_bytes=1000, retention_bytes=2500)
    for _ in range(40):
        plog.append(batch(1, size=100))
    total_before = plog.size_in_bytes
    with caplog.at_level("INFO", logger="rdmalog.store.log"):
        deleted = plog.apply_retention()
    assert deleted > 0
    said = f"t-0: retention deleted {deleted} segment(s), log start offset 0 -> "
    assert any(r.getMessage().startswith(said) for r in caplog.records), caplog.text
    assert plog.size_in_bytes <= 2500 + 1000 and plog.size_in_bytes < total_before
    assert plog.log_start_offset == plog.segments[0].base_offset > 0
    assert offsets(plog, plog.log_start_offset)[0] == plog.log_start_offset
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(0, 100)
    assert len(list((tmp_path / "t-0").glob("*.log"))) == len(plog.segments)
    plog.close()


def test_retention_by_time_including_the_head(tmp_path: Path, clock: Clock) -> None:
    plog = open_log(tmp_path / "t-0", clock=clock, segment_bytes=1000, retention_ms=60_000)
    for i in range(10):
        plog.append(batch(1, ts=T0 + i * 10_000, size=200))
    clock.now = T0 + 125_000  # batches older than T0 + 65_000 have expired
    plog.apply_retention()
    assert all(s.max_timestamp >= T0 + 65_000 for s in plog.segments)
    assert plog.log_start_offset == plog.segments[0].base_offset
    clock.now = T0 + 10**7  # everything expired: the head is rolled and deleted too
    plog.apply_retention()
    assert plog.log_start_offset == plog.log_end_offset == 10
    assert len(plog.segments) == 1 and plog.active_segment.size == 0
    assert plog.append(batch(1)).base_offset == 10
    plog.close()


def test_delete_records(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", segment_bytes=1000)
    for _ in range(30):
        plog.append(batch(1, size=100))
    assert plog.delete_records(17) == 17
    assert plog.segments[0].base_offset <= 17 < plog.segments[0].next_offset
    assert offsets(plog, 17)[0] >= plog.segments[0].base_offset
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(16, 100)
    with pytest.raises(OffsetOutOfRangeError):
        plog.delete_records(31)
    assert plog.delete_records(-1) == 30
    plog.close()


def test_start_listeners_hear_of_a_moved_log_start_with_no_lock_held(tmp_path: Path) -> None:
    """DeleteRecords and retention call start listeners before returning, outside the log's lock
    (another thread can take it), and only when the log start moved."""
    plog = open_log(tmp_path / "t-0", segment_bytes=1000)
    for _ in range(30):
        plog.append(batch(1, size=100))
    seen = []

    def take_and_give_back(lg: PartitionLog) -> None:
        if lg.lock.acquire(timeout=1):
            seen.append("free")
            lg.lock.release()

    def listener(lg: PartitionLog) -> None:
        other = threading.Thread(target=take_and_give_back, args=(lg,))
        other.start()
        other.join()
        seen.append(lg.log_start_offset)

    plog.add_start_listener(listener)
    plog.delete_records(17)
    plog.delete_records(10)  # below the start: nothing moves
    assert seen == ["free", 17]
    plog.remove_start_listener(listener)
    plog.delete_records(20)
    assert seen == ["free", 17]
    plog.close()


def test_flush_policy_holds_the_high_watermark(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", flush_messages=3)
    seen = []
    plog.add_listener(lambda lg: seen.append(lg.high_watermark))
    assert not plog.append(batch(2)).flush_needed
    assert plog.high_watermark == 2
    r = plog.append(batch(1))
    assert r.flush_needed and plog.high_watermark == 2 and plog.read(2, 100) is None
    r = plog.append(batch(1))  # still unflushed past the policy
    assert r.flush_needed and plog.high_watermark == 2
    t = threading.Thread(target=plog.flush)
    t.start()
    t.join()
    assert plog.high_watermark == 4 and plog.recovery_point == 4 and seen == [2, 4]
    assert offsets(plog, 2) == [2, 3]
    plog.close()


def test_time_based_flush_from_maintenance(tmp_path: Path, clock: Clock) -> None:
    plog = open_log(tmp_path / "t-0", clock=clock, flush_ms=1000)
    plog.append(batch(5))
    plog.maintain(retention=False)
    assert plog.recovery_point == 0
    clock.advance(1000)
    plog.maintain(retention=False)
    assert plog.recovery_point == 5
    plog.close()


def test_reopen_after_clean_close(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    plog = open_log(d, segment_bytes=2000, index_interval_bytes=200)
    for i in range(40):
        plog.append(batch(2, ts=T0 + i, size=50))
    expect = all_offsets(plog)
    assert expect == list(range(80))
    plog.close()
    for seg_file in d.glob("*.log"):
        assert os.path.getsize(seg_file) < 2000 or seg_file == max(d.glob("*.log"))
    again = open_log(d, clean=True, segment_bytes=2000, index_interval_bytes=200)
    assert again.log_end_offset == 80 and again.high_watermark == 80
    assert all_offsets(again) == expect
    assert offsets(again, 79) == [78, 79]
    assert again.offset_for_timestamp(T0 + 30) == (T0 + 30, 59)  # batch 29 holds T0+29, T0+30
    assert again.append(batch(1)).base_offset == 80
    again.close()


def test_recovery_truncates_a_torn_write(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    plog = open_log(d)
    for _ in range(10):
        plog.append(batch(3))
    seg = plog.active_segment
    end = seg.size
    half = batch(3)[:50]
    os.pwrite(seg.handle.fileno(), bytes(half), end)  # the crash tore the next batch's write
    crash(plog)
    again = open_log(d)
    assert again.log_end_offset == 30 and again.active_segment.size == end
    assert offsets(again)[-1] == 29
    assert again.append(batch(1)).base_offset == 30
    again.close()
    again = open_log(d, clean=True)
    assert offsets(again)[-1] == 30
    again.close()


def test_flipped_byte_invalidates_from_there_and_later_segments(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    plog = open_log(d, segment_bytes=1200)
    for _ in range(30):
        plog.append(batch(2, size=60))
    assert len(plog.segments) >= 4
    victim = plog.segments[1]
    positions = [p for p, _ in victim.batches()]
    flip_at = positions[3] + 70  # inside the 4th batch of the 2nd segment
    first_bad_offset = victim.base_offset + 6
    crash(plog)
    with open(victim.path, "r+b") as f:
        f.seek(flip_at)
        b = f.read(1)
        f.seek(flip_at)
        f.write(bytes([b[0] ^ 0x40]))
    again = open_log(d, segment_bytes=1200)
    assert again.log_end_offset == first_bad_offset
    assert len(again.segments) == 2  # later segments are gone
    assert len(list(d.glob("*.log"))) == 2
    assert offsets(again, victim.base_offset)[-1] == first_bad_offset - 1
    for b in iter_batches(again.read(victim.base_offset, 1 << 20).read()):
        assert b.is_valid()
    again.close()


def test_recovery_starts_at_the_recovery_point(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    plog = open_log(d, segment_bytes=1200)
    for _ in range(30):
        plog.append(batch(2, size=60))
    plog.flush()
    rp = plog.recovery_point
    first = plog.segments[0]
    crash(plog)
    with open(first.path, "r+b") as f:  # below the recovery point: trusted, as Kafka does
        f.seek(100)
        f.write(b"\xff")
    again = PartitionLog(d, "t", 0, topic_config(segment_bytes=1200), recovery_point=rp).open()
    assert again.log_end_offset == 60
    again.close()


def test_missing_or_corrupt_index_is_rebuilt(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    plog = open_log(d, segment_bytes=3000, index_interval_bytes=100)
    for i in range(40):
        plog.append(batch(1, ts=T0 + i, size=100))
    plog.close()
    idx_files = sorted(d.glob("*.index"))
    idx_files[0].unlink()
    tidx = sorted(d.glob("*.timeindex"))[1]
    tidx.write_bytes(struct.pack(">qiqi", T0 + 9999, 5, T0 + 1, 3))  # out of order
    again = open_log(d, clean=True, segment_bytes=3000, index_interval_bytes=100)
    assert again.segments[0].offset_index.entries > 0
    assert again.offset_for_timestamp(T0 + 20) == (T0 + 20, 20)
    assert offsets(again, 13)[0] <= 13
    again.close()


def test_leftover_files_are_cleaned(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    plog = open_log(d)
    plog.append(batch(2))
    plog.close()
    (d / "00000000000000000007.log.deleted").write_bytes(b"x")
    (d / "00000000000000000000.log.cleaned").write_bytes(b"x")
    (d / "00000000000000000009.index.swap").write_bytes(b"x")
    (d / "00000000000000000042.index").write_bytes(b"")  # an index without its log
    again = open_log(d, clean=True)
    names = sorted(p.name for p in d.iterdir())
    assert names == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
        "leader-epoch-checkpoint",
    ]
    assert again.log_end_offset == 2
    again.close()


def test_swap_log_replaces_its_segment(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    plog = open_log(d)
    plog.append(batch(2))
    plog.close()
    replacement = batch(5)
    (d / "00000000000000000000.log.swap").write_bytes(bytes(replacement))
    again = open_log(d)
    assert again.log_end_offset == 5
    again.close()


def test_commit_written_for_rdma(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", segment_bytes=1 << 16)
    plog.append(batch(2))
    seg = plog.active_segment
    raw = batch(3) + batch(1)
    seg.mmap[seg.size : seg.size + len(raw)] = bytes(raw)  # what a one-sided WRITE does
    r = plog.commit_written(seg, seg.size, seg.size + len(raw))
    assert (r.base_offset, r.last_offset) == (2, 5)
    assert offsets(plog) == list(range(6))
    bad = bytearray(batch(1))
    bad[-1] ^= 1
    seg.mmap[seg.size : seg.size + len(bad)] = bytes(bad)
    with pytest.raises(CorruptRecordError):
        plog.commit_written(seg, seg.size, seg.size + len(bad))
    assert plog.log_end_offset == 6
    plog.close()


def test_concurrent_flushes_and_appends(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", flush_messages=5, segment_bytes=4000)
    stop = threading.Event()

    def flusher() -> None:
        while not stop.is_set():
            plog.flush()

    t = threading.Thread(target=flusher)
    t.start()
    try:
        for _ in range(300):
            if plog.append(batch(2, size=30)).flush_needed:
                plog.flush()
    finally:
        stop.set()
        t.join()
    plog.flush()
    assert plog.high_watermark == plog.log_end_offset == plog.recovery_point == 600
    assert offsets(plog, 598) == [598, 599]
    plog.close()


def test_truncate_to(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", segment_bytes=1000)
    for _ in range(20):
        plog.append(batch(2, size=100))
    plog.truncate_to(13)  # inside the batch 12..13: whole batches from 12 go
    assert plog.log_end_offset == 12 and plog.high_watermark == 12
    assert plog.append(batch(1)).base_offset == 12
    assert offsets(plog, 10) == [10, 11, 12] or offsets(plog, 12) == [12]
    plog.close()


def test_control_batches_only_when_allowed(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    marker = build_batch([Record(b"\0\0\0\1", b"\0\0\0\0\0\0")], control=True, producer_id=7)
    with pytest.raises(InvalidRecordError):
        plog.append(bytearray(marker))
    assert plog.append(bytearray(marker), allow_control=True).base_offset == 0
    assert RecordBatch(plog.read(0, 100).read()).is_control
    plog.close()


def test_timestamp_bounds(tmp_path: Path, clock: Clock) -> None:
    plog = open_log(
        tmp_path / "t-0",
        clock=clock,
        message_timestamp_before_max_ms=1000,
        message_timestamp_after_max_ms=500,
    )
    plog.append(batch(1, ts=T0 - 1000))
    plog.append(batch(1, ts=T0 + 500))
    with pytest.raises(InvalidTimestampError) as e:
        plog.append(batch(1, ts=T0 - 1001))
    assert e.value.error_code == 32
    with pytest.raises(InvalidTimestampError):
        plog.append(batch(1, ts=T0 + 501))
    assert plog.log_end_offset == 2
    plog.close()


def test_disk_errors_become_storage_errors(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    seg = plog.active_segment
    seg._handle = FileHandle(Path("/dev/full"))  # every write fails (ENOSPC), as on a full disk
    with pytest.raises(KafkaStorageError) as e:
        plog.append(batch(1))
    assert e.value.error_code == 56 and plog.log_end_offset == 0


def idem(seq: int, n: int = 2, pid: int = 1000, epoch: int = 0) -> bytearray:
    return batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_idempotent_retries_are_acknowledged_not_rewritten(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    assert plog.append(idem(0)).base_offset == 0
    assert plog.append(idem(2)).base_offset == 2
    plog.append(batch(1))  # a non-idempotent producer in between
    retry = plog.append(idem(0))  # still among the producer's last five batches
    assert (retry.base_offset, retry.last_offset) == (0, 1)
    assert plog.log_end_offset == 5
    with pytest.raises(OutOfOrderSequenceError) as e:
        plog.append(idem(7))
    assert e.value.error_code == 45
    assert plog.append(idem(0, epoch=1)).base_offset == 5  # a new epoch restarts at 0
    with pytest.raises(InvalidProducerEpochError):
        plog.append(idem(4, epoch=0))  # the old epoch is fenced
    with pytest.raises(OutOfOrderSequenceError):
        plog.append(idem(2, epoch=1) + idem(5, epoch=1))  # batches of one request must follow on
    assert plog.append(idem(2, epoch=1) + idem(4, epoch=1)).last_offset == 10
    assert plog.log_end_offset == 11
    # A retried append of several batches is answered as a whole, through its last batch
    again = plog.append(idem(2, epoch=1) + idem(4, epoch=1))
    assert (again.base_offset, again.last_offset) == (7, 10)
    with pytest.raises(OutOfOrderSequenceError):  # part retried, part new: refused, not half-taken
        plog.append(idem(2, epoch=1) + idem(4, epoch=1) + idem(6, epoch=1))
    assert plog.log_end_offset == 11
    plog.close()


def test_producer_state_survives_clean_close_and_crash(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    plog = open_log(d)
    plog.append(idem(0))
    plog.close()
    assert (d / "rdmalog-producer-state.json").exists()
    plog = open_log(d, clean=True)
    assert plog.append(idem(0)).base_offset == 0  # duplicate known from the snapshot
    plog.append(idem(2))
    crash(plog)  # no snapshot for the last append: rebuilt from batch headers
    plog = open_log(d)
    assert plog.append(idem(2)).base_offset == 2
    assert plog.append(idem(4)).base_offset == 4
    plog.close()


def test_leader_epochs(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    plog = open_log(d)
    # an empty log is led in epoch 0 from its end (as a Kafka leader records at leadership)
    assert plog.leader_epoch == 0 and plog.epoch_end_offset(0) == (0, 0)
    plog.append(batch(3))
    plog.append(batch(2), leader_epoch=4)
    plog.append(batch(1))
    assert plog.leader_epoch == 4
    assert plog.epoch_end_offset(0) == (0, 3)
    assert plog.epoch_end_offset(2) == (0, 3)
    assert plog.epoch_end_offset(4) == (4, 6)
    assert plog.epoch_end_offset(5) == (-1, -1)
    plog.flush()  # the checkpoint is written by flushes, off the append path
    assert (d / "leader-epoch-checkpoint").read_text() == "0\n2\n0 0\n4 3\n"
    plog.close()
    (d / "leader-epoch-checkpoint").unlink()  # rebuilt from the batches' partitionLeaderEpoch
    plog = open_log(d, clean=True)
    assert plog.leader_epoch == 4 and plog.epoch_end_offset(1) == (0, 3)
    assert (d / "leader-epoch-checkpoint").read_text() == "0\n2\n0 0\n4 3\n"
    plog.close()


def test_random_crashes_and_corruption_keep_the_log_consistent(tmp_path: Path) -> None:
    """Seeded rounds of appends, flushes, crashes and damaged bytes: after every reopen the log is a
    contiguous run of valid batches that keeps everything flushed before an undamaged crash."""
    import random

    rng = random.Random(1234)
    d = tmp_path / "t-0"
    cfg = {"segment_bytes": 3000, "index_interval_bytes": 300}
    plog = open_log(d, **cfg)
    for _ in range(25):  # bounded rounds
        for _ in range(rng.randrange(1, 30)):
            plog.append(batch(rng.randrange(1, 5), size=rng.randrange(1, 200),
                              compression=rng.choice(list(Codec))))  # fmt: skip
            if rng.random() < 0.1:
                plog.flush()
        flushed = plog.recovery_point
        segs = [(s.path, s.size) for s in plog.segments]
        damaged = False
        if rng.random() < 0.5:
            crash(plog)
            path, size = rng.choice(segs)
            if size and rng.random() < 0.5:
                at = rng.randrange(size)
                with open(path, "r+b") as f:
                    f.seek(at)
                    b = f.read(1)
                    f.seek(at)
                    f.write(bytes([b[0] ^ 0xFF]))
                damaged = True
            plog = PartitionLog(d, "t", 0, topic_config(**cfg), recovery_point=0).open()
        else:
            plog.close()
            plog = open_log(d, clean=True, **cfg)
        if not damaged:
            assert plog.log_end_offset >= flushed
        offsets_seen = []
        pos = plog.log_start_offset
        while (s := plog.read(pos, 1 << 20)) is not None:
            for b in iter_batches(s.read()):
                assert b.is_valid()
                offsets_seen += [r.offset for r in b.records()]
            pos = offsets_seen[-1] + 1
        assert offsets_seen == list(range(plog.log_start_offset, plog.log_end_offset))
    plog.close()


def test_roll_waits_to_trim_a_registered_mapping(tmp_path: Path, clock: Clock) -> None:
    plog = open_log(tmp_path / "t-0", clock=clock, segment_bytes=4000)
    seen = []
    plog.add_roll_listener(lambda lg, old, new: seen.append((old.capacity, new.base_offset)))
    plog.append(batch(2))
    head = plog.active_segment
    registered = memoryview(head.mmap)  # what a transport holds while the region is registered
    plog.roll()
    assert seen == [(4000, 2)]  # listeners ran before the trim
    assert head.trim_pending and os.path.getsize(head.path) == 4000
    assert bytes(registered[: head.size]) == bytes(plog.read(0, 1 << 20).read())  # still mapped
    registered.release()
    plog.maintain(retention=False)
    assert not head.trim_pending and os.path.getsize(head.path) == head.size
    plog.close()


def test_offset_for_timestamp_matches_a_brute_force_scan(tmp_path: Path, clock: Clock) -> None:
    import random

    rng = random.Random(99)
    plog = open_log(tmp_path / "t-0", clock=clock, segment_bytes=1500, index_interval_bytes=150)
    stamps: list[int] = []
    for _ in range(120):  # bounded: a few dozen segments of jittery, partly out-of-order timestamps
        n = rng.randrange(1, 6)
        ts = [T0 + len(stamps) * 10 + rng.randrange(-40, 40) for _ in range(n)]
        plog.append(build_batch([Record(None, b"v", timestamp=t) for t in ts],
                                compression=rng.choice([Codec.NONE, Codec.LZ4])))  # fmt: skip
        stamps += ts
    assert len(plog.segments) > 5
    for target in [T0 - 100, *rng.sample(range(T0 - 50, T0 + len(stamps) * 10 + 50), 60)]:
        want = next(((t, o) for o, t in enumerate(stamps) if t >= target), None)
        assert plog.offset_for_timestamp(target) == want, target
    best = max(stamps)
    assert plog.max_timestamp() == (best, stamps.index(best))
    plog.close()


def test_a_failing_roll_listener_does_not_stop_the_roll(tmp_path: Path, clock: Clock) -> None:
    """A roll listener that raises is logged, as the other listeners' failures are: the other
    listeners still run and the old segment is still sealed (the exception used to escape the
    roll half done, the new head appended and the old one never sealed)."""
    plog = open_log(tmp_path / "t-0", clock=clock)
    seen = []

    def broken(lg, old, new):
        raise RuntimeError("listener bug")

    plog.add_roll_listener(broken)
    plog.add_roll_listener(lambda lg, old, new: seen.append(new.base_offset))
    plog.append(batch(2))
    head = plog.active_segment
    new = plog.roll()
    assert seen == [2] and new is plog.active_segment and head.size == os.path.getsize(head.path)
    plog.append(batch(1))
    assert plog.log_end_offset == 3
    plog.close()
