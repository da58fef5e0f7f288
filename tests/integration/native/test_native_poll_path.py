"""A native consumer that has read everything its slots showed polls with one look (on shm a C
compare of the slot words, `Consumer._quiet`): whatever changes next must still reach it - new
records, a roll to the next file, a resumed or re-sought partition, a commit's answer, the broker
going away. On shm and tcp (tcp has no quiet state: every look is a READ), over a real Store."""

from __future__ import annotations

import time

import pytest

from rdmalog.rdma import Consumer, Producer
from rdmalog.rdma.client.endpoint import BrokerDisconnected, ClientClosedError


def drain(c: Consumer, n: int, rounds: int = 400) -> list:
    got: list = []
    for _ in range(rounds):
        got += c.poll(0.02)
        if len(got) >= n:
            break
    return got


def settle_quiet(c: Consumer, kind: str) -> None:
    """Empty polls until the consumer has read all it was shown (on shm: quiet)."""
    for _ in range(3):
        assert c.poll(0) == []
    assert (c._quiet is not None) == (kind == "shm")


def test_a_quiet_consumer_sees_each_new_record_and_each_roll(broker, kind):
    st, svc = broker
    st.create_topic("q", 1, {"segment.bytes": "1024"})  # a roll every few records
    c = Consumer(svc.control_address)
    c.assign([("q", 0)])
    p = Producer(svc.control_address)
    settle_quiet(c, kind)
    for i in range(30):
        p.produce("q", 0, b"%03d" % i + b"." * 200)
        got = drain(c, 1)
        assert [(r.offset, r.value[:3]) for r in got] == [(i, b"%03d" % i)]
        settle_quiet(c, kind)
    assert len(st.partition("q", 0).segments) > 4
    p.close()
    c.close()


def test_a_roll_to_an_empty_head_under_a_quiet_consumer(broker, kind):
    """A head rolls with nothing new (segment.ms, say): the consumer moves to the empty new head
    and the head's first record still reaches it - also when the new file's slot is one the
    consumer's look did not cover (slots are handed out lowest first: partition 0's, given back
    when it was unassigned, is below those of the partitions still read)."""
    st, svc = broker
    st.create_topic("e", 3)
    c = Consumer(svc.control_address)
    c.assign([("e", 0), ("e", 1), ("e", 2)])
    settle_quiet(c, kind)
    c.assign([("e", 1), ("e", 2)])
    p = Producer(svc.control_address)
    for i in range(3):
        p.produce("e", 1, b"before-%d" % i)
        assert [r.value for r in drain(c, 1)] == [b"before-%d" % i]
        settle_quiet(c, kind)
        st.partition("e", 1).roll()
        for _ in range(5):
            assert c.poll(0.01) == []
        p.produce("e", 1, b"after-%d" % i)
        assert [r.value for r in drain(c, 1)] == [b"after-%d" % i]
    p.close()
    c.close()


def test_pause_resume_and_seek_of_a_quiet_consumer(broker, kind):
    st, svc = broker
    st.create_topic("s", 2)
    c = Consumer(svc.control_address)
    c.assign([("s", 0), ("s", 1)])
    settle_quiet(c, kind)
    c.pause([("s", 0)])
    p = Producer(svc.control_address)
    p.produce("s", 0, b"held")
    p.produce("s", 1, b"free")
    assert [r.value for r in drain(c, 1)] == [b"free"]
    assert c.poll(0.05) == []  # the paused partition's record waits
    settle_quiet(c, kind)
    c.resume([("s", 0)])
    assert [r.value for r in drain(c, 1)] == [b"held"]
    settle_quiet(c, kind)
    c.seek("s", 1, 0)  # back to what was read: read again
    assert [r.value for r in drain(c, 1)] == [b"free"]
    settle_quiet(c, kind)
    c.assign([("s", 1)])  # one partition less, then one more again
    settle_quiet(c, kind)
    c.assign([("s", 0), ("s", 1)])
    assert [r.value for r in drain(c, 1)] == [b"held"]
    p.close()
    c.close()


def test_a_quiet_consumer_runs_commit_callbacks_and_raises_once_closed(broker_factory, kind):
    """commit_async's callback runs in a later poll() of a consumer with nothing to read, both
    when nothing was to commit and once the coordinator answered a slot's commit (`rdmalog
    serve`: the group coordinator is the gateway's)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from compat_tests.brokers import free_port

    port = free_port()
    broker = broker_factory({"rdma.transport": kind, "rdma.control.port": str(port)}, local=True)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("cb", 1, 1)])["cb"].result(15)
    control = f"127.0.0.1:{port}"
    c = Consumer(control, kind, group_id="g", bootstrap=broker.bootstrap)
    c.assign([("cb", 0)], offset=0)
    settle_quiet(c, kind)
    calls: list = []
    c.commit_async({}, callback=lambda offsets, error: calls.append((offsets, error)))
    assert c.poll(0) == [] and calls == [({}, None)]
    settle_quiet(c, kind)
    c.commit_async({("cb", 0): 0}, callback=lambda offsets, error: calls.append((offsets, error)))
    deadline = time.monotonic() + 15
    while len(calls) < 2 and time.monotonic() < deadline:
        assert c.poll(0.01) == []
    assert calls[1] == ({("cb", 0): 0}, None) and c.committed("cb", 0) == 0
    settle_quiet(c, kind)
    c.close()
    with pytest.raises(ClientClosedError):
        c.poll(0)


def test_a_quiet_consumer_notices_the_broker_going_away(broker, kind):
    st, svc = broker
    st.create_topic("gone", 1)
    c = Consumer(svc.control_address)
    c.assign([("gone", 0)])
    settle_quiet(c, kind)
    svc.stop()
    deadline = time.monotonic() + 30
    with pytest.raises(BrokerDisconnected):  # the idle check, every IDLE_CHECK empty polls
        while time.monotonic() < deadline:
            c.poll(0)
    with pytest.raises(BrokerDisconnected):
        c.poll(0)
    c.close()
