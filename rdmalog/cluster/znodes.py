"""Kafka's ZooKeeper layout: znode paths and their JSON, exactly as Kafka (ZooKeeper mode) writes them,
so Kafka's own tools can read an rdmalog cluster's ZooKeeper and the other way round.

    /cluster/id                                   {"version":"1","id":"<22-char id>"}
    /controller                                   {"version":1,"brokerid":1,"timestamp":"<ms>"}   ephemeral
    /controller_epoch                             "<int>"
    /brokers/ids/<id>                             {"version":5,"host","port","endpoints":[...],
                                                   "listener_security_protocol_map","jmx_port",
                                                   "timestamp","rack"?,"features":{}}           ephemeral
    /brokers/topics/<topic>                       {"version":2,"topic_id","partitions":{"0":[1,2]},
                                                   "adding_replicas":{},"removing_replicas":{}}
    /brokers/topics/<topic>/partitions/<p>/state  {"version":1,"leader","leader_epoch","isr",
                                                   "controller_epoch"}
    /config/topics/<topic>                        {"version":1,"config":{"min.insync.replicas":"2"}}
    /config/changes/config_change_<seq>           {"version":2,"entity_path":"topics/<topic>"}
    /admin/delete_topics/<topic>                  (empty: a deletion the controller carries out)
    /latest_producer_id_block                     {"version":1,"broker","block_start","block_end"}

One addition of rdmalog's own, where Kafka used an RPC (ControlledShutdown, API key 7, not in the
client protocol schemas): /admin/controlled_shutdown/<id>, ephemeral, created by a broker asking the
controller to move its leaderships away; the controller answers by writing {"version":1,"remaining":n}
into it.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field

CLUSTER_ID = "/cluster/id"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
BROKER_SEQID = "/brokers/seqid"
CONFIG_TOPICS = "/config/topics"
CONFIG_CHANGES = "/config/changes"
DELETE_TOPICS = "/admin/delete_topics"
CONTROLLED_SHUTDOWN = "/admin/controlled_shutdown"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"

# Persistent paths every broker makes sure of at start (Kafka's ZkData.PersistentZkPaths).
PERSISTENT_PATHS = (
    "/consumers",
    BROKER_IDS,
    BROKER_TOPICS,
    CONFIG_CHANGES,
    CONFIG_TOPICS,
    "/config/clients",
    "/config/users",
    "/config/brokers",
    "/config/ips",
    DELETE_TOPICS,
    CONTROLLED_SHUTDOWN,
    BROKER_SEQID,
    ISR_CHANGE_NOTIFICATION,
    "/cluster",
)

NO_LEADER = -1


def json_bytes(obj: object) -> bytes:
    """A znode's JSON as Kafka writes it (no spaces)."""
    return json.dumps(obj, separators=(",", ":")).encode()


def json_object(data: bytes | None) -> dict:
    """A znode's JSON object ({} for an empty or non-object znode)."""
    if not data:
        return {}
    value = json.loads(data.decode("utf-8"))
    return value if isinstance(value, dict) else {}


def now_ms() -> int:
    return int(time.time() * 1000)


# --- cluster id, controller -------------------------------------------------------------------------


