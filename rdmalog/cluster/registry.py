"""The cluster's registry in ZooKeeper, through kazoo: brokers, cluster id, topics, partition states,
topic configs, the controller and producer id blocks, in Kafka's layout (see znodes.py).

Every call is synchronous (kazoo's threads do the I/O); callers on an event loop run them in an
executor. Writes that change who leads or what is in sync are conditional:

- the controller's writes are a ZooKeeper transaction that first checks the version of
  /controller_epoch it read when it was elected, so a controller that was replaced (its epoch znode
  moved on) can change nothing;
- a leader's ISR change is a set with the partition state's znode version, so a leader whose state
  was rewritten by the controller (a new leader epoch) cannot change the ISR, and a broker without a
  ZooKeeper session cannot write at all.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from rdmalog.cluster import znodes as Z
from rdmalog.errors import KafkaError
from rdmalog.store.checkpoints import uuid_to_kafka

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE


class RegistryError(KafkaError):
    """A registry operation that cannot be done (the message says why)."""


class BrokerIdInUseError(RegistryError):
    """Another live broker is registered with this broker id."""


class ControllerMovedError(RegistryError):
    """A controller write was refused: another controller was elected since (a newer epoch)."""


class StaleStateError(RegistryError):
    """A conditional write of a partition state or assignment lost against a newer version."""


@dataclass(frozen=True)
class ControllerLease:
    """What a controller holds after winning the election: its epoch and the version of the
    /controller_epoch znode it wrote (every later write checks it)."""

    epoch: int
    zk_version: int


class Registry:
    """A kazoo session with Kafka's znodes as typed operations."""

    def __init__(
        self,
        connect: str,
        session_timeout_ms: int = 18000,
        connection_timeout_ms: int | None = None,
    ) -> None:
        self.connect = connect
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms or session_timeout_ms
        self.zk = KazooClient(
            hosts=connect,
            timeout=session_timeout_ms / 1000,
            connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0),
            command_retry=KazooRetry(max_tries=3, delay=0.05, max_delay=0.5),
        )
        self._listeners: list[Callable[[str], None]] = []
        self.zk.add_listener(self._on_state)

    # --- session ----------------------------------------------------------------------------------

    def start(self) -> Registry:
        """Connect (waiting up to zookeeper.connection.timeout.ms) and make Kafka's persistent paths
        (and the chroot of a `host:port/chroot` connect string, as Kafka does)."""
        hosts, slash, chroot = self.connect.partition("/")
        timeout = self.connection_timeout_ms / 1000
        try:
            if slash and chroot.strip("/"):
                root = KazooClient(hosts=hosts, timeout=self.session_timeout_ms / 1000)
                try:
                    root.start(timeout=timeout)
                    root.ensure_path("/" + chroot.strip("/"))
                finally:
                    root.stop()
                    root.close()
            self.zk.start(timeout=timeout)
        except KazooTimeoutError:
            self.zk.close()
            raise RegistryError(
                f"cannot reach ZooKeeper at {self.connect} within "
                f"{self.connection_timeout_ms} ms (zookeeper.connection.timeout.ms)"
            ) from None
        for path in Z.PERSISTENT_PATHS:
            self.zk.ensure_path(path)
        return self

    def stop(self) -> None:
        try:
            self.zk.stop()
        finally:
            self.zk.close()

    def add_state_listener(self, cb: Callable[[str], None]) -> None:
        """`cb(state)` with "CONNECTED", "SUSPENDED" (connection lost, session may live on) or
        "LOST" (session expired: ephemeral znodes and watches of the old session are gone), on
        kazoo's connection thread: do not block in it."""
        self._listeners.append(cb)

    def _on_state(self, state: str) -> None:
        name = {
            KazooState.CONNECTED: "CONNECTED",
            KazooState.SUSPENDED: "SUSPENDED",
            KazooState.LOST: "LOST",
        }.get(state, str(state))
        log.info("ZooKeeper session %s", name)
        for cb in list(self._listeners):
            try:
                cb(name)
            except Exception:
                log.exception("ZooKeeper state listener failed")

    @property
    def connected(self) -> bool:
        return self.zk.state == KazooState.CONNECTED

    @property
    def session_id(self) -> int | None:
        cid = self.zk.client_id
        return cid[0] if cid else None

    # --- cluster id -------------------------------------------------------------------------------

    def cluster_id(self) -> str:
        """/cluster/id, created by the first broker of a new cluster (Kafka's 22-char form)."""
        try:
            data, _ = self.zk.get(Z.CLUSTER_ID)
            return Z.decode_cluster_id(data)
        except NoNodeError:
            pass
        new = uuid_to_kafka(uuid.uuid4())
        try:
            self.zk.create(Z.CLUSTER_ID, Z.encode_cluster_id(new), makepath=True)
            return new
        except NodeExistsError:
            data, _ = self.zk.get(Z.CLUSTER_ID)
            return Z.decode_cluster_id(data)

    # --- brokers ----------------------------------------------------------------------------------

    def register_broker(
        self,
        broker_id: int,
        endpoints: list[Z.Endpoint],
        rack: str | None = None,
        wait_s: float | None = None,
        protocols: dict[str, str] | None = None,
        rdma: tuple[str, str] | None = None,
    ) -> int:
        """Create the ephemeral /brokers/ids/<id>; return its czxid (the broker epoch).

        A registration left by this broker's previous process (its session not expired yet) goes
        away within the session timeout: wait for that. A registration still there after it
        belongs to a live broker with the same id: refused with BrokerIdInUseError.
        """
        path = Z.broker_path(broker_id)
        data = Z.encode_broker(endpoints, rack, protocols, rdma)
        wait_s = self.session_timeout_ms / 1000 + 2.0 if wait_s is None else wait_s
        deadline = time.monotonic() + wait_s
        waited = False
        while True:
            try:
                self.zk.create(path, data, ephemeral=True, makepath=True)
                break
            except NodeExistsError:
                try:
                    _, stat = self.zk.get(path)
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == self.session_id:
                    self.zk.set(path, data)
                    break
                if time.monotonic() >= deadline:
                    raise BrokerIdInUseError(
                        f"broker.id {broker_id} is registered in ZooKeeper ({self.connect}) by "
                        f"another live broker (session 0x{stat.ephemeralOwner:x}); each broker "
                        "needs its own broker.id"
                    ) from None
                if not waited:
                    log.info(
                        "%s exists (an earlier session of broker %d?): waiting up to %.1f s for "
                        "it to expire",
                        path, broker_id, wait_s,
                    )  # fmt: skip
                    waited = True
                time.sleep(0.2)
        _, stat = self.zk.get(path)
        return stat.czxid

    def deregister_broker(self, broker_id: int) -> None:
        try:
            _, stat = self.zk.get(Z.broker_path(broker_id))
            if stat.ephemeralOwner == self.session_id:
                self.zk.delete(Z.broker_path(broker_id))
        except NoNodeError:
            pass

    def broker(self, broker_id: int) -> Z.BrokerInfo | None:
        try:
            data, stat = self.zk.get(Z.broker_path(broker_id))
        except NoNodeError:
            return None
        return Z.decode_broker(broker_id, data, stat.czxid)

    def brokers(self) -> dict[int, Z.BrokerInfo]:
        out = {}
        for child in self.zk.get_children(Z.BROKER_IDS):
            if child.isdigit():
                info = self.broker(int(child))
                if info is not None:
                    out[info.broker_id] = info
        return out

    # --- topics -----------------------------------------------------------------------------------

    def topics(self) -> list[str]:
        return sorted(self.zk.get_children(Z.BROKER_TOPICS))

    def topic(self, topic: str) -> Z.TopicAssignment | None:
        try:
            data, stat = self.zk.get(Z.topic_path(topic))
        except NoNodeError:
            return None
        return Z.decode_topic(data, stat.version)

    def create_topic(
        self, topic: str, assignment: Z.TopicAssignment, configs: dict[str, str]
    ) -> None:
        """Kafka's order: the config znode, then the assignment (which the controller watches).
        Raises NodeExistsError when the topic exists."""
        if self.zk.exists(Z.topic_path(topic)):
            raise NodeExistsError()
        self.zk.ensure_path(Z.CONFIG_TOPICS)
        try:
            self.zk.create(Z.config_path(topic), Z.encode_config(configs))
        except NodeExistsError:
            self.zk.set(Z.config_path(topic), Z.encode_config(configs))
        self.zk.create(Z.topic_path(topic), Z.encode_topic(assignment))

    def set_topic(self, topic: str, assignment: Z.TopicAssignment) -> int:
        """Rewrite an assignment at the version it was read at; return the new version."""
        try:
            stat = self.zk.set(Z.topic_path(topic), Z.encode_topic(assignment), assignment.version)
        except BadVersionError:
            raise StaleStateError(f"the assignment of {topic} changed meanwhile") from None
        return stat.version

    def topic_configs(self, topic: str) -> dict[str, str]:
        return self.versioned_topic_configs(topic)[0]

    def versioned_topic_configs(self, topic: str) -> tuple[dict[str, str], int]:
        """/config/topics/<topic> and its znode version (-1: no such znode)."""
        try:
            data, stat = self.zk.get(Z.config_path(topic))
        except NoNodeError:
            return {}, -1
        return Z.decode_config(data), stat.version

    def set_topic_configs(
        self, topic: str, configs: dict[str, str], version: int | None = None
    ) -> None:
        """Write /config/topics/<topic> and its change notification (as Kafka's AdminZkClient) in
        one transaction: both or neither. `version`: the znode version the configs were read at
        (-1: read as absent); StaleStateError when they changed since. None writes regardless."""
        self.zk.ensure_path(Z.CONFIG_TOPICS)
        self.zk.ensure_path(Z.CONFIG_CHANGES)
        if version is None:
            version = self.versioned_topic_configs(topic)[1]
            if version != -1:
                version = None
        t = self.zk.transaction()
        if version == -1:
            t.create(Z.config_path(topic), Z.encode_config(configs))
        else:
            t.set_data(
                Z.config_path(topic), Z.encode_config(configs), -1 if version is None else version
            )
        t.create(f"{Z.CONFIG_CHANGES}/config_change_", Z.encode_config_change(topic), sequence=True)
        results = t.commit()
        if isinstance(results[0], (BadVersionError, NodeExistsError, NoNodeError)):
            raise StaleStateError(f"the configs of {topic} changed meanwhile")
        failed = [r for r in results if isinstance(r, Exception)]
        if failed:
            raise failed[0]

    def mark_for_deletion(self, topic: str) -> None:
        """/admin/delete_topics/<topic>: the controller deletes the topic."""
        try:
            self.zk.create(Z.delete_path(topic), b"", makepath=True)
        except NodeExistsError:
            pass

    def topics_to_delete(self) -> list[str]:
        return sorted(self.zk.get_children(Z.DELETE_TOPICS))

    # --- partition states -------------------------------------------------------------------------

    def partition_state(self, topic: str, partition: int) -> Z.PartitionState | None:
        try:
            data, stat = self.zk.get(Z.state_path(topic, partition))
        except NoNodeError:
            return None
        return Z.decode_state(data, stat.version, stat.mzxid)

    def set_isr(self, topic: str, partition: int, state: Z.PartitionState) -> Z.PartitionState:
        """A leader's ISR change: written only if the state znode is still at `state.version`
        (raises StaleStateError otherwise); returns the state with its new version."""
        try:
            stat = self.zk.set(Z.state_path(topic, partition), Z.encode_state(state), state.version)
        except (BadVersionError, NoNodeError):
            raise StaleStateError(f"the state of {topic}-{partition} changed meanwhile") from None
        return Z.PartitionState(
            state.leader, state.leader_epoch, state.isr, state.controller_epoch, stat.version,
            stat.mzxid,
        )  # fmt: skip

    # --- controller -------------------------------------------------------------------------------

    def controller_id(self) -> int:
        try:
            data, _ = self.zk.get(Z.CONTROLLER)
        except NoNodeError:
            return -1
        return Z.decode_controller(data)

    def try_become_controller(self, broker_id: int) -> ControllerLease | None:
        """Create the ephemeral /controller and increment /controller_epoch in one transaction;
        None when another broker is controller."""
        for _ in range(10):
            try:
                self.zk.create(Z.CONTROLLER_EPOCH, Z.encode_controller_epoch(0))
            except NodeExistsError:
                pass
            data, stat = self.zk.get(Z.CONTROLLER_EPOCH)
            epoch = Z.decode_controller_epoch(data) + 1
            t = self.zk.transaction()
            t.create(Z.CONTROLLER, Z.encode_controller(broker_id), ephemeral=True)
            t.set_data(Z.CONTROLLER_EPOCH, Z.encode_controller_epoch(epoch), stat.version)
            results = t.commit()
            if not any(isinstance(r, Exception) for r in results):
                return ControllerLease(epoch, results[1].version)
            if isinstance(results[0], NodeExistsError):
                return None
            # the epoch moved under us (another election in between): read it again
        return None

    def resign(self, broker_id: int) -> None:
        """Delete /controller if this session holds it."""
        try:
            _, stat = self.zk.get(Z.CONTROLLER)
            if stat.ephemeralOwner == self.session_id:
                self.zk.delete(Z.CONTROLLER)
        except NoNodeError:
            pass

    def fenced_write(self, lease: ControllerLease, ops: list[tuple]) -> list:
        """Apply controller writes atomically if /controller_epoch is still at the lease's version.

        `ops`: ("create", path, data) | ("set", path, data, version) | ("delete", path, version).
        Returns kazoo's result per op (a ZnodeStat for a set: `.version` is the new version).
        Raises ControllerMovedError when the lease is stale and StaleStateError when a version
        check failed (the caller re-reads and decides again).
        """
        t = self.zk.transaction()
        t.check(Z.CONTROLLER_EPOCH, lease.zk_version)
        for op in ops:
            if op[0] == "create":
                t.create(op[1], op[2])
            elif op[0] == "set":
                t.set_data(op[1], op[2], op[3])
            elif op[0] == "delete":
                t.delete(op[1], op[2] if len(op) > 2 else -1)
            else:
                raise ValueError(op[0])
        results = t.commit()
        if isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError):
            raise ControllerMovedError(f"controller epoch {lease.epoch} is no longer current")
        failed = [
            r
            for r in results[1:]
            if isinstance(r, Exception) and not isinstance(r, RolledBackError)
        ]
        if failed:
            raise StaleStateError(f"controller write refused: {failed[0]!r}")
        return results[1:]

    def delete_tree(self, path: str) -> None:
        try:
            self.zk.delete(path, recursive=True)
        except (NoNodeError, NotEmptyError):
            pass

    # --- controlled shutdown ----------------------------------------------------------------------

    def request_controlled_shutdown(self, broker_id: int) -> None:
        """Ask the controller to move this broker's leaderships away (a new request each call)."""
        path = Z.shutdown_path(broker_id)
        try:
            self.zk.delete(path)
        except NoNodeError:
            pass
        self.zk.create(path, b"", ephemeral=True, makepath=True)

    def controlled_shutdown_answer(self, broker_id: int) -> int | None:
        """Partitions the controller could not move away (None: not answered yet)."""
        try:
            data, _ = self.zk.get(Z.shutdown_path(broker_id))
        except NoNodeError:
            return None
        return Z.decode_shutdown_answer(data)

    # --- producer ids -----------------------------------------------------------------------------

    def allocate_producer_ids(self, broker_id: int) -> tuple[int, int]:
        """Claim the next block of producer ids for this broker (inclusive range), with a version
        check on /latest_producer_id_block so two brokers never get the same block."""
        while True:
            try:
                data, stat = self.zk.get(Z.PRODUCER_ID_BLOCK)
            except NoNodeError:
                try:
                    end = PRODUCER_ID_BLOCK_SIZE - 1
                    self.zk.create(
                        Z.PRODUCER_ID_BLOCK, Z.encode_producer_id_block(broker_id, 0, end)
                    )
                    return 0, end
                except NodeExistsError:
                    continue
            prev = Z.decode_producer_id_block(data)
            start = 0 if prev is None else prev[1] + 1
            end = start + PRODUCER_ID_BLOCK_SIZE - 1
            try:
                self.zk.set(
                    Z.PRODUCER_ID_BLOCK,
                    Z.encode_producer_id_block(broker_id, start, end),
                    stat.version,
                )
                return start, end
            except BadVersionError:
                continue
