"""An asyncio Kafka-protocol client connection on the gateway's codec: what one broker uses to talk to
another (followers fetching from leaders). One request at a time; response frames are bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from typing import Any

from gateway.protocol import decode_response, encode_request

_SIZE = struct.Struct(">i")
MAX_RESPONSE_BYTES = 256 * 1024 * 1024


class ProtocolError(ConnectionError):
    """The peer answered with something that is not the expected response."""


class KafkaConnection:
    """A connection to a Kafka-protocol server: `await request(key, version, body)` -> response."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str
    ) -> None:
        self.reader, self.writer = reader, writer
        self.client_id = client_id
        self._correlation = 0
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, host: str, port: int, client_id: str = "rdmalog") -> KafkaConnection:
        reader, writer = await asyncio.open_connection(host, port, limit=1 << 20)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(reader, writer, client_id)

    async def request(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        async with self._lock:
            self._correlation = (self._correlation + 1) & 0x7FFFFFFF
            corr = self._correlation
            self.writer.write(encode_request(api_key, version, corr, body, self.client_id))
            await self.writer.drain()
            (size,) = _SIZE.unpack(await self.reader.readexactly(4))
            if not 4 <= size <= MAX_RESPONSE_BYTES:
                raise ProtocolError(f"response frame of {size} bytes")
            frame = await self.reader.readexactly(size)
        got, response = decode_response(api_key, version, frame)
        if got != corr:
            raise ProtocolError(f"correlation id {got}, expected {corr}")
        return response

    def abort(self) -> None:
        """Drop the connection at once (a request in flight fails with a connection error)."""
        self.writer.transport.abort()

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()
