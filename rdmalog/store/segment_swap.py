"""Sealed segments replaced by their cleaned copy, as Kafka's replaceSegments does it (a mixin of
`PartitionLog`, like `in_place.py`).

The cleaner writes a group of sealed segments' surviving batches into one new segment whose files
end in `.cleaned`, syncs them and calls `replace_segments(cleaned, old)`: the cleaned files are
renamed `.swap` and the directory synced; then, under the log's lock, the old segments' files are
renamed `.deleted`, the `.swap` files take their final names and the log's list of segments
changes; then the directory is synced again and the old files unlinked (readers holding them keep
their descriptors). A crash at any point leaves files `log_loader.clean_leftovers` finishes or
undoes as Kafka's LogLoader does. Produce and fetch wait only for the renames, never for the
cleaning or an fsync.

Swap listeners (`add_swap_listener`) learn, with none of the log's locks held, which segments
were replaced: the RDMA service withdraws their read registrations, and their consumers seek
again (into the cleaned file).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from rdmalog.store.segment import LogSegment

log = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"


def sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SegmentSwap:
    """Mixin of PartitionLog: cleaned segments swapped in (see the module docstring)."""

    # What it uses of PartitionLog
    lock: threading.RLock
    segments: list[LogSegment]
    _bases: list[int]
    dir: Path
    name: str
    closed: bool
    _swap_listeners: list[Callable[..., None]]

    def replace_segments(self, cleaned: LogSegment, old: list[LogSegment]) -> bool:
        """Put `cleaned` (synced, its files ending in `.cleaned`, its base offset old[0]'s) in place
        of the consecutive sealed segments `old`. False, and nothing changed, when the log moved
        on meanwhile (one of them was deleted by retention or DeleteRecords, truncated, or the
        log closed): the caller drops its copy. The directory syncs and the unlinking of the old
        files happen outside the log's lock: produce and fetch wait only for renames."""
        with self.lock:
            if self._place_of(cleaned, old) is None:
                return False
        cleaned.rename_suffix(CLEANED_SUFFIX, SWAP_SUFFIX)
        sync_dir(self.dir)  # the .swap names are durable before any old file goes
        with self.lock:
            i = self._place_of(cleaned, old)
            if i is None:  # gone meanwhile: the copy goes too
                cleaned.delete()
                return False
            gone = [path for seg in old for path in seg.mark_deleted()]
            cleaned.rename_suffix(SWAP_SUFFIX, "")
            self.segments[i : i + len(old)] = [cleaned]
            self._bases[i : i + len(old)] = [cleaned.base_offset]
        sync_dir(self.dir)
        for path in gone:  # readers holding them keep their descriptors
            path.unlink(missing_ok=True)
        for cb in list(self._swap_listeners):
            try:
                cb(self, old)
            except Exception:
                log.exception("%s: swap listener failed", self.name)
        return True

    def _place_of(self, cleaned: LogSegment, old: list[LogSegment]) -> int | None:
        """Where the consecutive sealed segments `old` are in the log (under its lock), or None
        when they no longer are (or it is closed, or they would take the head)."""
        if self.closed or not old or cleaned.base_offset != old[0].base_offset:
            return None
        try:
            i = self.segments.index(old[0])
        except ValueError:
            return None
        span = self.segments[i : i + len(old)]
        if (
            len(span) != len(old)
            or any(a is not b for a, b in zip(span, old, strict=True))
            or i + len(old) >= len(self.segments)  # never the head
            or any(seg.active or seg.deleted for seg in old)
        ):
            return None
        return i

    def add_swap_listener(self, cb: Callable[..., None]) -> None:
        """`cb(log, replaced_segments)` after cleaned segments replaced them, with none of the log's
        locks held (so it may take locks that are taken before the log's)."""
        self._swap_listeners.append(cb)

    def remove_swap_listener(self, cb: Callable[..., None]) -> None:
        if cb in self._swap_listeners:
            self._swap_listeners.remove(cb)
