"""Requests within their memory budget, and the heavy ones off the event loop and one at a time.

The codec (gateway/protocol/compiler.py) checks every array count against the bytes the request
can still hold and charges what the decoded request will take to two budgets: memory (an
estimate of its dicts, lists, strings and numbers) and work (its array elements). Every request is
first decoded on the event loop with a small work budget, a few milliseconds of decoding. One with
more elements is heavy: it is decoded again in a worker thread, where the interpreter hands the
loop its turn every few milliseconds, and heavy requests are handled one at a time (decode,
handler, answer), so together they hold about one memory budget. A request whose decoded form
would take more than `request.max.decoded.bytes` is refused: the connection is closed with a log
line, as Kafka closes a connection whose request it cannot parse. Handlers build answers that
grow with the request with `gateway/handlers/answers.py`.
"""

from __future__ import annotations

import asyncio
import time

from gateway.protocol import DecodeBudgetExceeded, RequestHeader, decode_request

# Array elements decoded on the event loop (about 1-3 ms of decoding per thousand); beyond, a thread.
ON_LOOP_WORK = 4096
TURN_S = 0.005  # a handler working through a request's elements gives the loop a turn this often
CHECK_EVERY = 32  # elements between looks at the clock


class Turns:
    """The event loop's turns for a handler working through a request's elements: in its loop,
    `if turns.due(): await turns.take()` costs a counter most of the time and lets other clients
    be served every few milliseconds."""

    __slots__ = ("_count", "_since")

    def __init__(self) -> None:
        self._count = 0
        self._since = time.monotonic()

    def due(self) -> bool:
        self._count += 1
        return self._count % CHECK_EVERY == 0 and time.monotonic() - self._since > TURN_S

    async def take(self) -> None:
        await asyncio.sleep(0)
        self._since = time.monotonic()


class RequestLimits:
    """The decode budgets of one gateway and the lock heavy requests take turns on."""

    def __init__(self, max_decoded_bytes: int) -> None:
        self.max_decoded_bytes = max_decoded_bytes
        self.heavy = asyncio.Lock()

    def decode_on_loop(self, header: RequestHeader, frame: memoryview) -> dict | None:
        """The decoded request, or None when it is heavy (decode it with `decode_heavy`, holding
        `heavy`). Raises DecodeError, DecodeBudgetExceeded past the memory budget."""
        try:
            return decode_request(header, frame, self.max_decoded_bytes, ON_LOOP_WORK)
        except DecodeBudgetExceeded as exc:
            if exc.work:
                return None
            raise

    async def decode_heavy(self, header: RequestHeader, frame: memoryview) -> dict:
        """Decode a heavy request in a worker thread (the caller holds `heavy`)."""
        return await asyncio.to_thread(decode_request, header, frame, self.max_decoded_bytes)
