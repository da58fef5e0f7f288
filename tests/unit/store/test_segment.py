"""One segment: Kafka file names, sparse preallocation, trimming, sparse indexing, recovery, slices."""

from __future__ import annotations

import os
from pathlib import Path

from rdmalog.store.records import decode_all, iter_batches, validate_batches
from rdmalog.store.segment import FileSlice, LogSegment
from tests.unit.store.helpers import T0, batch


def new_segment(d: Path, base: int = 0, size: int = 1 << 20, interval: int = 4096) -> LogSegment:
    seg = LogSegment(d, base, segment_bytes=size, index_interval=interval)
    seg.preallocate()
    return seg


def append(seg: LogSegment, raw: bytearray, base: int) -> None:
    (info,) = validate_batches(memoryview(raw))
    raw[0:8] = base.to_bytes(8, "big")
    seg.append(raw, [(0, info.size, base + info.last_offset_delta, info.max_timestamp)])


def test_names_preallocation_and_trim(tmp_path: Path) -> None:
    seg = new_segment(tmp_path, 1234, size=1 << 30)
    log_path = tmp_path / "00000000000000001234.log"
    assert seg.path == log_path
    assert os.path.getsize(log_path) == 0  # grows by appends, as Kafka's without `preallocate`
    raw = batch(3)
    append(seg, raw, 1234)
    assert seg.size == len(raw) and seg.next_offset == 1237
    assert bytes(seg.mmap[: len(raw)]) == bytes(raw)  # mapped on demand: the pwrite is there
    assert os.path.getsize(log_path) == 1 << 30  # extended for the mapping (an RDMA grant)
    assert os.stat(log_path).st_blocks * 512 < 1 << 20  # sparse: a 1 GiB file costs nothing
    seg.close()
    assert os.path.getsize(log_path) == len(raw)
    assert {p.name for p in tmp_path.iterdir()} == {
        "00000000000000001234.log",
        "00000000000000001234.index",
        "00000000000000001234.timeindex",
    }


def test_index_sparsity_follows_kafka(tmp_path: Path) -> None:
    seg = new_segment(tmp_path, interval=1000)
    size = len(batch(1, size=300))
    off = 0
    for i in range(20):
        append(seg, batch(1, ts=T0 + i, size=300), off)
        off += 1
    # An entry is added for a batch once more than `interval` bytes were appended since the last one.
    per_entry = 1000 // size + 1
    assert seg.offset_index.entries == (20 - 1) // per_entry
    first_off, first_pos = seg.offset_index._entry(0)
    assert (first_off, first_pos) == (per_entry, per_entry * size)
    assert seg.time_index.entries == seg.offset_index.entries
    seg.close()


def test_find_position_and_slices(tmp_path: Path) -> None:
    seg = new_segment(tmp_path, interval=0)
    positions = []
    for i in range(10):
        positions.append(seg.size)
        append(seg, batch(5, ts=T0 + 10 * i), i * 5)
    assert seg.find_position(0)[0] == 0
    assert seg.find_position(23)[:2] == (positions[4], 20)  # middle of the batch 20..24
    assert seg.find_position(50) is None
    s = seg.slice(23, 1, 10**9)
    assert (s.position, s.length) == (
        positions[4],
        positions[5] - positions[4],
    )  # one batch at least
    s = seg.slice(23, 10**9, 35)  # stop before offset 35
    assert (s.position, s.length) == (positions[4], positions[7] - positions[4])
    assert [r.offset for r in decode_all(s.read())] == list(range(20, 35))
    assert seg.slice(23, 10**9, 20) is None  # its batch starts at the upper bound
    seg.close()


