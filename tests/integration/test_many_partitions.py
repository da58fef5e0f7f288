"""Many partitions against `rdmalog serve` under a lowered descriptor limit (prlimit): a CreateTopics
that cannot fit is refused up front with POLICY_VIOLATION, one that fits is created whole, a failed
creation leaves nothing behind, and the broker starts again every time. Descriptors are counted
in /proc/PID/fd: one per partition."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from compat_tests.brokers import BrokerProcess
from rdmalog.store.log_manager import METADATA_DIR

pytestmark = pytest.mark.skipif(
    shutil.which("prlimit") is None, reason="needs prlimit (util-linux)"
)

START_S = 180.0  # opening ten thousand partitions on a loaded two-core machine


class LimitedBroker(BrokerProcess):
    """`rdmalog serve` started under `prlimit --nofile=SOFT:HARD`."""

    def __init__(self, data_dir: Path, soft: int, hard: int) -> None:
        super().__init__(data_dir)
        self.nofile = f"{soft}:{hard}"

    def command(self) -> list[str]:
        return ["prlimit", f"--nofile={self.nofile}", "--", *super().command()]

    def start(self, timeout: float = START_S) -> None:
        super().start(timeout)

    def fds(self) -> int:
        assert self.proc is not None
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def soft_limit(self) -> int:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/limits").read_text().splitlines():
            if line.startswith("Max open files"):
                return int(line.split()[3])
        raise AssertionError("no open files limit in /proc/PID/limits")


@pytest.fixture
def limited(tmp_path: Path) -> Iterator:
    started: list[LimitedBroker] = []

    def start(soft: int, hard: int) -> LimitedBroker:
        if hard > _hard_limit():
            pytest.skip(f"needs a hard descriptor limit of {hard} (have {_hard_limit()})")
        broker = LimitedBroker(tmp_path / f"broker{len(started)}" / "data", soft, hard)
        started.append(broker)
        broker.start()
        return broker

    yield start
    for broker in started:
        broker.close()


def _hard_limit() -> int:
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return 1 << 30 if hard == resource.RLIM_INFINITY else hard


def _create(broker: BrokerProcess, name: str, partitions: int) -> KafkaError | None:
    """CreateTopics through librdkafka's admin client: None, or the error it answered."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    fut = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1)],
        operation_timeout=120,
        request_timeout=150,
    )[name]
    try:
        fut.result(180)
    except KafkaException as e:
        return e.args[0]
    return None


def _grow(broker: BrokerProcess, name: str, total: int, validate_only: bool) -> KafkaError | None:
    """CreatePartitions through librdkafka's admin client: None, or the error it answered."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    fut = admin.create_partitions(
        [NewPartitions(name, total)], validate_only=validate_only, request_timeout=60
    )[name]
    try:
        fut.result(90)
    except KafkaException as e:
        return e.args[0]
    return None


def _partitions(broker: BrokerProcess, name: str) -> int:
    """Partitions of `name` in the metadata of all topics (asking for it alone would create it)."""
    md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=30)
    t = md.topics.get(name)
    return 0 if t is None or t.error is not None else len(t.partitions)


def _one_per_partition(delta: int, partitions: int) -> bool:
    """A descriptor count grown by about one per partition: give or take the few a connection or a
    start-up's own files hold at the moments compared."""
    return partitions - 3 <= delta <= partitions + 10


def _leftovers(broker: BrokerProcess, name: str) -> list[str]:
    on_disk = [p.name for p in broker.data_dir.glob(f"{name}-*")]
    records = [p.read_text() for p in (broker.data_dir / METADATA_DIR / "topics").glob("*.json")]
    return on_disk + [r for r in records if f'"{name}"' in r]


def test_ten_thousand_partitions_under_a_low_limit_are_refused_whole(limited) -> None:
    broker = limited(2048, 2048)
    err = _create(broker, "huge", 10_000)
    assert err is not None and err.code() == KafkaError.POLICY_VIOLATION, err
    assert "needs 10000 file descriptors" in err.str() and "2048" in err.str()
    assert _leftovers(broker, "huge") == []
    broker.restart()
    assert _partitions(broker, "huge") == 0
    assert _create(broker, "fits", 1000) is None  # what fits is still created
    assert _partitions(broker, "fits") == 1000
    for validate_only in (True, False):  # growing it past the limit is refused the same way
        err = _grow(broker, "fits", 5000, validate_only)
        assert err is not None and err.code() == KafkaError.POLICY_VIOLATION, err
    assert _partitions(broker, "fits") == 1000 and _leftovers(broker, "fits-1000") == []
    broker.restart()
    assert _partitions(broker, "fits") == 1000


def test_ten_thousand_partitions_fit_once_the_soft_limit_is_raised(limited) -> None:
    broker = limited(1024, 12_288)
    assert broker.soft_limit() == 12_288  # start-up raised its soft limit to the hard one
    assert "raised the descriptor limit (RLIMIT_NOFILE) from 1024 to 12288" in broker.stderr_tail()
    before = broker.fds()
    assert _create(broker, "huge", 10_000) is None
    assert _partitions(broker, "huge") == 10_000
    assert _one_per_partition(broker.fds() - before, 10_000)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(3000):
        producer.produce("huge", b"v%d" % i, key=b"k%d" % i)
    assert producer.flush(60) == 0
    del producer  # its connections go before the broker does
    broker.restart()
    assert _partitions(broker, "huge") == 10_000
    assert _one_per_partition(broker.fds() - before, 10_000)


def test_a_failed_creation_leaves_nothing_behind(limited) -> None:
    broker = limited(4096, 4096)
    (broker.data_dir / "clash-7").write_text("a file where partition 7's directory would go")
    err = _create(broker, "clash", 20)
    assert err is not None and err.code() == KafkaError.KAFKA_STORAGE_ERROR, err
    assert "partition 7 of clash failed, so none was created" in err.str()
    assert _leftovers(broker, "clash") == ["clash-7"]
    assert _partitions(broker, "clash") == 0
    broker.restart()
    assert _partitions(broker, "clash") == 0
    (broker.data_dir / "clash-7").unlink()
    assert _create(broker, "clash", 20) is None and _partitions(broker, "clash") == 20


def test_an_idle_partition_costs_one_descriptor(limited) -> None:
    broker = limited(4096, 4096)
    before = broker.fds()
    assert _create(broker, "idle", 500) is None
    created = broker.fds() - before
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for p in range(500):
        producer.produce("idle", b"x" * 100, partition=p)
    assert producer.flush(60) == 0
    del producer
    written = broker.fds() - before
    broker.restart()
    reopened = broker.fds() - before
    # the head's log file per partition; indexes in memory
    assert all(_one_per_partition(n, 500) for n in (created, written, reopened))
