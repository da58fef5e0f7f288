"""Leader epoch cache lookups and its Kafka checkpoint file (rdmalog.store.leader_epochs)."""

from __future__ import annotations

from rdmalog.store.leader_epochs import LeaderEpochCache


def test_end_offset_for_follows_kafka_rules() -> None:
    cache = LeaderEpochCache()
    for epoch, start in ((0, 0), (2, 50), (5, 120)):
        assert cache.assign(epoch, start)
    assert not cache.assign(4, 130)  # older than the latest epoch
    leo = 200
    assert cache.end_offset_for(5, leo) == (5, 200)  # latest epoch ends at the log end
    assert cache.end_offset_for(2, leo) == (2, 120)
    assert cache.end_offset_for(3, leo) == (2, 120)  # unknown epoch: the floor epoch's end
    assert cache.end_offset_for(1, leo) == (0, 50)
    assert cache.end_offset_for(6, leo) == (-1, -1)  # above every known epoch
    assert cache.end_offset_for(-1, leo) == (-1, -1)


def test_truncation_keeps_the_spanning_epoch() -> None:
    cache = LeaderEpochCache()
    cache.assign(0, 0)
    cache.assign(1, 10)
    cache.assign(2, 20)
    cache.truncate_from_start(15)
    assert cache.entries == [(1, 15), (2, 20)]
    cache.truncate_from_end(20)
    assert cache.entries == [(1, 15)]


def test_checkpoint_file_is_kafkas_format(tmp_path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochCache(path)
    cache.assign(0, 0)
    cache.assign(3, 42)
    cache.save()
    assert path.read_text() == "0\n2\n0 0\n3 42\n"
    assert LeaderEpochCache.load(path).entries == [(0, 0), (3, 42)]
    path.write_text("0\n3\n0 0\n")  # count says 3, one line present
    assert LeaderEpochCache.load(path) is None
