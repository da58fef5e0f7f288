"""The broker's file descriptor budget (RLIMIT_NOFILE).

A partition holds one descriptor: its head segment's log file (indexes live in memory and sealed
segments are opened only while read). Creating partitions that cannot all be opened would fail half
way, and a broker whose partitions exceed its limit could not start again, so the store checks what
fits before it creates anything (`check_room`) and at start-up. Some descriptors are always kept for
what is not a partition: connections, reads of sealed segments, index and checkpoint writes.
"""

from __future__ import annotations

import logging
import os
import resource

from rdmalog.errors import PolicyViolationError

log = logging.getLogger(__name__)


def raise_soft_limit() -> tuple[int, int]:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit (allowed without privileges) and
    log it; returns (soft limit before, soft limit now)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:  # a soft limit cannot exceed the kernel's nr_open
        try:
            with open("/proc/sys/fs/nr_open") as f:
                target = int(f.read())
        except (OSError, ValueError):
            target = soft
    if soft == resource.RLIM_INFINITY or soft >= target:
        log.info("descriptor limit (RLIMIT_NOFILE): %s", "unlimited" if soft < 0 else soft)
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as e:
        log.warning("cannot raise the descriptor limit from %d to %d: %s", soft, target, e)
        return soft, soft
    log.info("raised the descriptor limit (RLIMIT_NOFILE) from %d to %d", soft, target)
    return soft, target


def kept_free(limit: int) -> int:
    """Descriptors never given to partitions: an eighth of the limit, 64 to 4096."""
    return min(max(limit // 8, 64), 4096)


def open_count() -> int:
    """Descriptors this process has open now (Linux: /proc/self/fd)."""
    return len(os.listdir("/proc/self/fd")) - 1  # less the one listing the directory


def room() -> tuple[int | None, str]:
    """(descriptors partitions may still take or None when unlimited, how that was reckoned)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return None, "no descriptor limit"
    used, keep = open_count(), kept_free(soft)
    return max(soft - used - keep, 0), (
        f"its limit (RLIMIT_NOFILE) is {soft}, {used} are open and {keep} are kept for "
        "connections and reads"
    )


def check_room(partitions: int, what: str) -> None:
    """Raise PolicyViolationError when `partitions` more partitions would not fit the limit."""
    free, why = room()
    if free is not None and partitions > free:
        raise PolicyViolationError(
            f"{what} needs {partitions} file descriptors (one per partition) but the broker can "
            f"open only {free} more: {why}. Raise the broker's descriptor limit (ulimit -n, "
            "systemd LimitNOFILE) or use fewer partitions."
        )
