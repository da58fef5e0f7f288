"""Idempotent producers through real clients and the raw protocol: producer ids, Kafka's sequence
rules, retried batches acknowledged once with their first offsets (also across restarts).
Transactions are tested in test_transactions.py."""

from __future__ import annotations

import signal
import socket
import struct
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("confluent_kafka")
pytest.importorskip("kafka")

import kafka  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from rawkafka import RawClient, list_offset, produce, recv_exact  # noqa: E402

from compat_tests.brokers import BrokerProcess  # noqa: E402
from compat_tests.common import TIMEOUT_S, Deadline, create_topic  # noqa: E402
from rdmalog.store.records import Record, build_batch  # noqa: E402

OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47


class CuttingProxy:
    """Relays Kafka traffic to the broker, but for the first `cuts` Produce requests it drops the
    broker's answer and cuts the client's connection: the batch is in the log, the client does not
    know it and sends it again."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.upstream: tuple[str, int] | None = None
        self.cuts = 0
        self.cut_done = 0
        self.lock = threading.Lock()
        self.closed = False
        self.socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                assert self.upstream is not None
                server = socket.create_connection(self.upstream, timeout=TIMEOUT_S)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            self.socks += [client, server]
            doomed: set[int] = set()
            threading.Thread(
                target=self._requests, args=(client, server, doomed), daemon=True
            ).start()
            threading.Thread(
                target=self._answers, args=(server, client, doomed), daemon=True
            ).start()

    def _requests(self, src: socket.socket, dst: socket.socket, doomed: set[int]) -> None:
        try:
            while True:
                frame = _frame(src)
                if frame is None:
                    break
                api_key, _, corr = struct.unpack_from(">hhi", frame, 4)
                if api_key == 0:
                    with self.lock:
                        if self.cuts > 0:
                            self.cuts -= 1
                            doomed.add(corr)
                dst.sendall(frame)
        except OSError:
            pass
        _shut(src, dst)

    def _answers(self, src: socket.socket, dst: socket.socket, doomed: set[int]) -> None:
        try:
            while True:
                frame = _frame(src)
                if frame is None:
                    break
                (corr,) = struct.unpack_from(">i", frame, 4)
                if corr in doomed:  # the broker appended it: drop the answer, cut the client
                    with self.lock:
                        self.cut_done += 1
                    break
                dst.sendall(frame)
        except OSError:
            pass
        _shut(src, dst)

    def close(self) -> None:
        self.closed = True
        self.listener.close()
        for s in self.socks:
            _shut(s)


def _frame(sock: socket.socket) -> bytes | None:
    try:
        head = recv_exact(sock, 4)
        return head + recv_exact(sock, struct.unpack(">i", head)[0])
    except ConnectionError:
        return None


def _shut(*socks: socket.socket) -> None:
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()


@pytest.fixture(scope="module")
def proxy() -> Iterator[CuttingProxy]:
    p = CuttingProxy()
    yield p
    p.close()


@pytest.fixture(scope="module")
def kbroker(
    tmp_path_factory: pytest.TempPathFactory, proxy: CuttingProxy
) -> Iterator[BrokerProcess]:
    """One broker for the module; clients reach it through the proxy it advertises."""
    tmp: Path = tmp_path_factory.mktemp("idempotence")
    overrides = {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"}
    broker = BrokerProcess(tmp / "data", overrides, log_dir=tmp)
    broker.start()
    proxy.upstream = (broker.host, broker.port)
    yield broker
    broker.close()


@pytest.fixture
def via_proxy(kbroker: BrokerProcess, proxy: CuttingProxy) -> str:
    return f"127.0.0.1:{proxy.port}"


def _topic(bootstrap: str, partitions: int = 1) -> str:
    name = f"idem-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, name, partitions)
    return name


def _values(bootstrap: str, topic: str, partitions: int, expected: int) -> list[bytes]:
    """Every record value of the topic, read from offset 0 (checks the end offsets match)."""
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    try:
        tps = [kafka.TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        assert sum(ends.values()) == expected, ends
        out: list[bytes] = []
        deadline = Deadline(TIMEOUT_S)
        while len(out) < expected and deadline:
            for recs in consumer.poll(timeout_ms=500).values():
                out += [r.value for r in recs]
        return out
    finally:
        consumer.close()


def _init_producer_id(client: RawClient, version: int = 4, txn: str | None = None) -> dict:
    return client.call(
        22,
        version,
        {
            "transactional_id": txn,
            "transaction_timeout": 60000,
            "producer_id": -1,
            "producer_epoch": -1,
        },
    )


def _batch(n: int, pid: int, epoch: int, seq: int, tag: str = "r") -> bytes:
    recs = [Record(None, f"{tag}-{seq + i}".encode()) for i in range(n)]
    return bytes(build_batch(recs, producer_id=pid, producer_epoch=epoch, base_sequence=seq))


# --- real clients -------------------------------------------------------------------------------


def test_kafka_python_default_producer_is_idempotent_and_retries_once(
    via_proxy: str, proxy: CuttingProxy
) -> None:
    topic = _topic(via_proxy, 2)
    producer = kafka.KafkaProducer(bootstrap_servers=via_proxy, linger_ms=5)
    try:
        assert producer.config["enable_idempotence"] and producer.config["acks"] == -1
        first = [producer.send(topic, value=b"kp-%d" % i) for i in range(100)]
        producer.flush(timeout=TIMEOUT_S)
        with proxy.lock:
            proxy.cuts, proxy.cut_done = 2, 0
        second = [producer.send(topic, value=b"kp-%d" % i) for i in range(100, 300)]
        producer.flush(timeout=TIMEOUT_S)
        metas = [f.get(timeout=TIMEOUT_S) for f in first + second]
    finally:
        producer.close(timeout=TIMEOUT_S)
    assert proxy.cut_done >= 1, "no produce answer was cut: the retry path was not exercised"
    # every acknowledged offset is distinct and the log holds each record exactly once
    assert len({(m.partition, m.offset) for m in metas}) == 300
    values = _values(via_proxy, topic, 2, 300)
    assert Counter(values) == Counter(b"kp-%d" % i for i in range(300))


def test_confluent_idempotent_producer_retries_once(via_proxy: str, proxy: CuttingProxy) -> None:
    topic = _topic(via_proxy, 2)
    producer = Producer(
        {"bootstrap.servers": via_proxy, "enable.idempotence": True, "linger.ms": 5}
    )
    delivered: list[tuple[int, int]] = []
    errors: list[object] = []

    def report(err: object, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append((msg.partition(), msg.offset()))  # type: ignore[attr-defined]

    for i in range(100):
        producer.produce(topic, value=b"ck-%d" % i, on_delivery=report)
    assert producer.flush(TIMEOUT_S) == 0
    with proxy.lock:
        proxy.cuts, proxy.cut_done = 2, 0
    for i in range(100, 300):
        producer.produce(topic, value=b"ck-%d" % i, on_delivery=report)
    assert producer.flush(TIMEOUT_S) == 0
    assert errors == []
    assert proxy.cut_done >= 1, "no produce answer was cut: the retry path was not exercised"
    assert len(set(delivered)) == 300
    values = _values(via_proxy, topic, 2, 300)
    assert Counter(values) == Counter(b"ck-%d" % i for i in range(300))


def test_confluent_idempotent_producer_across_a_broker_crash(
    kbroker: BrokerProcess, via_proxy: str
) -> None:
    """The broker is killed while librdkafka has batches in flight; after the restart the producer
    state rebuilt from the log recognises whatever it resends."""
    topic = _topic(via_proxy, 2)
    producer = Producer(
        {"bootstrap.servers": via_proxy, "enable.idempotence": True, "linger.ms": 2}
    )
    errors: list[object] = []
    total = 6000
    for i in range(total):
        while True:
            try:
                producer.produce(
                    topic, value=b"crash-%d" % i, on_delivery=lambda e, m: e and errors.append(e)
                )
                break
            except BufferError:
                producer.poll(0.1)
        if i == total // 2:
            kbroker.restart(signal.SIGKILL)
    assert producer.flush(TIMEOUT_S) == 0
    assert errors == []
    values = _values(via_proxy, topic, 2, total)
    assert Counter(values) == Counter(b"crash-%d" % i for i in range(total))


# --- the raw protocol ---------------------------------------------------------------------------


def test_init_producer_id_every_version_gives_fresh_ids(kbroker: BrokerProcess) -> None:
    with RawClient(kbroker.bootstrap) as c:
        ids = []
        for version in range(0, 6):
            resp = _init_producer_id(c, version)
            assert resp["error_code"] == 0 and resp["producer_epoch"] == 0
            ids.append(resp["producer_id"])
    assert len(set(ids)) == 6 and min(ids) >= 0


def test_resend_over_a_new_connection_is_acknowledged_with_the_first_offsets(
    kbroker: BrokerProcess,
) -> None:
    topic = _topic(kbroker.bootstrap)
    with RawClient(kbroker.bootstrap) as c, RawClient(kbroker.bootstrap) as watcher:
        pid = _init_producer_id(c)["producer_id"]
        first = produce(c, topic, 0, _batch(3, pid, 0, 0))
        assert first["error_code"] == 0 and first["base_offset"] == 0
        second = _batch(2, pid, 0, 3)
        c.send(0, 9, _produce_body(topic, second))
        # the broker appended it (bounded wait), then the connection is cut before the answer
        deadline = Deadline(TIMEOUT_S)
        while list_offset(watcher, topic, 0, -1)["offset"] < 5 and deadline:
            pass
        assert list_offset(watcher, topic, 0, -1)["offset"] == 5
    with RawClient(kbroker.bootstrap) as again:
        retry = produce(again, topic, 0, second)
        assert retry["error_code"] == 0 and retry["base_offset"] == 3
        # any of the last five batches is recognised, also an older one
        assert produce(again, topic, 0, _batch(3, pid, 0, 0))["base_offset"] == 0
        assert list_offset(again, topic, 0, -1)["offset"] == 5
    assert sorted(_values(kbroker.bootstrap, topic, 1, 5)) == sorted(
        f"r-{i}".encode() for i in range(5)
    )


def _produce_body(topic: str, batch: bytes) -> dict:
    return {
        "transactional_id": None,
        "acks": -1,
        "timeout": int(TIMEOUT_S * 1000),
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
    }


def test_sequence_and_epoch_rules(kbroker: BrokerProcess) -> None:
    topic = _topic(kbroker.bootstrap)
    with RawClient(kbroker.bootstrap) as c:
        pid = _init_producer_id(c)["producer_id"]
        assert produce(c, topic, 0, _batch(2, pid, 0, 0))["base_offset"] == 0
        gap = produce(c, topic, 0, _batch(1, pid, 0, 5))
        assert gap["error_code"] == OUT_OF_ORDER_SEQUENCE_NUMBER
        assert produce(c, topic, 0, _batch(1, pid, 0, 2))["base_offset"] == 2
        # a batch that overlaps an earlier one without matching it is out of order too
        assert produce(c, topic, 0, _batch(2, pid, 0, 1))["error_code"] == 45
        # a new epoch starts at sequence 0; an older epoch is fenced
        assert produce(c, topic, 0, _batch(1, pid, 1, 3))["error_code"] == 45
        assert produce(c, topic, 0, _batch(1, pid, 1, 0))["base_offset"] == 3
        old = produce(c, topic, 0, _batch(1, pid, 0, 3))
        assert old["error_code"] == INVALID_PRODUCER_EPOCH
        # a producer the partition has never seen may start at any sequence (as Kafka accepts)
        other = _init_producer_id(c)["producer_id"]
        assert produce(c, topic, 0, _batch(1, other, 0, 41))["base_offset"] == 4
        assert list_offset(c, topic, 0, -1)["offset"] == 5


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_duplicates_are_recognised_after_a_restart(kbroker: BrokerProcess, sig: int) -> None:
    topic = _topic(kbroker.bootstrap)
    with RawClient(kbroker.bootstrap) as c:
        before = _init_producer_id(c)["producer_id"]
        pid = _init_producer_id(c)["producer_id"]
        batches = [_batch(2, pid, 0, 2 * i) for i in range(7)]
        offsets = [produce(c, topic, 0, b)["base_offset"] for b in batches]
    assert offsets == list(range(0, 14, 2))
    kbroker.restart(sig)
    with RawClient(kbroker.bootstrap) as c:
        for i in (6, 4, 2):  # the last batches are remembered; order of retries does not matter
            resp = produce(c, topic, 0, batches[i])
            assert resp["error_code"] == 0 and resp["base_offset"] == offsets[i]
        # a batch older than the last five is no longer known: out of order, as in Kafka
        assert produce(c, topic, 0, batches[0])["error_code"] == OUT_OF_ORDER_SEQUENCE_NUMBER
        assert produce(c, topic, 0, _batch(1, pid, 0, 20))["error_code"] == 45
        assert produce(c, topic, 0, _batch(1, pid, 0, 14))["base_offset"] == 14
        assert list_offset(c, topic, 0, -1)["offset"] == 15
        # producer ids are never handed out twice, across restarts too
        assert _init_producer_id(c)["producer_id"] not in (before, pid)