def test_next_slice_starts_where_the_last_ended_and_survives_truncation(tmp_path: Path) -> None:
    """A fetch from where the previous slice ended starts there (no index search); the same
    answers as from the index, also after the segment was truncated and written again."""
    seg = new_segment(tmp_path, interval=1 << 20)  # one index entry: reads walk from byte 0
    positions = []
    for i in range(6):
        positions.append(seg.size)
        append(seg, batch(5, ts=T0 + i), i * 5)
    s = seg.slice(10, 10**9, 20)  # offsets 10..19 (batches 2 and 3): ends at offset 20
    assert (s.position, s.length) == (positions[2], positions[4] - positions[2])
    assert seg._slice_ends[20] == positions[4]
    s = seg.slice(20, 1, 10**9)  # from the remembered end
    assert (s.position, s.length) == (positions[4], positions[5] - positions[4])
    assert [r.offset for r in decode_all(s.read())] == list(range(20, 25))
    seg.truncate_to(15)  # batches 3.. go; 15.. is written again with other batch sizes
    assert not seg._slice_ends
    append(seg, batch(2, ts=T0), 15)
    append(seg, batch(8, ts=T0), 17)
    s = seg.slice(15, 1, 10**9)
    assert [r.offset for r in decode_all(s.read())] == [15, 16]
    s = seg.slice(17, 10**9, 10**9)
    assert [r.offset for r in decode_all(s.read())] == list(range(17, 25))
    seg._slice_ends[20] = s.position  # a stale end (no batch based at 20 there): not trusted
    s = seg.slice(20, 10**9, 10**9)
    assert [r.offset for r in decode_all(s.read())] == list(range(17, 25))  # the batch holding 20
    seg.close()


def test_recover_truncates_torn_tail_and_zeroes_it(tmp_path: Path) -> None:
    seg = new_segment(tmp_path)
    for i in range(5):
        append(seg, batch(2, ts=T0 + i), 2 * i)
    good = seg.size
    torn = batch(2)
    seg.mmap[good : good + 40] = bytes(torn[:40])  # a batch whose write was cut short
    valid, corrupt = seg.recover()
    assert (valid, corrupt) == (good, True)
    assert seg.next_offset == 10 and seg.size == good
    assert not any(seg.mmap[good : good + 100])  # stale bytes can never look like a batch later
    assert [b.base_offset for b in iter_batches(bytes(seg.mmap[:good]))] == [0, 2, 4, 6, 8]
    seg.close()


def test_recover_of_clean_zero_tail_is_not_corruption(tmp_path: Path) -> None:
    seg = new_segment(tmp_path)
    append(seg, batch(2), 0)
    assert seg.recover() == (seg.size, False)
    seg.close()


def test_load_after_close_walks_from_last_index_entry(tmp_path: Path) -> None:
    seg = new_segment(tmp_path, 100, interval=200)
    for i in range(30):
        append(seg, batch(1, ts=T0 + i, size=100), 100 + i)
    seg.close()
    again = LogSegment(tmp_path, 100, segment_bytes=1 << 20, index_interval=200)
    again.load()
    assert again.next_offset == 130 and again.max_timestamp == T0 + 29
    assert again.offset_of_max_timestamp == 129 and again.first_batch_timestamp == T0
    again.close()


def test_slice_survives_deletion(tmp_path: Path) -> None:
    seg = new_segment(tmp_path)
    raw = batch(4)
    append(seg, raw, 0)
    s = FileSlice(seg.handle, 0, seg.size)
    seg.delete()
    assert not any(tmp_path.iterdir())
    assert s.read() == bytes(raw)  # the open file outlives its name
    assert os.fstat(s.fileno()).st_nlink == 0


def test_offset_by_timestamp_exact_to_record(tmp_path: Path) -> None:
    seg = new_segment(tmp_path, interval=0)
    for i in range(10):
        append(seg, batch(10, ts=T0 + 100 * i), 10 * i)  # timestamps T0+100i .. T0+100i+9
    assert seg.find_offset_by_timestamp(T0 + 305, 0) == (35, T0 + 305)
    assert seg.find_offset_by_timestamp(T0 + 310, 0) == (40, T0 + 400)
    assert seg.find_offset_by_timestamp(0, 0) == (0, T0)
    assert seg.find_offset_by_timestamp(0, 42) == (42, T0 + 402)
    assert seg.find_offset_by_timestamp(T0 + 10_000, 0) is None
    seg.close()
