"""Consumer groups through real clients: kafka-python, confluent-kafka (librdkafka) and aiokafka.

Each scenario moves through phases: records are produced only while the group is settled, so every
record is consumed and committed before membership changes, and "never twice" is exact. Waits are
bounded loops on observable state; nothing asserts on elapsed time.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("confluent_kafka")
pytest.importorskip("kafka")
pytest.importorskip("aiokafka")

from confluent_kafka import Consumer, KafkaException, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

PARTITIONS = 6
SESSION_MS = 10000  # generous: on 2 loaded cores a client thread can stall for seconds
WAIT_S = 60.0

GROUP_OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "4",
    "log.segment.bytes": "1048576",
}


# --- helpers -------------------------------------------------------------------------------------


def wait_until(cond: Callable[[], bool], what: str, seconds: float = WAIT_S) -> None:
    """Poll `cond` until true; fail naming `what` after a generous bound."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def create_topic(bootstrap: str, partitions: int = PARTITIONS) -> str:
    name = f"groups-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)
    return name


def produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    """`count` records with values start..start+count-1, spread round-robin over the partitions."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    errors: list[str] = []
    for i in range(start, start + count):
        producer.produce(
            topic,
            value=str(i).encode(),
            partition=i % PARTITIONS,
            on_delivery=lambda err, _m: err and errors.append(str(err)),
        )
    assert producer.flush(30) == 0 and not errors, errors[:3]


class Worker(threading.Thread):
    """One group member running in a thread: consume, commit synchronously, then record."""

    def __init__(self, label: str) -> None:
        super().__init__(name=label, daemon=True)
        self.label = label
        self.stop_event = threading.Event()
        self.values: list[int] = []
        self.assignment: frozenset[int] = frozenset()
        self.errors: list[str] = []
        self.assign_events = 0
        self.ready = threading.Event()

    def stop(self) -> None:
        """Leave cleanly (close the consumer) and wait for the thread."""
        self.stop_event.set()
        self.join(30)
        assert not self.is_alive(), f"{self.label} did not stop"

    def note(self, values: list[int], assignment: set[int]) -> None:
        self.values.extend(values)
        self.assignment = frozenset(assignment)


class KafkaPythonWorker(Worker):
    def __init__(self, bootstrap: str, topic: str, group: str, **extra: Any) -> None:
        super().__init__(f"kafka-python-{uuid.uuid4().hex[:4]}")
        self.conf = dict(
            bootstrap_servers=bootstrap,
            group_id=group,
            client_id=self.label,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=500,
            max_poll_interval_ms=30000,
            **extra,
        )
        self.topic = topic

    def run(self) -> None:
        from kafka import KafkaConsumer
        from kafka.consumer.subscription_state import ConsumerRebalanceListener

        worker = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: Any) -> None:
                pass

            def on_partitions_assigned(self, assigned: Any) -> None:
                worker.assign_events += 1

        consumer = KafkaConsumer(**self.conf)
        consumer.subscribe([self.topic], listener=Listener())
        self.ready.set()
        try:
            while not self.stop_event.is_set():
                batch = consumer.poll(timeout_ms=200)
                values = [int(r.value) for recs in batch.values() for r in recs]
                if values:
                    consumer.commit()
                self.note(values, {tp.partition for tp in consumer.assignment()})
        except Exception as exc:  # surfaced by the test
            self.errors.append(repr(exc))
        finally:
            consumer.close()


class ConfluentWorker(Worker):
    def __init__(self, bootstrap: str, topic: str, group: str, **extra: Any) -> None:
        super().__init__(f"confluent-{uuid.uuid4().hex[:4]}")
        self.conf = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": self.label,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": SESSION_MS,
            "heartbeat.interval.ms": 500,
            "topic.metadata.refresh.interval.ms": 2000,
            **extra,
        }
        self.topic = topic

    def run(self) -> None:
        consumer = Consumer(self.conf)

        def on_assign(_c: Any, _parts: Any) -> None:
            self.assign_events += 1

        consumer.subscribe([self.topic], on_assign=on_assign)
        self.ready.set()
        try:
            while not self.stop_event.is_set():
                msgs = consumer.consume(num_messages=500, timeout=0.2)
                values = []
                for m in msgs:
                    if m.error():
                        self.errors.append(str(m.error()))
                    else:
                        values.append(int(m.value()))
                if values:
                    consumer.commit(asynchronous=False)
                self.note(values, {tp.partition for tp in consumer.assignment()})
        except KafkaException as exc:
            self.errors.append(repr(exc))
        finally:
            consumer.close()


class AiokafkaWorker(Worker):
    def __init__(self, bootstrap: str, topic: str, group: str, **extra: Any) -> None:
        super().__init__(f"aiokafka-{uuid.uuid4().hex[:4]}")
        self.conf = dict(
            bootstrap_servers=bootstrap,
            group_id=group,
            client_id=self.label,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=500,
            **extra,
        )
        self.topic = topic

    def run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        from aiokafka import AIOKafkaConsumer

        consumer = AIOKafkaConsumer(self.topic, **self.conf)
        await consumer.start()
        self.ready.set()
        try:
            while not self.stop_event.is_set():
                batch = await consumer.getmany(timeout_ms=200)
                values = [int(r.value) for recs in batch.values() for r in recs]
                if values:
                    await consumer.commit()
                self.note(values, {tp.partition for tp in consumer.assignment()})
        except Exception as exc:
            self.errors.append(repr(exc))
        finally:
            await consumer.stop()


def settled(workers: list[Worker]) -> bool:
    """Every live member owns partitions and together they own each partition exactly once."""
    owned = [p for w in workers for p in w.assignment]
    return all(w.assignment for w in workers) and sorted(owned) == list(range(PARTITIONS))


def consumed(workers: list[Worker]) -> Counter[int]:
    return Counter(v for w in workers for v in w.values)


def assert_exactly(workers: list[Worker], total: int) -> None:
    counts = consumed(workers)
    missing = sorted(set(range(total)) - set(counts))
    twice = sorted(v for v, n in counts.items() if n > 1)
    assert not missing and not twice, f"missing {missing[:10]}, consumed twice {twice[:10]}"
    assert not [e for w in workers for e in w.errors], [w.errors for w in workers]


@pytest.fixture
def group_broker(broker_factory):
    return broker_factory(overrides=GROUP_OVERRIDES, local=True)


# --- scenarios -----------------------------------------------------------------------------------


def test_three_client_libraries_share_a_group(group_broker):
    """kafka-python, librdkafka and aiokafka members join and leave one range group."""
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor as AkRange
    from kafka.coordinator.assignors.range import RangePartitionAssignor as KpRange

    bootstrap = group_broker.bootstrap
    topic = create_topic(bootstrap)
    group = f"mixed-{uuid.uuid4().hex[:6]}"
    kp = KafkaPythonWorker(bootstrap, topic, group, partition_assignment_strategy=[KpRange])
    ck = ConfluentWorker(bootstrap, topic, group, **{"partition.assignment.strategy": "range"})
    ak = AiokafkaWorker(bootstrap, topic, group, partition_assignment_strategy=(AkRange,))
    workers: list[Worker] = []
    try:
        produce(bootstrap, topic, 0, 120)
        kp.start()
        workers.append(kp)
        wait_until(lambda: len(consumed(workers)) >= 120, "kafka-python to consume phase 1")

        for w in (ck, ak):
            w.start()
            workers.append(w)
        wait_until(lambda: settled(workers), "three members to share the partitions")
        produce(bootstrap, topic, 120, 120)
        wait_until(lambda: sum(consumed(workers).values()) >= 240, "phase 2 to be consumed")
        assert all(w.values for w in workers[1:]), "every member consumed something"

        ck.stop()  # a clean leave
        workers.remove(ck)
        wait_until(lambda: settled(workers), "two members to take over")
        produce(bootstrap, topic, 240, 120)
        wait_until(lambda: sum(consumed([*workers, ck]).values()) >= 360, "phase 3 to be consumed")
    finally:
        for w in workers:
            w.stop()
    assert_exactly([kp, ck, ak], 360)


def test_cooperative_sticky_members_rebalance_incrementally(group_broker):
    """librdkafka's cooperative-sticky assignor: members join and leave without losing records."""
    bootstrap = group_broker.bootstrap
    topic = create_topic(bootstrap)
    group = f"coop-{uuid.uuid4().hex[:6]}"
    conf = {"partition.assignment.strategy": "cooperative-sticky"}
    members = [ConfluentWorker(bootstrap, topic, group, **conf) for _ in range(3)]
    live: list[Worker] = []
    try:
        produce(bootstrap, topic, 0, 60)
        members[0].start()
        live.append(members[0])
        wait_until(lambda: len(consumed(live)) >= 60, "the first member to consume phase 1")
        first_owned = members[0].assignment
        for w in members[1:]:
            w.start()
            live.append(w)
        wait_until(lambda: settled(live), "three cooperative members to settle")
        assert members[0].assignment < first_owned  # it kept part of what it had (sticky)
        produce(bootstrap, topic, 60, 60)
        wait_until(lambda: sum(consumed(members).values()) >= 120, "phase 2 to be consumed")
        members[1].stop()
        live.remove(members[1])
        wait_until(lambda: settled(live), "two members to take over")
        produce(bootstrap, topic, 120, 60)
        wait_until(lambda: sum(consumed(members).values()) >= 180, "phase 3 to be consumed")
    finally:
        for w in live:
            w.stop()
    assert_exactly(members, 180)


