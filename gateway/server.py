"""asyncio TCP server speaking the Kafka protocol: connections, ordered responses, sendfile.

Connections are accepted within their limits by `gateway/acceptor.py`. Frames are received with
`recv_into` (asyncio.BufferedProtocol) into the buffers of a sans-io `FrameReader`
(gateway/protocol/framing.py: a staging buffer shared by all connections, frame buffers grown as
bytes arrive, `socket.request.max.bytes` and `queued.max.request.bytes`). A periodic sweep closes
idle connections (`connections.max.idle.ms`) and frames that stall (`request.receive.timeout.ms`).
Lines about a client's bad input are rate-limited per client address. Requests of one connection
are handled one at a time in order (as Kafka mutes a channel) while reading continues, so
pipelined requests queue up (bounded).
Fetch responses send the header from memory and record bytes from the segment file with
`os.sendfile`, falling back to `loop.sendfile` (which waits for the socket) and, on event loops
without it and on TLS connections (the bytes must be encrypted in user space), to a bounded copy.

Each listener (`listeners`, rdmalog/security/listeners.py) has its own sockets and protocol: TLS on
SSL/SASL_SSL listeners, and on SASL listeners the authentication exchange of
gateway/authentication.py, which decides what a connection may send before it is authenticated.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import os
import socket
import time
import types
from typing import Any

from gateway.acceptor import Acceptor, ConnectionLimits, listening_sockets
from gateway.authentication import Session
from gateway.broker import Broker, RequestContext
from gateway.handlers.produce_fast import PRODUCE, try_produce
from gateway.handlers.registry import REGISTRY, ApiEntry, load_all, supported_apis
from gateway.log_limit import RateLimitedLog
from gateway.protocol import (
    DecodeBudgetExceeded,
    DecodeError,
    RequestHeader,
    encode_response,
    error_response,
    has_schema,
    parse_request_header,
    part_length,
    response_fields,
)
from gateway.protocol.framing import FrameBudget, FrameReader, Stage
from gateway.quotas import QuotaManager
from gateway.request_limits import RequestLimits
from gateway.small_writes import slice_fd as _slice_fd
from gateway.small_writes import write_small
from rdmalog.errors import UNKNOWN_SERVER_ERROR, UNSUPPORTED_VERSION
from rdmalog.security.authorizer import Principal
from rdmalog.security.listeners import ListenerSecurity
from rdmalog.security.tls import subject_name

log = logging.getLogger("gateway.server")

_MAX_QUEUED_FRAMES = 256  # pause reading a connection beyond this many pending requests
_MAX_QUEUED_BYTES = 128 * 1024 * 1024
_COPY_CHUNK = 1024 * 1024
# How often idle connections and stalled frames are looked for: a quarter of the shorter timeout,
# within these bounds.
_SWEEP_MIN_S = 0.05
_SWEEP_MAX_S = 1.0
_CORK_MAX = 64 * 1024
API_VERSIONS = 18
CORK_FILE_RESPONSES = True  # TCP_CORK around header + sendfile pieces of a response
EAGER_START = True  # run eager handlers inside the read callback (see ApiEntry.eager)


class _FileProxy:
    """What loop.sendfile needs of a file, without moving a shared file object's position."""

    mode = "rb"

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        return self._fd

    def seek(self, *_args) -> None:
        return None


