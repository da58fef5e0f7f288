"""Accepting client connections within the broker's limits.

- `max.connections`: while that many are open, accepting stops; new connections wait in the listen
  backlog until one closes (Kafka blocks its acceptor the same way).
- `max.connections.per.ip`: a connection from an address that already has that many is accepted and
  closed at once (Kafka's TooManyConnectionsException), logged rate-limited per address.
- Out of descriptors (EMFILE/ENFILE) or kernel memory: accepting pauses for `ACCEPT_BACKOFF_S` at a
  time, and the condition is logged at most once per log interval, instead of asyncio's accept loop
  logging a traceback for every attempt.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable

from gateway.log_limit import RateLimitedLog

log = logging.getLogger("gateway.acceptor")

ACCEPT_BATCH = 128  # connections accepted per readiness callback
ACCEPT_BACKOFF_S = 0.5
LOG_INTERVAL_S = 10.0  # the acceptor's own conditions (limit reached, out of descriptors)
_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class ConnectionLimits:
    """Open connections, in total and per client address, against their limits."""

    def __init__(self, max_total: int, max_per_address: int) -> None:
        self.max_total = max_total
        self.max_per_address = max_per_address
        self.total = 0
        self._per_address: dict[str, int] = {}

    @property
    def full(self) -> bool:
        return self.total >= self.max_total

    def admit(self, address: str) -> bool:
        """Count a new connection from `address`, or False when that address is at its limit."""
        count = self._per_address.get(address, 0)
        if count >= self.max_per_address:
            return False
        self._per_address[address] = count + 1
        self.total += 1
        return True

    def release(self, address: str) -> None:
        """A connection from `address` closed."""
        count = self._per_address.pop(address, 0) - 1
        if count > 0:
            self._per_address[address] = count
        self.total -= 1


async def listening_sockets(host: str | None, port: int, backlog: int) -> list[socket.socket]:
    """Non-blocking sockets listening on `host` (None: every address) and `port`, bound as
    `loop.create_server` binds them."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(
        host, port, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    socks: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                raise OSError(
                    exc.errno, f"error while attempting to bind on address {address!r}: {exc}"
                ) from None
            sock.listen(backlog)
            sock.setblocking(False)
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    return socks


class Acceptor:
    """Accepts connections on listening sockets within `limits`; `connect(sock, address)` hands an
    accepted socket over (and calls `release(address)` once it closes). Rejections are logged
    through `peer_log`, keyed by address."""

    def __init__(
        self,
        socks: list[socket.socket],
        limits: ConnectionLimits,
        connect: Callable[[socket.socket, str], None],
        peer_log: RateLimitedLog,
    ) -> None:
        self.socks = socks
        self.limits = limits
        self._connect = connect
        self._peer_log = peer_log
        self._log = RateLimitedLog(log, burst=1, interval=LOG_INTERVAL_S)
        self._loop = asyncio.get_running_loop()
        self._reading = False
        self._blocked = False  # stopped at max.connections
        self._backoff: asyncio.TimerHandle | None = None
        self._closed = False

    def start(self) -> None:
        self._set_reading(True)

    def close(self) -> None:
        """Stop accepting and close the listening sockets."""
        self._closed = True
        self._set_reading(False)
        if self._backoff is not None:
            self._backoff.cancel()
        for sock in self.socks:
            sock.close()

    def release(self, address: str) -> None:
        """A connection counted by `limits` closed; accept again if it was the limit."""
        self.limits.release(address)
        self.resume_if_below_limit()

    def resume_if_below_limit(self) -> None:
        """Accept again if accepting stopped at `max.connections` and the (shared) limits have room."""
        if self._blocked and not self.limits.full:
            self._blocked = False
            self._set_reading(self._backoff is None)

    def _set_reading(self, on: bool) -> None:
        on = on and not self._closed
        if on == self._reading:
            return
        self._reading = on
        for sock in self.socks:
            if on:
                self._loop.add_reader(sock.fileno(), self._accept, sock)
            else:
                self._loop.remove_reader(sock.fileno())

    def _accept(self, listener: socket.socket) -> None:
        limits = self.limits
        for _ in range(ACCEPT_BATCH):
            if limits.full:
                self._blocked = True
                self._set_reading(False)
                self._log.log(
                    "new connections",
                    logging.WARNING,
                    "max.connections=%d reached: new connections wait until one closes",
                    limits.max_total,
                )
                return
            try:
                sock, peer = listener.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:
                if exc.errno in _OUT_OF_RESOURCES:
                    self._back_off(exc)
                else:
                    self._log.log("new connections", logging.WARNING, "accept failed: %s", exc)
                return
            address = peer[0] if isinstance(peer, tuple) else str(peer)
            if not limits.admit(address):
                sock.close()
                self._peer_log.log(
                    address,
                    logging.INFO,
                    "rejected connection from %s: it already has max.connections.per.ip=%d",
                    address,
                    limits.max_per_address,
                )
                continue
            sock.setblocking(False)
            self._connect(sock, address)

    def _back_off(self, exc: OSError) -> None:
        self._set_reading(False)
        self._log.log(
            "new connections",
            logging.WARNING,
            "cannot accept connections (%d open): %s; pausing accepts %.1f s at a time until it "
            "clears (raise the descriptor limit, ulimit -n, or set max.connections below it)",
            self.limits.total,
            exc.strerror or exc,
            ACCEPT_BACKOFF_S,
        )
        self._backoff = self._loop.call_later(ACCEPT_BACKOFF_S, self._retry)

    def _retry(self) -> None:
        self._backoff = None
        if not self._blocked:
            self._set_reading(True)
