"""Which compacted log the Store's cleaner cleans and when (`cleaner_manager.py`): the dirty
ratio, the compaction lags, the checkpoint, the throttle, pausing for a deletion, the configs."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from rdmalog.errors import InvalidConfigError
from rdmalog.store import checkpoints as ck
from rdmalog.store.cleaner_manager import CHECKPOINT_FILE, Throttler
from rdmalog.store.log_manager import Store
from tests.unit.store.cleaner_helpers import contents, keyed
from tests.unit.store.helpers import T0, broker_config, open_store, topic_config

HOUR = 3_600_000
SMALL = {"log_cleaner_dedupe_buffer_size": 2 << 20}


def compacted_topic(st: Store, name: str, **configs: object):
    cfg = {"cleanup.policy": "compact", "segment.bytes": "1024"}
    cfg.update({k.replace("_", "."): str(v) for k, v in configs.items()})
    return st.create_topic(name, 1, cfg).partitions[0]


def fill(plog, n: int, keys: int, ts: int = T0, prefix: str = "k") -> None:
    for i in range(n):
        plog.append(keyed(f"{prefix}{i % keys}", f"v{i}", ts + i))
    plog.roll()


def test_the_filthiest_log_first_and_none_below_its_ratio(tmp_path: Path, clock) -> None:
    st = open_store(tmp_path, clock, **SMALL)
    a = compacted_topic(st, "a")
    b = compacted_topic(st, "b", min_cleanable_dirty_ratio=0.9)
    fill(a, 100, 5)
    fill(b, 100, 5)
    ltc = st.cleaner.grab_filthiest(clock())
    assert ltc.log is a and ltc.cleanable_ratio == 1.0  # both all dirty: a, the first of equals
    st.cleaner._done_cleaning(a, ltc.first_dirty_offset)
    assert st.cleaner.clean_once() and st.cleaner.checkpoints()[("a", 0)] == 100
    assert st.cleaner.clean_once() and st.cleaner.checkpoints()[("b", 0)] == 100
    assert not st.cleaner.clean_once()  # nothing dirty now

    fill(a, 3, 5, prefix="x")  # a little dirt on a lot of clean bytes: below 0.5
    ltc = st.cleaner.grab_filthiest(clock())
    assert ltc is None and 0 < st.cleaner.dirtiest_ratio < 0.5
    fill(a, 60, 60, prefix="y")  # now above it
    assert st.cleaner.grab_filthiest(clock()).log is a
    file = ck.read_offset_checkpoint(tmp_path / CHECKPOINT_FILE)  # Kafka's format and name
    assert file == {("a", 0): 100, ("b", 0): 100}
    st.close()


def test_min_compaction_lag_keeps_young_segments_dirty(tmp_path: Path, clock) -> None:
    st = open_store(tmp_path, clock, **SMALL)
    plog = compacted_topic(st, "lag", min_compaction_lag_ms=HOUR)
    fill(plog, 50, 5, ts=clock())
    assert not st.cleaner.clean_once()  # every segment holds records younger than an hour
    clock.advance(HOUR + 100)
    assert st.cleaner.clean_once()
    assert [k for _, k, _ in contents(plog)] == [b"k0", b"k1", b"k2", b"k3", b"k4"]
    st.close()


def test_max_compaction_lag_cleans_below_the_ratio(tmp_path: Path, clock) -> None:
    st = open_store(tmp_path, clock, **SMALL)
    plog = compacted_topic(st, "maxlag", max_compaction_lag_ms=HOUR)
    fill(plog, 200, 100, ts=clock())
    assert st.cleaner.clean_once()
    fill(plog, 3, 3, ts=clock(), prefix="late")  # dirty, far below the ratio
    assert not st.cleaner.clean_once()
    clock.advance(HOUR + 1)  # its first batch waited past max.compaction.lag.ms
    assert st.cleaner.clean_once()
    assert st.cleaner.checkpoints()[("maxlag", 0)] == plog.log_end_offset
    st.close()


def test_a_checkpoint_past_the_log_end_starts_over(tmp_path: Path, clock) -> None:
    st = open_store(tmp_path, clock, **SMALL)
    plog = compacted_topic(st, "reset")
    fill(plog, 30, 3)
    st.close()
    ck.write_offset_checkpoint(tmp_path / CHECKPOINT_FILE, {("reset", 0): 10_000})
    st = open_store(tmp_path, clock, **SMALL)
    ltc = st.cleaner.grab_filthiest(clock())
    assert ltc.first_dirty_offset == 0
    st.close()


def test_partitions_with_deletion_suspended_are_not_cleaned(tmp_path: Path, clock) -> None:
    st = open_store(tmp_path, clock, **SMALL)
    plog = compacted_topic(st, "adopted")
    fill(plog, 30, 3)
    plog.deletion_suspended = True  # adopted from a Kafka log dir without its configs
    assert not st.cleaner.clean_once()
    plog.deletion_suspended = False
    assert st.cleaner.clean_once()
    st.close()


def test_deleting_a_topic_stops_its_cleaning_first(tmp_path: Path, clock) -> None:
    """DeleteTopics during a round: the round stops at its next check, leaves nothing behind,
    and the topic's checkpoint entry goes (Kafka's abortCleaning)."""
    st = open_store(tmp_path, clock, log_cleaner_io_max_bytes_per_second=1e9, **SMALL)
    plog = compacted_topic(st, "gone")
    fill(plog, 200, 7)
    inside, release = threading.Event(), threading.Event()
    real = st.cleaner.throttler.maybe_throttle

    def throttle(n: int) -> None:  # the round is reading: hold it there
        inside.set()
        release.wait(10)
        real(n)

    st.cleaner.throttler.maybe_throttle = throttle
    st.cleaner._foreground = None
    worker = threading.Thread(target=st.cleaner.clean_once)
    worker.start()
    assert inside.wait(10)
    deleter = threading.Thread(target=st.delete_topic, args=("gone",))
    deleter.start()
    release.set()
    deleter.join(10)
    worker.join(10)
    assert not deleter.is_alive() and not worker.is_alive()
    assert "gone" not in st.topics and ("gone", 0) not in st.cleaner.checkpoints()
    leftovers = [p for p in tmp_path.rglob("*") if p.name.endswith((".cleaned", ".swap"))]
    assert leftovers == []
    st.close()


def test_the_cleaner_threads_compact_on_their_own(tmp_path: Path) -> None:
    """A Store opened with its background work runs the cleaner threads: a compacted topic is
    cleaned within the backoff without anyone asking."""
    cfg = broker_config(log_cleaner_backoff_ms=20, **SMALL)
    st = Store(tmp_path, cfg).open()
    plog = compacted_topic(st, "auto")
    fill(plog, 300, 4)
    done = threading.Event()
    for _ in range(500):
        if st.cleaner.checkpoints().get(("auto", 0)) == 300:
            done.set()
            break
        done.wait(0.02)
    assert done.is_set()
    assert len(contents(plog)) == 4
    st.close()
    again = Store(tmp_path, cfg).open(start_maintenance=False)
    assert len(contents(again.partition("auto", 0))) == 4
    again.close()


def test_the_throttle_holds_the_rate() -> None:
    now = [0]
    slept = []
    t = Throttler(1000.0, slept.append, check_ms=300, clock=lambda: now[0])
    t.maybe_throttle(500)  # within the first interval: no look yet
    now[0] = 400_000_000  # 0.4 s later, 500 + 500 bytes: 2500 B/s, sleep to make it 1000
    t.maybe_throttle(500)
    assert slept == [pytest.approx(0.6)]
    now[0] += 1_000_000_000
    t.maybe_throttle(900)  # 900 B/s: no sleep
    assert len(slept) == 1
    unlimited = Throttler(1.7976931348623157e308, slept.append)
    unlimited.maybe_throttle(10**12)
    assert len(slept) == 1


def test_cleaner_configs_are_checked_as_kafka_checks_them() -> None:
    broker = broker_config()
    assert topic_config(broker, cleanup_policy="compact").get("delete.retention.ms") == 86400000
    assert broker_config(log_cleaner_delete_retention_ms=5).get("log.cleaner.threads") == 1
    derived = topic_config(broker_config(log_cleaner_min_cleanable_ratio=0.2))
    assert derived.get("min.cleanable.dirty.ratio") == 0.2
    with pytest.raises(InvalidConfigError, match="min.compaction.lag.ms"):
        topic_config(broker, min_compaction_lag_ms=10, max_compaction_lag_ms=5)
    with pytest.raises(InvalidConfigError):
        topic_config(broker, min_cleanable_dirty_ratio=1.5)
    with pytest.raises(InvalidConfigError, match="1MB per cleaner thread"):
        broker_config(log_cleaner_dedupe_buffer_size=4 << 20, log_cleaner_threads=4)
