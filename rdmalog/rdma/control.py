"""The control channel: small JSON-line requests over TCP on the RDMA service's own port.

KafkaDirect sends its control requests over Kafka's TCP path; here they get their own port so the
datapaths do not depend on the gateway. One TCP connection is one client session: when it closes
(cleanly or because the client died) the service releases everything the session held.

Requests (``{"op": ..., ...}``, answered by ``broker/grants.py``) and their replies:

- ``hello`` -> ``{token, rdma_address, transport}``: the client connects a queue pair to
  ``rdma_address``, SENDs the token on it, then ``attach`` -> ``{session}`` binds the two.
- ``produce_access {topic, partition, mode: exclusive|shared}`` -> ``{file_id, region, length,
  position, base_offset, word?}``: the head file registered for REMOTE_WRITE; shared mode adds the
  reservation word (``{addr, rkey}``).
- ``read_access {topic, partition, offset}`` -> ``{file_id, region, start, lrb, mutable,
  base_offset, slot, slots}``: a file registered for REMOTE_READ, where to start, how far it may
  be read, and the metadata slot (index into the session's slot region ``slots``) of a mutable file.
- ``next_file {topic, partition, file_id, ...}``: producer: roll and grant the new head;
  consumer: read access to the file after the one named.
- ``release {topic, partition, base_offset}``: a consumer is done with a file.
- ``commit_slot {group, topic, partition}`` -> the commit slot a consumer's ``commit_async``
  adds to (see commit_slots.py); ``producer_id`` -> ``{producer_id, producer_epoch}`` for an
  idempotent producer; ``partitions {topic}`` -> ``{partitions}``, for a producer's partitioner.
- ``bye``: the client is closing: everything the session holds is released before the reply
  (a closed connection releases it too, but asynchronously).

Errors come back as ``{"error": code, "message": text}``. A line that is not a JSON object, an
unknown op, or a missing or mistyped field is ``invalid_request`` naming it; a line over
MAX_LINE is answered so and the connection closed.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import socket
import threading
from collections.abc import Callable
from typing import Any

from rdmalog.errors import KafkaError
from rdmalog.rdma.transport.interface import wait_readable

log = logging.getLogger(__name__)

MAX_LINE = 1 << 16


class ControlError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message  # without the code: what travels in a reply


class Session:
    """One client's control connection and what the service granted it."""

    _ids = itertools.count(1)

    def __init__(self, sock: socket.socket, peer: Any):
        self.id = next(self._ids)
        self.sock = sock
        self.peer = peer
        self.state: dict[str, Any] = {}


_REQUIRED = object()


def arg(req: dict, name: str, kind: type, default: Any = _REQUIRED) -> Any:
    """A request's field `name` of JSON type `kind` (int: a true integer, not a bool or float);
    `default` when it is absent, if given. Anything else is the client's mistake: invalid_request
    naming the field."""
    value = req.get(name, default)
    if value is _REQUIRED:
        raise ControlError("invalid_request", f"{req.get('op')!r} needs {name!r}")
    if value is not default and type(value) is not kind:
        raise ControlError(
            "invalid_request", f"{name!r} must be {kind.__name__}, not {type(value).__name__}"
        )
    return value


def _parse(line: bytes) -> dict:
    """One request line: a JSON object, else invalid_request."""
    try:
        req = json.loads(line)
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ControlError("invalid_request", f"not JSON: {e}") from None
    if not isinstance(req, dict):
        raise ControlError(
            "invalid_request", f"a request is a JSON object, not {type(req).__name__}"
        )
    return req


def _read_line(f) -> bytes | None:
    line = f.readline(MAX_LINE + 1)
    if not line:
        return None
    if len(line) > MAX_LINE:
        raise ControlError("invalid_request", "request too large")
    return line


class ControlServer:
    """Thread-per-connection server (control traffic is rare: grants, rolls, releases)."""

    def __init__(
        self,
        handler: Callable[[Session, dict], dict],
        on_close: Callable[[Session], None],
        host: str = "127.0.0.1",
        port: int = 0,
    ):
        self.handler, self.on_close = handler, on_close
        self.sock = socket.create_server((host, port))
        h, p = self.sock.getsockname()[:2]
        self.address = f"{h}:{p}"
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sessions: set[Session] = set()

    def start(self) -> ControlServer:
        self.sock.settimeout(0.2)  # here, not in the thread: stop() may close the socket first
        t = threading.Thread(target=self._accept_loop, name="rdma-control", daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, peer = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            s = Session(conn, peer)
            self._sessions.add(s)
            t = threading.Thread(
                target=self._serve, args=(s,), name=f"rdma-session-{s.id}", daemon=True
            )
            t.start()

    def _serve(self, s: Session) -> None:
        f = s.sock.makefile("rb")
        try:
            while not self._stop.is_set():
                line = _read_line(f)
                if line is None:
                    break
                try:
                    reply = self.handler(s, _parse(line))
                except ControlError as e:
                    if e.code == "invalid_request":
                        log.info("control request from %s refused: %s", s.peer, e.message)
                    reply = {"error": e.code, "message": e.message}
                except KafkaError as e:  # e.g. an unknown topic: the client's mistake, not ours
                    log.info("control request refused: %s", e)
                    reply = {"error": type(e).__name__, "message": str(e)}
                except Exception as e:  # a bug or a store error: the client gets a reason
                    log.exception("control request failed")
                    reply = {"error": type(e).__name__, "message": str(e)}
                s.sock.sendall(json.dumps(reply).encode() + b"\n")
        except ControlError as e:  # a line over MAX_LINE: answered, then the connection closes
            log.info("control connection from %s closed: %s", s.peer, e.message)
            with contextlib.suppress(OSError):
                s.sock.sendall(json.dumps({"error": e.code, "message": e.message}).encode() + b"\n")
        except (OSError, ValueError):  # the peer went away mid-line
            pass
        finally:
            self._sessions.discard(s)
            try:
                self.on_close(s)
            finally:
                f.close()
                s.sock.close()

    def stop(self) -> None:
        self._stop.set()
        self.sock.close()
        for s in list(self._sessions):
            try:
                s.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class ControlClient:
    """Blocking request/reply client; one per native producer or consumer."""

    def __init__(self, address: str, timeout: float = 10.0):
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self._f = self.sock.makefile("rb")
        self._lock = threading.Lock()

    def request(self, op: str, **args: Any) -> dict:
        with self._lock:
            try:
                self.sock.sendall(json.dumps({"op": op, **args}).encode() + b"\n")
                line = _read_line(self._f)
            except OSError as e:  # reset by a dead peer, or our timeout: the session is unusable
                raise ControlError("disconnected", f"control connection failed: {e}") from e
        if line is None:
            raise ControlError("disconnected", "the RDMA service closed the control connection")
        reply = json.loads(line)
        if "error" in reply:
            raise ControlError(reply["error"], reply.get("message", ""))
        return reply

    def alive(self) -> bool:
        """False once the service closed the connection or its process died (one peek, no wait)."""
        try:
            if not wait_readable([self.sock], 0):
                return True  # nothing to read: no EOF, no reset
            return self.sock.recv(1, socket.MSG_PEEK) != b""
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        try:
            self._f.close()
            self.sock.close()
        except OSError:
            pass
