"""PartitionLog's in-place access (rdmalog/store/in_place.py): the head handed out for writing,
bytes written into it committed by the log, files handed out for reading and how far they read."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdmalog.errors import CorruptRecordError, OffsetOutOfRangeError
from rdmalog.store.in_place import EARLIEST, LATEST, HeadMovedError
from rdmalog.store.records import build_batch, decode_all
from tests.unit.store.helpers import batch, open_log


def write(mapping, position: int, data: bytes) -> int:
    """What a one-sided WRITE does: the bytes land in the mapping; returns their end."""
    mapping[position : position + len(data)] = data
    return position + len(data)


def offsets(plog) -> list[int]:
    s = plog.read(plog.log_start_offset, 1 << 20)
    return [] if s is None else [r.offset for r in decode_all(s.read())]


def test_written_batches_commit_where_the_head_ends(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", segment_bytes=1 << 16)
    plog.append(batch(2))
    with plog.head_for_writing() as (head, position):
        assert head.base_offset == 0 and position > 0 and head.capacity == 1 << 16
    end = write(head.mmap, position, bytes(batch(3)))
    r = plog.commit_written(head, position, end, expected_base_offset=2)
    assert (r.base_offset, r.last_offset, r.duplicate) == (2, 4, False)
    assert offsets(plog) == list(range(5))
    with pytest.raises(HeadMovedError):  # committed already: the head ends past it now
        plog.commit_written(head, position, end)
    nxt = write(head.mmap, end, bytes(batch(1)))
    with pytest.raises(HeadMovedError):  # the writer expected another log end
        plog.commit_written(head, end, nxt, expected_base_offset=4)
    assert plog.commit_written(head, end, nxt, expected_base_offset=5).base_offset == 5
    plog.close()


def test_nothing_commits_from_invalid_bytes_or_into_a_rolled_head(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", segment_bytes=1 << 16)
    with plog.head_for_writing() as (head, position):
        registered = memoryview(head.mmap)  # as a transport's registration: the trim waits
    bad = bytearray(batch(1))
    bad[-1] ^= 1
    end = write(head.mmap, position, bytes(bad))
    with pytest.raises(CorruptRecordError):
        plog.validate_written(head, position, end)
    with pytest.raises(CorruptRecordError):
        plog.commit_written(head, position, end)
    end = write(head.mmap, position, bytes(batch(1)))
    infos = plog.validate_written(head, position, end)
    plog.commit_written(head, position, end, infos=infos)
    plog.roll_head(head)
    with plog.head_for_writing() as (new_head, new_position):
        assert new_head is not head and new_head.base_offset == 1 and new_position == 0
    later = write(registered, end, bytes(batch(1)))
    with pytest.raises(HeadMovedError):  # written into the old head: no longer the head
        plog.commit_written(head, end, later)
    registered.release()
    plog.roll_head(head)  # not the head any more: nothing happens
    with plog.head_for_writing() as (again, _):
        assert again is new_head
    assert plog.log_end_offset == 1
    plog.close()


def test_a_retried_idempotent_batch_is_answered_not_committed(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", segment_bytes=1 << 16)
    first = bytes(batch(2, producer_id=5, producer_epoch=0, base_sequence=0))
    plog.append(first)
    with plog.head_for_writing() as (head, position):
        pass
    end = write(head.mmap, position, first)
    assert plog.holds_retry(plog.validate_written(head, position, end))
    r = plog.commit_written(head, position, end)
    assert (r.base_offset, r.last_offset, r.duplicate) == (0, 1, True)
    assert plog.log_end_offset == 2
    with plog.head_for_writing() as (_, still):
        assert still == position  # the retry's bytes stay uncommitted
    plog.close()


def test_files_for_reading_and_how_far_they_read(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", segment_bytes=1000, flush_messages=100)
    for _ in range(12):
        plog.append(batch(1, size=100))
    assert plog.log_end_offset == 12 and len(plog.segments) > 1
    first, head = plog.segments[0], plog.segments[-1]
    with plog.file_for_reading(EARLIEST) as at:
        assert (at.file, at.position, at.offset) == (first, 0, 0)
    with plog.file_for_reading(LATEST) as at:
        assert at.file is head and at.offset == plog.high_watermark == 12
    with plog.file_for_reading(head.base_offset + 1) as at:
        assert at.file is head and at.position > 0
    with pytest.raises(OffsetOutOfRangeError), plog.file_for_reading(13):
        pass
    assert plog.readable_end(first) == (first.size, False, True)
    assert plog.readable_end(head) == (head.size, True, True)
    with plog.next_file(first.base_offset) as nxt:
        assert nxt is plog.segments[1]
    with plog.next_file(head.base_offset) as nxt:
        assert nxt is None  # nothing follows the head
    plog.close()


def test_a_file_above_the_high_watermark_reads_only_below_it(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", segment_bytes=1000, flush_messages=2)
    plog.append(batch(1, size=100))
    plog.flush()
    plog.append(batch(1, size=100))
    assert plog.append(batch(1, size=100)).flush_needed  # the high watermark waits for a flush
    assert plog.high_watermark == 2 < plog.log_end_offset
    head = plog.segments[-1]
    lrb, mutable, to_end = plog.readable_end(head)
    assert mutable and not to_end and 0 < lrb < head.size
    plog.roll()
    old = plog.segments[0]
    with plog.next_file(old.base_offset) as nxt:
        assert nxt is None  # not readable to its end yet
    plog.flush()
    assert plog.readable_end(old) == (old.size, False, True)
    with plog.next_file(old.base_offset) as nxt:
        assert nxt is plog.segments[-1]
    plog.close()


def test_a_leaders_batches_commit_as_they_are(tmp_path: Path) -> None:
    """commit_written(replicated=True), push replication's commit: the leader's offsets, epochs
    and timestamps kept byte for byte (even on a LogAppendTime topic); batches that do not
    continue the log are refused and nothing is committed."""
    leader = open_log(
        tmp_path / "leader", segment_bytes=1 << 16, message_timestamp_type="LogAppendTime"
    )
    leader.begin_leader_epoch(7)
    leader.append(batch(2))
    leader.append(batch(3))
    with leader.file_for_reading(0) as at:
        pushed = bytes(at.file.mmap[: leader.active_segment.size])
    follower = open_log(
        tmp_path / "follower", segment_bytes=1 << 16, message_timestamp_type="LogAppendTime"
    )
    with follower.head_for_writing() as (head, position):
        pass
    end = write(head.mmap, position, pushed)
    r = follower.commit_written(head, position, end, replicated=True)
    assert (r.base_offset, r.last_offset, follower.log_end_offset) == (0, 4, 5)
    assert bytes(head.mmap[:end]) == pushed  # nothing patched
    assert follower.leader_epochs.latest_epoch == 7  # from the batches' headers
    again = write(head.mmap, end, pushed)  # offsets 0..4 again: they do not follow 5
    with pytest.raises(CorruptRecordError):
        follower.commit_written(head, end, again, replicated=True)
    assert follower.log_end_offset == 5
    leader.close()
    follower.close()


def test_pushed_epochs_and_producers_are_tracked_only_when_committed(tmp_path: Path) -> None:
    """commit_written(replicated=True) takes a new leader epoch and an idempotent producer's
    state from the batches it commits, and nothing from a write it refuses (a batch of a new
    epoch followed by one that does not continue the log)."""
    follower = open_log(tmp_path / "follower", segment_bytes=1 << 16)
    with follower.head_for_writing() as (head, position):
        pass
    first = build_batch([(None, b"a")], partition_leader_epoch=7)
    end = write(head.mmap, position, first)
    follower.commit_written(head, position, end, replicated=True)
    assert follower.leader_epochs.entries == [(7, 0)]
    bad = build_batch([(None, b"b")], base_offset=1, partition_leader_epoch=9) + first
    with pytest.raises(CorruptRecordError):  # offset 0 again, after 1
        follower.commit_written(head, end, write(head.mmap, end, bad), replicated=True)
    assert follower.leader_epochs.entries == [(7, 0)] and follower.log_end_offset == 1
    idem = build_batch(
        [(None, b"c"), (None, b"d")], base_offset=1, partition_leader_epoch=9,
        producer_id=42, producer_epoch=0, base_sequence=0,
    )  # fmt: skip
    r = follower.commit_written(head, end, write(head.mmap, end, idem), replicated=True)
    assert (r.base_offset, r.last_offset, follower.log_end_offset) == (1, 2, 3)
    assert follower.leader_epochs.entries == [(7, 0), (9, 1)]
    assert 42 in follower.producer_state.producers
    follower.close()