class Connection(asyncio.BufferedProtocol):
    """One client connection: frame reader, ordered request worker, response writer."""

    def __init__(self, gateway: Gateway, address: str, listener: ListenerSecurity) -> None:
        self.gateway = gateway
        self.broker = gateway.broker
        self.transport: asyncio.Transport | None = None
        self.address = address  # the client's IP address (what limits and log lines are keyed by)
        self.peer: str = address
        self._fd = -1
        self._sock = None
        self._frames = FrameReader(
            gateway.max_request_bytes, gateway.stage, gateway.budget, self._sync_reading
        )
        self._queue: collections.deque[bytearray] = collections.deque()
        self._queued_bytes = 0
        self._worker: asyncio.Task | object | None = None
        self._queue_full = False  # pipelined requests beyond the queue's bounds
        self._read_paused = False
        self._muted = False  # throttled by a quota: nothing is read until the delay is over
        self._throttle_s = 0.0  # the delay the last response's quotas called for
        self._write_paused = False
        self._drained: asyncio.Future | None = None
        self._out: list[bytearray] = []  # responses written together when the loop turns
        self._gathering = False  # handling the frames of one read: their answers go together
        self.active_at = time.monotonic()  # last bytes in or response out (idle timeout)
        self.frame_since: float | None = None  # when the frame now arriving began (its deadline)
        self.closed = False
        self.state: dict = {}  # per-connection state for handlers (client software, ...)
        self.session = Session(listener, gateway.credentials)  # principal, SASL exchange
        if not self.session.authenticated:  # Kafka bounds frames before authentication tighter
            self._frames.max_frame = min(gateway.max_request_bytes, listener.max_receive)
        self.tls = listener.ssl_context is not None  # no sendfile or cork: bytes go through TLS

    def _log(self, level: int, msg: str, *args: object, exc_info: bool = False) -> None:
        """A line about this client, rate-limited per address (a flood must not fill the disk)."""
        self.gateway.peer_log.log(self.address, level, msg, *args, exc_info=exc_info)

    # --- asyncio callbacks ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            self._sock = sock
            self._fd = -1 if self.tls else sock.fileno()
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.gateway.connections.add(self)
        if self.tls:
            self._tls_principal(transport.get_extra_info("ssl_object"))

    def _tls_principal(self, ssl_object) -> None:
        """SSL listeners: the client certificate's subject names the principal (as mapped by
        `ssl.principal.mapping.rules`); no certificate: ANONYMOUS. SASL_SSL: SASL names it."""
        session = self.session
        cert = ssl_object.getpeercert() if ssl_object is not None else None
        if not cert or session.listener.spec.sasl:
            return
        name = session.listener.principal_mapper.name(subject_name(cert))
        if name is None:
            self._log(
                logging.WARNING,
                "closing %s: no ssl.principal.mapping.rules rule applies to %s",
                self.peer,
                subject_name(cert),
            )
            self.abort()
            return
        session.principal = Principal("User", name)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._frames.close()
        self.gateway.forget(self)
        self._queue.clear()
        self._out.clear()
        if isinstance(self._worker, asyncio.Task) and not self._worker.done():
            self._worker.cancel()
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def eof_received(self) -> bool:
        self._flush_out()
        return False  # close once pending responses are written

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._frames.buffer()

    def buffer_updated(self, nbytes: int) -> None:
        reader = self._frames
        frames = reader.received(nbytes)
        self.active_at = now = time.monotonic()
        if frames or not reader.partial:
            self.frame_since = now if reader.partial else None
        elif self.frame_since is None:
            self.frame_since = now
        self._gathering = len(frames) > 1
        for frame in frames:
            self._push(frame)
        self._gathering = False
        if reader.refused is not None:
            self._log(
                logging.WARNING,
                "closing %s: request frame of %d bytes (%s=%d)",
                self.peer,
                reader.refused,
                "socket.request.max.bytes"
                if self.session.authenticated
                else "sasl.server.max.receive.size, before authentication",
                reader.max_frame,
            )
            self.abort()
        elif reader.waiting:
            self._sync_reading()  # paused until queued.max.request.bytes has room for it

    def _sync_reading(self) -> None:
        """Pause reading while the request queue is full or a frame waits for memory."""
        pause = self._queue_full or self._frames.waiting or self._muted
        if pause != self._read_paused and self.transport is not None:
            self._read_paused = pause
            if pause:
                self.transport.pause_reading()
            else:
                self.transport.resume_reading()

    # --- request queue -------------------------------------------------------------------------

    def _push(self, frame: bytearray) -> None:
        if self.closed:
            return
        self._queue.append(frame)
        self._queued_bytes += len(frame)
        if not self._queue_full and (
            len(self._queue) >= _MAX_QUEUED_FRAMES or self._queued_bytes >= _MAX_QUEUED_BYTES
        ):
            self._queue_full = True
            self._sync_reading()
        if self._worker is not None:
            return
        entry = (
            REGISTRY.get(int.from_bytes(frame[0:2], "big", signed=True)) if len(frame) > 1 else None
        )
        if entry is None or not entry.eager or not EAGER_START:
            self._worker = asyncio.get_running_loop().create_task(self._run())
            return
        # Eager start: most requests complete without awaiting anything, so run the worker right
        # here and answer in this loop iteration; only if it suspends does a Task take it over.
        coro = self._run()
        self._worker = _EAGER
        try:
            pending = coro.send(None)
        except StopIteration:
            return
        self._worker = asyncio.get_running_loop().create_task(_resume(coro, pending))

    async def _run(self) -> None:
        try:
            while self._queue and not self.closed:
                frame = self._queue.popleft()
                self._queued_bytes -= len(frame)
                if self._queue_full and len(self._queue) < _MAX_QUEUED_FRAMES // 2:
                    self._queue_full = False
                    self._sync_reading()
                await self._handle(frame)
                if self.session.authenticated:
                    self._frames.max_frame = self.gateway.max_request_bytes
                if self._write_paused and not self.closed:
                    self._drained = asyncio.get_running_loop().create_future()
                    await self._drained
                if self._throttle_s > 0 and not self.closed:
                    await self._mute()
        except asyncio.CancelledError:
            pass
        except Exception:
            self._log(logging.ERROR, "closing %s: internal error", self.peer, exc_info=True)
            self.abort()
        finally:
            self._worker = None
            self.active_at = time.monotonic()

    async def _mute(self) -> None:
        """Kafka's channel muting after a throttled response (KIP-219): read nothing more from the
        client until its throttle time is over."""
        delay, self._throttle_s = self._throttle_s, 0.0
        self._muted = True
        self._sync_reading()
        try:
            await asyncio.sleep(delay)
        finally:
            self._muted = False
            if not self.closed:
                self._sync_reading()

    def expire(self, now: float, idle_s: float, frame_s: float) -> None:
        """Close the connection when the frame arriving missed its deadline (`frame_s`), or when it
        has been idle (no bytes in, no request in progress or queued) for `idle_s`, a frame half
        received or not, as Kafka counts idleness; negative: never."""
        since = self.frame_since
        if since is not None and 0 <= frame_s < now - since:
            self._log(
                logging.WARNING,
                "closing %s: a request frame is still incomplete after %.0f ms "
                "(request.receive.timeout.ms=%d)",
                self.peer,
                (now - since) * 1000,
                frame_s * 1000,
            )
            self.abort()
        elif (
            0 <= idle_s < now - self.active_at
            and self._worker is None
            and not self._queue
            and not self._frames.waiting  # not read because of us, not idle
        ):
            log.debug(
                "closing %s: idle for over %d ms (connections.max.idle.ms)",
                self.peer,
                idle_s * 1000,
            )
            self.abort()

    @property
    def busy(self) -> bool:
        return self._worker is not None

    def abort(self) -> None:
        """Close the connection (after writing what is already queued)."""
        if not self.closed:
            self._flush_out()
            self.closed = True
            self._queue.clear()
            if self.transport is not None:
                self.transport.close()

    # --- one request ---------------------------------------------------------------------------

    async def _handle(self, frame: bytearray) -> None:
        session = self.session
        if session.expects_raw_token:
            await self._raw_token(frame)
            return
        mv = memoryview(frame)
        try:
            hdr = parse_request_header(mv)
        except DecodeError as exc:
            self._log(logging.WARNING, "closing %s: malformed request header: %s", self.peer, exc)
            self.abort()
            return
        refusal = session.refusal(hdr.api_key)
        if refusal is not None:
            self._log(
                logging.INFO,
                "closing %s (listener %s): %s",
                self.peer,
                session.listener.name,
                refusal,
            )
            self.abort()
            return
        entry = REGISTRY.get(hdr.api_key)
        if entry is None or not entry.min_version <= hdr.api_version <= entry.max_version:
            await self._unsupported(hdr, entry)
            return
        if hdr.api_key == PRODUCE:  # the common one-partition request: no generic decode
            done = try_produce(self, hdr, mv)
            if done is not None:
                if done is not True:
                    await done
                return
        limits = self.gateway.requests
        try:
            body = limits.decode_on_loop(hdr, mv)
            if body is None:  # heavy: decoded in a thread, handled while no other heavy one is
                async with limits.heavy:
                    body = await limits.decode_heavy(hdr, mv)
                    await self._answer(hdr, entry, body, len(frame))
                return
        except DecodeError as exc:
            self._log(
                logging.WARNING,
                "closing %s: cannot decode %s v%d request: %s%s",
                self.peer,
                entry.name.rsplit(".", 1)[-1],
                hdr.api_version,
                exc,
                f" (request.max.decoded.bytes={limits.max_decoded_bytes})"
                if isinstance(exc, DecodeBudgetExceeded)
                else "",
            )
            self.abort()
            return
        await self._answer(hdr, entry, body, len(frame))

    async def _answer(
        self, hdr: RequestHeader, entry: ApiEntry, body: dict, request_bytes: int
    ) -> None:
        """Run the handler of a decoded request and send its answer."""
        ctx = RequestContext(
            self.broker, hdr.api_key, hdr.api_version, hdr.correlation_id, hdr.client_id, self
        )
        started = time.monotonic()
        try:
            response = await entry.handler(ctx, body)
        except Exception:
            self._log(
                logging.ERROR,
                "%s v%d from %s failed",
                entry.name,
                hdr.api_version,
                self.peer,
                exc_info=True,
            )
            response = error_response(hdr.api_key, hdr.api_version, UNKNOWN_SERVER_ERROR)
            if response is None:
                self.abort()
                return
        metrics = self.broker.metrics
        if response is None or self.closed:  # acks=0 produce: no answer
            metrics.request_done(hdr.api_key, (time.monotonic() - started) * 1000)
            return
        buf, parts = encode_response(hdr.api_key, hdr.api_version, hdr.correlation_id, response)
        quotas = self.gateway.quotas
        if quotas is not None and quotas.enabled:
            buf, parts = self._throttle(hdr, request_bytes, buf, parts, response, started)
        await self.send(buf, parts)
        metrics.request_done(hdr.api_key, (time.monotonic() - started) * 1000)
        if self.session.close_after_response:
            self.abort()

    def _throttle(self, hdr: RequestHeader, request_bytes: int, buf, parts, response, started):
        """Record the request against its quotas; when they call for a delay, the response carries
        it (throttle_time_ms) and the connection is muted for it after sending."""
        principal = self.session.principal
        user = principal.name if principal.type == "User" else None
        size = len(buf) + sum(part_length(part) for _, part in parts)
        elapsed = time.monotonic() - started
        throttle_ms = self.gateway.quotas.record(
            user, hdr.client_id, hdr.api_key, request_bytes, size, elapsed
        )
        if throttle_ms <= 0 or "throttle_time" not in response_fields(hdr.api_key, hdr.api_version):
            return buf, parts
        self._throttle_s = throttle_ms / 1000
        response["throttle_time"] = throttle_ms
        return encode_response(hdr.api_key, hdr.api_version, hdr.correlation_id, response)

    async def _raw_token(self, frame: bytearray) -> None:
        """Kafka's legacy SASL flow (after SaslHandshake v0): a frame is a bare SASL token and the
        answer a bare size-prefixed token; a refused token closes the connection."""
        from rdmalog.security.sasl import AuthenticationError

        try:
            answer = self.session.authenticate(bytes(frame))
        except AuthenticationError as exc:
            self._log(logging.INFO, "closing %s: %s", self.peer, exc)
            self.abort()
            return
        await self.send(bytearray(len(answer).to_bytes(4, "big") + answer), [])

    async def _unsupported(self, hdr: RequestHeader, entry: ApiEntry | None) -> None:
        if hdr.api_key == API_VERSIONS:
            # Kafka answers an ApiVersions it cannot parse with v0 + UNSUPPORTED_VERSION + ranges.
            self._log(
                logging.INFO,
                "%s: ApiVersions v%d unsupported, answering v0",
                self.peer,
                hdr.api_version,
            )
            body = {"error_code": UNSUPPORTED_VERSION, "api_keys": supported_apis()}
            buf, _ = encode_response(API_VERSIONS, 0, hdr.correlation_id, body)
            await self.send(buf, [])
            return
        what = "unknown API key" if entry is None else "unsupported version of"
        body = None
        if entry is not None and has_schema(hdr.api_key, hdr.api_version):
            body = error_response(hdr.api_key, hdr.api_version, UNSUPPORTED_VERSION)
        if body is None:
            self._log(
                logging.WARNING,
                "closing %s: %s %d v%d",
                self.peer,
                what,
                hdr.api_key,
                hdr.api_version,
            )
            self.abort()
            return
        self._log(
            logging.INFO,
            "%s: %s %d v%d -> UNSUPPORTED_VERSION",
            self.peer,
            what,
            hdr.api_key,
            hdr.api_version,
        )
        buf, _ = encode_response(hdr.api_key, hdr.api_version, hdr.correlation_id, body)
        await self.send(buf, [])

    # --- writing -------------------------------------------------------------------------------

    async def send(self, buf: bytearray, parts: list) -> None:
        """Write one response frame: memory chunks with file slices (sendfile) in between."""
        t = self.transport
        if self.closed or t is None or t.is_closing():
            return
        if not parts:
            if len(buf) <= _COPY_CHUNK:
                self.send_now(buf)
            else:
                self._flush_out()  # what was answered before goes first
                await self._write_paced(buf)
            return
        self._flush_out()
        try:
            if self._fd >= 0 and write_small(self._fd, t, buf, parts):
                return
        except OSError as exc:
            self._log(logging.INFO, "closing %s: %s", self.peer, exc)
            self.abort()
            return
        mv = memoryview(buf)
        pos = 0
        # Small responses: cork so header and records leave as one segment (uncorked below).
        cork = (
            CORK_FILE_RESPONSES
            and not self.tls
            and self._sock is not None
            and len(buf) + sum(part_length(part) for _, part in parts) <= _CORK_MAX
            and t.get_write_buffer_size() == 0
        )
        try:
            if cork:
                self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
            for at, part in parts:
                if at > pos:
                    t.write(mv[pos:at])
                    pos = at
                if isinstance(part, bytes | bytearray):  # a large answer's pre-encoded array
                    await self._write_paced(part)
                else:
                    await self._send_slice(part)
                if self.closed:
                    return
            if pos < len(buf):
                t.write(mv[pos:])
        except OSError as exc:
            self._log(logging.INFO, "closing %s: %s", self.peer, exc)
            self.abort()
        finally:
            if cork and not self.closed:
                with contextlib.suppress(OSError):
                    self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)

    def send_now(self, buf: bytearray) -> None:
        """Queue a small response frame (up to 1 MiB, no file parts): written with the others of
        this loop iteration."""
        if self.closed or self.transport is None or self.transport.is_closing():
            return
        self._out.append(buf)
        if not self._gathering and not self._queue:  # no other answer to go with it
            self._flush_out()  # (an acks=all one after its wait): now, not a turn later
        elif len(self._out) == 1:
            asyncio.get_running_loop().call_soon(self._flush_out)

    def _flush_out(self) -> None:
        """Write the responses held by `send`: those answering requests that arrived together
        leave in one write, one system call instead of one each (librdkafka sends a produce request
        per partition, so a topic of many partitions brings many small requests at once)."""
        out, self._out = self._out, []
        t = self.transport
        if out and t is not None and not t.is_closing():
            t.write(out[0] if len(out) == 1 else b"".join(out))

    async def _write_paced(self, buf: bytearray) -> None:
        """Write a large answer a chunk at a time as the socket takes it: the transport copies
        what it cannot send at once, so this keeps that copy to about one chunk."""
        loop = asyncio.get_running_loop()
        with memoryview(buf) as mv:
            for at in range(0, len(mv), _COPY_CHUNK):
                if self.closed:
                    return
                self.transport.write(mv[at : at + _COPY_CHUNK])
                if self._write_paused:
                    self._drained = loop.create_future()
                    await self._drained

    async def _send_slice(self, sl) -> None:
        count = sl.length
        if count <= 0:
            return
        t = self.transport
        fd_in = _slice_fd(sl)
        off = sl.position
        if self._fd >= 0 and t.get_write_buffer_size() == 0:
            # Socket buffer has room and nothing is queued ahead: sendfile right now.
            try:
                while count:
                    n = os.sendfile(self._fd, fd_in, off, count)
                    if n == 0:
                        raise OSError(f"segment file ended {count} bytes early")
                    off += n
                    count -= n
            except (BlockingIOError, InterruptedError):
                pass
            if not count:
                return
        loop = asyncio.get_running_loop()
        if not self.tls and getattr(t, "_sendfile_compatible", None) is not None:
            log.debug("%s: socket full, loop.sendfile for the last %d bytes", self.peer, count)
            await loop.sendfile(t, _FileProxy(fd_in), off, count)
            return
        # TLS, and event loops without transport sendfile (uvloop): copy, bounded, with flow
        # control. Each chunk is a new bytes object: the TLS transport may hold it until written.
        while count and not self.closed:
            chunk = os.pread(fd_in, min(count, _COPY_CHUNK), off)
            if not chunk:
                raise OSError(f"segment file ended {count} bytes early")
            t.write(chunk)
            off += len(chunk)
            count -= len(chunk)
            if self._write_paused:
                self._drained = loop.create_future()
                await self._drained


_EAGER = object()  # placeholder worker while a request runs eagerly


@types.coroutine
def _continue(coro, pending):
    """Hand a started coroutine to a Task: yield what it waits on, then delegate send/throw."""
    while True:
        try:
            sent = yield pending
        except BaseException as exc:
            try:
                pending = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
            continue
        try:
            pending = coro.send(sent)
        except StopIteration as stop:
            return stop.value


async def _resume(coro, pending) -> None:
    await _continue(coro, pending)


class Gateway:
    """A running gateway: the listening sockets of its listeners, its connections within their
    limits, the shared receive buffers, and the broker state."""

    def __init__(self, broker: Broker, credentials=None) -> None:
        config = broker.config
        self.broker = broker
        self.max_request_bytes: int = config.get("socket.request.max.bytes")
        self.requests = RequestLimits(config.get("request.max.decoded.bytes"))
        self.connections: set[Connection] = set()
        self.stage = Stage()
        self.budget = FrameBudget(config.get("queued.max.request.bytes"))
        self.limits = ConnectionLimits(
            config.get("max.connections"), config.get("max.connections.per.ip")
        )
        broker.config_listeners.append(self._reconfigure)
        self.idle_s: float = config.get("connections.max.idle.ms") / 1000
        self.frame_s: float = config.get("request.receive.timeout.ms") / 1000
        self.peer_log = RateLimitedLog(log)
        self.credentials = credentials  # SCRAM credentials (rdmalog/security/entity_configs.py)
        self.quotas: QuotaManager | None = None  # client quotas (gateway/quotas.py)
        self.acceptors: list[Acceptor] = []
        self.metrics_server: Any = None  # the /metrics endpoint, when gateway/app.py starts one
        self._sweeper: asyncio.TimerHandle | None = None
        self.address: tuple[str, int] = ("", 0)  # the first listener's bound address
        self.addresses: dict[str, tuple[str, int]] = {}  # listener name -> bound address

    async def start(self, listeners: list[ListenerSecurity]) -> tuple[str, int]:
        """Listen on every listener (port 0 picks a free one); return the first bound address.

        The first listener is bound last, so once it accepts connections every listener does
        (what a readiness probe of one port can rely on), and no connection is served before the
        broker knows every listener's advertised endpoint."""
        loop = asyncio.get_running_loop()
        load_all()
        bound: dict[str, list[socket.socket]] = {}
        try:
            for listener in reversed(listeners):
                spec = listener.spec
                bound[spec.name] = await listening_sockets(
                    spec.host or None, spec.port, backlog=1024
                )
        except BaseException:
            for socks in bound.values():
                for sock in socks:
                    sock.close()
            raise
        advertised: dict[str, tuple[str, int]] = {}
        for listener in listeners:
            spec = listener.spec
            host, port = bound[spec.name][0].getsockname()[:2]
            self.addresses[spec.name] = (host, port)
            if (spec.host or host) in ("", "0.0.0.0", "::"):
                shown = "127.0.0.1"
            else:
                shown = spec.host or host
            advertised[spec.name] = (spec.advertised_host or shown, spec.advertised_port or port)
        self.address = self.addresses[listeners[0].spec.name]
        self.broker.bind(loop, advertised)
        for listener in listeners:
            spec = listener.spec
            acceptor = Acceptor(
                bound[spec.name],
                self.limits,
                functools.partial(self._connect, listener),
                self.peer_log,
            )
            self.acceptors.append(acceptor)
            acceptor.start()
            host, port = self.addresses[spec.name]
            log.info("listening on %s:%d (listener %s, %s)", host, port, spec.name, spec.protocol)
        self._sweep()
        log.info("serving as node %d", self.broker.node_id)
        return self.address

    def _connect(self, listener: ListenerSecurity, sock: socket.socket, address: str) -> None:
        """Serve an accepted socket (counted in `limits` until its connection is forgotten)."""
        loop = asyncio.get_running_loop()
        conn = Connection(self, address, listener)
        task = loop.create_task(
            loop.connect_accepted_socket(lambda: conn, sock, ssl=listener.ssl_context)
        )
        task.add_done_callback(functools.partial(self._connected, conn, sock))

    def _connected(self, conn: Connection, sock: socket.socket, task: asyncio.Task) -> None:
        if task.cancelled() or task.exception() is not None:
            if task.exception() is not None and conn.tls:
                conn._log(
                    logging.INFO, "TLS handshake with %s failed: %r", conn.address, task.exception()
                )
            if conn.transport is None:  # never made: no connection_lost will release it
                sock.close()
                self.release(conn.address)

    def release(self, address: str) -> None:
        """A connection counted in the (shared) limits closed."""
        if self.acceptors:
            self.acceptors[0].release(address)
            for acceptor in self.acceptors[1:]:
                acceptor.resume_if_below_limit()

    def _reconfigure(self, config: Any) -> None:
        """Dynamic connection limits (on the loop): they count from the next accept."""
        self.limits.max_total = config.get("max.connections")
        self.limits.max_per_address = config.get("max.connections.per.ip")
        for acceptor in self.acceptors:
            acceptor.resume_if_below_limit()

    def forget(self, conn: Connection) -> None:
        """A connection closed: it no longer counts against the limits."""
        if conn in self.connections:
            self.connections.discard(conn)
            self.release(conn.address)

    def _sweep(self) -> None:
        """Close idle connections and frames past their deadline; again in a while."""
        now = time.monotonic()
        for conn in list(self.connections):
            conn.expire(now, self.idle_s, self.frame_s)
        timeouts = [t for t in (self.idle_s, self.frame_s) if t >= 0]
        if timeouts:
            interval = min(_SWEEP_MAX_S, max(_SWEEP_MIN_S, min(timeouts) / 4))
            self._sweeper = asyncio.get_running_loop().call_later(interval, self._sweep)

    async def stop(self, grace: float = 5.0) -> None:
        """Stop accepting, let in-flight requests finish (long polls return early), close."""
        for acceptor in self.acceptors:
            acceptor.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        self.broker.wake_all()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while any(c.busy for c in self.connections) and loop.time() < deadline:
            await asyncio.sleep(0.01)
        for conn in list(self.connections):
            conn.abort()
        deadline = loop.time() + 1.0
        while self.connections and loop.time() < deadline:
            await asyncio.sleep(0.01)
