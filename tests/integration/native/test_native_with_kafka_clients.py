"""Native (RDMA-style) and Kafka clients on one partition of a real `rdmalog serve`, at the same time.

The broker runs with `rdma.transport` set; a native producer in shared mode reserves its places with
FETCH_AND_ADD while confluent-kafka produces through the gateway, whose appends reserve through the
same word. Both kinds of consumer then read the one log: a Kafka consumer sees the native batches, the
native consumer sees the Kafka producer's batches, offsets are contiguous and each producer's order holds.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.brokers import free_port
from rdmalog.rdma import Consumer, Producer

N = 200


def _create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)


def _kafka_read_all(bootstrap: str, topic: str, count: int) -> list[tuple[int, bytes]]:
    consumer = KafkaConsumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 30
    while len(out) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            out.append((msg.offset(), msg.value()))
    consumer.close()
    return out


def _native_read_all(control: str, transport: str, topic: str, count: int):
    consumer = Consumer(control, transport)
    consumer.assign([(topic, 0)])
    out = []
    deadline = time.monotonic() + 30
    while len(out) < count and time.monotonic() < deadline:
        out += [(r.offset, r.value) for r in consumer.poll(0.2)]
    consumer.close()
    return out


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_native_and_kafka_producers_share_a_partition(broker_factory, transport: str) -> None:
    control_port = free_port()
    broker = broker_factory(
        {"rdma.transport": transport, "rdma.control.port": str(control_port)}, local=True
    )
    control = f"127.0.0.1:{control_port}"
    topic = f"shared-{transport}"
    _create_topic(broker.bootstrap, topic)

    native = Producer(control, transport, mode="shared")
    kafka = KafkaProducer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "acks": "all"})
    for i in range(N):
        native.send(topic, 0, b"native-%d" % i)
        kafka.produce(topic, b"kafka-%d" % i, partition=0)
        kafka.poll(0)
    native.flush()
    assert kafka.flush(30) == 0
    native.close()

    for seen in (
        _kafka_read_all(broker.bootstrap, topic, 2 * N),
        _native_read_all(control, transport, topic, 2 * N),
    ):
        assert [o for o, _ in seen] == list(range(2 * N))  # contiguous: no hole, no overlap
        values = [v for _, v in seen]
        for prefix in (b"native-", b"kafka-"):
            mine = [v for v in values if v.startswith(prefix)]
            assert mine == [prefix + b"%d" % i for i in range(N)]  # all of them, in send order


def _native_writer(control: str, transport: str, name: str, acked: str, idempotent: bool) -> None:
    """Send `name-i` records in runs, appending "value offset" for each acknowledged one to
    `acked` (unbuffered: what is written survives the SIGKILL that ends this process)."""
    import os
    import random

    p = Producer(control, transport, mode="shared", idempotent=idempotent)
    fd = os.open(acked, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    i = 0
    while i < 100_000:
        run = []
        for _ in range(random.randint(1, 30)):
            run.append((i, p.send("soak", 0, b"%s-%d" % (name.encode(), i))))
            i += 1
        p.flush(30)
        os.write(fd, b"".join(b"%s-%d %d\n" % (name.encode(), j, d.wait()[0]) for j, d in run))


@pytest.mark.parametrize(
    "transport,idempotent", [("shm", False), ("tcp", False), ("shm", True)], ids=str
)
def test_native_producers_killed_at_random_beside_a_kafka_producer(
    broker_factory, tmp_path, transport: str, idempotent: bool
) -> None:
    """Three shared native producers, SIGKILLed at random and replaced, write into the partition
    a Kafka idempotent producer writes into too, while a native consumer reads along; 64 KiB
    segments, so the head rolls all the time. Whatever a producer died holding (a reservation, a
    write not yet committed) leaves no hole: offsets are contiguous, both kinds of consumer read
    the same log, every acknowledged record is at its acknowledged offset, none is there twice,
    each producer's records keep their order, no producer fails but by our SIGKILL, and the
    broker logs no failure (a grant revoked by a roll and by the completion loop at once freed
    its shm region twice, and failed writes until the producers gave up)."""
    import multiprocessing
    import os
    import random
    import signal

    rnd = random.Random(7)
    control_port = free_port()
    broker = broker_factory(
        {"rdma.transport": transport, "rdma.control.port": str(control_port)}, local=True
    )
    control = f"127.0.0.1:{control_port}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("soak", 1, 1, config={"segment.bytes": "65536"})])["soak"].result(
        15
    )
    spawn = multiprocessing.get_context("spawn")
    writers: dict[str, multiprocessing.process.BaseProcess] = {}

    def start_writer() -> None:
        name = f"w{len(writers)}"
        acked = str(tmp_path / f"{name}.acked")
        w = spawn.Process(target=_native_writer, args=(control, transport, name, acked, idempotent))
        w.start()
        writers[name] = w

    for _ in range(3):
        start_writer()
    kafka_acked: list[tuple[bytes, int]] = []
    kafka_errors: list = []

    def delivered(err, msg) -> None:
        if err:
            kafka_errors.append(err)
        else:
            kafka_acked.append((msg.value(), msg.offset()))

    kafka = KafkaProducer(
        {
            "bootstrap.servers": broker.bootstrap,
            "linger.ms": 2,
            "enable.idempotence": True,
            # A killed native producer's reservation holds the gateway's appends up to the order
            # timeout (1 s), and librdkafka batches what piles up meanwhile up to batch.size (1 MB
            # by default): a batch beyond the 64 KiB segments is refused as Kafka refuses it
            # (RECORD_LIST_TOO_LARGE), and librdkafka does not split it. Keep batches well below.
            "batch.size": 16384,
        }
    )
    reader = Consumer(control, transport)
    reader.assign([("soak", 0)])
    seen: list[tuple[int, bytes]] = []
    end = time.monotonic() + 5
    next_kill, kills, i = time.monotonic() + 0.5, 0, 0
    while time.monotonic() < end and i < 1_000_000:
        for _ in range(20):
            kafka.produce("soak", b"k-%d" % i, partition=0, on_delivery=delivered)
            i += 1
        kafka.poll(0)
        seen += [(r.offset, r.value) for r in reader.poll(0.01, max_records=5000)]
        if time.monotonic() > next_kill:
            victim = writers[rnd.choice([n for n, w in writers.items() if w.is_alive()])]
            os.kill(victim.pid, signal.SIGKILL)
            victim.join(10)
            kills += 1
            start_writer()
            next_kill = time.monotonic() + rnd.uniform(0.3, 1.0)
    for w in writers.values():
        if w.is_alive():
            os.kill(w.pid, signal.SIGKILL)
            w.join(10)
    assert kafka.flush(60) == 0 and not kafka_errors
    assert broker.running and kills >= 4
    assert {w.exitcode for w in writers.values()} == {-signal.SIGKILL}  # none failed on its own

    watermarks = KafkaConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    hw = watermarks.get_watermark_offsets(TopicPartition("soak", 0), timeout=10)[1]
    watermarks.close()
    deadline = time.monotonic() + 60
    while len(seen) < hw and time.monotonic() < deadline:
        seen += [(r.offset, r.value) for r in reader.poll(0.1, max_records=50_000)]
    reader.close()
    assert [o for o, _ in seen] == list(range(hw))  # contiguous: no hole, nothing read twice
    assert _kafka_read_all(broker.bootstrap, "soak", hw) == seen  # one log for both kinds
    log = dict(seen)
    assert len(set(log.values())) == hw  # no record stored twice
    acked = list(kafka_acked)
    for f in tmp_path.glob("*.acked"):
        for line in f.read_bytes().splitlines():
            value, offset = line.rsplit(b" ", 1)
            acked.append((value, int(offset)))
    assert len(acked) > 1000 and any(v.startswith(b"w") for v, _ in acked)
    assert [(v, o) for v, o in acked if log.get(o) != v] == []  # each where it was acknowledged
    last: dict[bytes, int] = {}
    for _, v in seen:  # each producer's records in the order it sent them
        name, _, n = v.rpartition(b"-")
        assert int(n) > last.get(name, -1), v
        last[name] = int(n)
    assert "Traceback" not in broker.stderr_tail(100_000)


def test_native_consumer_reads_compressed_batches_of_kafka_producers(broker_factory) -> None:
    """Batches librdkafka compressed (gzip, snappy, lz4, zstd) are stored as they came and
    decoded by the native consumer: keys, values, headers and offsets as produced."""
    control_port = free_port()
    broker = broker_factory(
        {"rdma.transport": "shm", "rdma.control.port": str(control_port)}, local=True
    )
    codecs = ["gzip", "snappy", "lz4", "zstd"]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(c, 1, 1) for c in codecs]).values():
        f.result(15)
    for codec in codecs:
        kafka = KafkaProducer(
            {"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 5}
        )
        for i in range(300):
            value = b"value-%d-" % i + b"x" * 200
            kafka.produce(codec, value, key=b"k%d" % i, headers=[("h", b"%d" % i)], partition=0)
        assert kafka.flush(30) == 0
        consumer = Consumer(f"127.0.0.1:{control_port}", "shm")
        consumer.assign([(codec, 0)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 300 and time.monotonic() < deadline:
            got += consumer.poll(0.2)
        batches = []
        consumer.seek(codec, 0, 0)
        while not batches and time.monotonic() < deadline:
            batches = consumer.poll_batches(0.2)
        consumer.close()
        assert [(r.offset, r.key, r.value, r.headers) for r in got] == [
            (i, b"k%d" % i, b"value-%d-" % i + b"x" * 200, (("h", b"%d" % i),)) for i in range(300)
        ], codec
        attributes = int.from_bytes(batches[0].data[21:23], "big")
        assert attributes & 0x07 == codecs.index(codec) + 1  # stored as compressed


def test_native_producer_partitions_keyed_records_as_kafka_producers_do(broker_factory) -> None:
    """send(topic, None, value, key): the native producer picks the partition Kafka's default
    partitioner picks (murmur2 of the key, as kafka-python's and the Java producer's), so keyed
    records of both kinds of producer meet in one partition; records without a key go
    round-robin; an unknown topic is UnknownTopicOrPartitionError."""
    import kafka

    from rdmalog.errors import UnknownTopicOrPartitionError

    control_port = free_port()
    broker = broker_factory(
        {"rdma.transport": "shm", "rdma.control.port": str(control_port)}, local=True
    )
    _create_topic(broker.bootstrap, "keyed", 5)
    keys = [b"user-%d" % i for i in range(20)]
    java_like = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap)
    try:
        expected = [
            java_like.send("keyed", key=k, value=b"k").get(timeout=15).partition for k in keys
        ]
    finally:
        java_like.close()
    assert len(set(expected)) > 1
    with Producer(f"127.0.0.1:{control_port}", "shm") as p:
        got = [p.send("keyed", None, b"n", key=k) for k in keys]
        p.flush()
        assert [d.partition for d in got] == expected
        unkeyed = [p.send("keyed", None, b"u").partition for _ in range(10)]
        assert sorted(set(unkeyed)) == [0, 1, 2, 3, 4]
        with pytest.raises(UnknownTopicOrPartitionError):
            p.send("no-such-topic", None, b"x", key=b"k")