CRASHING_MEMBER = r"""
import json, sys
from confluent_kafka import Consumer
bootstrap, topic, group, session = sys.argv[1:5]
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
              "auto.offset.reset": "earliest", "session.timeout.ms": int(session),
              "heartbeat.interval.ms": 500, "partition.assignment.strategy": "range"})
c.subscribe([topic])
while True:
    for m in c.consume(num_messages=100, timeout=0.2):
        if not m.error():
            c.commit(message=m, asynchronous=False)
            print(json.dumps({"value": int(m.value())}), flush=True)
    print(json.dumps({"assignment": sorted(tp.partition for tp in c.assignment())}), flush=True)
"""


class CrashingMember:
    """A librdkafka member in a subprocess that commits each record before reporting it."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CRASHING_MEMBER, bootstrap, topic, group, str(SESSION_MS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.values: list[int] = []
        self.assignment: frozenset[int] = frozenset()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            if "value" in event:
                self.values.append(event["value"])
            else:
                self.assignment = frozenset(event["assignment"])

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(30)
        self.reader.join(10)


def test_crashed_member_expires_and_its_partitions_resume_from_commits(group_broker):
    bootstrap = group_broker.bootstrap
    topic = create_topic(bootstrap)
    group = f"crash-{uuid.uuid4().hex[:6]}"
    survivor = KafkaPythonWorker(bootstrap, topic, group)
    crasher = CrashingMember(bootstrap, topic, group)
    try:
        wait_until(lambda: bool(crasher.assignment), "the subprocess member to get partitions")
        survivor.start()
        wait_until(lambda: settled([survivor, crasher]), "two members to share the partitions")
        produce(bootstrap, topic, 0, 120)
        wait_until(
            lambda: len(survivor.values) + len(crasher.values) >= 120, "phase 1 to be consumed"
        )
        assert crasher.values, "the subprocess member consumed part of phase 1"
        crasher.kill()  # no LeaveGroup: only the session timeout tells the coordinator
        produce(bootstrap, topic, 120, 120)
        wait_until(
            lambda: survivor.assignment == frozenset(range(PARTITIONS)),
            "the survivor to own every partition after the session timeout",
        )
        wait_until(
            lambda: len(survivor.values) + len(crasher.values) >= 240, "phase 2 to be consumed"
        )
    finally:
        if crasher.proc.poll() is None:
            crasher.kill()
        survivor.stop()
    counts = Counter(survivor.values + crasher.values)
    assert sorted(counts) == list(range(240))
    assert max(counts.values()) == 1, "a committed record was consumed again"


def test_group_resumes_from_commits_across_broker_restarts(group_broker):
    """Commits survive a clean restart and a crash (SIGKILL) of the broker, in Kafka's format."""
    from kafka import KafkaConsumer

    from gateway.groups.schema import OFFSETS_TOPIC, OffsetKey, decode_key, partition_for
    from rdmalog.store.records import decode_all

    bootstrap = group_broker.bootstrap
    topic = create_topic(bootstrap)
    group = f"resume-{uuid.uuid4().hex[:6]}"
    produce(bootstrap, topic, 0, 60)

    first = ConfluentWorker(bootstrap, topic, group)
    first.start()
    wait_until(lambda: len(first.values) >= 60, "the first consumer to read phase 1")
    first.stop()

    group_broker.restart()  # SIGTERM
    produce(bootstrap, topic, 60, 60)
    second = KafkaPythonWorker(bootstrap, topic, group)
    second.start()
    wait_until(lambda: len(second.values) >= 60, "the second consumer to read phase 2")
    second.stop()

    group_broker.kill()
    group_broker.start()
    produce(bootstrap, topic, 120, 60)
    third = AiokafkaWorker(bootstrap, topic, group)
    third.start()
    wait_until(lambda: len(third.values) >= 60, "the third consumer to read phase 3")
    third.stop()
    assert_exactly([first, second, third], 180)
    assert sorted(second.values) == list(range(60, 120))

    committed = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
    try:
        from kafka import TopicPartition

        offsets = {p: committed.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)}
    finally:
        committed.close()
    assert offsets == dict.fromkeys(range(PARTITIONS), 30)

    part = partition_for(group, 4)
    log_dir = Path(group_broker.data_dir) / f"{OFFSETS_TOPIC}-{part}"
    records = [r for f in sorted(log_dir.glob("*.log")) for r in decode_all(f.read_bytes())]
    keys = {decode_key(r.key) for r in records}
    assert OffsetKey(group, topic, 0) in keys