def encode_cluster_id(cluster_id: str) -> bytes:
    return json_bytes({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    return str(json_object(data)["id"])


def encode_controller(broker_id: int) -> bytes:
    return json_bytes({"version": 1, "brokerid": broker_id, "timestamp": str(now_ms())})


def decode_controller(data: bytes | None) -> int:
    """The controller's broker id (-1 when the znode is empty or unreadable)."""
    try:
        return int(json_object(data).get("brokerid", -1))
    except (ValueError, TypeError):
        return -1


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(data: bytes) -> int:
    return int(data.decode())


# --- brokers ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """One advertised listener: name (security protocol here), host, port."""

    listener: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener}://{host}:{self.port}"


@dataclass(frozen=True)
class BrokerInfo:
    """A registered broker: its id, endpoints and rack; `epoch` is the registration's czxid (a
    broker that re-registers after losing its session gets a new one, as in Kafka)."""

    broker_id: int
    endpoints: tuple[Endpoint, ...]
    rack: str | None = None
    epoch: int = -1
    # rdmalog's own field: the RDMA service's control address and transport (push replication)
    rdma: tuple[str, str] | None = None

    def endpoint(self, listener: str | None = None) -> Endpoint:
        """The endpoint of `listener` (the first one when None or not found)."""
        for ep in self.endpoints:
            if listener is None or ep.listener == listener:
                return ep
        return self.endpoints[0]


def encode_broker(
    endpoints: list[Endpoint],
    rack: str | None = None,
    protocols: dict[str, str] | None = None,
    rdma: tuple[str, str] | None = None,
) -> bytes:
    """`protocols`: listener name -> security protocol (`listener.security.protocol.map`);
    `rdma`: (control address, transport) of the broker's RDMA service (a field Kafka's tools
    ignore)."""
    protocols = {e.listener: (protocols or {}).get(e.listener, e.listener) for e in endpoints}
    plain = next((e for e in endpoints if protocols[e.listener] == "PLAINTEXT"), None)
    body: dict = {
        "version": 5,
        "host": plain.host if plain else None,
        "port": plain.port if plain else -1,
        "endpoints": [str(e) for e in endpoints],
        "listener_security_protocol_map": protocols,
        "jmx_port": -1,
        "timestamp": str(now_ms()),
        "features": {},
    }
    if rack is not None:
        body["rack"] = rack
    if rdma is not None:
        body["rdma"] = {"control": rdma[0], "transport": rdma[1]}
    return json_bytes(body)


def decode_broker(broker_id: int, data: bytes, epoch: int = -1) -> BrokerInfo:
    body = json_object(data)
    endpoints = []
    for item in body.get("endpoints") or []:
        name, _, rest = str(item).partition("://")
        host, _, port = rest.rpartition(":")
        endpoints.append(Endpoint(name, host.strip("[]"), int(port)))
    if not endpoints and body.get("host"):
        endpoints.append(Endpoint("PLAINTEXT", str(body["host"]), int(body["port"])))
    rdma = body.get("rdma")
    if isinstance(rdma, dict) and rdma.get("control") and rdma.get("transport"):
        rdma = (str(rdma["control"]), str(rdma["transport"]))
    else:
        rdma = None
    return BrokerInfo(broker_id, tuple(endpoints), body.get("rack"), epoch, rdma)


# --- topics and partitions --------------------------------------------------------------------------


@dataclass
class TopicAssignment:
    """`/brokers/topics/<topic>`: the replicas of each partition (and reassignments in progress)."""

    topic_id: uuid.UUID | None
    partitions: dict[int, list[int]]
    adding: dict[int, list[int]] = field(default_factory=dict)
    removing: dict[int, list[int]] = field(default_factory=dict)
    version: int = -1  # the znode version it was read at


def encode_topic(a: TopicAssignment) -> bytes:
    body: dict = {
        "version": 2,
        "partitions": {str(p): list(r) for p, r in sorted(a.partitions.items())},
        "adding_replicas": {str(p): list(r) for p, r in sorted(a.adding.items()) if r},
        "removing_replicas": {str(p): list(r) for p, r in sorted(a.removing.items()) if r},
    }
    if a.topic_id is not None:
        body["topic_id"] = str(a.topic_id)
    return json_bytes(body)


def decode_topic(data: bytes, version: int = -1) -> TopicAssignment:
    body = json_object(data)

    def replicas(key: str) -> dict[int, list[int]]:
        return {int(p): [int(b) for b in r] for p, r in (body.get(key) or {}).items()}

    tid = body.get("topic_id")
    return TopicAssignment(
        uuid.UUID(tid) if tid else None,
        replicas("partitions"),
        replicas("adding_replicas"),
        replicas("removing_replicas"),
        version,
    )


@dataclass(frozen=True)
class PartitionState:
    """`.../partitions/<p>/state`: leader, leader epoch, ISR, the controller epoch that wrote the
    leader, and the znode version it was read at (the fencing token of conditional writes)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    version: int = -1
    mzxid: int = -1  # the ZooKeeper transaction that last wrote it (compared with registrations)


def encode_state(s: PartitionState) -> bytes:
    return json_bytes(
        {
            "controller_epoch": s.controller_epoch,
            "leader": s.leader,
            "version": 1,
            "leader_epoch": s.leader_epoch,
            "isr": list(s.isr),
        }
    )


def decode_state(data: bytes, version: int = -1, mzxid: int = -1) -> PartitionState:
    body = json_object(data)
    return PartitionState(
        int(body["leader"]),
        int(body["leader_epoch"]),
        tuple(int(b) for b in body.get("isr") or ()),
        int(body.get("controller_epoch", 0)),
        version,
        mzxid,
    )


def encode_config(configs: dict[str, str]) -> bytes:
    return json_bytes({"version": 1, "config": {k: str(v) for k, v in sorted(configs.items())}})


def decode_config(data: bytes | None) -> dict[str, str]:
    return {str(k): str(v) for k, v in (json_object(data).get("config") or {}).items()}


def encode_config_change(topic: str) -> bytes:
    return json_bytes({"version": 2, "entity_path": f"topics/{topic}"})


def encode_producer_id_block(broker_id: int, start: int, end: int) -> bytes:
    return json_bytes(
        {"version": 1, "broker": broker_id, "block_start": str(start), "block_end": str(end)}
    )


def decode_producer_id_block(data: bytes | None) -> tuple[int, int] | None:
    body = json_object(data)
    if not body:
        return None
    return int(body["block_start"]), int(body["block_end"])


def encode_shutdown_answer(remaining: int) -> bytes:
    return json_bytes({"version": 1, "remaining": remaining})


def decode_shutdown_answer(data: bytes | None) -> int | None:
    body = json_object(data)
    return int(body["remaining"]) if "remaining" in body else None


# --- paths ------------------------------------------------------------------------------------------


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions"


def state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def delete_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def shutdown_path(broker_id: int) -> str:
    return f"{CONTROLLED_SHUTDOWN}/{broker_id}"
