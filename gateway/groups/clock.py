"""Time for the coordinator: a wall clock for timestamps and timers for deadlines.

The coordinator never sleeps or reads the time itself; it is given a `Clock`. `LoopClock` runs timers
on an asyncio loop, `ManualClock` is advanced by hand (unit tests drive the state machine with it).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol


class Timer(Protocol):
    """A scheduled callback that can be cancelled."""

    def cancel(self) -> None: ...


class Clock(Protocol):
    """What the coordinator needs to know about time."""

    def now_ms(self) -> int:
        """Wall-clock milliseconds since the epoch (commit and state timestamps)."""
        ...

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Timer:
        """Run `callback` once, `delay_ms` from now."""
        ...


class LoopClock:
    """Timers on an asyncio event loop, timestamps from `time.time()`."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Timer:
        return self.loop.call_later(max(delay_ms, 0) / 1000.0, callback)


class _ManualTimer:
    __slots__ = ("deadline", "seq", "callback", "cancelled")

    def __init__(self, deadline: int, seq: int, callback: Callable[[], None]) -> None:
        self.deadline = deadline
        self.seq = seq
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def __lt__(self, other: _ManualTimer) -> bool:
        return (self.deadline, self.seq) < (other.deadline, other.seq)


class ManualClock:
    """A clock that only moves when `advance` is called; due timers fire in deadline order."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms
        self._timers: list[_ManualTimer] = []
        self._seq = itertools.count()

    def now_ms(self) -> int:
        return self._now

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Timer:
        timer = _ManualTimer(self._now + max(delay_ms, 0), next(self._seq), callback)
        heapq.heappush(self._timers, timer)
        return timer

    def advance(self, ms: int) -> None:
        """Move time forward by `ms`, firing every timer that falls due on the way."""
        target = self._now + ms
        while self._timers and self._timers[0].deadline <= target:
            timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self._now = max(self._now, timer.deadline)
            timer.callback()
        self._now = target

    def pending(self) -> int:
        """How many live timers are scheduled."""
        return sum(1 for t in self._timers if not t.cancelled)
