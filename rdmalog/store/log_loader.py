"""Reading a partition directory at open: leftovers of interrupted operations are cleaned up, the
segment files found, and each segment loaded, or recovered (validated and re-indexed) from the
recovery point on after an unclean shutdown, as Kafka's LogLoader does."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from rdmalog.store.disk import storage_error
from rdmalog.store.index import IndexCorruptError
from rdmalog.store.leader_epochs import FILE_NAME as LEADER_EPOCH_FILE
from rdmalog.store.leader_epochs import LeaderEpochCache
from rdmalog.store.producer_state import ProducerStateTable
from rdmalog.store.records import CONTROL_BIT, LOG_OVERHEAD, MIN_BATCH_LENGTH
from rdmalog.store.segment import LogSegment
from rdmalog.store.segment import walk_headers as walk_file_headers
from rdmalog.store.segment_swap import CLEANED_SUFFIX, SWAP_SUFFIX

if TYPE_CHECKING:
    from rdmalog.store.log import PartitionLog

log = logging.getLogger(__name__)

_LEFTOVER_SUFFIXES = (".deleted", ".tmp")


def _offset_of(name: str) -> int | None:
    """The base offset a segment file's name starts with (Kafka's offsetFromFileName), or None."""
    stem = name.partition(".")[0]
    return int(stem) if stem.isdigit() else None


def _next_offset(path: Path) -> int:
    """The offset after the last whole batch of the log file `path` (its base when it has none)."""
    nxt = _offset_of(path.name) or 0
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        for at, h in walk_file_headers(fd, 0, size):
            if h[1] < MIN_BATCH_LENGTH or at + h[1] + LOG_OVERHEAD > size:
                break
            nxt = h[0] + h[3] + 1
    finally:
        os.close(fd)
    return nxt


def clean_leftovers(directory: Path) -> set[str]:
    """Remove leftovers of interrupted operations and finish or undo an interrupted swap of cleaned
    segments, as Kafka's LogLoader does; returns the file names that remain.

    `.deleted` and `.tmp` files go. `.cleaned` files are a cleaning that never reached its swap:
    they go, with any `.swap` file at or after the first of them (an incomplete operation).
    The remaining `.swap` files were complete: the segments they replace (files whose base offset
    lies between the first swapped base offset and the offset after the swapped data) go, then
    the `.swap` files take their names."""
    names = set(os.listdir(directory))
    swaps, cleaned_from = [], None
    for name in list(names):
        if name.endswith(_LEFTOVER_SUFFIXES):
            names.discard(name)
            (directory / name).unlink(missing_ok=True)
        elif name.endswith(CLEANED_SUFFIX) and _offset_of(name) is not None:
            off = _offset_of(name)
            cleaned_from = off if cleaned_from is None else min(cleaned_from, off)
            names.discard(name)
            (directory / name).unlink(missing_ok=True)
        elif name.endswith(SWAP_SUFFIX) and _offset_of(name) is not None:
            swaps.append(name)
    for name in list(swaps):
        if cleaned_from is not None and _offset_of(name) >= cleaned_from:  # type: ignore[operator]
            log.warning("%s: removing %s of an incomplete swap", directory, name)
            swaps.remove(name)
            names.discard(name)
            (directory / name).unlink(missing_ok=True)
    logs = [n for n in swaps if n[: -len(SWAP_SUFFIX)].endswith(".log")]
    if logs:
        low = min(_offset_of(n) for n in logs)  # type: ignore[type-var]
        high = max(_next_offset(directory / n) for n in logs)
        for name in list(names):
            off = _offset_of(name)
            if not name.endswith(SWAP_SUFFIX) and off is not None and low <= off < high:
                names.discard(name)
                (directory / name).unlink(missing_ok=True)
    for name in swaps:
        log.info("%s: completing the swap of %s", directory, name)
        target = name[: -len(SWAP_SUFFIX)]
        os.replace(directory / name, directory / target)
        names.discard(name)
        names.add(target)
    return names


def segment_bases(directory: Path) -> list[int]:
    """Base offsets of the directory's segments, after removing leftovers of interrupted
    operations and indexes whose log is gone (Kafka deletes them too)."""
    names = clean_leftovers(directory)
    for n in names:
        stem, _, suffix = n.partition(".")
        if suffix in ("index", "timeindex") and f"{stem}.log" not in names:
            os.unlink(directory / n)
    return sorted(
        int(n[:20]) for n in names if n.endswith(".log") and len(n) == 24 and n[:20].isdigit()
    )


def load_segments(name: str, segs: list[LogSegment], first_unflushed: int) -> list[LogSegment]:
    """Load each segment of log `name`, recovering those from `first_unflushed` on and any whose
    indexes fail their check; all but the last are sealed, recovered ones synced. Returns the
    segments that remain (a truncated one drops those after it)."""
    i = 0
    recovered = []
    while i < len(segs):
        seg = segs[i]
        need_recovery = i >= first_unflushed
        if not need_recovery:
            try:
                seg.load()
            except IndexCorruptError as e:
                log.warning("%s: %s; rebuilding the segment's indexes", name, e)
                need_recovery = True
        if need_recovery:
            prev_end = segs[i - 1].next_offset if i else None
            _, corrupt = seg.recover(prev_end)
            recovered.append(seg)
            nxt = segs[i + 1].base_offset if i + 1 < len(segs) else None
            # Bytes cut past the last batch that still ends where the next file begins were
            # never committed (an RDMA write refused or revoked by a roll, left while a
            # registration kept the trim waiting): the later segments follow on, keep them.
            if nxt is not None and (seg.next_offset > nxt or (corrupt and seg.next_offset != nxt)):
                log.warning(
                    "%s: segment %d was truncated; deleting %d later segment(s)",
                    name, seg.base_offset, len(segs) - i - 1,
                )  # fmt: skip
                for later in segs[i + 1 :]:
                    later.delete()
                del segs[i + 1 :]
        i += 1
    for seg in segs[:-1]:
        seg.seal()
    for seg in recovered:  # recovered data becomes the new recovery point: make it durable
        if not seg.deleted:
            _sync_recovered(name, seg)
    return segs


def _sync_recovered(name: str, seg: LogSegment) -> None:
    """fsync a recovered segment. On a full disk its rebuilt indexes may not fit in their files:
    the log data is synced all the same (an index entry only shortens a lookup's walk, and the
    next recovery rebuilds what is missing) and the failure is reported."""
    try:
        fds = seg.dup_fds()
    except OSError as e:
        storage_error(e, seg.path.parent, f"writing the rebuilt indexes of {name}")
        fds = [os.dup(seg.handle.fileno())]
    for fd in fds:
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def walk_headers(plog: PartitionLog, from_offset: int) -> Iterator[tuple[int, tuple]]:
    """(base offset, header) of every batch of `plog` whose last offset >= `from_offset`."""
    for seg in plog.segments:
        if seg.next_offset <= from_offset:
            continue
        for _, h in seg.headers():
            if h[0] + h[6] >= from_offset:
                yield h[0], h


def load_leader_epochs(plog: PartitionLog, recovered_from: int | None) -> LeaderEpochCache:
    """The checkpoint file, with the epochs of recovered batches assigned again (the file is synced
    by flushes, so it may lack what came after the last one), as Kafka's recovery does; rebuilt
    from every batch when it is missing or unreadable."""
    path = plog.dir / LEADER_EPOCH_FILE
    cache = LeaderEpochCache.load(path)
    if cache is None:
        cache, recovered_from = LeaderEpochCache(path), 0
    before = list(cache.entries)
    if recovered_from is not None:
        for base, h in walk_headers(plog, max(recovered_from, plog.log_start_offset)):
            cache.assign(h[2], base)
    cache.truncate_from_end(plog.log_end_offset)
    if cache.entries != before:
        try:
            cache.save()
        except OSError as e:  # a full disk: the log's next flush writes the file
            storage_error(e, path, f"saving the leader epochs of {plog.name}")
            plog._save_epochs()
    return cache


def load_producer_state(plog: PartitionLog, file_name: str) -> ProducerStateTable:
    """The snapshot a clean close left (then removed: valid for this start only), brought up to
    date from the batch headers after it; rebuilt from every batch without one."""
    path = plog.dir / file_name
    restored = ProducerStateTable.restore(path)
    path.unlink(missing_ok=True)
    table, start = restored if restored else (ProducerStateTable(), plog.log_start_offset)
    if start > plog.log_end_offset:  # the log lost data the snapshot knew: rebuild it all
        table, start = ProducerStateTable(), plog.log_start_offset
    for base, h in walk_headers(plog, start):
        if h[9] >= 0 and not h[5] & CONTROL_BIT:
            # the sequences a batch took span its offsets (lastOffsetDelta + 1), as Kafka's
            # lastSequence: a cleaned batch keeps them with fewer records, or none
            table.update(h[9], h[10], h[11], h[6] + 1, base, base + h[6], h[8])
    return table
