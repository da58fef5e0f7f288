"""Native clients against a real `rdmalog serve` (rdma.transport=shm|tcp): group offsets, restarts.

- A native consumer commits its position to the group coordinator (`__consumer_offsets`, through
  the gateway's Kafka protocol); a Kafka consumer of the same group resumes there, commits, and a
  native consumer resumes where the Kafka one committed.
- The broker stops (SIGTERM) or dies (SIGKILL) under a native producer and consumer: both get
  BrokerDisconnected, reconnect once it is back, and nothing acknowledged is lost or duplicated.
"""

from __future__ import annotations

import signal
import time

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.brokers import free_port
from rdmalog.rdma import BrokerDisconnected, Consumer, Producer
from rdmalog.rdma.control import ControlError


def _start(broker_factory, transport: str):
    control_port = free_port()
    broker = broker_factory(
        {"rdma.transport": transport, "rdma.control.port": str(control_port)}, local=True
    )
    return broker, f"127.0.0.1:{control_port}"


def _create_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(15)


def _start_with_records(broker_factory, transport: str, topic: str, prefix: bytes, n: int):
    """A broker with `topic` holding n records prefix0, prefix1, ... produced natively."""
    broker, control = _start(broker_factory, transport)
    _create_topic(broker.bootstrap, topic)
    p = Producer(control, transport)
    for i in range(n):
        p.send(topic, 0, prefix + b"%d" % i)
    p.flush()
    p.close()
    return broker, control


def _native_poll(c: Consumer, count: int, rounds: int = 300) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    for _ in range(rounds):
        out += [(r.offset, r.value) for r in c.poll(0.05)]
        if len(out) >= count:
            break
    return out


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_group_offsets_shared_with_kafka_consumers(broker_factory, transport: str) -> None:
    topic, group = f"offsets-{transport}", f"group-{transport}"
    broker, control = _start_with_records(broker_factory, transport, topic, b"n", 20)

    native = Consumer(control, transport, group_id=group, bootstrap=broker.bootstrap)
    assert native.committed(topic, 0) is None
    native.assign([(topic, 0)])  # nothing committed: auto_offset_reset=earliest
    assert [o for o, _ in _native_poll(native, 20)] == list(range(20))
    native.commit({(topic, 0): 12})
    assert native.committed(topic, 0) == 12
    native.close()

    kafka = KafkaConsumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "latest",  # so only the native commit can make it start at 12
        }
    )
    kafka.subscribe([topic])
    seen: list[int] = []
    for _ in range(300):
        msg = kafka.poll(0.1)
        if msg is not None and not msg.error():
            seen.append(msg.offset())
            if msg.offset() == 19:
                break
    assert seen == list(range(12, 20))
    kafka.commit(asynchronous=False)  # position 20
    kafka.close()

    kp = KafkaProducer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for i in range(5):
        kp.produce(topic, b"k%d" % i, partition=0)
    assert kp.flush(30) == 0

    native = Consumer(control, transport, group_id=group, bootstrap=broker.bootstrap)
    assert native.committed(topic, 0) == 20
    native.assign([(topic, 0)])
    assert native.position(topic, 0) == 20
    assert _native_poll(native, 5) == [(20 + i, b"k%d" % i) for i in range(5)]
    native.commit()  # the position of every assigned partition
    assert native.committed(topic, 0) == 25
    native.close()

    native = Consumer(control, transport, group_id=group, bootstrap=broker.bootstrap)
    native.commit({(topic, 0): 1000})  # past the log end (as after a retention deletion)
    native.assign([(topic, 0)])
    assert native.position(topic, 0) == 0  # out of range: auto_offset_reset=earliest
    native.close()


