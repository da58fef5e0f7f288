"""What native producers and consumers share: a control session bound to one queue pair.

The control connection is also the liveness signal: when the broker stops or its process dies the
kernel closes the socket, and the client's next operation raises `BrokerDisconnected` instead of
waiting for acknowledgements or slot updates that will never come. `reconnect()` waits for the
broker to come back and re-establishes the session; subclasses then re-register their buffers.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass

from rdmalog.rdma.control import ControlClient, ControlError
from rdmalog.rdma.transport.devices import open_device
from rdmalog.rdma.transport.interface import Access, Status, TransportError


class BrokerDisconnected(TransportError):
    """The broker's RDMA service went away (stopped, crashed or restarting).

    Writes not yet acknowledged have an unknown outcome (as a Kafka produce that timed out); what
    was acknowledged is committed. Call `reconnect()` on the client, or make a new one.
    """


class ClientClosedError(RuntimeError):
    """The client was closed by the application: nothing more can be done with it (as Kafka
    clients refuse every operation after close); make a new one."""


@dataclass(frozen=True)
class SaslCredentials:
    """Who the client is to a service that requires authentication: a SASL mechanism (PLAIN,
    SCRAM-SHA-256, SCRAM-SHA-512) and the user's name and password (kafka-python's
    sasl_mechanism, sasl_plain_username, sasl_plain_password)."""

    mechanism: str
    username: str
    password: str = ""

    def __repr__(self) -> str:
        return f"SaslCredentials({self.mechanism!r}, {self.username!r}, password=...)"


class Endpoint:
    """Control connection + transport device + one RC queue pair to the broker, bound by a token.

    The control connection authenticates first when `sasl` is given. The token travels in a SEND
    on the new queue pair, so the broker learns which control session (and so which grants and
    metadata slots) the queue pair belongs to. Refusals by the broker's authorizer raise the
    Kafka error a Kafka client would get (TopicAuthorizationFailedError, ...).
    """

    def __init__(
        self,
        control_address: str,
        transport: str | None = None,
        timeout: float = 10.0,
        sasl: SaslCredentials | None = None,
    ):
        self.control_address = control_address
        self.timeout = timeout
        self.sasl = sasl
        self.broken: str | None = None  # why the session is gone (None while connected)
        self.closed = False
        self._transport = transport
        self._connect()

    def _connect(self) -> None:
        self.ctl = ControlClient(self.control_address, self.timeout)
        self.device = self.cq = self.qp = None
        try:
            if self.sasl is not None:
                self.ctl.authenticate(self.sasl.mechanism, self.sasl.username, self.sasl.password)
            try:
                hello = self.ctl.request("hello")
            except ControlError as e:
                raise e.kafka_error() or e from None
            self.kind = self._transport or hello["transport"]
            if self.kind != hello["transport"]:
                raise TransportError(f"broker serves {hello['transport']}, not {self.kind}")
            self.device = open_device(self.kind)
            self.cq = self.device.create_cq(1024)
            self.qp = self.device.connect(hello["rdma_address"], self.cq)
            self.scratch = self.device.alloc_mr(64, Access.LOCAL_WRITE)
            struct.pack_into("<Q", self.scratch.buf, 0, hello["token"])
            self.qp.post_send(0, self.scratch, 0, 8)
            self._wait_send()
            self.ctl.request("attach")
        except Exception:
            self._teardown()  # what this attempt made: a retrying reconnect() makes it again
            raise

    def _wait_send(self) -> None:
        for wc in self.cq.wait(self.timeout):
            if wc.status != Status.SUCCESS:
                raise TransportError(f"hello failed: {wc.status.name}")
            return
        raise TransportError("hello was not completed")

    # -- liveness ------------------------------------------------------------------------------------
    def disconnected(self, why: str) -> BrokerDisconnected | ClientClosedError:
        """Mark the session gone; return the error to raise (subclasses fail what is pending)."""
        if self.closed:
            return ClientClosedError(f"this {type(self).__name__} is closed")
        if self.broken is None:
            self.broken = why
        return BrokerDisconnected(
            f"the broker's RDMA service at {self.control_address} went away ({self.broken}); "
            "call reconnect() or make a new client"
        )

    def check(self) -> None:
        """Raise BrokerDisconnected if the session is (or has just been seen) gone."""
        if self.broken is None and not self.ctl.alive():
            raise self.disconnected("control connection closed by the broker")
        if self.broken is not None:
            raise self.disconnected(self.broken)

    def control(self, op: str, **args) -> dict:
        """A control request; a lost connection becomes BrokerDisconnected."""
        if self.broken is not None:
            raise self.disconnected(self.broken)
        try:
            return self.ctl.request(op, **args)
        except ControlError as e:
            if e.code == "disconnected":
                raise self.disconnected(str(e)) from e
            raise e.kafka_error() or e from None

    def reconnect(self, timeout: float = 30.0) -> None:
        """Drop the old session and open a new one, retrying until the broker answers."""
        if self.closed:
            raise self.disconnected("closed")
        self._teardown()
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._connect()
                break
            except (OSError, TransportError, ControlError, ValueError) as e:
                if time.monotonic() >= deadline:
                    raise BrokerDisconnected(
                        f"the broker at {self.control_address} did not come back "
                        f"within {timeout}s: {e}"
                    ) from e
                time.sleep(0.1)
        self.broken = None
        self._reconnected()

    def _reconnected(self) -> None:
        """Subclasses re-register their buffers and re-request what they held."""

    def _teardown(self) -> None:
        """Close the queue pair, completion queue, control connection and device, each once: the
        completion queue too (on tcp an eventfd, which no garbage collection closes)."""
        parts = (self.qp, self.cq, self.ctl, self.device)
        self.qp = self.cq = self.device = None
        for part in parts:
            if part is None:
                continue
            try:
                part.close()
            except Exception:  # the peer is gone: best effort, the new session starts clean
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Say bye and free the queue pair and device; closing again does nothing."""
        if self.closed:
            return
        self.closed = True
        if self.broken is None:
            try:
                self.ctl.request("bye")  # released before we go: a successor never finds it held
            except (ControlError, OSError):
                pass
        self._teardown()
        self.broken = "closed"  # every later operation raises ClientClosedError (disconnected)
