"""Helpers for the store's tests: configs, logs on tmp dirs, batches, a settable clock, crashes."""

from __future__ import annotations

from pathlib import Path

from rdmalog.config import BrokerConfig, TopicConfig
from rdmalog.store.log import PartitionLog
from rdmalog.store.log_manager import Store
from rdmalog.store.records import Record, build_batch

T0 = 1_700_000_000_000  # a fixed "now" in ms


class Clock:
    """A settable millisecond clock passed to logs and stores in place of the wall clock."""

    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now


def broker_config(**overrides: object) -> BrokerConfig:
    """A BrokerConfig from keyword overrides (`log_segment_bytes=1000` -> `log.segment.bytes`)."""
    return BrokerConfig.from_sources(
        None, {k.replace("_", "."): str(v) for k, v in overrides.items()}
    )


def topic_config(broker: BrokerConfig | None = None, **overrides: object) -> TopicConfig:
    return TopicConfig.from_overrides(
        broker or broker_config(), {k.replace("_", "."): str(v) for k, v in overrides.items()}
    )


def open_log(directory: Path, clock=None, clean: bool = False, **overrides: object) -> PartitionLog:
    """Open (or reopen) the log `directory` with topic config overrides."""
    kwargs = {"clock": clock} if clock is not None else {}
    return PartitionLog(
        directory, "t", 0, topic_config(**overrides), clean_shutdown=clean, **kwargs
    ).open()


def open_store(d: Path, clock=None, **overrides: object) -> Store:
    """Open (or reopen) a Store on `d` with broker config overrides, without its maintenance thread."""
    kw = {"clock": clock} if clock else {}
    return Store(d, broker_config(**overrides), **kw).open(start_maintenance=False)


def batch(
    n: int = 1, ts: int = T0, size: int = 10, key: bytes | None = b"k", **kw: object
) -> bytearray:
    """A batch of `n` records with values of `size` bytes and timestamps ts, ts+1, ..."""
    return build_batch(
        [Record(key, bytes([65 + i % 26]) * size, timestamp=ts + i) for i in range(n)], **kw
    )


def crash(plog: PartitionLog) -> None:
    """Drop a log as a killed process would: let go of files without trimming them, flushing or
    writing the head's in-memory index entries."""
    for seg in plog.segments:
        if seg._mmap is not None:
            try:
                seg._mmap.close()
            except BufferError:
                pass
            seg._mmap = None
        seg._handle = seg._handle_ref = None
        seg.closed = True
    plog.closed = True