def _expect_disconnected(op) -> BrokerDisconnected:
    """Run `op` until it raises BrokerDisconnected (bounded: each call waits a little)."""
    for _ in range(200):
        try:
            op()
        except BrokerDisconnected as e:
            return e
    raise AssertionError("the client never noticed the broker was gone")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_restart_under_native_clients(broker_factory, transport: str, sig: int) -> None:
    broker, control = _start(broker_factory, transport)
    topic = f"restart-{transport}"
    _create_topic(broker.bootstrap, topic)

    p = Producer(control, transport, timeout=5.0)
    c = Consumer(control, transport, timeout=5.0)
    c.assign([(topic, 0)])
    acked = [p.produce(topic, 0, b"a%d" % i)[0] for i in range(30)]
    assert acked == list(range(30))
    assert _native_poll(c, 30) == [(i, b"a%d" % i) for i in range(30)]

    broker.stop(sig)
    err = _expect_disconnected(lambda: p.produce(topic, 0, b"lost?"))
    assert control in str(err) and "reconnect" in str(err)
    _expect_disconnected(lambda: c.poll(0.05))
    with pytest.raises(BrokerDisconnected):  # stays broken until reconnect()
        p.send(topic, 0, b"x")

    broker.start()
    p.reconnect(timeout=30)
    c.reconnect(timeout=30)
    after = [p.produce(topic, 0, b"b%d" % i)[0] for i in range(30)]
    assert after == list(range(30, 60))  # the unacknowledged "lost?" was not committed
    assert _native_poll(c, 30) == [(30 + i, b"b%d" % i) for i in range(30)]  # no gap, no repeat
    p.close()
    c.close()

    want = [b"a%d" % i for i in range(30)] + [b"b%d" % i for i in range(30)]
    fresh = Consumer(control, transport)
    fresh.assign([(topic, 0)])
    assert [v for _, v in _native_poll(fresh, 60)] == want
    fresh.close()
    kafka = KafkaConsumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "check",
            "auto.offset.reset": "earliest",
        }
    )
    kafka.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < 60 and time.monotonic() < deadline:
        msg = kafka.poll(0.2)
        if msg is not None and not msg.error():
            values.append(msg.value())
    kafka.close()
    assert values == want


def _wait_committed(c: Consumer, topic: str, want: int, seconds: float = 10.0) -> int | None:
    """The group's committed offset once it reads `want` (bounded: the fold is asynchronous)."""
    deadline = time.monotonic() + seconds
    got = c.committed(topic, 0)
    while got != want and time.monotonic() < deadline:
        time.sleep(0.05)
        got = c.committed(topic, 0)
    return got


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_commits_through_commit_slots(broker_factory, transport: str) -> None:
    """commit_async(): one FETCH_AND_ADD on the partition's commit slot; the broker folds it into
    the group coordinator within rdma.commit.interval.ms, when the consumer closes, and when the
    broker stops (SIGTERM) - a Kafka consumer of the group then resumes there after the restart.
    Moving a commit backwards (after a seek) works too: the add wraps modulo 2**64."""
    topic = group = f"slots-{transport}"
    broker, control = _start_with_records(broker_factory, transport, topic, b"s", 30)

    c = Consumer(control, transport, group_id=group, bootstrap=broker.bootstrap)
    c.assign([(topic, 0)])
    assert [o for o, _ in _native_poll(c, 10)][:10] == list(range(10))
    c.seek(topic, 0, 10)
    c.commit_async()  # the position: 10
    assert _wait_committed(c, topic, 10) == 10  # folded by the interval, c still open
    c.commit_async({(topic, 0): 25})
    c.commit_async({(topic, 0): 7})  # backwards
    c.close()  # folded at once: the last word counts
    check = Consumer(control, transport, group_id=group, bootstrap=broker.bootstrap)
    assert _wait_committed(check, topic, 7) == 7
    check.close()

    c = Consumer(control, transport, group_id=group, bootstrap=broker.bootstrap)
    c.commit_async({(topic, 0): 21})
    broker.stop(signal.SIGTERM)  # the broker folds what open sessions committed as it stops
    broker.start()
    kafka = KafkaConsumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "latest",  # only the folded commit can make it start at 21
        }
    )
    kafka.subscribe([topic])
    seen: list[int] = []
    deadline = time.monotonic() + 30
    while (not seen or seen[-1] < 29) and time.monotonic() < deadline:
        msg = kafka.poll(0.1)
        if msg is not None and not msg.error():
            seen.append(msg.offset())
    kafka.close()
    assert seen == list(range(21, 30))

    with pytest.raises(ValueError):
        Consumer(control, transport).commit_async({(topic, 0): 1})  # no group
    c = Consumer(control, transport, group_id=group, bootstrap=broker.bootstrap)
    for bad in ({"topic": "nope", "partition": 0}, {"topic": topic, "partition": "0"}, {}):
        with pytest.raises(ControlError):
            c.control("commit_slot", group=group, **bad)
    with pytest.raises(ControlError):
        c.control("commit_slot", group="", topic=topic, partition=0)
    with pytest.raises(ValueError):
        c.commit_async({(topic, 0): -1})
    c.commit_async({(topic, 0): 3})  # the session still works
    c.close()


