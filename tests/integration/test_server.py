"""Raw Kafka protocol against a real gateway + store started in-process (our codec over a socket)."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
import uuid

import pytest
from kafka.record.memory_records import MemoryRecordsBuilder

from gateway import app
from gateway.protocol import decode_response, encode_request
from rdmalog.config import BrokerConfig
from tests.integration.rawkafka import recv_exact

MAX_REQUEST = 256 * 1024


def _records(
    n: int = 3, value: bytes = b"v" * 40, ts: int = 1_700_000_000_000, codec: int = 0
) -> bytes:
    b = MemoryRecordsBuilder(magic=2, compression_type=codec, batch_size=1 << 22)
    for i in range(n):
        b.append(timestamp=ts + i, key=b"k%d" % i, value=value, headers=[])
    b.close()
    return bytes(b.buffer())


class Gateway:
    """A gateway running on its own event loop thread."""

    def __init__(self, data_dir, **overrides) -> None:
        props = {
            "log.dirs": str(data_dir),
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "socket.request.max.bytes": str(MAX_REQUEST),
        }
        props.update(overrides)
        self.config = BrokerConfig.from_sources(None, props)
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.ready.wait(30), "gateway did not start"
        self.port = self.gw.address[1]

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.gw = self.loop.run_until_complete(app.start(self.config, ("127.0.0.1", 0)))
        self.ready.set()
        self.loop.run_forever()

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(app.shutdown(self.gw), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


class Client:
    """A raw protocol client: frames requests with our codec, reads whole response frames."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=20)
        self.corr = 0

    def send(self, api_key: int, version: int, body: dict) -> int:
        self.corr += 1
        self.sock.sendall(encode_request(api_key, version, self.corr, body))
        return self.corr

    def recv(self, api_key: int, version: int) -> tuple[int, dict]:
        size = struct.unpack(">i", self._exact(4))[0]
        return decode_response(api_key, version, self._exact(size))

    def call(self, api_key: int, version: int, body: dict) -> dict:
        corr = self.send(api_key, version, body)
        got, resp = self.recv(api_key, version)
        assert got == corr
        return resp

    def _exact(self, n: int) -> bytes:
        return recv_exact(self.sock, n)

    def closed_by_server(self) -> bool:
        """True when the server closed the connection (EOF) without sending anything more."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    g = Gateway(tmp_path_factory.mktemp("data"))
    yield g
    g.close()


@pytest.fixture
def client(gateway):
    c = Client(gateway.port)
    yield c
    c.close()


def _still_serving(gateway) -> None:
    c = Client(gateway.port)
    try:
        resp = c.call(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert resp["error_code"] == 0
    finally:
        c.close()


def _create(client: Client, name: str, partitions: int = 1, configs=None) -> dict:
    topic = {
        "name": name,
        "num_partitions": partitions,
        "replication_factor": 1,
        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
    }
    return client.call(19, 7, {"topics": [topic], "timeout": 5000})["topics"][0]


def _produce(
    client: Client, topic: str, partition: int, records: bytes, version: int = 9, acks: int = 1
):
    body = {
        "acks": acks,
        "timeout": 5000,
        "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": records}]}
        ],
    }
    if acks == 0:
        client.send(0, version, body)
        return None
    return client.call(0, version, body)["responses"][0]["partition_responses"][0]


def _fetch(
    client: Client, topic: str, partition: int, offset: int, version: int = 12, **kw
) -> dict:
    part = {
        "partition": partition,
        "fetch_offset": offset,
        "partition_max_bytes": kw.pop("pmax", 1 << 20),
    }
    t = {"topic": topic, "partitions": [part]}
    if version >= 13:
        t = {"topic_id": kw.pop("topic_id"), "partitions": [part]}
    body = {
        "replica_id": -1,
        "max_wait": kw.pop("max_wait", 0),
        "min_bytes": kw.pop("min_bytes", 0),
        "max_bytes": kw.pop("max_bytes", 50 << 20),
        "topics": [t],
        "session_epoch": -1,
    }
    resp = client.call(1, version, body)
    assert resp.get("session_id", 0) == 0
    return resp["responses"][0]["partitions"][0]


# --- ApiVersions and protocol errors --------------------------------------------------------------


def test_api_versions_lists_implemented_apis(client):
    resp = client.call(18, 3, {"client_software_name": "raw", "client_software_version": "0"})
    ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in resp["api_keys"]}
    for key, want in {
        0: (0, 11),
        1: (0, 17),
        2: (0, 9),
        3: (0, 12),
        8: (0, 10),
        9: (0, 10),
        18: (0, 4),
        19: (0, 7),
        20: (0, 6),
    }.items():
        assert ranges[key] == want
    assert client.call(18, 0, {})["error_code"] == 0
    bad = client.call(18, 3, {"client_software_name": "bad name!", "client_software_version": "1"})
    assert bad["error_code"] == 42  # INVALID_REQUEST, as Kafka checks KIP-511 names


def test_api_versions_unsupported_version_gets_v0_answer(client):
    client.corr += 1
    frame = struct.pack(">hhih", 18, 99, client.corr, 3) + b"raw" + b"\x00\x00"
    client.sock.sendall(struct.pack(">i", len(frame)) + frame)
    corr, resp = client.recv(18, 0)
    assert corr == client.corr
    assert resp["error_code"] == 35
    assert {"api_key": 18, "min_version": 0, "max_version": 4} in resp["api_keys"]
    # the connection stays usable
    assert client.call(3, 12, {"topics": []})["topics"] == []


def test_unsupported_version_with_top_level_error_code(client):
    # Fetch v18 exists in the protocol (Kafka 4.1) but is not advertised: Kafka's error shape
    resp = client.call(1, 18, {"max_wait": 0, "topics": []})
    assert resp["error_code"] == 35
    assert client.call(18, 2, {})["error_code"] == 0


def test_unsupported_version_without_error_field_closes(gateway):
    c = Client(gateway.port)
    assert c.call(3, 13, {"topics": None})["error_code"] == 35  # Metadata v13 has one
    c.send(0, 12, {"acks": 1, "topic_data": []})  # Produce v12 has none: closed, as Kafka does
    assert c.closed_by_server()
    c.close()
    _still_serving(gateway)


def test_unknown_api_key_closes_connection(gateway):
    c = Client(gateway.port)
    frame = struct.pack(">hhih", 999, 0, 1, 1) + b"x" + b"payload"
    c.sock.sendall(struct.pack(">i", len(frame)) + frame)
    assert c.closed_by_server()
    c.close()
    _still_serving(gateway)


@pytest.mark.parametrize(
    "raw",
    [
        struct.pack(">i", MAX_REQUEST + 1),  # larger than socket.request.max.bytes: never read
        struct.pack(">i", 2**31 - 1),
        struct.pack(">i", -5),
        struct.pack(">i", 0),
        struct.pack(">i", 5) + b"\x00\x03\x00\x0c\x00",  # garbage: a header cut short
        struct.pack(">i", 12) + b"\xff" * 12,  # garbage: api key -1
    ],
)
def test_bad_frames_close_the_connection_only(gateway, raw):
    c = Client(gateway.port)
    c.sock.sendall(raw)
    assert c.closed_by_server()
    c.close()
    _still_serving(gateway)


def test_truncated_body_closes_connection(gateway):
    c = Client(gateway.port)
    full = encode_request(3, 12, 1, {"topics": [{"name": "some-topic"}]})
    frame = full[4:-6]
    c.sock.sendall(struct.pack(">i", len(frame)) + frame)
    assert c.closed_by_server()
    c.close()
    _still_serving(gateway)


def test_partial_frames_across_writes(client):
    """A request dribbled in small pieces (and a big one) is reassembled correctly."""
    name = "dribble"
    _create(client, name)
    frame = encode_request(
        0,
        9,
        77,
        {
            "acks": 1,
            "timeout": 1000,
            "topic_data": [
                {
                    "name": name,
                    "partition_data": [{"index": 0, "records": _records(200, b"z" * 500)}],
                }
            ],
        },
    )
    assert len(frame) > 64 * 1024
    for i in range(0, 39, 3):
        client.sock.sendall(frame[i : i + 3])
        time.sleep(0.002)
    client.sock.sendall(frame[39:])
    corr, resp = client.recv(0, 9)
    assert corr == 77
    assert resp["responses"][0]["partition_responses"][0]["error_code"] == 0


# --- produce / fetch -----------------------------------------------------------------------------


def test_produce_then_fetch_bytes_identical(client):
    _create(client, "pf", 2)
    recs = _records(5)
    p = _produce(client, "pf", 1, recs)
    assert p["error_code"] == 0 and p["base_offset"] == 0 and p["log_append_time"] == -1
    p = _produce(client, "pf", 1, recs, version=3)
    assert p["base_offset"] == 5
    for version in (4, 11, 12):
        got = _fetch(client, "pf", 1, 0, version)
        assert got["error_code"] == 0 and got["high_watermark"] == 10
        assert got.get("log_start_offset", 0) == 0  # v5+
        data = bytes(got["records"])
        assert len(data) == 2 * len(recs)
        # identical to what was sent except the base offset the broker assigned
        assert data[8 : len(recs)] == recs[8:] and data[len(recs) + 8 :] == recs[8:]
        assert struct.unpack_from(">q", data, len(recs))[0] == 5
    # fetch in the middle of the second batch returns that whole batch
    got = _fetch(client, "pf", 1, 7)
    assert struct.unpack_from(">q", bytes(got["records"]), 0)[0] == 5


def test_fetch_by_topic_id_v13(client):
    created = _create(client, "by-id")
    tid = created["topic_id"]
    _produce(client, "by-id", 0, _records(2))
    got = _fetch(client, None, 0, 0, 13, topic_id=tid)
    assert got["error_code"] == 0 and got["high_watermark"] == 2
    got = _fetch(client, None, 0, 0, 16, topic_id=uuid.uuid4())
    assert got["error_code"] == 100  # UNKNOWN_TOPIC_ID
    # an incremental fetch on a session this broker never created
    resp = client.call(
        1, 13, {"session_id": 12345, "session_epoch": 3, "max_bytes": 1 << 20, "topics": []}
    )
    assert resp["error_code"] == 70 and resp["session_id"] == 0


def test_fetch_errors_and_limits(client):
    _create(client, "lim")
    one = _records(10, b"x" * 1000)
    for _ in range(3):
        _produce(client, "lim", 0, one)
    assert _fetch(client, "lim", 0, 31)["error_code"] == 1  # OFFSET_OUT_OF_RANGE
    assert _fetch(client, "nope", 0, 0)["error_code"] == 3
    assert _fetch(client, "lim", 5, 0)["error_code"] == 3
    at_end = _fetch(client, "lim", 0, 30)
    assert at_end["error_code"] == 0 and len(at_end["records"]) == 0
    # KIP-74: a limit smaller than one batch still returns the first batch
    small = _fetch(client, "lim", 0, 0, pmax=10)
    assert len(small["records"]) == len(one)
    # whole batches only, up to the partition limit
    two = _fetch(client, "lim", 0, 0, pmax=2 * len(one) + 5)
    assert len(two["records"]) == 2 * len(one)


def test_long_poll_wakes_on_produce(gateway, client):
    _create(client, "poll")
    waiter = Client(gateway.port)
    try:
        corr = waiter.send(
            1,
            12,
            {
                "replica_id": -1,
                "max_wait": 120_000,
                "min_bytes": 1,
                "max_bytes": 1 << 20,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": "poll",
                        "partitions": [
                            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                        ],
                    }
                ],
            },
        )
        time.sleep(0.2)  # let the fetch park
        recs = _records(3)
        _produce(client, "poll", 0, recs)
        got_corr, resp = waiter.recv(1, 12)  # would hang (and time out) if not woken
        assert got_corr == corr
        part = resp["responses"][0]["partitions"][0]
        assert part["high_watermark"] == 3 and len(part["records"]) == len(recs)
    finally:
        waiter.close()


def test_pipelined_requests_answered_in_order(client):
    _create(client, "pipe")
    recs = _records(2)
    n = 60
    corrs = []
    for _ in range(n):
        corrs.append(
            client.send(
                0,
                9,
                {
                    "acks": 1,
                    "timeout": 1000,
                    "topic_data": [
                        {"name": "pipe", "partition_data": [{"index": 0, "records": recs}]}
                    ],
                },
            )
        )
    offsets = []
    for want in corrs:
        corr, resp = client.recv(0, 9)
        assert corr == want
        offsets.append(resp["responses"][0]["partition_responses"][0]["base_offset"])
    assert offsets == [2 * i for i in range(n)]


def test_acks_zero_sends_no_response(client):
    _create(client, "ack0")
    _produce(client, "ack0", 0, _records(4), acks=0)
    resp = client.call(
        2,
        8,
        {
            "replica_id": -1,
            "topics": [{"name": "ack0", "partitions": [{"partition_index": 0, "timestamp": -1}]}],
        },
    )
    # the next response on the wire is the ListOffsets answer, and the records are there
    assert resp["topics"][0]["partitions"][0]["offset"] == 4


def test_produce_errors(client):
    _create(client, "small", configs={"max.message.bytes": "2000"})
    assert _produce(client, "missing-topic", 0, _records())["error_code"] == 3
    assert _produce(client, "small", 3, _records())["error_code"] == 3
    big = _produce(client, "small", 0, _records(10, b"y" * 500))
    assert big["error_code"] == 10  # MESSAGE_TOO_LARGE
    bad = bytearray(_records())
    bad[-1] ^= 0xFF  # breaks the CRC
    assert _produce(client, "small", 0, bytes(bad))["error_code"] == 2  # CORRUPT_MESSAGE
    # nothing was written by the failed requests
    assert _fetch(client, "small", 0, 0)["high_watermark"] == 0
    ok = _produce(client, "small", 0, _records(2))
    assert ok["error_code"] == 0 and ok["base_offset"] == 0


@pytest.mark.parametrize("codec", [1, 2, 3, 4])  # gzip, snappy, lz4, zstd: stored as sent
def test_compressed_batches_stored_as_sent(client, codec):
    name = f"codec-{codec}"
    _create(client, name)
    recs = _records(50, b"compressible " * 10, codec=codec)
    assert _produce(client, name, 0, recs)["error_code"] == 0
    data = bytes(_fetch(client, name, 0, 0)["records"])
    assert (
        len(data) == len(recs) and data[21:] == recs[21:]
    )  # after offset, length, epoch, magic, crc... same


def test_log_append_time_reported(client):
    _create(client, "lat", configs={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    p = _produce(client, "lat", 0, _records(ts=1000))
    assert p["error_code"] == 0 and p["log_append_time"] >= before


# --- list offsets -------------------------------------------------------------------------------


def test_list_offsets(client):
    _create(client, "lo")
    _produce(client, "lo", 0, _records(3, ts=1000))  # offsets 0-2, ts 1000-1002
    _produce(client, "lo", 0, _records(3, ts=5000))  # offsets 3-5, ts 5000-5002

    def query(ts, version=8):
        r = client.call(
            2,
            version,
            {
                "replica_id": -1,
                "topics": [
                    {
                        "name": "lo",
                        "partitions": [
                            {"partition_index": 0, "timestamp": ts, "current_leader_epoch": -1}
                        ],
                    }
                ],
            },
        )
        return r["topics"][0]["partitions"][0]

    assert query(-2)["offset"] == 0
    assert query(-1)["offset"] == 6
    assert query(-1, version=1)["offset"] == 6
    assert (query(1001)["offset"], query(1001)["timestamp"]) == (1, 1001)
    assert query(4000)["offset"] == 3
    assert query(9999)["offset"] == -1
    mx = query(-3)
    assert (mx["offset"], mx["timestamp"]) == (5, 5002)
    assert query(-1)["leader_epoch"] == 0
    r = client.call(
        2,
        8,
        {"topics": [{"name": "no-such", "partitions": [{"partition_index": 0, "timestamp": -1}]}]},
    )
    assert r["topics"][0]["partitions"][0]["error_code"] == 3


# --- metadata, create / delete topics ----------------------------------------------------------


def test_metadata(gateway, client):
    _create(client, "meta", 3)
    r = client.call(3, 12, {"topics": [{"name": "meta"}], "allow_auto_topic_creation": False})
    assert r["brokers"] == [{"node_id": 0, "host": "127.0.0.1", "port": gateway.port, "rack": None}]
    assert r["controller_id"] == 0 and r["cluster_id"]
    t = r["topics"][0]
    assert t["error_code"] == 0 and t["topic_id"] != uuid.UUID(int=0)
    assert [p["partition_index"] for p in t["partitions"]] == [0, 1, 2]
    assert t["partitions"][1]["isr_nodes"] == [0] and t["partitions"][1]["leader_epoch"] == 0
    # by id (v10+ topic id lookups)
    r = client.call(
        3,
        12,
        {"topics": [{"name": None, "topic_id": t["topic_id"]}], "allow_auto_topic_creation": False},
    )
    assert r["topics"][0]["name"] == "meta"
    r = client.call(
        3,
        12,
        {"topics": [{"name": "absent"}, {"name": "bad/name"}], "allow_auto_topic_creation": False},
    )
    assert [x["error_code"] for x in r["topics"]] == [3, 17]
    # auto creation (request flag and auto.create.topics.enable)
    r = client.call(3, 9, {"topics": [{"name": "auto-made"}], "allow_auto_topic_creation": True})
    assert r["topics"][0]["error_code"] == 0 and len(r["topics"][0]["partitions"]) == 1
    r = client.call(
        3, 9, {"topics": [{"name": "__transaction_state"}], "allow_auto_topic_creation": True}
    )
    assert r["topics"][0]["error_code"] == 3  # internal topics are never auto-created
    # all topics: null at v1+, empty at v0
    names = {x["name"] for x in client.call(3, 12, {"topics": None})["topics"]}
    assert {"meta", "auto-made"} <= names
    assert {x["name"] for x in client.call(3, 0, {"topics": []})["topics"]} == names


def test_create_topics_validation(client):
    assert _create(client, "ct", 2)["error_code"] == 0
    dup = _create(client, "ct", 2)
    assert dup["error_code"] == 36 and "already exists" in dup["error_message"]
    assert _create(client, "ct-zero", 0)["error_code"] == 37
    bad_cfg = _create(client, "ct-cfg", 1, {"retention.ms": "soon"})
    assert bad_cfg["error_code"] == 40 and bad_cfg["error_message"]
    assert _create(client, "ct-unknown-cfg", 1, {"no.such.config": "1"})["error_code"] == 40
    assert _create(client, "bad name!", 1)["error_code"] == 17
    assert _create(client, "__consumer_offsets", 1)["error_code"] == 42
    rf = client.call(
        19, 7, {"topics": [{"name": "ct-rf", "num_partitions": 1, "replication_factor": 3}]}
    )
    assert rf["topics"][0]["error_code"] == 38
    # defaults: -1 partitions / -1 replication factor; validate_only creates nothing
    r = client.call(
        19,
        5,
        {
            "topics": [{"name": "ct-val", "num_partitions": -1, "replication_factor": -1}],
            "validate_only": True,
        },
    )
    assert r["topics"][0]["error_code"] == 0 and r["topics"][0]["num_partitions"] == 1
    meta = client.call(3, 12, {"topics": [{"name": "ct-val"}], "allow_auto_topic_creation": False})
    assert meta["topics"][0]["error_code"] == 3
    r = client.call(
        19, 2, {"topics": [{"name": "ct-v2", "num_partitions": -1, "replication_factor": -1}]}
    )
    assert r["topics"][0]["error_code"] == 0
    cfgs = {
        c["name"]: c["value"]
        for c in _create(client, "ct-c", 1, {"retention.ms": "1234"})["configs"]
    }
    assert cfgs["retention.ms"] == "1234"


def test_delete_topics(client):
    _create(client, "del-a")
    b = _create(client, "del-b")
    r = client.call(20, 4, {"topic_names": ["del-a", "del-missing"], "timeout": 1000})
    assert [x["error_code"] for x in r["responses"]] == [0, 3]
    r = client.call(
        20,
        6,
        {
            "topics": [
                {"name": None, "topic_id": b["topic_id"]},
                {"name": None, "topic_id": uuid.uuid4()},
            ],
            "timeout": 1000,
        },
    )
    assert [x["error_code"] for x in r["responses"]] == [0, 100]
    assert r["responses"][0]["name"] == "del-b"
    meta = client.call(
        3,
        12,
        {"topics": [{"name": "del-a"}, {"name": "del-b"}], "allow_auto_topic_creation": False},
    )
    assert [x["error_code"] for x in meta["topics"]] == [3, 3]


def test_many_connections(gateway):
    clients = [Client(gateway.port) for _ in range(40)]
    try:
        for c in clients:
            c.send(18, 3, {"client_software_name": "m", "client_software_version": "1"})
        for c in clients:
            assert c.recv(18, 3)[1]["error_code"] == 0
    finally:
        for c in clients:
            c.close()


def test_large_fetch_to_a_slow_reader_is_complete(client):
    """A response far larger than the socket buffer (sendfile must wait for the reader)."""
    _create(client, "big")
    sent = []
    for i in range(40):
        recs = _records(100, bytes([i]) * 1500)  # ~150 KiB per request
        assert _produce(client, "big", 0, recs)["error_code"] == 0
        sent.append(recs)
    total = sum(map(len, sent))
    client.send(
        1,
        12,
        {
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 0,
            "max_bytes": 64 << 20,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": "big",
                    "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 64 << 20}
                    ],
                }
            ],
        },
    )
    time.sleep(0.3)  # let the server fill the socket buffers before anything is read
    _, resp = client.recv(1, 12)
    data = bytes(resp["responses"][0]["partitions"][0]["records"])
    assert len(data) == total
    pos = 0
    for i, recs in enumerate(sent):
        assert struct.unpack_from(">q", data, pos)[0] == 100 * i
        assert data[pos + 8 : pos + len(recs)] == recs[8:]
        pos += len(recs)
    # the connection is still in sync afterwards
    assert (
        client.call(18, 3, {"client_software_name": "x", "client_software_version": "1"})[
            "error_code"
        ]
        == 0
    )


def test_flush_policy_runs_before_the_answer(client):
    """flush.messages=1: each append needs a flush (off the loop) before the ack and the HW move."""
    _create(client, "flushy", configs={"flush.messages": "1"})
    for i in range(5):
        p = _produce(client, "flushy", 0, _records(2))
        assert p["error_code"] == 0 and p["base_offset"] == 2 * i
        assert _fetch(client, "flushy", 0, 0)["high_watermark"] == 2 * (i + 1)


def test_mutated_requests_never_hurt_the_server(gateway, client):
    """Valid requests with random bytes flipped or cut: each gets an answer or a clean close."""
    import random

    rng = random.Random(1234)
    _create(client, "fuzz")
    recs = _records(3)
    valid = [
        (
            0,
            9,
            {
                "acks": 1,
                "timeout": 100,
                "topic_data": [{"name": "fuzz", "partition_data": [{"index": 0, "records": recs}]}],
            },
        ),
        (
            0,
            3,
            {
                "acks": 1,
                "timeout": 100,
                "topic_data": [{"name": "fuzz", "partition_data": [{"index": 0, "records": recs}]}],
            },
        ),
        (
            1,
            12,
            {
                "max_wait": 0,
                "max_bytes": 1 << 20,
                "topics": [
                    {
                        "topic": "fuzz",
                        "partitions": [
                            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                        ],
                    }
                ],
            },
        ),
        (
            1,
            4,
            {
                "max_wait": 0,
                "max_bytes": 1 << 20,
                "topics": [
                    {
                        "topic": "fuzz",
                        "partitions": [
                            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                        ],
                    }
                ],
            },
        ),
        (
            2,
            8,
            {"topics": [{"name": "fuzz", "partitions": [{"partition_index": 0, "timestamp": -1}]}]},
        ),
        (3, 12, {"topics": [{"name": "fuzz"}], "allow_auto_topic_creation": False}),
        (3, 0, {"topics": [{"name": "fuzz"}]}),
        (18, 3, {"client_software_name": "f", "client_software_version": "1"}),
        (
            19,
            7,
            {
                "topics": [{"name": "fuzz-new", "num_partitions": 1, "replication_factor": 1}],
                "validate_only": True,
            },
        ),
        (20, 6, {"topics": [{"name": "does-not-exist", "topic_id": uuid.UUID(int=0)}]}),
    ]
    for i in range(150):
        api_key, version, body = valid[i % len(valid)]
        frame = bytearray(encode_request(api_key, version, 1, body)[4:])
        if rng.random() < 0.3:
            frame = frame[: rng.randrange(9, len(frame))]
        for _ in range(rng.randint(1, 3)):
            pos = rng.randrange(8, len(frame))  # keep key/version/correlation id
            frame[pos] = rng.randrange(256)
        c = Client(gateway.port)
        try:
            c.sock.sendall(struct.pack(">i", len(frame)) + frame)
            c.sock.sendall(encode_request(18, 0, 2, {}))
            while True:
                head = c.sock.recv(4, socket.MSG_WAITALL)
                if len(head) < 4:
                    break  # closed cleanly
                size = struct.unpack(">i", head)[0]
                resp = c._exact(size)
                if struct.unpack_from(">i", resp, 0)[0] == 2:
                    break  # the follow-up ApiVersions was answered: connection still in sync
        except ConnectionResetError:
            pass
        finally:
            c.close()
    _still_serving(gateway)
    # the log holds only whole, valid batches: everything fetched decodes and offsets are dense
    got = _fetch(client, "fuzz", 0, 0)
    data = bytes(got["records"])
    pos, expect = 0, 0
    while pos < len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        assert base == expect
        last_delta = struct.unpack_from(">i", data, pos + 23)[0]
        expect = base + last_delta + 1
        pos += 12 + length
    assert pos == len(data) and expect == got["high_watermark"]
