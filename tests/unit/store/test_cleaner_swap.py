"""Swapping cleaned segments in (`segment_swap.py`) and a crash at each step of it: the log that
recovery opens is either the log before the clean or the cleaned one, never a mix."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdmalog.store import cleaner as cleaner_module
from rdmalog.store.segment import LogSegment
from tests.unit.store.cleaner_helpers import (
    clean,
    compacted,
    contents,
    keyed,
    latest_per_key,
    new_cleaner,
    raw_batches,
)
from tests.unit.store.helpers import T0, crash, open_log


class Crash(BaseException):
    """The process dies here."""


def build(d: Path, clock) -> tuple:
    plog = compacted(d, clock)
    appended = []
    for i in range(90):
        key, value = f"k{i % 5}".encode(), f"v{i}".encode()
        appended.append((plog.append(keyed(key, value, T0 + i)).base_offset, key, value))
    plog.roll()
    plog.flush()
    return plog, appended


def reopen(d: Path, clock):
    return open_log(d, clock=clock, cleanup_policy="compact", segment_bytes=1024)


def test_cleaned_segments_replace_the_old_ones(tmp_path: Path, clock) -> None:
    plog, appended = build(tmp_path / "t-0", clock)
    old = list(plog.segments[:-1])
    before = plog.read(0, 1 << 20)  # a fetch answered before the swap, sent after it
    old_bytes = before.read()
    swapped = []
    plog.add_swap_listener(lambda log, replaced: swapped.append(list(replaced)))
    clean(plog, new_cleaner(clock))
    assert before.read() == old_bytes  # the unlinked file still reads as it was
    assert [s for group in swapped for s in group] == old and all(s.deleted for s in old)
    names = sorted(p.name for p in plog.dir.iterdir())
    assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))]
    plog.close()
    again = reopen(plog.dir, clock)
    assert contents(again) == latest_per_key(appended)
    again.close()


# where it dies: (old segments deleted before, the first segment the swaps did not reach)
STEPS = {"cleaned": (0, 0), "swap": (0, 1), "one-old-deleted": (1, 2), "all-old-deleted": (99, 1)}


@pytest.mark.parametrize("at", list(STEPS))
def test_a_crash_during_the_swap_recovers_one_whole_log(
    tmp_path: Path, clock, monkeypatch, at: str
) -> None:
    """Killed (a) with the cleaned copy still `.cleaned`, (b) right after it became `.swap`,
    (c) after one old segment was deleted, (d) after all were: recovery keeps the old log in
    (a) and completes the swap in the others, as Kafka's LogLoader does."""
    d = tmp_path / "t-0"
    plog, appended = build(d, clock)
    original = contents(plog)
    deletes, reached = STEPS[at]
    cut = plog.segments[reached].base_offset  # recovered: cleaned below, as it was from here
    real_delete = LogSegment.mark_deleted
    calls = []

    def delete(seg: LogSegment) -> list:
        if seg.file_suffix:  # the cleaner dropping its copy: the process is already dead
            raise Crash
        calls.append(seg)
        if len(calls) > deletes:
            raise Crash
        return real_delete(seg)

    def replace(*args, **kw):
        raise Crash

    monkeypatch.setattr(LogSegment, "mark_deleted", delete)
    monkeypatch.setattr(LogSegment, "delete", lambda seg: delete(seg))
    if at == "cleaned":
        monkeypatch.setattr(type(plog), "replace_segments", replace)
    if at == "all-old-deleted":  # dies before the .swap files take their names
        real_rename = LogSegment.rename_suffix

        def rename(seg: LogSegment, old: str, new: str) -> None:
            if old == ".swap":
                raise Crash
            real_rename(seg, old, new)

        monkeypatch.setattr(LogSegment, "rename_suffix", rename)
    with pytest.raises(Crash):
        clean(plog, new_cleaner(clock))
    monkeypatch.undo()
    suffixes = {p.name.rpartition(".")[2] for p in d.iterdir()}
    assert ("cleaned" in suffixes) == (at == "cleaned")
    assert ("swap" in suffixes) == (at != "cleaned")
    crash(plog)

    again = reopen(d, clock)
    latest = latest_per_key(appended)
    assert contents(again) == [r for r in latest if r[0] < cut] + [
        r for r in original if r[0] >= cut
    ]
    names = [p.name for p in d.iterdir()]
    assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))]
    # and a clean of the recovered log ends where a clean without the crash would have
    clean(again, new_cleaner(clock))
    assert contents(again) == latest_per_key(appended)
    again.close()


def test_a_segment_deleted_under_the_clean_cancels_the_swap(tmp_path: Path, clock) -> None:
    """DeleteRecords deletes the segment being cleaned (after the cleaner opened it): the swap
    finds it gone and nothing is swapped; the copy is removed."""
    plog, appended = build(tmp_path / "t-0", clock)
    cleaner = new_cleaner(clock)
    sealed = len(plog.segments) - 1
    cut = plog.segments[1].base_offset
    real = cleaner_module._open_sealed
    opened = []

    def open_then_delete(p, seg):
        found = real(p, seg)
        opened.append(seg)
        if len(opened) == sealed + 1:  # the first segment of the first group to clean
            p.delete_records(cut)
        return found

    cleaner_module._open_sealed = open_then_delete
    try:
        with pytest.raises(cleaner_module.LogCleaningAborted, match="changed"):
            clean(plog, cleaner)
    finally:
        cleaner_module._open_sealed = real
    assert plog.log_start_offset == cut and plog.segments[0].base_offset == cut
    names = [p.name for p in plog.dir.iterdir()]
    assert not [n for n in names if n.endswith((".cleaned", ".swap"))]
    assert contents(plog) == [r for r in appended if r[0] >= cut]
    plog.close()


def test_replace_segments_refuses_what_is_no_longer_the_log(tmp_path: Path, clock) -> None:
    plog, _ = build(tmp_path / "t-0", clock)
    head = plog.active_segment
    stranger = LogSegment(tmp_path, 0, segment_bytes=1024, file_suffix=".cleaned", new=True)
    assert not plog.replace_segments(stranger, [head])  # never the head
    assert not plog.replace_segments(stranger, [plog.segments[1]])  # base offsets differ
    assert raw_batches(plog)
    stranger.delete()
    plog.close()
