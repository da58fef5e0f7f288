"""An asyncio Kafka-protocol client connection on the gateway's codec: what one broker uses to talk to
another (followers fetching from leaders). One request at a time.

Responses are received with `recv_into` into one buffer the connection keeps (asyncio's
BufferedProtocol), grown when a frame needs more and reused afterwards: a follower's fetch responses
carry up to `replica.fetch.response.max.bytes` of records, which are decoded as memoryviews of that
buffer and appended from it, with no copy in between. So a response, and every memoryview in it, is
valid only until the next request on the same connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import struct
from typing import Any

from gateway.protocol import decode_response, encode_request

_SIZE = struct.Struct(">i")
MAX_RESPONSE_BYTES = 256 * 1024 * 1024
INITIAL_BUFFER = 1 << 20


class ProtocolError(ConnectionError):
    """The peer answered with something that is not the expected response."""


class _Receiver(asyncio.BufferedProtocol):
    """Frames received straight into a reusable buffer; one awaited at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray(INITIAL_BUFFER)
        self.mv = memoryview(self.buf)
        self.have = 0
        self.size = -1  # the current frame's size once its prefix arrived
        self.waiter: asyncio.Future | None = None
        self.closed: BaseException | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = exc or ConnectionResetError("connection closed by the peer")
        w = self.waiter
        if w is not None and not w.done():
            w.set_exception(self.closed)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.mv[self.have :]

    def buffer_updated(self, nbytes: int) -> None:
        self.have += nbytes
        if self.size < 0 and self.have >= 4:
            size = _SIZE.unpack_from(self.buf, 0)[0]
            if not 4 <= size <= MAX_RESPONSE_BYTES:
                self._fail(ProtocolError(f"response frame of {size} bytes"))
                return
            self.size = size
            if size + 4 > len(self.buf):  # grow: earlier responses keep the old buffer alive
                grown = bytearray(max(size + 4, 2 * len(self.buf)))
                grown[: self.have] = self.mv[: self.have]
                self.buf, self.mv = grown, memoryview(grown)
        if self.size >= 0 and self.have >= self.size + 4:
            w = self.waiter
            if w is not None and not w.done():
                w.set_result(self.mv[4 : 4 + self.size])

    def _fail(self, exc: BaseException) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_exception(exc)
        if self.transport is not None:
            self.transport.abort()

    def expect(self) -> asyncio.Future:
        """The next frame (its bytes without the size prefix, a view of the buffer)."""
        if self.closed is not None:
            raise self.closed
        self.have, self.size = 0, -1
        self.waiter = asyncio.get_running_loop().create_future()
        return self.waiter


class KafkaConnection:
    """A connection to a Kafka-protocol server: `await request(key, version, body)` -> response."""

    def __init__(self, transport: asyncio.Transport, receiver: _Receiver, client_id: str) -> None:
        self.transport = transport
        self.receiver = receiver
        self.client_id = client_id
        self._correlation = 0
        self._lock = asyncio.Lock()

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        client_id: str = "rdmalog",
        ssl_context: ssl.SSLContext | None = None,
    ) -> KafkaConnection:
        """Connect (over TLS with `ssl_context`)."""
        loop = asyncio.get_running_loop()
        transport, receiver = await loop.create_connection(
            _Receiver, host, port, ssl=ssl_context, server_hostname=host if ssl_context else None
        )
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(transport, receiver, client_id)

    async def request(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        """Send a request and decode its response (valid until the next request)."""
        async with self._lock:
            self._correlation = (self._correlation + 1) & 0x7FFFFFFF
            corr = self._correlation
            frame = self.receiver.expect()
            self.transport.write(encode_request(api_key, version, corr, body, self.client_id))
            data = await frame
        got, response = decode_response(api_key, version, data)
        if got != corr:
            raise ProtocolError(f"correlation id {got}, expected {corr}")
        return response

    def abort(self) -> None:
        """Drop the connection at once (a request in flight fails with a connection error)."""
        self.transport.abort()

    async def close(self) -> None:
        self.transport.close()
        await asyncio.sleep(0)