def _poll_until(c: Consumer, pred, seconds: float = 10.0) -> bool:
    """Poll (which runs commit callbacks) until pred() holds; bounded."""
    deadline = time.monotonic() + seconds
    while not pred() and time.monotonic() < deadline:
        c.poll(0.01)
    return pred()


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_commit_async_callbacks_report_the_coordinators_answer(broker_factory, transport) -> None:
    """commit_async(callback=...): once the broker has folded the slot, a later poll() runs the
    callback with the coordinator's answer, read from the slot's result word - None when it was
    committed (commits superseded before the fold are answered with the one that carried them),
    the Kafka error when it was refused: a group with an active Kafka member refuses these simple
    commits (UNKNOWN_MEMBER_ID), which would otherwise be lost without the consumer knowing."""
    from rdmalog.rdma.client.offsets import OffsetCommitError

    topic = group = f"cb-{transport}"
    broker, control = _start_with_records(broker_factory, transport, topic, b"c", 10)
    c = Consumer(control, transport, group_id=group, bootstrap=broker.bootstrap)
    c.assign([(topic, 0)])
    calls: list[tuple[dict, Exception | None]] = []
    cb = lambda offsets, error: calls.append((offsets, error))  # noqa: E731

    c.commit_async({(topic, 0): 5}, callback=cb)
    assert _poll_until(c, lambda: len(calls) == 1)
    assert calls == [({(topic, 0): 5}, None)] and c.committed(topic, 0) == 5
    c.commit_async({(topic, 0): 6}, callback=cb)
    c.commit_async({(topic, 0): 8}, callback=cb)  # before the next fold: one fold carries both
    assert _poll_until(c, lambda: len(calls) == 3)
    assert calls[1:] == [({(topic, 0): 6}, None), ({(topic, 0): 8}, None)]
    assert c.committed(topic, 0) == 8

    kafka = KafkaConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    kafka.subscribe([topic])
    deadline = time.monotonic() + 30
    while not kafka.assignment() and time.monotonic() < deadline:
        kafka.poll(0.1)
    assert kafka.assignment(), "the Kafka consumer never joined the group"
    c.commit_async({(topic, 0): 9}, callback=cb)
    assert _poll_until(c, lambda: len(calls) == 4)
    offsets, error = calls[3]
    assert offsets == {(topic, 0): 9} and isinstance(error, OffsetCommitError)
    assert error.error_code == 25  # UNKNOWN_MEMBER_ID: the group has a member
    kafka.close()  # leaves: the group is empty again and takes simple commits

    c.commit_async({(topic, 0): 10}, callback=cb)
    c.close()  # waits for the answer: the callback runs before close() returns
    assert calls[4] == ({(topic, 0): 10}, None)
    check = Consumer(control, transport, group_id=group, bootstrap=broker.bootstrap)
    assert check.committed(topic, 0) == 10
    check.close()


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_commit_async_of_the_offset_a_slot_holds_is_a_commit_again(broker_factory, transport):
    """Two native consumers of one group commit the same partition: c commits 5, d commits 8,
    then c commits 5 again (it rewound, or retries) - the last commit wins, as with Kafka
    consumers. c's slot already held 5, so a word of the offset alone did not change: the broker
    never folded the commit (the group stayed at 8), and its callback was answered at once by
    the old result word."""
    topic = group = f"again-{transport}"
    broker, control = _start_with_records(broker_factory, transport, topic, b"a", 10)
    c = Consumer(control, transport, group_id=group, bootstrap=broker.bootstrap)
    d = Consumer(control, transport, group_id=group, bootstrap=broker.bootstrap)
    calls: list[tuple[dict, Exception | None]] = []
    cb = lambda offsets, error: calls.append((offsets, error))  # noqa: E731

    c.commit_async({(topic, 0): 5}, callback=cb)
    assert _poll_until(c, lambda: len(calls) == 1) and calls == [({(topic, 0): 5}, None)]
    d.commit_async({(topic, 0): 8})
    assert _wait_committed(c, topic, 8) == 8
    c.commit_async({(topic, 0): 5}, callback=cb)
    assert _poll_until(c, lambda: len(calls) == 2)
    assert calls[1] == ({(topic, 0): 5}, None)
    assert c.committed(topic, 0) == 5  # the callback came after the fold that committed it
    d.close()
    c.close()


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_a_commit_callback_that_raises_loses_no_other_answer(broker_factory, transport):
    """A commit_async callback that raises: its exception comes out of poll() (or close()), as
    from a Kafka consumer's, and the callbacks answered with it still run - the next poll() runs
    them (they were dropped, never called), and close() still closes the consumer (it stopped
    half way, its session and group client left open)."""
    topic = group = f"raise-{transport}"
    broker, control = _start_with_records(broker_factory, transport, topic, b"r", 10)
    c = Consumer(control, transport, group_id=group, bootstrap=broker.bootstrap)
    calls: list[tuple[dict, Exception | None]] = []
    cb = lambda offsets, error: calls.append((offsets, error))  # noqa: E731

    def boom(offsets, error):
        raise RuntimeError("callback failed")

    c.commit_async({(topic, 0): 5}, callback=boom)
    c.commit_async({(topic, 0): 6}, callback=cb)  # one fold answers both
    with pytest.raises(RuntimeError, match="callback failed"):
        _poll_until(c, lambda: False, 5.0)
    assert _poll_until(c, lambda: len(calls) == 1, 1.0)
    assert calls == [({(topic, 0): 6}, None)]

    c.commit_async({(topic, 0): 7}, callback=boom)
    c.commit_async({(topic, 0): 8}, callback=cb)
    with pytest.raises(RuntimeError, match="callback failed"):
        c.close()
    assert c.closed and calls[1] == ({(topic, 0): 8}, None)
    check = Consumer(control, transport, group_id=group, bootstrap=broker.bootstrap)
    assert check.committed(topic, 0) == 8
    check.close()


