"""An in-process push-replication pair for tests and benchmarks: a follower's Store and real
RdmaService, and a leader's log with its FollowerLink (rdmalog/cluster/push.py) to it, on any
transport. Used by tests/integration/native/test_push_link.py and bench/replication_modes.py."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

from rdmalog.cluster.push import FollowerLink, Pushed
from rdmalog.config import BrokerConfig
from rdmalog.rdma.broker.service import RdmaService
from rdmalog.store.log_manager import Store
from rdmalog.store.records import build_batch

LEADER, EPOCH = 1, 5


def _store(path: Path, segment_bytes: int | None = None) -> Store:
    path.mkdir()
    st = Store(path, BrokerConfig.from_sources(None, {"log.dirs": str(path)}))
    st.open(start_maintenance=False)
    st.create_topic("t", 1, {} if segment_bytes is None else {"segment.bytes": str(segment_bytes)})
    return st


class Follower:
    """A follower broker's store and RDMA service, following LEADER in `current`."""

    def __init__(self, path: Path, kind: str, credits: int = 32, segment_bytes: int | None = None):
        self.store = _store(path, segment_bytes)
        self.log = self.store.partition("t", 0)
        self.current = (LEADER, EPOCH)
        self.pushed: list[bool] = []
        self.svc = RdmaService(self.store, kind, order_timeout=0.3, replica_credits=credits)
        self.svc.serve_replicas(
            lambda t, p, leader, epoch: (leader, epoch) == self.current,
            lambda t, p, held: self.pushed.append(held),
        )
        self.svc.start()

    def close(self) -> None:
        self.svc.stop()
        self.store.close()


class Leader:
    """The leader's log and its link to the follower, recording acknowledgements."""

    def __init__(
        self,
        path: Path,
        follower: Follower,
        kind: str,
        batch_max: int = 4096,
        segment_bytes: int | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ):
        """`loop`: the event loop that reads the link's acknowledgements (None: its thread)."""
        self.store = _store(path, segment_bytes)
        self.log = self.store.partition("t", 0)
        self.acked = -1
        self.pulled: list[str] = []
        self.down: list[str] = []
        self.changed = threading.Condition()
        self.ack_threads: list[int] = []  # the thread each acknowledgement was reported on
        self.link = FollowerLink(
            LEADER, 2, follower.svc.control_address, kind,
            batch_max=batch_max, stall_s=30.0,
            on_ack=self._ack, on_pull=lambda _p, why: self._note(self.pulled, why),
            on_down=lambda _link, why: self._note(self.down, why), loop=loop,
        )  # fmt: skip
        self.pp = Pushed("t", 0, self.log, EPOCH)
        self.link.push(self.pp)
        self.wait("pushing", lambda: self.pp.state == "pushing")

    def _ack(self, _pp, leo: int) -> None:
        with self.changed:
            self.ack_threads.append(threading.get_ident())
            self.acked = max(self.acked, leo)
            self.changed.notify_all()

    def _note(self, where: list, why: str) -> None:
        with self.changed:
            where.append(why)
            self.changed.notify_all()

    def wait(self, what: str, check, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not check():
                left = deadline - time.monotonic()
                assert left > 0, f"timed out waiting for {what}"
                self.changed.wait(min(left, 0.05))

    def append(self, *values: bytes) -> int:
        """Append a batch per value and push it; the log end offset after."""
        for v in values:
            self.log.append(memoryview(bytearray(build_batch([(None, v)]))))
            self.link.kick(self.log)
        return self.log.log_end_offset

    def close(self) -> None:
        self.link.close()
        self.store.close()
