"""A full or failing log directory: Kafka's KAFKA_STORAGE_ERROR for the client, one clear line for the
operator (what is full, what fails, what to do) instead of a traceback per request.

Every store operation that writes turns an OSError into KafkaStorageError with `storage_error`.
The line is logged at most once a minute per kind of failure (with the count of those not logged),
and once more when writes succeed again (`recovered`).
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import threading
import time
from pathlib import Path

from rdmalog.errors import KafkaStorageError

log = logging.getLogger("rdmalog.store.disk")

REPORT_INTERVAL_S = 60.0
_FULL = (errno.ENOSPC, errno.EDQUOT)

_lock = threading.Lock()
_reported: dict[tuple[int, int], tuple[float, int]] = {}  # (device, errno) -> (last line, unsaid)


def is_full(exc: BaseException) -> bool:
    """True for "no space left" and "quota exceeded"."""
    return isinstance(exc, OSError) and exc.errno in _FULL


def _device(path: Path) -> int:
    for p in (path, *path.parents):
        try:
            return os.stat(p).st_dev
        except OSError:
            continue
    return -1


def _free(path: Path) -> str:
    for p in (path, *path.parents):
        try:
            usage = shutil.disk_usage(p)
            return f"{usage.free >> 20} MiB free of {usage.total >> 20} MiB"
        except OSError:
            continue
    return "free space unknown"


def storage_error(exc: OSError, path: Path, doing: str) -> KafkaStorageError:
    """The KafkaStorageError for `exc`, raised while `doing` under `path` (a file or directory of
    the log dir); says so in the log, at most once a minute for the same device and error."""
    path = Path(path)
    key = (_device(path), exc.errno or 0)
    now = time.monotonic()
    with _lock:
        last, unsaid = _reported.get(key, (-REPORT_INTERVAL_S, 0))
        say = now - last >= REPORT_INTERVAL_S
        _reported[key] = (now, 0) if say else (last, unsaid + 1)
    if say:
        more = f" ({unsaid} more such failures in the last minute)" if unsaid else ""
        if is_full(exc):
            log.error(
                "the file system of %s is full (%s): %s failed: %s%s. Until space is freed, "
                "appends, topic creation and checkpoints fail with KAFKA_STORAGE_ERROR; what was "
                "acknowledged stays intact. Free space: delete topics or records "
                "(DeleteTopics/DeleteRecords free it at once), lower retention.ms/retention.bytes, "
                "or grow the file system",
                path, _free(path), doing, exc.strerror or exc, more,
            )  # fmt: skip
        else:
            log.error(
                "I/O error on %s: %s failed: %s%s (answered KAFKA_STORAGE_ERROR)",
                path, doing, exc, more,
            )  # fmt: skip
    return KafkaStorageError(f"{doing} failed: {exc}")


def recovered(path: Path) -> None:
    """A write under `path` succeeded: say once that failures reported for its device are over."""
    if not _reported:
        return
    device = _device(Path(path))
    with _lock:
        gone = [key for key in _reported if key[0] == device]
        for key in gone:
            del _reported[key]
    if gone:
        log.warning("writes to %s succeed again", path)
