"""A broker's part in a cluster, composed and started in order.

`connect()` opens the ZooKeeper session and reads the cluster id (before the store opens, so a data
dir of another cluster is refused); `prepare(store, broker)` starts the watches and the replica
manager (local replicas created, followers fetching) before the gateway listens; `join()` registers
the broker under /brokers/ids once it listens, which lets the controller give it leaderships, and
starts its controller candidacy; `controlled_shutdown()` asks the controller to move its leaderships
away before it stops; `stop()` leaves the cluster.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from gateway.cluster.link import ReplicaLink
from rdmalog.cluster import znodes as Z
from rdmalog.cluster.controller import Controller
from rdmalog.cluster.fetcher import FetcherManager
from rdmalog.cluster.registry import Registry
from rdmalog.cluster.replica_manager import ReplicaManager
from rdmalog.cluster.view import ClusterWatcher
from rdmalog.config import BrokerConfig
from rdmalog.security.inter_broker import client_security
from rdmalog.security.listeners import protocol_map

log = logging.getLogger("gateway.cluster")


class ClusterProducerIds:
    """Producer ids from blocks claimed in ZooKeeper (/latest_producer_id_block): unique across the
    cluster, so a producer keeps its id whichever broker it asked."""

    def __init__(self, registry: Registry, broker_id: int) -> None:
        self.registry = registry
        self.broker_id = broker_id
        self._lock = threading.Lock()
        self._next = 0
        self._end = -1

    def allocate(self) -> int:
        with self._lock:
            if self._next > self._end:
                self._next, self._end = self.registry.allocate_producer_ids(self.broker_id)
            pid = self._next
            self._next += 1
            return pid


class ClusterNode:
    """Registry session, watches, controller, replica manager and fetchers of one broker."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.node_id
        self.registry = Registry(
            config.get("zookeeper.connect"),
            config.get("zookeeper.session.timeout.ms"),
            config.get("zookeeper.connection.timeout.ms"),
        )
        self.watcher: ClusterWatcher | None = None
        self.controller: Controller | None = None
        self.replicas: ReplicaManager | None = None
        self.fetchers: FetcherManager | None = None
        self.broker: Any = None
        self.rdma: Any = None  # the RDMA service, when this broker runs one
        self._stop_callbacks: list[Callable[[], None]] = []  # stores kept on this session
        # the other brokers' inter-broker listener and how to log in to it
        self.security = client_security(config)
        self.listener = self.security.listener

    @property
    def view(self):
        return self.watcher.view

    def connect(self) -> str:
        """Open the ZooKeeper session (blocking); return the cluster id."""
        self.registry.start()
        return self.registry.cluster_id()

    async def prepare(self, store: Any, broker: Any) -> None:
        """Watches, replica manager and fetchers; local replicas made to match ZooKeeper."""
        loop = asyncio.get_running_loop()
        self.broker = broker
        self.watcher = await asyncio.to_thread(ClusterWatcher(self.registry).start)
        cfg = self.config
        self.fetchers = FetcherManager(
            self.broker_id,
            lambda host, port: ReplicaLink.open(host, port, self.security),
            self._endpoint,
            max_wait_ms=cfg.get("replica.fetch.wait.max.ms"),
            max_partition_bytes=cfg.get("replica.fetch.max.bytes"),
            max_response_bytes=cfg.get("replica.fetch.response.max.bytes"),
        )
        self.replicas = ReplicaManager(
            self.broker_id,
            store,
            self.registry,
            self.watcher,
            loop,
            lag_time_max_ms=cfg.get("replica.lag.time.max.ms"),
            fetchers=self.fetchers,
        )
        self.replicas.register = self._register
        self.replicas.add_deleted_listener(broker.forget_log)
        metrics = broker.metrics

        def isr_changed(shrunk: int, expanded: int) -> None:  # the /metrics counters
            metrics.isr_shrunk(shrunk)
            metrics.isr_expanded(expanded)

        self.replicas.on_isr_change = isr_changed
        store.producer_ids = ClusterProducerIds(self.registry, self.broker_id)
        await self.replicas.start()

    def serve_rdma(self, rdma: Any) -> None:
        """Native clients in a cluster: only the leader grants produce and read access, a grant
        is withdrawn when leadership moves, and native consumers read up to the high watermark
        (their last readable byte follows it), so only replicated records are readable."""
        replicas = self.replicas
        rdma.leader_check = lambda topic, p: replicas.leader_error(topic, p)
        self.rdma = rdma

        def moved(topic: str, p: int, leads: bool, _epoch: int) -> None:
            if not leads:
                rdma.revoke_produce(topic, p)

        replicas.add_leadership_listener(moved)
        # push replication, the follower's side: its leader writes the replica's head as a
        # native producer would, granted by this service; a role change revokes that first
        rdma.serve_replicas(replicas.accept_push, replicas.replica_pushed)
        # acks=all native producers are answered once the ISR holds their batches
        rdma.replicated_acks(
            replicas.when_replicated, lambda topic, p: replicas.check_produce(topic, p, -1)
        )
        replicas.add_role_listener(rdma.revoke_produce)
        if self.replica_transport() == "push":
            self._push_from_here()

    def replica_transport(self) -> str:
        """`replica.transport`; unset: push when this broker serves an RDMA transport."""
        chosen = self.config.get("replica.transport")
        if chosen is None:
            chosen = "pull" if self.config.get("rdma.transport") == "none" else "push"
        return chosen

    def _push_from_here(self) -> None:
        """The leader's side: PushReplication, with links made to followers' RDMA services."""
        from rdmalog.cluster.push import PushReplication
        from rdmalog.rdma.client.endpoint import SaslCredentials

        replicas, cfg, sec = self.replicas, self.config, self.security

        def rdma_of(broker_id: int) -> tuple[str, str] | None:
            info = self.view.brokers.get(broker_id)
            return None if info is None else info.rdma

        replicas.push = PushReplication(
            self.broker_id,
            rdma_of,
            replicas.push_acked,  # on the loop that reads the acks (or a link's thread: isr.py)
            lambda *gone: replicas.call_soon(replicas.push_pulled, *gone),
            batch_max=cfg.get("replica.push.batch.max.bytes"),
            stall_s=cfg.get("replica.lag.time.max.ms") / 1000,
            # the follower's RDMA service takes the login of its inter-broker listener
            sasl=None
            if sec.mechanism is None
            else SaslCredentials(sec.mechanism, sec.username or "", sec.password or ""),
            loop=replicas.loop,
        )

    async def join(self) -> None:
        """Register (the gateway listens now) and stand for controller."""
        epoch = await asyncio.to_thread(self._register)
        log.info(
            "broker %d registered in ZooKeeper %s (cluster %s)",
            self.broker_id, self.registry.connect, self.broker.cluster_id,
        )  # fmt: skip
        await self.replicas.registered(epoch)
        cfg = self.config
        self.controller = Controller(
            self.registry,
            self.watcher,
            self.broker_id,
            unclean_default=cfg.get("unclean.leader.election.enable"),
            rebalance_interval_s=(
                cfg.get("leader.imbalance.check.interval.seconds")
                if cfg.get("auto.leader.rebalance.enable")
                else None
            ),
            rebalance_imbalance_pct=cfg.get("leader.imbalance.per.broker.percentage"),
        ).start()

    def _register(self) -> int:
        """/brokers/ids/<id> with every listener's advertised endpoint and protocol."""
        endpoints = [Z.Endpoint(name, h, p) for name, (h, p) in self.broker.endpoints.items()]
        rdma = self.rdma
        return self.registry.register_broker(
            self.broker_id,
            endpoints,
            self.config.get("broker.rack"),
            protocols=protocol_map(self.config),
            rdma=None if rdma is None else (rdma.control_address, rdma.kind),
        )

    def _endpoint(self, broker_id: int) -> tuple[str, int] | None:
        info = self.view.brokers.get(broker_id)
        if info is None or not info.endpoints:
            return None
        ep = info.endpoint(self.listener)
        return ep.host, ep.port

    async def controlled_shutdown(self) -> int | None:
        """Ask the controller to move this broker's leaderships away and wait for its answer
        (retrying as `controlled.shutdown.max.retries` says); the partitions still led here."""
        cfg = self.config
        if not cfg.get("controlled.shutdown.enable") or self.replicas is None:
            return None
        tries = cfg.get("controlled.shutdown.max.retries") + 1
        backoff = cfg.get("controlled.shutdown.retry.backoff.ms") / 1000
        wait_s = max(cfg.get("zookeeper.session.timeout.ms") / 1000, 5.0)
        remaining = None
        for attempt in range(tries):
            try:
                await asyncio.to_thread(self.registry.request_controlled_shutdown, self.broker_id)
            except Exception as exc:
                log.warning("controlled shutdown request failed: %r", exc)
                return None
            deadline = time.monotonic() + wait_s
            remaining = None
            while time.monotonic() < deadline:
                remaining = await asyncio.to_thread(
                    self.registry.controlled_shutdown_answer, self.broker_id
                )
                if remaining is not None:
                    break
                await asyncio.sleep(0.02)
            if remaining == 0:
                break
            if attempt + 1 < tries:
                await asyncio.sleep(min(backoff, 1.0))
        # the new leaders' states reach this broker through its watches: wait until it leads none
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and remaining == 0 and self.replicas.leading():
            await asyncio.sleep(0.01)
        log.info("controlled shutdown: %s partition(s) still led here", remaining)
        return remaining

    def on_stop(self, callback: Callable[[], None]) -> None:
        """Call `callback()` when the node stops, before its ZooKeeper session closes."""
        self._stop_callbacks.append(callback)

    async def stop(self) -> None:
        """Leave the cluster: no more controller, no more fetching, registration removed."""
        for callback in self._stop_callbacks:
            callback()
        if self.controller is not None:
            await asyncio.to_thread(self.controller.stop)
        if self.replicas is not None:
            await self.replicas.stop()
        if self.watcher is not None:
            self.watcher.stop()
        try:
            await asyncio.to_thread(self.registry.deregister_broker, self.broker_id)
        except Exception:
            pass
        await asyncio.to_thread(self.registry.stop)
