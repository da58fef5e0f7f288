"""A running broker composed of its parts: the listeners and their security, the store, the
authorizer and the users' settings, the group coordinator, the RDMA datapaths and the gateway's
server, started and stopped in order (`start`/`shutdown`, `serve`, and `run`, the blocking entry
point of `rdmalog serve`)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from gateway.broker import Broker, SharedAppends
from gateway.groups.service import GroupService
from gateway.mirror.service import MirrorService
from gateway.quotas import QuotaManager
from gateway.server import Gateway
from gateway.transactions.service import TransactionService
from rdmalog import dynamic_broker_config as dynamic
from rdmalog.config import BrokerConfig
from rdmalog.errors import KafkaError
from rdmalog.security.acls import acl_file, authorizer_from_config, authorizer_settings
from rdmalog.security.authorizer import Authorizer
from rdmalog.security.entity_configs import EntityConfigs, ScramCredentials
from rdmalog.security.inter_broker import client_security
from rdmalog.security.listeners import ListenerSecurity, listener_specs, secure
from rdmalog.security.sasl import Credentials
from rdmalog.store.interface import LogStore

log = logging.getLogger("gateway.app")


def secure_listeners(
    config: BrokerConfig, listen: tuple[str, int] | None = None
) -> list[ListenerSecurity]:
    """Every listener with what it needs to serve its protocol (`listen` replaces the first one's
    address); InvalidConfigError, naming the key, when one cannot be served as configured."""
    specs = listener_specs(config)
    if not specs:
        specs = listener_specs(BrokerConfig.from_sources(None, {"listeners": "PLAINTEXT://:9092"}))
    if listen is not None:
        specs[0] = dataclasses.replace(specs[0], host=listen[0], port=listen[1])
    if config.get("zookeeper.connect"):
        client_security(config)  # brokers must be able to log in to each other
    return [secure(config, spec) for spec in specs]


def open_store(
    config: BrokerConfig, replicated: bool = False, cluster_id: str | None = None
) -> LogStore:
    """Open the rdmalog store of this broker (recovers every log), its descriptor limit raised
    first: each partition holds a file open. `replicated` and the cluster's id in cluster mode."""
    from rdmalog.store.descriptors import raise_soft_limit
    from rdmalog.store.log_manager import Store

    raise_soft_limit()
    store = Store(Path(config.log_dirs[0]), config, replicated=replicated, cluster_id=cluster_id)
    store.open()
    return store


def start_rdma(
    store: LogStore,
    config: BrokerConfig,
    groups: GroupService | None = None,
    credentials: Credentials | None = None,
    authorizer: Authorizer | None = None,
) -> SharedAppends | None:
    """Start KafkaDirect's datapaths for native clients when `rdma.transport` names one; offsets
    native consumers commit through commit slots go to `groups`' coordinator. With `credentials`
    control sessions must authenticate (SASL, the Kafka listeners' SCRAM users); every grant is
    checked by `authorizer` (the Kafka listeners' ACLs)."""
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
        replica_credits=config.get("replica.push.credits"),
        credentials=credentials,
        authorizer=authorizer,
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


def version() -> str:
    try:
        return metadata.version("rdmalog")
    except metadata.PackageNotFoundError:
        return "unknown"


def log_start_up(config: BrokerConfig, store: LogStore, listeners: list[ListenerSecurity]) -> None:
    """What an operator checks first: version, cluster id, listeners, non-default configs."""
    log.info(
        "rdmalog %s starting: cluster id %s, node %s, log dir %s",
        version(), getattr(store, "cluster_id", "?"), getattr(store, "node_id", config.node_id),
        config.log_dirs[0],
    )  # fmt: skip
    shown = ", ".join(
        f"{x.spec.name}://{x.spec.host}:{x.spec.port} ({x.spec.protocol})" for x in listeners
    )
    log.info("listeners: %s", shown or "(none)")
    changed = [
        f"{e.name}={'[hidden]' if 'password' in e.name else e.value}"
        for e in config.describe()
        if not e.is_default
    ]
    log.info("configs set (not defaults): %s", ", ".join(changed) or "(none)")