def test_static_members_rejoin_without_rebalance(group_broker):
    bootstrap = group_broker.bootstrap
    topic = create_topic(bootstrap)
    group = f"static-{uuid.uuid4().hex[:6]}"
    conf = {"partition.assignment.strategy": "range", "session.timeout.ms": 10000}
    a = ConfluentWorker(bootstrap, topic, group, **{**conf, "group.instance.id": "member-a"})
    b = ConfluentWorker(bootstrap, topic, group, **{**conf, "group.instance.id": "member-b"})
    live = [a, b]
    replacement = None
    try:
        a.start()
        wait_until(lambda: bool(a.assignment), "member a to get partitions")
        b.start()
        wait_until(lambda: settled(live), "two static members to settle")
        produce(bootstrap, topic, 0, 60)
        wait_until(lambda: sum(consumed(live).values()) >= 60, "phase 1 to be consumed")
        b_events, b_owned, a_owned = b.assign_events, b.assignment, a.assignment
        members_before = _describe(bootstrap, group)

        a.stop()  # a static member leaves no LeaveGroup behind
        replacement = ConfluentWorker(
            bootstrap, topic, group, **{**conf, "group.instance.id": "member-a"}
        )
        replacement.start()
        live = [replacement, b]
        wait_until(
            lambda: replacement.assignment == a_owned, "member a's restart to get its partitions"
        )
        produce(bootstrap, topic, 60, 60)
        wait_until(lambda: sum(consumed([a, *live]).values()) >= 120, "phase 2 to be consumed")
        assert b.assign_events == b_events and b.assignment == b_owned, "b saw a rebalance"
        members_after = _describe(bootstrap, group)
        assert members_after["member-b"] == members_before["member-b"]
        assert members_after["member-a"] != members_before["member-a"]
    finally:
        for w in live:
            if w.is_alive():
                w.stop()
    assert_exactly([a, b, replacement], 120)


def _describe(bootstrap: str, group: str) -> dict[str | None, str]:
    """group.instance.id -> member id, from DescribeGroups through confluent-kafka's admin."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    desc = admin.describe_consumer_groups([group])[group].result(timeout=30)
    assert desc.state.name == "STABLE", desc.state
    return {m.group_instance_id: m.member_id for m in desc.members}
