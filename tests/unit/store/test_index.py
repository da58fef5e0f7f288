"""Offset and time index files: Kafka's byte layouts, lookups, preallocation, trimming, sanity checks."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from rdmalog.store.index import IndexCorruptError, OffsetIndex, TimeIndex


def test_offset_index_layout_and_lookup(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.index"
    idx = OffsetIndex(path, 100, 4096)
    idx.activate()
    for off, pos in [(110, 4200), (125, 8400), (160, 12800)]:
        idx.append(off, pos)
    assert not path.exists()  # the head's entries are written at flush, roll and close
    idx.append(150, 1)  # not increasing: ignored, as in Kafka
    assert idx.lookup(99) == (100, 0)
    assert idx.lookup(110) == (110, 4200)
    assert idx.lookup(124) == (110, 4200)
    assert idx.lookup(1000) == (160, 12800)
    idx.close()
    raw = path.read_bytes()
    assert raw == struct.pack(">iiiiii", 10, 4200, 25, 8400, 60, 12800)  # trimmed to its entries
    again = OffsetIndex(path, 100, 4096)
    assert again.entries == 3 and again.last_entry() == (160, 12800)
    again.sanity_check(20000)
    with pytest.raises(IndexCorruptError):
        again.sanity_check(10000)  # a position past the log end
    again.truncate_to(125)
    assert again.entries == 1
    again.close()


def test_offset_index_is_full(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "0.index", 0, 24)
    for i in range(5):
        idx.append(i + 1, i * 100)
    assert idx.entries == 3 and idx.is_full
    idx.close()


def test_torn_index_tail_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(struct.pack(">ii", 5, 100) + b"\x00\x00\x00")
    idx = OffsetIndex(path, 0, 4096)
    assert idx.entries == 1 and idx.lookup(7) == (5, 100)
    idx.close()


def test_time_index_layout_and_lookup(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000050.timeindex"
    idx = TimeIndex(path, 50, 1200)
    idx.maybe_append(1000, 55)
    idx.maybe_append(1000, 60)  # same timestamp: no entry
    idx.maybe_append(900, 61)  # older timestamp: no entry
    idx.maybe_append(2000, 70)
    idx.maybe_append(3000, 90)
    assert idx.entries == 3
    assert idx.lookup_before(1000) is None
    assert idx.lookup_before(1001) == (1000, 55)
    assert idx.lookup_before(2500) == (2000, 70)
    assert idx.lookup_before(10**13) == (3000, 90)
    assert idx.last_entry() == (3000, 90)
    idx.truncate_to(70)
    assert idx.last_entry() == (1000, 55)
    idx.close()
    assert path.read_bytes() == struct.pack(">qi", 1000, 5)


def test_time_index_sanity(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.timeindex"
    path.write_bytes(struct.pack(">qiqi", 2000, 5, 1000, 9))
    idx = TimeIndex(path, 0, 1200)
    with pytest.raises(IndexCorruptError):
        idx.sanity_check(100)
    idx.reset()
    assert idx.entries == 0
    idx.close()
