"""Helpers of the cleaner's tests: compacted logs built by hand, what a log holds, one cleaning."""

from __future__ import annotations

from pathlib import Path

from rdmalog.store._cleaner import OffsetMap
from rdmalog.store.cleaner import Cleaner, CleanerStats
from rdmalog.store.cleaner_manager import cleanable_offsets
from rdmalog.store.log import PartitionLog
from rdmalog.store.records import (
    HEADER,
    LOG_OVERHEAD,
    Record,
    RecordBatch,
    build_batch,
    decode_records,
    iter_batches,
)
from tests.unit.store.helpers import T0, open_log, topic_config


def compacted(d: Path, clock, **overrides: object) -> PartitionLog:
    """A compacted log (`segment.bytes` 1 KiB unless given) on directory `d`."""
    overrides.setdefault("segment_bytes", 1024)
    return open_log(d, clock=clock, cleanup_policy="compact", **overrides)


def keyed(key: bytes | str | None, value: bytes | str | None, ts: int = T0, **kw) -> bytearray:
    """A one-record batch."""
    enc = [x.encode() if isinstance(x, str) else x for x in (key, value)]
    return build_batch([Record(enc[0], enc[1], timestamp=ts)], **kw)


def records_batch(pairs, ts: int = T0, **kw) -> bytearray:
    """A batch of (key, value) records with timestamps ts, ts+1, ..."""
    recs = [
        Record(
            k.encode() if isinstance(k, str) else k,
            v.encode() if isinstance(v, str) else v,
            timestamp=ts + i,
        )
        for i, (k, v) in enumerate(pairs)
    ]
    return build_batch(recs, **kw)


def raw_batches(plog: PartitionLog) -> list[bytes]:
    """Every batch of every segment, as the files hold them."""
    out = []
    for seg in plog.segments:
        with open(seg.path, "rb") as f:
            data = f.read(seg.size)
        out += [bytes(b.bytes()) for b in iter_batches(data)]
    return out


def batch_views(plog: PartitionLog) -> list[RecordBatch]:
    return [RecordBatch(b) for b in raw_batches(plog)]


def contents(plog: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record of the log, in order."""
    return [
        (r.offset, r.key, r.value)
        for b in batch_views(plog)
        if not b.is_control
        for r in decode_records(b)
    ]


def latest_per_key(appended: list[tuple[int, bytes | None, bytes | None]]) -> list[tuple]:
    """What a full compaction keeps of `appended` (offset, key, value): each key's last record."""
    last = {}
    for off, k, v in appended:
        last[k] = (off, k, v)
    return sorted(last.values())


def new_cleaner(clock, map_entries: int = 10_000, **kw) -> Cleaner:
    return Cleaner(OffsetMap(24 * map_entries), clock=clock, **kw)


def clean(
    plog: PartitionLog, cleaner: Cleaner, now: int | None = None, first_dirty: int | None = None
) -> tuple[int, CleanerStats]:
    """One round over the log's whole cleanable section (from `first_dirty`, default its start)."""
    now = cleaner.clock() if now is None else now
    dirty, uncleanable, _ = cleanable_offsets(plog, first_dirty, now)
    return cleaner.clean(plog, dirty, uncleanable, now)


def header(b: bytes | RecordBatch) -> tuple:
    """The 13 header fields of a batch."""
    raw = b.bytes() if isinstance(b, RecordBatch) else b
    return HEADER.unpack_from(raw, 0)


def size_of(b: bytes) -> int:
    return int.from_bytes(b[8:12], "big") + LOG_OVERHEAD


def compact_topic_config(**overrides: object):
    return topic_config(cleanup_policy="compact", **overrides)
