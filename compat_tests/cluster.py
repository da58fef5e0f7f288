"""A cluster for tests and benchmarks: `rdmalog serve` brokers (BrokerProcess) in Kafka's ZooKeeper mode
on 127.0.0.1, coordinated through a real ZooKeeper (compat_tests/zookeeper.py).

`BrokerCluster(tmp_dir, zk_connect, size=3).start()`; `.bootstrap` lists every broker;
`.broker(id)` is its BrokerProcess (kill, stop, restart, SIGSTOP ...); `.state(topic, p)` reads
a partition's leader/ISR from ZooKeeper; `wait_for(...)` polls a condition with a deadline.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from compat_tests.brokers import BrokerProcess, free_ports

WAIT_S = 60.0

# Short timeouts so that failovers in tests take seconds (Kafka's defaults are 18 s and 30 s).
TEST_OVERRIDES = {
    "zookeeper.session.timeout.ms": "4000",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "200",
    "controlled.shutdown.retry.backoff.ms": "200",
    "default.replication.factor": "3",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "4",
    "group.initial.rebalance.delay.ms": "0",
    "num.partitions": "1",
}


def wait_for(what: str, check: Callable[[], Any], timeout: float = WAIT_S, every: float = 0.05):
    """Poll `check()` until it returns something truthy (returned); fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


class BrokerCluster:
    """`size` brokers with ids 1..size sharing one ZooKeeper connect string."""

    def __init__(
        self,
        directory: Path,
        zk_connect: str,
        size: int = 3,
        overrides: dict[str, str] | None = None,
        rdma: str | None = None,
        per_broker: Callable[[int, int], dict[str, str]] | None = None,
    ) -> None:
        """`rdma`: a transport (shm, tcp) for native clients; `rdma_control[id]` is each broker's
        control address; `per_broker(broker_id, port)` gives a broker overrides of its own (its
        listeners on that port, say)."""
        self.dir = Path(directory)
        self.zk_connect = zk_connect
        self.overrides = {**TEST_OVERRIDES, **(overrides or {})}
        self.brokers: dict[int, BrokerProcess] = {}
        self.rdma_control: dict[int, str] = {}
        ports = iter(free_ports(2 * size))  # each broker a listener and an RDMA control port
        for broker_id in range(1, size + 1):
            port, control = next(ports), next(ports)
            home = self.dir / f"broker{broker_id}"
            cfg = {**self.overrides, "broker.id": str(broker_id), "zookeeper.connect": zk_connect}
            if rdma is not None:
                cfg.update({"rdma.transport": rdma, "rdma.control.port": str(control)})
                self.rdma_control[broker_id] = f"127.0.0.1:{control}"
            if per_broker is not None:
                cfg.update(per_broker(broker_id, port))
            self.brokers[broker_id] = BrokerProcess(home / "data", cfg, log_dir=home, port=port)
        self._zk = None

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def broker(self, broker_id: int) -> BrokerProcess:
        return self.brokers[broker_id]

    def start(self) -> BrokerCluster:
        """Start every broker and wait until they are registered; a start that fails stops the
        brokers it started (a fixture whose setup raised never runs its teardown)."""
        try:
            for b in self.brokers.values():
                b.start()
            self.wait_registered(set(self.brokers))
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for b in self.brokers.values():
            try:
                b.close()
            except Exception:
                b.kill()
        self.stop_zk_client()

    def stop_zk_client(self) -> None:
        """Close this helper's own ZooKeeper session (reopened on next use)."""
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()
            self._zk = None

    # --- ZooKeeper's view -------------------------------------------------------------------------

    @property
    def zk(self):
        if self._zk is None:
            from kazoo.client import KazooClient

            self._zk = KazooClient(hosts=self.zk_connect, timeout=10)
            self._zk.start(timeout=15)
        return self._zk

    def registered(self) -> set[int]:
        try:
            return {int(c) for c in self.zk.get_children("/brokers/ids")}
        except Exception:
            return set()

    def controller(self) -> int:
        try:
            return json.loads(self.zk.get("/controller")[0])["brokerid"]
        except Exception:
            return -1

    def wait_registered(self, ids: set[int], timeout: float = WAIT_S) -> None:
        wait_for(f"brokers {sorted(ids)} registered", lambda: self.registered() == ids, timeout)
        wait_for("a controller", lambda: self.controller() in ids, timeout)

    def state(self, topic: str, partition: int = 0) -> dict | None:
        try:
            data, _ = self.zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
        except Exception:
            return None
        return json.loads(data)

    def leader(self, topic: str, partition: int = 0) -> int:
        s = self.state(topic, partition)
        return -1 if s is None else s["leader"]

    def wait_isr(
        self, topic: str, isr: set[int], partition: int = 0, timeout: float = WAIT_S
    ) -> dict:
        return wait_for(
            f"ISR of {topic}-{partition} == {sorted(isr)}",
            lambda: (s := self.state(topic, partition)) and set(s["isr"]) == isr and s,
            timeout,
        )

    def stderr(self) -> str:
        return "\n".join(
            f"--- broker {i} ---\n{b.stderr_tail(80)}" for i, b in self.brokers.items()
        )

    def __enter__(self) -> BrokerCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