def test_a_commit_async_of_nothing_still_calls_back(broker_factory):
    """commit_async(callback=...) with nothing to commit (no partition assigned, or {}) answers
    the callback in the next poll() with no error, as a Kafka consumer's commitAsync does; it was
    never called, so an application waiting for it waited forever."""
    topic = group = "nothing"
    broker, control = _start_with_records(broker_factory, "shm", topic, b"n", 1)
    c = Consumer(control, "shm", group_id=group, bootstrap=broker.bootstrap)
    calls: list[tuple[dict, Exception | None]] = []
    cb = lambda offsets, error: calls.append((offsets, error))  # noqa: E731
    c.commit_async(callback=cb)
    c.commit_async({}, callback=cb)
    assert _poll_until(c, lambda: len(calls) == 2, 2.0)
    assert calls == [({}, None), ({}, None)]
    c.commit_async(callback=cb)
    c.close()  # runs it too
    assert len(calls) == 3


def test_a_refused_commit_async_commits_none_of_its_partitions(broker_factory):
    """commit_async() of partitions one of which has no commit slot (an unknown topic) raises,
    and commits none of them: it had already moved the slots of the partitions before that one,
    so a commit the application saw fail was folded in part (no callback ever ran for it)."""
    topic = group = "partial"
    broker, control = _start_with_records(broker_factory, "shm", topic, b"p", 5)
    c = Consumer(control, "shm", group_id=group, bootstrap=broker.bootstrap)
    calls: list[tuple[dict, Exception | None]] = []
    with pytest.raises(ControlError):
        c.commit_async(
            {(topic, 0): 4, ("no-such-topic", 0): 1}, callback=lambda *a: calls.append(a)
        )
    c.close()  # folds whatever its slots hold
    check = Consumer(control, "shm", group_id=group, bootstrap=broker.bootstrap)
    assert check.committed(topic, 0) is None and calls == []
    check.close()


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_close_after_the_broker_died_fails_waiting_commits_at_once(broker_factory, transport):
    """A broker killed before it folded a commit: close() fails the commit's callback at once,
    since no fold will answer it. On shm the dead broker's result words still read (a mapping),
    so close() waited its whole timeout for an answer that could not come."""
    from rdmalog.rdma.client.offsets import OffsetCommitError

    topic = group = f"died-{transport}"
    broker, control = _start_with_records(broker_factory, transport, topic, b"d", 5)
    c = Consumer(control, transport, group_id=group, bootstrap=broker.bootstrap, timeout=5)
    calls: list[tuple[dict, Exception | None]] = []
    c.commit_async({(topic, 0): 1})  # the slot, while the broker is up
    broker.stop(signal.SIGKILL)
    time.sleep(0.2)
    try:
        c.commit_async({(topic, 0): 3}, callback=lambda o, e: calls.append((o, e)))
    except BrokerDisconnected:  # tcp may see the broker gone already: nothing waits then
        calls.append(({(topic, 0): 3}, OffsetCommitError("refused")))
    started = time.monotonic()
    c.close()
    assert time.monotonic() - started < 2.0
    assert len(calls) == 1 and isinstance(calls[0][1], OffsetCommitError)


