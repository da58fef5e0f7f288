"""PartitionLog in replicated mode: the high watermark moved from outside, follower appends of the
leader's bytes, leader epochs, truncation and a full reset."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdmalog.config import BrokerConfig, TopicConfig
from rdmalog.errors import CorruptRecordError
from rdmalog.store.log import PartitionLog
from rdmalog.store.records import Record, build_batch, decode_all, iter_batches

T0 = 1_700_000_000_000


def _log(directory: Path, replicated: bool = True, **overrides: str) -> PartitionLog:
    cfg = TopicConfig.from_overrides(BrokerConfig.from_sources(None, {}), overrides)
    return PartitionLog(directory, "t", 0, cfg, replicated=replicated).open()


def _batch(n: int, pid: int = -1, seq: int = -1, size: int = 10) -> bytearray:
    records = [Record(b"k", bytes([i % 256]) * size, timestamp=T0 + i) for i in range(n)]
    return build_batch(records, producer_id=pid, producer_epoch=0, base_sequence=seq, now_ms=T0)


def _log_bytes(plog: PartitionLog) -> bytes:
    out = bytearray()
    for seg in plog.segments:
        out += seg.mmap[: seg.size] if seg.mmap is not None else b""
    return bytes(out)


def test_appends_leave_the_high_watermark_to_the_replica_manager(tmp_path: Path) -> None:
    plog = _log(tmp_path / "t-0")
    seen = []
    plog.add_listener(lambda g: seen.append(g.high_watermark))
    appended = []
    plog.add_append_listener(lambda g: appended.append(g.log_end_offset))
    r = plog.append(_batch(3))
    assert (r.base_offset, r.last_offset, plog.log_end_offset) == (0, 2, 3)
    assert plog.high_watermark == 0 and plog.read(0, 1 << 20) is None
    assert appended == [3] and seen == []
    assert plog.read(0, 1 << 20, upper_bound=plog.log_end_offset) is not None  # a follower's read
    assert plog.set_high_watermark(2) and seen == [2]
    assert [r.offset for r in decode_all(plog.read(0, 1 << 20).read())] == [0, 1, 2]
    assert not plog.set_high_watermark(1)  # never backwards
    assert plog.set_high_watermark(99) and plog.high_watermark == 3  # capped at the log end


def test_single_broker_mode_is_unchanged(tmp_path: Path) -> None:
    plog = _log(tmp_path / "t-0", replicated=False)
    plog.append(_batch(2))
    assert plog.high_watermark == 2


def test_follower_keeps_the_leaders_bytes_offsets_and_epochs(tmp_path: Path) -> None:
    leader = _log(tmp_path / "leader" / "t-0")
    follower = _log(tmp_path / "follower" / "t-0")
    leader.begin_leader_epoch(3)
    leader.append(_batch(2, pid=7, seq=0))
    leader.append(_batch(3, pid=7, seq=2))
    leader.begin_leader_epoch(5)
    leader.append(_batch(1))
    fetched = leader.read(0, 1 << 20, upper_bound=leader.log_end_offset).read()
    assert follower.append_replicated(fetched) == 6
    assert _log_bytes(follower) == _log_bytes(leader)
    assert follower.leader_epochs.entries == [(3, 0), (5, 5)]
    assert follower.epoch_end_offset(3) == (3, 5)
    # the follower knows the producer: a retry of the last batch is a duplicate once it leads
    follower.begin_leader_epoch(6)
    dup = follower.append(_batch(3, pid=7, seq=2))
    assert (dup.base_offset, dup.last_offset) == (2, 4) and follower.log_end_offset == 6
    # batches already held are skipped; a batch overlapping the log end is refused
    assert follower.append_replicated(fetched) == 6
    overlap = bytearray(_batch(3))
    overlap[0:8] = (4).to_bytes(8, "big")  # offsets 4..6
    with pytest.raises(CorruptRecordError):
        follower.append_replicated(overlap)
    assert follower.log_end_offset == 6


def test_follower_replicates_a_compacted_leader_across_its_gaps(tmp_path: Path) -> None:
    """The leader's cleaner leaves offset gaps between batches; a follower fetching that range
    (a new replica, one back from a long stop) takes the batches as they are, byte for byte."""
    from tests.unit.store.cleaner_helpers import clean, contents, new_cleaner, raw_batches

    compact = {"cleanup.policy": "compact", "segment.bytes": "1024"}
    leader = _log(tmp_path / "leader" / "t-0", **compact)
    for i in range(40):  # five keys written once, then three keys over and over
        key = b"once-%d" % i if i < 5 else b"k%d" % (i % 3)
        leader.append(build_batch([Record(key, b"v" * 60, timestamp=T0 + i)]))
    leader.set_high_watermark(leader.log_end_offset)
    clean(leader, new_cleaner(lambda: T0 + 1000))
    offsets = [off for off, _, _ in contents(leader)]
    assert offsets[:5] == [0, 1, 2, 3, 4] and offsets[5] > 5  # the cleaner left a gap
    follower = _log(tmp_path / "follower" / "t-0", **compact)
    follower.append_replicated(b"".join(raw_batches(leader)))
    assert follower.log_end_offset == leader.log_end_offset == 40
    assert raw_batches(follower) == raw_batches(leader)
    assert contents(follower) == contents(leader)


def test_follower_rolls_segments_by_its_own_size_limit(tmp_path: Path) -> None:
    leader = _log(tmp_path / "leader" / "t-0")
    follower = _log(tmp_path / "follower" / "t-0", **{"segment.bytes": "400"})
    for _ in range(6):
        leader.append(_batch(2, size=50))
    follower.append_replicated(leader.read(0, 1 << 20, upper_bound=leader.log_end_offset).read())
    assert follower.log_end_offset == 12 and len(follower.segments) > 1
    assert all(s.size <= 400 for s in follower.segments)
    follower.set_high_watermark(12)
    got = []
    pos = 0
    while (sl := follower.read(pos, 1 << 20)) is not None:
        got += [r.offset for r in decode_all(sl.read())]
        pos = got[-1] + 1
    assert got == list(range(12))


def test_truncation_and_reset(tmp_path: Path) -> None:
    plog = _log(tmp_path / "t-0")
    plog.begin_leader_epoch(1)
    plog.append(_batch(2))
    plog.begin_leader_epoch(2)
    plog.append(_batch(2))
    plog.set_high_watermark(4)
    plog.truncate_to(2)
    assert (plog.log_end_offset, plog.high_watermark) == (2, 2)
    assert plog.leader_epochs.entries == [(1, 0)]
    plog.reset_to(40)
    assert (plog.log_start_offset, plog.log_end_offset, plog.high_watermark) == (40, 40, 40)
    assert plog.leader_epochs.entries == [] and len(plog.segments) == 1
    leader = _log(tmp_path / "leader" / "t-0")
    leader.reset_to(40)
    leader.append(_batch(2))
    plog.append_replicated(leader.read(40, 1 << 20, upper_bound=42).read())
    assert plog.log_end_offset == 42


def test_high_watermark_restarts_from_its_checkpoint(tmp_path: Path) -> None:
    plog = _log(tmp_path / "t-0")
    plog.append(_batch(3))
    plog.append(_batch(2))
    plog.set_high_watermark(3)
    plog.close()
    cfg = plog.config
    again = PartitionLog(tmp_path / "t-0", "t", 0, cfg, replicated=True, high_watermark=3).open()
    assert (again.log_end_offset, again.high_watermark) == (5, 3)
    assert len(list(iter_batches(memoryview(again.read(0, 1 << 20).read())))) == 1


def test_follower_tracks_transactions_from_replicated_batches(tmp_path: Path) -> None:
    """A follower learns open transactions and ABORT markers from the leader's bytes (its
    `.txnindex` too), so as leader it stops read_committed at the right last stable offset and
    names the aborted transactions."""
    from rdmalog.store.transactions import marker_batch

    leader = _log(tmp_path / "leader")
    follower = _log(tmp_path / "follower")
    txn = {"producer_epoch": 0, "transactional": True, "now_ms": T0}
    leader.append(_batch(1))  # 0
    leader.append(
        build_batch([Record(b"k", b"a", timestamp=T0)], producer_id=7, base_sequence=0, **txn)
    )  # 1
    leader.append(
        build_batch([Record(b"k", b"b", timestamp=T0)], producer_id=8, base_sequence=0, **txn)
    )  # 2
    leader.append(marker_batch(7, 0, False, 5, timestamp_ms=T0), allow_control=True)  # 3: abort 7
    follower.append_replicated(_log_bytes(leader))
    follower.set_high_watermark(follower.log_end_offset)
    assert follower.last_stable_offset == 2  # producer 8 still open
    (aborted,) = follower.aborted_transactions(0, 4)
    assert (aborted.producer_id, aborted.first_offset, aborted.last_offset) == (7, 1, 3)
    assert follower.producer_state.producers[7].coordinator_epoch == 5
    leader.append(marker_batch(8, 0, True, 5, timestamp_ms=T0), allow_control=True)  # 4
    follower.append_replicated(_log_bytes(leader))
    follower.set_high_watermark(follower.log_end_offset)
    assert follower.last_stable_offset == 5 and len(follower.aborted_transactions(0, 5)) == 1
    leader.close()
    follower.close()
