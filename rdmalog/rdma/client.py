"""What native producers and consumers share: a control session bound to one queue pair."""

from __future__ import annotations

import struct

from rdmalog.rdma.control import ControlClient
from rdmalog.rdma.transport import Access, Status, TransportError, open_device


class Endpoint:
    """Control connection + transport device + one RC queue pair to the broker, bound by a token.

    The token travels in a SEND on the new queue pair, so the broker learns which control session
    (and so which grants and metadata slots) the queue pair belongs to.
    """

    def __init__(self, control_address: str, transport: str | None = None, timeout: float = 10.0):
        self.timeout = timeout
        self.ctl = ControlClient(control_address, timeout)
        try:
            hello = self.ctl.request("hello")
            self.kind = transport or hello["transport"]
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
            self.ctl.close()
            raise

    def _wait_send(self) -> None:
        for wc in self.cq.wait(self.timeout):
            if wc.status != Status.SUCCESS:
                raise TransportError(f"hello failed: {wc.status.name}")
            return
        raise TransportError("hello was not completed")

    def close(self) -> None:
        try:
            self.qp.close()
        finally:
            self.ctl.close()
            self.device.close()
