"""The control channel: small JSON-line requests over TCP on the RDMA service's own port.

KafkaDirect sends its control requests over Kafka's TCP path; here they get their own port so the
datapaths do not depend on the gateway. One TCP connection is one client session: when it closes
(cleanly or because the client died) the service releases everything the session held.

Requests (``{"op": ..., ...}``, answered by ``broker/grants.py``) and their replies:

- ``authenticate {mechanism, data}`` -> ``{data, done}``: one step of a SASL exchange (PLAIN,
  SCRAM-SHA-256, SCRAM-SHA-512; data base64), repeated until done. A service with credentials
  configured refuses every other request before it (``authentication_required``), and closes the
  connection after refused credentials (``SaslAuthenticationFailedError``). Every grant below is
  checked against the service's authorizer for the session's principal
  (``broker/access_control.py``).
- ``hello`` -> ``{token, rdma_address, transport}``: the client connects a queue pair to
  ``rdma_address``, SENDs the token on it, then ``attach`` -> ``{session}`` binds the two.
- ``produce_access {topic, partition, mode: exclusive|shared}`` -> ``{file_id, region, length,
  position, base_offset, word?}``: the head file registered for REMOTE_WRITE; shared mode adds the
  reservation word (``{addr, rkey}``).
- ``read_access {topic, partition, offset}`` -> ``{file_id, region, start, lrb, mutable,
  base_offset, slot, slots}``: a file registered for REMOTE_READ, where to start, how far it may
  be read, and the metadata slot (index into the session's slot region ``slots``) of a mutable file.
  With ``isolation_level: 1`` the session reads committed data: its last readable bytes stop at the
  last stable offset, and ``aborted_transactions {topic, partition, start}`` -> ``{aborted:
  [[producer_id, first_offset], ...], upto}`` tells it the aborted transactions from ``start`` on.
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
from base64 import b64decode, b64encode
from collections.abc import Callable
from typing import Any

from rdmalog.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    InvalidTopicError,
    KafkaError,
    NotEnoughReplicasError,
    SaslAuthenticationFailedError,
    TopicAuthorizationFailedError,
)
from rdmalog.rdma.transport.interface import wait_readable

log = logging.getLogger(__name__)

MAX_LINE = 1 << 16
_KAFKA_REFUSALS = {
    c.__name__: c
    for c in (
        TopicAuthorizationFailedError,
        GroupAuthorizationFailedError,
        ClusterAuthorizationFailedError,
        SaslAuthenticationFailedError,
        InvalidTopicError,
        NotEnoughReplicasError,
    )
}


class ControlError(Exception):
    """A refused request: `code` and `message` travel in the reply; `close`: the server closes
    the connection after answering (refused credentials)."""

    close = False

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message  # without the code: what travels in a reply

    def kafka_error(self) -> KafkaError | None:
        """The Kafka error a Kafka client would get for this refusal (authorization,
        authentication, an internal topic), None for the service's own codes."""
        if self.code == "authentication_required":
            return SaslAuthenticationFailedError(self.message)
        cls = _KAFKA_REFUSALS.get(self.code)
        return None if cls is None else cls(self.message)


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
                close = False
                try:
                    reply = self.handler(s, _parse(line))
                except ControlError as e:
                    if e.code == "invalid_request":
                        log.info("control request from %s refused: %s", s.peer, e.message)
                    reply = {"error": e.code, "message": e.message}
                    close = e.close
                except KafkaError as e:  # e.g. an unknown topic: the client's mistake, not ours
                    log.info("control request refused: %s", e)
                    reply = {"error": type(e).__name__, "message": str(e)}
                except Exception as e:  # a bug or a store error: the client gets a reason
                    log.exception("control request failed")
                    reply = {"error": type(e).__name__, "message": str(e)}
                s.sock.sendall(json.dumps(reply).encode() + b"\n")
                if close:
                    break
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

    def end(self, s: Session) -> None:
        """End session s from here (its connection closes; `on_close` releases what it held)."""
        with contextlib.suppress(OSError):
            s.sock.shutdown(socket.SHUT_RDWR)

    def sessions(self) -> list[Session]:
        return list(self._sessions)

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

    def authenticate(self, mechanism: str, user: str, password: str) -> None:
        """Run a SASL exchange (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) on this connection."""
        from rdmalog.security.sasl import AuthenticationError, SaslClient

        try:
            client = SaslClient(mechanism, user, password)
            out: bytes | None = client.first()
            while out is not None:
                try:
                    data = b64encode(out).decode()
                    r = self.request("authenticate", mechanism=mechanism, data=data)
                except ControlError as e:
                    raise e.kafka_error() or e from None
                out = client.step(b64decode(r["data"]))
                if r["done"] and out is not None:  # PLAIN: done with the first answer
                    out = None
        except AuthenticationError as e:  # refused on our side (a mechanism, the server's proof)
            raise SaslAuthenticationFailedError(str(e)) from None
        if not client.done:
            raise SaslAuthenticationFailedError("the service ended the exchange early")

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