@pytest.mark.parametrize("mode", ["exclusive", "shared"])
@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_idempotent_producer_neither_loses_nor_duplicates_across_a_broker_kill(
    broker_factory, transport: str, mode: str
) -> None:
    """An idempotent native producer streams while the broker is killed (SIGKILL) and started
    again: batches it had sent but not heard back about are sent again after reconnect() with
    the same sequences, and the log answers those it already holds (committed, or recovered from
    the file after the crash) with their original offsets. Every record is then stored exactly
    once, in send order; a plain producer would have had to choose between losing and repeating
    them. In shared mode a send can find the broker gone after its sequences were taken (while it
    reserves space): that batch is kept and resent too, not dropped (a gap in the sequence would
    have every later batch refused)."""
    broker, control = _start(broker_factory, transport)
    topic = f"idem-{transport}-{mode}"
    _create_topic(broker.bootstrap, topic)
    p = Producer(control, transport, timeout=5.0, idempotent=True, mode=mode)
    assert p.producer_id >= 0
    total, kill_at = 400, (100, 200, 300)  # three crashes: each may catch batches in doubt
    sent: list = []
    restarts = 0
    for _ in range(2 * total):  # bounded
        i = len(sent)
        if i == total:
            break
        if restarts < len(kill_at) and i == kill_at[restarts] and broker.running:
            broker.stop(signal.SIGKILL)
        try:
            d = p.send(topic, 0, b"v%d" % i)
        except BrokerDisconnected:  # this record was not sent: it is sent again below
            restarts += 1
            broker.start()
            p.reconnect(timeout=30)
            continue
        sent.append(d)
    p.flush(30)
    assert restarts == len(kill_at) and len(sent) == total
    assert [d.error for d in sent] == [None] * total
    assert [d.result for d in sent] == [(n, n) for n in range(total)]  # each once, in order
    p.close()
    c = Consumer(control, transport)
    c.assign([(topic, 0)], offset=0)
    assert [v for _, v in _native_poll(c, total)] == [b"v%d" % n for n in range(total)]
    c.close()
