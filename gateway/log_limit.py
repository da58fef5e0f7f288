"""Log lines rate-limited per key (a client's address), so that a flood of bad input cannot fill the
disk with one line per frame or connection.

Each key may log `burst` lines per `interval` seconds; what it logs beyond that is counted, and the
count is appended to its next line once the interval has passed. All keys together are held to
`total` lines per interval (a flood from many addresses). Keys are forgotten least recently used
first beyond `max_keys`.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable

_ALL = object()  # the key of the limit on all keys together


class _Window:
    __slots__ = ("start", "lines", "held_back")

    def __init__(self, start: float) -> None:
        self.start = start
        self.lines = 0
        self.held_back = 0


class RateLimitedLog:
    """A logger's lines, limited per key (see the module docstring)."""

    def __init__(
        self,
        logger: logging.Logger,
        burst: int = 5,
        interval: float = 10.0,
        total: int = 50,
        max_keys: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.burst = burst
        self.interval = interval
        self.total = total
        self.max_keys = max_keys
        self.clock = clock
        self._windows: collections.OrderedDict[object, _Window] = collections.OrderedDict()

    def log(self, key: str, level: int, msg: str, *args: object, exc_info: bool = False) -> bool:
        """Log `msg % args` at `level` unless `key` (or everyone) used up the interval's lines;
        True when the line was written."""
        if not self.logger.isEnabledFor(level):
            return False
        now = self.clock()
        mine = self._window(key, now)
        everyone = self._window(_ALL, now)
        if mine.lines >= self.burst or everyone.lines >= self.total:
            mine.held_back += 1
            return False
        mine.lines += 1
        everyone.lines += 1
        if mine.held_back:
            msg += " (%d more lines for %s were not logged)"
            args = (*args, mine.held_back, key)
            mine.held_back = 0
        self.logger.log(level, msg, *args, exc_info=exc_info)
        return True

    def _window(self, key: object, now: float) -> _Window:
        w = self._windows.get(key)
        if w is None:
            w = self._windows[key] = _Window(now)
            if len(self._windows) > self.max_keys:
                self._windows.popitem(last=False)
        else:
            self._windows.move_to_end(key)
            if now - w.start >= self.interval:
                w.start, w.lines = now, 0
        return w
