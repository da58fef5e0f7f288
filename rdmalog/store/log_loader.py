"""Reading a partition directory at open: leftovers of interrupted operations are cleaned up, the
segment files found, and each segment loaded, or recovered (validated and re-indexed) from the
recovery point on after an unclean shutdown, as Kafka's LogLoader does."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from rdmalog.store.index import IndexCorruptError
from rdmalog.store.segment import LogSegment

log = logging.getLogger(__name__)

_LEFTOVER_SUFFIXES = (".deleted", ".cleaned", ".tmp")


def clean_leftovers(directory: Path) -> set[str]:
    """Remove leftovers of interrupted operations; returns the file names that remain."""
    names = set(os.listdir(directory))
    for name in list(names):
        p = directory / name
        if name.endswith(_LEFTOVER_SUFFIXES):
            names.discard(name)
            p.unlink(missing_ok=True)
        elif name.endswith(".swap"):
            # A .log.swap is a finished replacement (Kafka renames it into place); indexes are rebuilt.
            names.discard(name)
            target = directory / name[: -len(".swap")]
            if target.name.endswith(".log"):
                os.replace(p, target)
                names.add(target.name)
                for suffix in (".index", ".timeindex"):
                    names.discard(target.name[:-4] + suffix)
                    (directory / (target.name[:-4] + suffix)).unlink(missing_ok=True)
            else:
                p.unlink(missing_ok=True)
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
            for fd in seg.dup_fds():
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
    return segs
