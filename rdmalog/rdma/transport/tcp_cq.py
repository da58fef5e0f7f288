"""The tcp transport's completion queue: completions from the engine thread, or from driving the
connecting side's connections (which run no thread) in poll/wait; and its descriptors for an
event loop (`notify_fds`)."""

from __future__ import annotations

import os
import time
from collections import deque
from typing import Any

from rdmalog.rdma.transport.interface import WorkCompletion, wait_readable

# An initiator waiting for an answer polls this long before it sleeps: a wakeup from a sleeping
# poll(2) costs ~25 us on these VMs (a loopback round trip of two Python processes: 57 us when both
# ends sleep, 8.8 us when both poll).
SPIN_S = 100e-6


def _spin_then_wait(fds: list, timeout: float | None) -> bool:
    """wait_readable, after polling without sleeping for SPIN_S."""
    end = time.perf_counter() + SPIN_S
    while time.perf_counter() < end:
        if wait_readable(fds, 0):
            return True
    return wait_readable(fds, timeout)


class TcpCQ:
    """Completions from the engine thread or from driving the connections attached to it."""

    def __init__(self, dev: Any):
        self.device = dev
        self._local: deque[WorkCompletion] = deque()
        self._pumped: list[Any] = []  # connect-side QPs whose socket this CQ drives
        self._efd = os.eventfd(0, os.EFD_NONBLOCK)
        self._sleeping = False
        self._armed = False  # notify_fds() was called: local completions write the eventfd

    def _push_local(self, wc: WorkCompletion) -> None:
        self._local.append(wc)
        if self._sleeping:
            os.eventfd_write(self._efd, 1)

    def poll(self, max_entries: int = 16) -> list[WorkCompletion]:
        for qp in self._pumped:
            qp._pump(block=False)
        out: list[WorkCompletion] = []
        local = self._local
        while local and len(out) < max_entries:
            out.append(local.popleft())
        return out

    def wait(self, timeout: float | None, max_entries: int = 16) -> list[WorkCompletion]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            out = self.poll(max_entries)
            if out:
                return out
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return out
            self._sleeping = True
            try:
                if not self._local:
                    fds = [self._efd] + [qp.sock for qp in self._pumped if not qp.closed]
                    # A thread that drives its connections polls them before it sleeps; an
                    # engine-fed CQ does not: spinning would hold the GIL the engine needs.
                    (_spin_then_wait if self._pumped else wait_readable)(fds, left)
            finally:
                self._sleeping = self._armed
            self.notified()

    def notify_fds(self) -> list[int]:
        """The eventfd and the sockets of the connections it drives, for an event loop's reader;
        from now on local completions write the eventfd. `notified()`, then `poll()`."""
        self._armed = self._sleeping = True
        return [self._efd] + [qp.sock.fileno() for qp in self._pumped if not qp.closed]

    def notified(self) -> None:
        try:
            os.eventfd_read(self._efd)
        except BlockingIOError:
            pass

    def close(self) -> None:
        """Close its eventfd, once (a service stopped twice closes its queues twice)."""
        if self._efd >= 0:
            os.close(self._efd)
            self._efd = -1
