"""A TCP tap between Kafka clients and a broker: forwards bytes unchanged both ways and keeps the
record-batch bytes of every Produce request as the client sent them and of every Fetch response as
the broker sent them (and, with `keep_requests`, every request frame: the fuzz corpus).

Start the broker with `advertised.listeners` pointing at the tap so that clients reach the leader
through it too.
"""

from __future__ import annotations

import socket
import struct
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from tests.integration.rawkafka import recv_exact

PRODUCE = 0
FETCH = 1
FIRST_FLEXIBLE_PRODUCE = 9
FIRST_TOPIC_ID_PRODUCE = 13
FIRST_FLEXIBLE_FETCH = 12
FIRST_TOPIC_ID_FETCH = 13


@dataclass(frozen=True)
class ProducedRecords:
    version: int
    topic: str | uuid.UUID  # a name, or a topic id from Produce v13 on
    partition: int
    records: bytes


class _Reader:
    def __init__(self, buf: bytes) -> None:
        self.buf, self.pos = buf, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise ValueError("truncated request")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def int16(self) -> int:
        return struct.unpack(">h", self.take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self.take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    def string(self, flexible: bool) -> str | None:
        n = self.uvarint() - 1 if flexible else self.int16()
        return None if n < 0 else self.take(n).decode()

    def bytes_(self, flexible: bool) -> bytes | None:
        n = self.uvarint() - 1 if flexible else self.int32()
        return None if n < 0 else self.take(n)

    def array_len(self, flexible: bool) -> int:
        return self.uvarint() - 1 if flexible else self.int32()

    def tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


def parse_produce(frame: bytes) -> list[ProducedRecords]:
    """The (topic, partition, records) of a Produce request frame (without its size prefix)."""
    r = _Reader(frame)
    api_key, version = r.int16(), r.int16()
    if api_key != PRODUCE:
        return []
    flexible = version >= FIRST_FLEXIBLE_PRODUCE
    r.int32()  # correlation id
    r.string(False)  # client id: a plain nullable string in every header version
    if flexible:
        r.tagged_fields()
    if version >= 3:
        r.string(flexible)  # transactional id
    r.int16()  # acks
    r.int32()  # timeout
    out = []
    for _ in range(r.array_len(flexible)):
        if version >= FIRST_TOPIC_ID_PRODUCE:
            topic: str | uuid.UUID = uuid.UUID(bytes=r.take(16))
        else:
            topic = r.string(flexible) or ""
        for _ in range(r.array_len(flexible)):
            partition = r.int32()
            records = r.bytes_(flexible)
            if flexible:
                r.tagged_fields()
            if records:
                out.append(ProducedRecords(version, topic, partition, records))
        if flexible:
            r.tagged_fields()
    return out


def request_key(frame: bytes) -> tuple[int, int, int]:
    """(api key, api version, correlation id) of a request frame."""
    return struct.unpack_from(">hhi", frame, 0)


def parse_fetch_response(version: int, frame: bytes) -> list[ProducedRecords]:
    """The (topic, partition, records) of a Fetch response frame (without its size prefix)."""
    flexible = version >= FIRST_FLEXIBLE_FETCH
    r = _Reader(frame)
    r.int32()  # correlation id
    if flexible:
        r.tagged_fields()
    if version >= 1:
        r.int32()  # throttle time
    if version >= 7:
        r.int16()  # error code
        r.int32()  # session id
    out = []
    for _ in range(r.array_len(flexible)):
        if version >= FIRST_TOPIC_ID_FETCH:
            topic: str | uuid.UUID = uuid.UUID(bytes=r.take(16))
        else:
            topic = r.string(flexible) or ""
        for _ in range(r.array_len(flexible)):
            partition = r.int32()
            r.take(2 + 8)  # error code, high watermark
            if version >= 4:
                r.take(8)  # last stable offset
            if version >= 5:
                r.take(8)  # log start offset
            for _ in range(max(0, r.array_len(flexible)) if version >= 4 else 0):
                r.take(16)  # aborted transactions
                if flexible:
                    r.tagged_fields()
            if version >= 11:
                r.int32()  # preferred read replica
            records = r.bytes_(flexible)
            if flexible:
                r.tagged_fields()
            if records:
                out.append(ProducedRecords(version, topic, partition, records))
        if flexible:
            r.tagged_fields()
    return out


class KafkaTap:
    """Listens on a free 127.0.0.1 port and relays every connection to `upstream`."""

    def __init__(
        self, upstream: tuple[str, int] | None = None, keep_requests: bool = False
    ) -> None:
        self.upstream = upstream
        self.keep_requests = keep_requests
        self.requests: list[bytes] = []  # whole request frames, size prefix included
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self.produced: list[ProducedRecords] = []
        self.fetched: list[ProducedRecords] = []
        self.requests: list[tuple[int, int]] = []  # (api key, version) of every request, in order
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            assert self.upstream is not None, "set upstream before clients connect"
            try:
                broker = socket.create_connection(self.upstream, timeout=10)
                broker.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._socks += [client, broker]
            fetches: dict[int, int] = {}  # correlation id -> Fetch version, per connection
            threading.Thread(
                target=self._requests, args=(client, broker, fetches), daemon=True
            ).start()
            threading.Thread(
                target=self._responses, args=(broker, client, fetches), daemon=True
            ).start()

    def _requests(self, src: socket.socket, dst: socket.socket, fetches: dict[int, int]) -> None:
        for head, frame in _relayed_frames(src, dst):
            api_key, version, corr = request_key(frame)
            with self._lock:
                self.requests.append((api_key, version))
            if api_key == FETCH:
                fetches[corr] = version
            try:
                found = parse_produce(frame)
            except ValueError as e:
                found = []
                self.errors.append(f"unparsable Produce request: {e}")
            with self._lock:
                self.produced.extend(found)
                if self.keep_requests:
                    self.requests.append(head + frame)

    def _responses(self, src: socket.socket, dst: socket.socket, fetches: dict[int, int]) -> None:
        for _head, frame in _relayed_frames(src, dst):
            version = fetches.pop(struct.unpack_from(">i", frame, 0)[0], None)
            if version is not None:
                try:
                    found = parse_fetch_response(version, frame)
                except ValueError as e:
                    found = []
                    self.errors.append(f"unparsable Fetch v{version} response: {e}")
                with self._lock:
                    self.fetched.extend(found)

    def close(self) -> None:
        self._closed = True
        self.server.close()
        with self._lock:
            for s in self._socks:
                s.close()


def _relayed_frames(src: socket.socket, dst: socket.socket) -> Iterator[tuple[bytes, bytes]]:
    """Each (size prefix, frame) read from `src`, sent on to `dst` once the caller has looked at
    it; the end of `src` (or an error) shuts `dst` for writing."""
    try:
        while True:
            head = recv_exact(src, 4)  # the end of src: ConnectionError, an OSError
            frame = recv_exact(src, struct.unpack(">i", head)[0])
            yield head, frame
            dst.sendall(head + frame)
    except OSError:
        pass
    finally:
        _shut(dst)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass
