"""asyncio TCP server speaking the Kafka protocol: framing with size limits, ordered responses, sendfile.

Frames are received with `recv_into` (asyncio.BufferedProtocol): small frames land in a staging
buffer and are copied out once; a frame that is still arriving gets its own buffer and the rest of
it is received straight into that buffer. Requests of one connection are handled one at a time in
order (as Kafka mutes a channel) while reading continues, so pipelined requests queue up (bounded).
Fetch responses send the header from memory and record bytes from the segment file with
`os.sendfile`, falling back to `loop.sendfile` (which waits for the socket) and, on event loops
without it, to a bounded copy.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import signal
import socket
import struct
import types
from pathlib import Path

from gateway.broker import UNKNOWN_SERVER_ERROR, UNSUPPORTED_VERSION, Broker, RequestContext
from gateway.groups.service import GroupService
from gateway.handlers.registry import REGISTRY, ApiEntry, load_all
from gateway.protocol import (
    DecodeError,
    RequestHeader,
    decode_request,
    encode_response,
    has_schema,
    parse_request_header,
)
from gateway.protocol.schema import entity_spec, message_class
from rdmalog.config import BrokerConfig
from rdmalog.errors import KafkaError

log = logging.getLogger("gateway.server")

_SIZE = struct.Struct(">i")
_STAGE_BYTES = 256 * 1024
_MAX_QUEUED_FRAMES = 256  # pause reading a connection beyond this many pending requests
_MAX_QUEUED_BYTES = 128 * 1024 * 1024
_COPY_CHUNK = 1024 * 1024
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


def _slice_fd(sl) -> int:
    fileno = getattr(sl, "fileno", None)
    if fileno is not None:
        return fileno()
    f = sl.file
    return f if isinstance(f, int) else f.fileno()


class Connection(asyncio.BufferedProtocol):
    """One client connection: frame reader, ordered request worker, response writer."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.broker = gateway.broker
        self.max_frame = gateway.max_request_bytes
        self.transport: asyncio.Transport | None = None
        self.peer: str = "?"
        self._fd = -1
        self._sock = None
        self._stage = bytearray(_STAGE_BYTES)
        self._stage_mv = memoryview(self._stage)
        self._stage_end = 0
        self._frame: bytearray | None = None  # a frame being received directly
        self._frame_mv: memoryview | None = None
        self._frame_got = 0
        self._queue: collections.deque[bytearray] = collections.deque()
        self._queued_bytes = 0
        self._worker: asyncio.Task | None = None
        self._read_paused = False
        self._write_paused = False
        self._drained: asyncio.Future | None = None
        self.closed = False
        self.state: dict = {}  # per-connection state for handlers (SASL, sessions, ...)

    # --- asyncio callbacks ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            self._sock = sock
            self._fd = sock.fileno()
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.gateway.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.gateway.connections.discard(self)
        self._queue.clear()
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
        return False  # close once pending responses are written

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame_mv is not None:
            return self._frame_mv[self._frame_got :]
        return self._stage_mv[self._stage_end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._frame is not None:
            self._frame_got += nbytes
            if self._frame_got == len(self._frame):
                frame = self._frame
                self._frame = self._frame_mv = None
                self._push(frame)
            return
        self._stage_end += nbytes
        stage, end, pos = self._stage, self._stage_end, 0
        while end - pos >= 4:
            size = _SIZE.unpack_from(stage, pos)[0]
            if size <= 0 or size > self.max_frame:
                log.warning(
                    "closing %s: request frame of %d bytes (socket.request.max.bytes=%d)",
                    self.peer,
                    size,
                    self.max_frame,
                )
                self.abort()
                return
            start = pos + 4
            avail = end - start
            if avail >= size:
                self._push(stage[start : start + size])
                pos = start + size
                continue
            # The rest of this frame is received straight into its own buffer.
            frame = bytearray(size)
            frame[:avail] = self._stage_mv[start:end]
            self._frame, self._frame_mv, self._frame_got = frame, memoryview(frame), avail
            self._stage_end = 0
            return
        rest = end - pos
        if rest and pos:
            stage[:rest] = stage[pos:end]
        self._stage_end = rest

    # --- request queue -------------------------------------------------------------------------

    def _push(self, frame: bytearray) -> None:
        if self.closed:
            return
        self._queue.append(frame)
        self._queued_bytes += len(frame)
        if not self._read_paused and (
            len(self._queue) >= _MAX_QUEUED_FRAMES or self._queued_bytes >= _MAX_QUEUED_BYTES
        ):
            self._read_paused = True
            self.transport.pause_reading()
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
                if self._read_paused and len(self._queue) < _MAX_QUEUED_FRAMES // 2:
                    self._read_paused = False
                    self.transport.resume_reading()
                await self._handle(frame)
                if self._write_paused and not self.closed:
                    self._drained = asyncio.get_running_loop().create_future()
                    await self._drained
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("closing %s: internal error", self.peer)
            self.abort()
        finally:
            self._worker = None

    @property
    def busy(self) -> bool:
        return self._worker is not None

    def abort(self) -> None:
        """Close the connection (after writing what is already queued)."""
        if not self.closed:
            self.closed = True
            self._queue.clear()
            if self.transport is not None:
                self.transport.close()

    # --- one request ---------------------------------------------------------------------------

    async def _handle(self, frame: bytearray) -> None:
        mv = memoryview(frame)
        try:
            hdr = parse_request_header(mv)
        except DecodeError as exc:
            log.warning("closing %s: malformed request header: %s", self.peer, exc)
            self.abort()
            return
        entry = REGISTRY.get(hdr.api_key)
        if entry is None or not entry.min_version <= hdr.api_version <= entry.max_version:
            await self._unsupported(hdr, entry)
            return
        try:
            body = decode_request(hdr, mv)
        except DecodeError as exc:
            log.warning(
                "closing %s: cannot decode %s v%d request: %s",
                self.peer,
                entry.name.rsplit(".", 1)[-1],
                hdr.api_version,
                exc,
            )
            self.abort()
            return
        ctx = RequestContext(
            self.broker, hdr.api_key, hdr.api_version, hdr.correlation_id, hdr.client_id, self
        )
        try:
            response = await entry.handler(ctx, body)
        except Exception:
            log.exception("%s v%d from %s failed", entry.name, hdr.api_version, self.peer)
            response = _error_body(hdr.api_key, hdr.api_version, UNKNOWN_SERVER_ERROR)
            if response is None:
                self.abort()
                return
        if response is None or self.closed:
            return
        buf, parts = encode_response(hdr.api_key, hdr.api_version, hdr.correlation_id, response)
        await self.send(buf, parts)

    async def _unsupported(self, hdr: RequestHeader, entry: ApiEntry | None) -> None:
        if hdr.api_key == API_VERSIONS:
            # Kafka answers an ApiVersions it cannot parse with v0 + UNSUPPORTED_VERSION + ranges.
            log.info("%s: ApiVersions v%d unsupported, answering v0", self.peer, hdr.api_version)
            body = {"error_code": UNSUPPORTED_VERSION, "api_keys": supported_apis()}
            buf, _ = encode_response(API_VERSIONS, 0, hdr.correlation_id, body)
            await self.send(buf, [])
            return
        what = "unknown API key" if entry is None else "unsupported version of"
        body = None
        if entry is not None and has_schema(hdr.api_key, hdr.api_version):
            body = _error_body(hdr.api_key, hdr.api_version, UNSUPPORTED_VERSION)
        if body is None:
            log.warning("closing %s: %s %d v%d", self.peer, what, hdr.api_key, hdr.api_version)
            self.abort()
            return
        log.info(
            "%s: %s %d v%d -> UNSUPPORTED_VERSION", self.peer, what, hdr.api_key, hdr.api_version
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
            t.write(buf)
            return
        mv = memoryview(buf)
        pos = 0
        # Small responses: cork so header and records leave as one segment (uncorked below).
        cork = (
            CORK_FILE_RESPONSES
            and self._sock is not None
            and len(buf) + sum(sl.length for _, sl in parts) <= _CORK_MAX
            and t.get_write_buffer_size() == 0
        )
        try:
            if cork:
                self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
            for at, sl in parts:
                if at > pos:
                    t.write(mv[pos:at])
                    pos = at
                await self._send_slice(sl)
                if self.closed:
                    return
            if pos < len(buf):
                t.write(mv[pos:])
        except OSError as exc:
            log.info("closing %s: %s", self.peer, exc)
            self.abort()
        finally:
            if cork and not self.closed:
                with contextlib.suppress(OSError):
                    self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)

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
        if getattr(t, "_sendfile_compatible", None) is not None:
            log.debug("%s: socket full, loop.sendfile for the last %d bytes", self.peer, count)
            await loop.sendfile(t, _FileProxy(fd_in), off, count)
            return
        # Event loops without transport sendfile (uvloop): copy, bounded, with flow control.
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


def supported_apis() -> list[dict]:
    """ApiVersions entries for every registered API."""
    return [
        {"api_key": e.api_key, "min_version": e.min_version, "max_version": e.max_version}
        for e in sorted(REGISTRY.values(), key=lambda e: e.api_key)
    ]


def _error_body(api_key: int, version: int, code: int) -> dict | None:
    """A response carrying `code` in its top-level error_code, or None if it has none."""
    try:
        spec = entity_spec(message_class(api_key, version, False))
    except KeyError:
        return None
    if any(f.name == "error_code" and f.tag is None for f in spec.fields):
        return {"error_code": code}
    return None


class Gateway:
    """A running gateway: the listening server, its connections and the broker state."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.max_request_bytes: int = broker.config.get("socket.request.max.bytes")
        self.connections: set[Connection] = set()
        self.server: asyncio.base_events.Server | None = None
        self.address: tuple[str, int] = ("", 0)

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen on host:port (port 0 picks a free one); return the bound address."""
        loop = asyncio.get_running_loop()
        load_all()
        self.server = await loop.create_server(
            lambda: Connection(self), host or None, port, reuse_address=True, backlog=1024
        )
        sockname = self.server.sockets[0].getsockname()
        self.address = (sockname[0], sockname[1])
        self.broker.bind(loop, (host or sockname[0], sockname[1]))
        log.info(
            "listening on %s:%d (node %d)", self.address[0], self.address[1], self.broker.node_id
        )
        return self.address

    async def stop(self, grace: float = 5.0) -> None:
        """Stop accepting, let in-flight requests finish (long polls return early), close."""
        if self.server is not None:
            self.server.close()
        self.broker.wake_all()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while any(c.busy for c in self.connections) and loop.time() < deadline:
            await asyncio.sleep(0.01)
        for conn in list(self.connections):
            conn.abort()
        if self.server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 1.0)


def _listen_address(config: BrokerConfig, listen: tuple[str, int] | None) -> tuple[str, int]:
    if listen is not None:
        return listen
    first = config.listeners[0] if config.listeners else None
    return (first.host, first.port) if first else ("0.0.0.0", 9092)


def open_store(config: BrokerConfig, replicated: bool = False, cluster_id: str | None = None):
    """Open the rdmalog store of this broker (recovers every log); `replicated` in cluster mode."""
    from rdmalog.store.log_manager import Store

    store = Store(Path(config.log_dirs[0]), config, replicated=replicated, cluster_id=cluster_id)
    store.open()
    return store


def start_rdma(store, config: BrokerConfig, groups: GroupService | None = None):
    """Start KafkaDirect's datapaths for native clients when `rdma.transport` names one; offsets
    native consumers commit through commit slots go to `groups`' coordinator."""
    transport = config.get("rdma.transport")
    if transport == "none":
        return None
    from rdmalog.rdma.broker.service import RdmaService

    service = RdmaService(
        store,
        transport,
        config.get("rdma.host"),
        config.get("rdma.control.port"),
        order_timeout=config.get("rdma.order.timeout.ms") / 1000,
        commit_sink=None if groups is None else _commit_sink(groups),
        commit_interval=config.get("rdma.commit.interval.ms") / 1000,
        slots_per_consumer=config.get("rdma.consumer.slots"),
    ).start()
    log.info("RDMA datapaths on %s, control requests at %s", transport, service.control_address)
    return service


def _commit_sink(groups: GroupService):
    """Hand RDMA commit-slot offsets to the coordinator on its event loop, as simple commits
    (generation -1, no member), the kind a Kafka consumer with manual assignment makes."""
    from gateway.groups.model import CommitEntry

    def commit(group: str, entries: list[CommitEntry], done) -> None:
        errors = groups.coordinator.commit_offsets(group, -1, "", entries)
        refused = {tp: e for tp, e in errors.items() if e}
        if refused:
            log.warning("RDMA commits of group %s refused (Kafka error codes): %s", group, refused)
        done(errors)  # the consumer reads the answer from its slots' result words

    def sink(group: str, offsets: dict[tuple[str, int], int], done) -> None:
        entries = [CommitEntry(t, p, o) for (t, p), o in offsets.items()]
        groups.loop.call_soon_threadsafe(commit, group, entries, done)

    return sink


async def start(config: BrokerConfig, listen: tuple[str, int] | None = None) -> Gateway:
    """Open the store and start a gateway on `listen` (or the first listener); return it running.
    With `zookeeper.connect` the broker joins its cluster (gateway/cluster/node.py)."""
    node = None
    if config.get("zookeeper.connect"):
        from gateway.cluster.node import ClusterNode

        node = ClusterNode(config)
        cluster_id = await asyncio.to_thread(node.connect)
        store = open_store(config, replicated=True, cluster_id=cluster_id)
    else:
        store = open_store(config)
    gateway = Gateway(Broker(config, store))
    gateway.broker.cluster = node
    try:
        replicas = None
        if node is not None:
            await node.prepare(store, gateway.broker)
            replicas = node.replicas
        # groups are loaded from __consumer_offsets before the first client can ask for them (in
        # a cluster, partition by partition as this broker comes to lead them)
        loop = asyncio.get_running_loop()
        gateway.broker.groups = GroupService(store, config, loop, replicas).start()
        gateway.broker.rdma = start_rdma(store, config, gateway.broker.groups)
        if node is not None and gateway.broker.rdma is not None:
            node.serve_rdma(gateway.broker.rdma)
        host, port = _listen_address(config, listen)
        await gateway.start(host, port)
        if node is not None:
            await node.join()
    except BaseException:
        await gateway.stop()
        if node is not None:
            await node.stop()
        store.close()
        raise
    return gateway


async def shutdown(gateway: Gateway) -> None:
    """Stop a gateway started by `start` and flush/close its store (in a cluster, leaderships move
    away first: Kafka's controlled shutdown)."""
    node = gateway.broker.cluster
    if node is not None:
        await node.controlled_shutdown()
    await gateway.stop()
    if node is not None:
        await node.stop()
    if gateway.broker.rdma is not None:
        gateway.broker.rdma.stop()  # hands the last RDMA commits to the coordinator ...
        await asyncio.sleep(0)  # ... which writes them here, before the store closes
    if gateway.broker.groups is not None:
        gateway.broker.groups.stop()
    await asyncio.get_running_loop().run_in_executor(None, gateway.broker.store.close)
    log.info("store flushed and closed")


async def serve(config: BrokerConfig, listen: tuple[str, int] | None = None) -> None:
    """Run a broker until cancelled; on cancellation finish in-flight requests, flush, close."""
    gateway = await start(config, listen)
    try:
        await asyncio.Event().wait()
    finally:
        await shutdown(gateway)


def run(config: BrokerConfig, listen: tuple[str, int] | None = None) -> None:
    """Blocking entry point of `rdmalog serve`: serve until SIGTERM/SIGINT, then close cleanly."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, _stop, task, sig)
        await serve(config, listen)

    try:
        asyncio.run(main())
    except asyncio.CancelledError:
        pass
    except (OSError, KafkaError) as exc:  # cannot listen, or the store refuses its directory
        log.error("broker failed to start: %s", exc)
        raise SystemExit(1) from None


def _stop(task: asyncio.Task, sig: signal.Signals) -> None:
    log.info("received %s, shutting down", signal.Signals(sig).name)
    task.cancel()