async def start_metrics(gateway: Gateway, config: BrokerConfig, listen_host: str):
    """Start the /metrics and /health endpoint when `metrics.port` is set (>= 0)."""
    port = config.get("metrics.port")
    if port < 0:
        return None
    from gateway.metrics_http import MetricsServer

    server = MetricsServer(gateway.broker, version())
    await server.start(config.get("metrics.host") or listen_host or "0.0.0.0", port)
    return server


def open_security(
    config: BrokerConfig, node: Any = None
) -> tuple[EntityConfigs, Authorizer | None]:
    """Users, client quotas and the ACL authorizer (None when not configured): in the data dir
    of a single broker; in ZooKeeper in a cluster (rdmalog/cluster/security_store.py), where a
    data dir's own users and ACLs are handed over once."""
    log_dir = config.log_dirs[0]
    if node is None:
        return EntityConfigs.in_data_dir(log_dir), authorizer_from_config(config, log_dir)
    from rdmalog.cluster.security_store import ZkAclAuthorizer, ZkEntityConfigs

    zk = node.registry.zk
    entity_configs = ZkEntityConfigs(zk, EntityConfigs.in_data_dir(log_dir).path).start()
    node.on_stop(entity_configs.stop)
    settings = authorizer_settings(config)
    if settings is None:
        return entity_configs, None
    authorizer = ZkAclAuthorizer(zk, *settings, import_from=acl_file(log_dir)).start()
    node.on_stop(authorizer.stop)
    return entity_configs, authorizer


def cluster_broker_configs(node, config: BrokerConfig) -> dynamic.BrokerConfigStore:
    """Cluster mode: this broker's and the `<default>` dynamic configs, watched in ZooKeeper."""
    from rdmalog.cluster.broker_configs import ZkBrokerConfigs

    return ZkBrokerConfigs(node.registry, config.node_id).start()


def apply_broker_configs(broker: Broker) -> None:
    """The dynamic broker configs changed (here or, in a cluster, anywhere): apply them live."""
    try:
        config = dynamic.layered(broker.config.static, broker.broker_configs.entities())
    except KafkaError as exc:  # written by another tool; the broker keeps what it has
        log.warning("dynamic broker configs not applied: %s", exc)
        return
    broker.reconfigure(config)


def on_event_loop(callback: Callable[[Broker], None], broker: Broker) -> Callable[[], None]:
    """A listener that runs `callback(broker)` on the running event loop, the broker's only
    thread: a ZooKeeper watch calls it from kazoo's thread, a local write from the loop itself."""
    loop = asyncio.get_running_loop()

    def listener() -> None:
        try:
            here = asyncio.get_running_loop() is loop
        except RuntimeError:  # not on any loop's thread: kazoo's
            here = False
        if here:
            callback(broker)
        else:
            loop.call_soon_threadsafe(callback, broker)

    return listener


