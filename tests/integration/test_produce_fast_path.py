"""Produce's fast path (gateway/handlers/produce_fast.py) answers exactly as the generic handler:
the same raw requests sent to a broker with it and to one without it (RDMALOG_PRODUCE_FAST_PATH=0)
get byte-identical answers, successes and refusals alike, in every version it takes; and the
request shapes real clients send are the ones it takes."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from gateway.handlers.produce_fast import FIRST_VERSION, LAST_VERSION, parse_one_partition
from gateway.protocol import encode_request, parse_request_header
from rdmalog.store.compression import Codec
from rdmalog.store.records import Record, build_batch
from tests.integration.rawkafka import RawClient, recv_exact

NOW = 1_700_000_000_000  # fixed record timestamps: both brokers get the same bytes


def _batch(n: int = 3, key: bytes | None = b"k", **kw) -> bytes:
    return bytes(
        build_batch([Record(key, b"v" * 20, timestamp=NOW + i) for i in range(n)], now_ms=NOW, **kw)
    )


def _corrupt() -> bytes:
    b = bytearray(_batch())
    b[-1] ^= 0xFF  # the CRC no longer matches
    return bytes(b)


def _produce(topic: str, index: int, records: bytes | None, acks: int = 1, txn=None) -> dict:
    return {
        "transactional_id": txn,
        "acks": acks,
        "timeout": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": index, "records": records}]}],
    }


def _cases(version: int, producer_id: int) -> list[tuple[str, dict]]:
    idem = {"producer_id": producer_id, "producer_epoch": 0}
    cases = [
        ("ok", _produce("fast", 0, _batch())),
        ("ok partition 2", _produce("fast", 2, _batch(5))),
        ("acks=all", _produce("fast", 1, _batch(), acks=-1)),
        ("acks=0", _produce("fast", 1, _batch(), acks=0)),
        ("after acks=0", _produce("fast", 1, _batch())),
        ("bad acks", _produce("fast", 0, _batch(), acks=2)),
        ("unknown topic", _produce("nope", 0, _batch())),
        ("no such partition", _produce("fast", 7, _batch())),
        ("internal topic", _produce("__consumer_offsets", 0, _batch())),
        ("empty records", _produce("fast", 0, b"")),
        ("null records", _produce("fast", 0, None)),
        ("corrupt", _produce("fast", 0, _corrupt())),
        ("base offset", _produce("fast", 0, _batch(base_offset=5))),
        ("two batches", _produce("fast", 0, _batch() + _batch())),
        ("too large", _produce("small", 0, _batch(50))),
        ("null key compacted", _produce("compacted", 0, _batch(key=None))),
        ("transactional id", _produce("fast", 0, _batch(), txn="t1")),
        ("idempotent", _produce("fast", 0, _batch(base_sequence=0, **idem))),
        ("duplicate", _produce("fast", 0, _batch(base_sequence=0, **idem))),
        ("out of order", _produce("fast", 0, _batch(base_sequence=9, **idem))),
        ("two partitions", {**_produce("fast", 0, _batch()), "topic_data": [
            {"name": "fast", "partition_data": [
                {"index": 0, "records": _batch()}, {"index": 1, "records": _batch()}]}]}),
        ("last ok", _produce("fast", 0, _batch())),
    ]  # fmt: skip
    if version < 7:
        cases.append(("zstd before v7", _produce("fast", 0, _batch(compression=Codec.ZSTD))))
    return cases


def _answers(bootstrap: str, version: int) -> list[tuple[str, bytes | None]]:
    """Create the topics, then send every case and read the raw answer (None: no answer)."""
    with RawClient(bootstrap) as admin:
        topics = [
            ("fast", 3, {}),
            ("small", 1, {"max.message.bytes": "300"}),
            ("compacted", 1, {"cleanup.policy": "compact"}),
        ]
        for name, parts, configs in topics:
            body = {
                "topics": [
                    {
                        "name": name,
                        "num_partitions": parts,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": [{"name": k, "value": v} for k, v in configs.items()],
                    }
                ],
                "timeout": 10000,
            }
            assert admin.call(19, 5, body)["topics"][0]["error_code"] == 0
        pid = admin.call(22, 4, {"transactional_id": None, "transaction_timeout_ms": 60000})
        producer_id = pid["producer_id"]
    host, _, port = bootstrap.rpartition(":")
    out = []
    for corr, (what, body) in enumerate(_cases(version, producer_id)):
        # a fresh connection for each: a refused request may close it
        with socket.create_connection((host, int(port)), timeout=20) as sock:
            sock.sendall(encode_request(0, version, corr, body, client_id="fast-path-test"))
            if body["acks"] == 0:
                sock.settimeout(0.5)
            try:
                (size,) = struct.unpack(">i", recv_exact(sock, 4))
                out.append((what, recv_exact(sock, size)))
            except (TimeoutError, ConnectionError):
                out.append((what, None))
    return out


@pytest.mark.parametrize("version", [3, 5, 7, 8, 9, 11])
def test_fast_and_generic_paths_answer_byte_for_byte_alike(broker_factory, monkeypatch, version):
    fast = broker_factory(local=True)
    monkeypatch.setenv("RDMALOG_PRODUCE_FAST_PATH", "0")
    generic = broker_factory(local=True)
    got = _answers(fast.bootstrap, version)
    want = _answers(generic.bootstrap, version)
    assert [w for w, _ in got] == [w for w, _ in want]
    for (what, a), (_, b) in zip(got, want, strict=True):
        assert a == b, f"{what}: fast {a!r} != generic {b!r}"
    answered = dict(got)
    assert answered["acks=0"] is None
    assert answered["ok"] is not None and answered["corrupt"] is not None


@pytest.mark.parametrize("version", range(FIRST_VERSION, LAST_VERSION + 1))
def test_the_one_partition_request_is_the_fast_paths_shape(version):
    """What librdkafka sends at many partitions parses; what the fast path leaves to the generic
    handler does not."""
    frame = memoryview(
        bytearray(encode_request(0, version, 1, _produce("t", 4, _batch(), acks=-1))[4:])
    )
    hdr = parse_request_header(frame)
    acks, timeout, name, index, at, size = parse_one_partition(frame, hdr.body_offset, version >= 9)
    assert (acks, timeout, name, index) == (-1, 5000, b"t", 4)
    assert bytes(frame[at : at + size]) == _batch()
    for body in (
        _produce("t", 4, _batch(), txn="x"),
        _produce("t", 4, None),
        {**_produce("t", 0, _batch()), "topic_data": []},
    ):
        frame = memoryview(bytearray(encode_request(0, version, 1, body)[4:]))
        assert (
            parse_one_partition(frame, parse_request_header(frame).body_offset, version >= 9)
            is None
        )


def _read_all(bootstrap: str, topic: str, partitions: int, count: int) -> list[tuple]:
    """Every record of the topic as (partition, offset, key, value), read with confluent-kafka."""
    from confluent_kafka import Consumer, TopicPartition

    cons = Consumer({"bootstrap.servers": bootstrap, "group.id": f"fp-{topic}"})
    try:
        cons.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: list[tuple] = []
        for _ in range(200):  # bounded: 200 polls of at most 0.2 s
            if len(got) >= count:
                break
            for m in cons.consume(500, 0.2):
                assert m.error() is None, m.error()
                got.append((m.partition(), m.offset(), m.key(), m.value()))
        return sorted(got)
    finally:
        cons.close()


def test_real_clients_round_trip_through_the_fast_path(broker_factory) -> None:
    """librdkafka (idempotent, acks=all), kafka-python (acks=1) and Kafka's Java client each put
    records on a 4-partition topic one partition per request; all come back in order."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka import KafkaProducer

    from compat_tests import java
    from compat_tests.common import Rec

    bootstrap = broker_factory().bootstrap
    topic, parts, n = "fast-clients", 4, 40
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: the future needs its handle
    admin.create_topics([NewTopic(topic, parts, 1)])[topic].result(30)
    sent = []
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, key=b"c%d" % i, value=b"confluent %d" % i, partition=i % parts)
        sent.append((i % parts, b"c%d" % i, b"confluent %d" % i))
    assert p.flush(30) == 0
    kp = KafkaProducer(bootstrap_servers=bootstrap, acks=1)
    for i in range(n):
        kp.send(topic, key=b"k%d" % i, value=b"kafka-python %d" % i, partition=i % parts).get(20)
        sent.append((i % parts, b"k%d" % i, b"kafka-python %d" % i))
    kp.close(10)
    jvm_missing = java.unavailable()
    if jvm_missing is None:
        prod = java.producer(bootstrap, acks="all", linger_ms=0)
        try:
            for i in range(n):  # one at a time: each request carries one partition's batch
                rec = Rec(i % parts, b"j%d" % i, b"java %d" % i, (), int(time.time() * 1000))
                java.wait(java.send(prod, topic, rec))
                sent.append((i % parts, b"j%d" % i, b"java %d" % i))
        finally:
            prod.close()
    got = _read_all(bootstrap, topic, parts, len(sent))
    assert sorted((p, k, v) for p, _, k, v in got) == sorted(sent)
    for part in range(parts):  # each partition's offsets are 0.. in the order they were sent
        mine = [(o, k, v) for p, o, k, v in got if p == part]
        assert [o for o, _, _ in mine] == list(range(len(mine)))
        assert [(k, v) for _, k, v in mine] == [(k, v) for p, k, v in sent if p == part]
    if jvm_missing is not None:
        pytest.skip(f"confluent-kafka and kafka-python checked; Java: {jvm_missing}")