async def start(config: BrokerConfig, listen: tuple[str, int] | None = None) -> Gateway:
    """Open the store and start a gateway on its listeners (`listen` replaces the first one's
    address); return it running. Security that cannot be served as configured stops start-up
    before anything is opened. With `zookeeper.connect` the broker joins its cluster
    (gateway/cluster/node.py): the session and cluster id before the store opens, replicas before
    the gateway listens, registration after."""
    listeners = secure_listeners(config, listen)
    node = None
    if config.get("zookeeper.connect"):
        from gateway.cluster.node import ClusterNode

        node = ClusterNode(config)
        cluster_id = await asyncio.to_thread(node.connect)
        try:
            broker_configs = await asyncio.to_thread(cluster_broker_configs, node, config)
            config = dynamic.layered(config, broker_configs.entities())
            store = open_store(config, replicated=True, cluster_id=cluster_id)
        except BaseException:
            await node.stop()
            raise
    else:
        broker_configs = dynamic.FileBrokerConfigs.in_data_dir(config.log_dirs[0])
        config = dynamic.layered(config, broker_configs.entities())
        store = open_store(config)
    try:
        entity_configs, authorizer = await asyncio.to_thread(open_security, config, node)
    except BaseException:
        if node is not None:
            await node.stop()
        store.close()
        raise
    gateway = Gateway(Broker(config, store), ScramCredentials(entity_configs))
    gateway.broker.cluster = node
    gateway.broker.authorizer = authorizer
    gateway.broker.entity_configs = entity_configs
    gateway.broker.broker_configs = broker_configs
    broker_configs.add_listener(on_event_loop(apply_broker_configs, gateway.broker))
    if node is not None:  # a change that reached the watch before the listener was there
        apply_broker_configs(gateway.broker)
    gateway.quotas = QuotaManager(
        entity_configs, config.get("quota.window.num"), config.get("quota.window.size.seconds")
    )
    try:
        replicas = None
        if node is not None:
            await node.prepare(store, gateway.broker)
            replicas = node.replicas
        # groups are loaded from __consumer_offsets before the first client can ask for them (in
        # a cluster, partition by partition as this broker comes to lead them)
        loop = asyncio.get_running_loop()
        gateway.broker.groups = GroupService(store, config, loop, replicas).start()
        # transactional ids too (a transaction a crash left preparing is completed)
        gateway.broker.transactions = TransactionService(gateway.broker, loop).start()
        # native clients: the same users and ACLs; SASL on the control port as soon as any Kafka
        # listener asks for security (the control port has no TLS to name a principal by)
        secured = any(listener.spec.protocol != "PLAINTEXT" for listener in listeners)
        gateway.broker.rdma = start_rdma(
            store,
            config,
            gateway.broker.groups,
            credentials=gateway.credentials if secured else None,
            authorizer=authorizer,
        )
        log_start_up(config, store, listeners)
        gateway.broker.mirror = MirrorService(gateway.broker).start()
        gateway.metrics_server = await start_metrics(gateway, config, listeners[0].spec.host)
        if node is not None and gateway.broker.rdma is not None:
            node.serve_rdma(gateway.broker.rdma)
        await gateway.start(listeners)
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
    metrics_server = gateway.metrics_server
    if metrics_server is not None:
        metrics_server.stopping = True  # /health answers 503 from here on
    if gateway.broker.mirror is not None:
        await gateway.broker.mirror.stop()
    node = gateway.broker.cluster
    if node is not None:
        await node.controlled_shutdown()
    await gateway.stop()
    if node is not None:
        await node.stop()
    if gateway.broker.rdma is not None:
        gateway.broker.rdma.stop()  # hands the last RDMA commits to the coordinator ...
        await asyncio.sleep(0)  # ... which writes them here, before the store closes
    if gateway.broker.transactions is not None:
        gateway.broker.transactions.stop()
    if gateway.broker.groups is not None:
        gateway.broker.groups.stop()
    gateway.broker.close()
    await asyncio.get_running_loop().run_in_executor(None, gateway.broker.store.close)
    log.info("store flushed and closed")
    if metrics_server is not None:
        await metrics_server.stop()


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
        # a hang-up (a closed terminal, a reload by habit) must not stop a broker
        loop.add_signal_handler(signal.SIGHUP, _ignore_hangup)
        await serve(config, listen)

    try:
        asyncio.run(main())
    except asyncio.CancelledError:
        pass
    except (OSError, KafkaError) as exc:  # cannot listen, or the store refuses its directory
        log.error("broker failed to start: %s", exc)
        raise SystemExit(1) from None


def _ignore_hangup() -> None:
    log.info("received SIGHUP: ignored (rdmalog reloads nothing; restart to change configs)")


def _stop(task: asyncio.Task, sig: signal.Signals) -> None:
    log.info("received %s, shutting down", signal.Signals(sig).name)
    task.cancel()
