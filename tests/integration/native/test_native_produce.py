"""Native producers, exclusive and shared, with the gateway's appends beside them: commits, rolls,
grants, flush policy."""

from __future__ import annotations

import multiprocessing
import os
import time

import pytest

from rdmalog.errors import PolicyViolationError
from rdmalog.rdma import Consumer, Producer
from rdmalog.rdma.client.producer import ProduceError
from rdmalog.store.records import build_batch
from tests.integration.native.helpers import consume, store_records, wait_for


def test_exclusive_produce_and_consume(broker):
    st, svc = broker
    st.create_topic("t", 1)
    p = Producer(svc.control_address)
    assert p.produce("t", 0, b"v0", key=b"k0") == (0, 0)
    ds = [p.send("t", 0, b"v%d" % i, headers=[("h", b"x")]) for i in range(1, 50)]
    p.flush()
    assert [d.result for d in ds] == [(i, i) for i in range(1, 50)]
    recs = store_records(st, "t")
    assert [r.value for r in recs] == [b"v%d" % i for i in range(50)]
    assert recs[0].key == b"k0" and recs[1].headers == [("h", b"x")]
    c = Consumer(svc.control_address)
    c.assign([("t", 0)])
    got = consume(c, 50)
    assert [(r.offset, r.value) for r in got] == [(i, b"v%d" % i) for i in range(50)]
    assert got[0].key == b"k0" and got[1].headers == (("h", b"x"),)
    assert c.poll(0) == []
    p.produce("t", 0, b"late")  # the head file's slot shows the new last readable byte
    assert [r.value for r in consume(c, 1)] == [b"late"]
    c.seek("t", 0, 10)
    assert consume(c, 41)[0].offset == 10
    c.seek("t", 0, -1)  # LATEST: only what comes next
    assert c.poll(0.05) == [] and c.position("t", 0) == 51
    p.produce("t", 0, b"next")
    assert [r.offset for r in consume(c, 1)] == [51]
    c.close()
    p.close()


def test_rolls_follow_files(broker):
    st, svc = broker
    st.create_topic("r", 1, {"segment.bytes": "2048"})
    c = Consumer(svc.control_address, fetch_size=300)
    c.assign([("r", 0)])
    for mode in ("exclusive", "shared"):
        p = Producer(svc.control_address, mode=mode)
        for i in range(60):
            p.send("r", 0, b"%s-%03d" % (mode.encode(), i) + b"." * 40)
        p.flush()
        p.close()
    plog = st.partition("r", 0)
    assert len(plog.segments) > 4
    want = [
        b"%s-%03d" % (m.encode(), i) + b"." * 40 for m in ("exclusive", "shared") for i in range(60)
    ]
    assert [r.value for r in store_records(st, "r")] == want
    got = consume(c, 120)
    assert [r.value for r in got] == want
    assert [r.offset for r in got] == list(range(120))
    assert wait_for(lambda: svc.stats()["readers"] == 1)  # read files were released behind it
    c.close()


def test_partial_batches_and_big_batches(broker):
    st, svc = broker
    st.create_topic("b", 1)
    p = Producer(svc.control_address)
    big = os.urandom(50_000)
    p.send_records("b", 0, [(b"k", big), (None, b"small")]).wait()
    for i in range(20):
        p.send("b", 0, b"%d" % i * 100)
    p.flush()
    c = Consumer(svc.control_address, fetch_size=64)  # every batch spans several READs
    c.assign([("b", 0)])
    got = consume(c, 22)
    assert got[0].value == big and got[1].value == b"small"
    assert [r.value for r in got[2:]] == [b"%d" % i * 100 for i in range(20)]
    c.close()
    p.close()


def _shared_producer(addr: str, kind: str, tag: bytes, n: int, q) -> None:
    p = Producer(addr, kind, mode="shared")
    for i in range(n):
        p.send("s", 0, tag + b"-%04d" % i)
    p.flush(30)
    p.close()
    q.put("ok")


def test_shared_mode_two_processes_and_the_gateway(broker, kind):
    st, svc = broker
    st.create_topic("s", 1, {"segment.bytes": "8192"})
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    n = 150
    procs = [
        ctx.Process(target=_shared_producer, args=(svc.control_address, kind, t, n, q))
        for t in (b"A", b"B")
    ]
    for pr in procs:
        pr.start()
    gw = []
    for i in range(40):  # the gateway's TCP produce path reserves through the same word
        r = svc.append("s", 0, build_batch([(None, b"G-%04d" % i)]))
        gw.append(r.base_offset)
    assert [q.get(timeout=120) for _ in procs] == ["ok", "ok"]
    for pr in procs:
        pr.join(30)
    recs = store_records(st, "s")
    assert [r.offset for r in recs] == list(range(2 * n + 40))  # no hole, nothing twice
    vals = [r.value for r in recs]
    for tag, cnt in ((b"A", n), (b"B", n), (b"G", 40)):
        mine = [v for v in vals if v.startswith(tag)]
        assert mine == [tag + b"-%04d" % i for i in range(cnt)]  # each writer's order kept
    assert gw == sorted(gw)
    assert len(st.partition("s", 0).segments) > 1


def test_gateway_idempotent_appends_into_a_shared_grant(broker):
    """A Kafka idempotent producer's batches through the gateway into a partition a native shared
    producer holds: a retried batch is answered with the original's offsets and not stored twice,
    the native producer's next writes still commit, and a sequence gap is refused with its own
    Kafka error (OUT_OF_ORDER_SEQUENCE_NUMBER, what a Kafka client acts on), not a generic one."""
    from rdmalog.errors import OutOfOrderSequenceError

    st, svc = broker
    st.create_topic("gi", 1)
    p = Producer(svc.control_address, mode="shared")
    assert p.produce("gi", 0, b"native-0") == (0, 0)
    kafka = build_batch([(None, b"kafka-0")], producer_id=11, producer_epoch=0, base_sequence=0)
    assert svc.append("gi", 0, kafka).base_offset == 1
    assert svc.append("gi", 0, kafka).base_offset == 1  # a retry: the original's offset
    assert p.produce("gi", 0, b"native-1") == (2, 2)
    gap = build_batch([(None, b"kafka-9")], producer_id=11, producer_epoch=0, base_sequence=9)
    with pytest.raises(OutOfOrderSequenceError):
        svc.append("gi", 0, gap)
    assert p.produce("gi", 0, b"native-2") == (3, 3)
    p.close()
    assert [r.value for r in store_records(st, "gi")] == [
        b"native-0", b"kafka-0", b"native-1", b"native-2",
    ]  # fmt: skip


def test_gateway_append_into_a_shared_grant_reports_the_log_append_time(broker):
    """On a LogAppendTime topic the gateway's append answers with the time the log stamped on
    its batch (the produce response's log_append_time, which Kafka clients report as the
    record's timestamp), also when it is ordered with a shared producer's writes - it said -1
    there - and a retried idempotent batch gets its original's time, as with no grant."""
    st, svc = broker
    st.create_topic("lt", 1, {"message.timestamp.type": "LogAppendTime"})
    plain = svc.append("lt", 0, build_batch([(None, b"no-grant")]))
    assert plain.log_append_time > 0
    p = Producer(svc.control_address, mode="shared")
    p.produce("lt", 0, b"native")
    kafka = build_batch([(None, b"kafka")], producer_id=12, producer_epoch=0, base_sequence=0)
    res = svc.append("lt", 0, kafka)
    stamped = store_records(st, "lt")[res.base_offset].timestamp
    assert res.log_append_time == stamped >= plain.log_append_time
    assert svc.append("lt", 0, kafka) == res  # the retry: same offsets, same time
    p.close()


def test_exclusive_grant_excludes_others(broker):
    st, svc = broker
    st.create_topic("x", 1)
    p = Producer(svc.control_address)
    p.produce("x", 0, b"mine")
    with pytest.raises(PolicyViolationError):
        svc.append("x", 0, build_batch([(None, b"gateway")]))
    p2 = Producer(svc.control_address, mode="shared")
    with pytest.raises(ProduceError, match="^busy: another producer holds this partition$"):
        p2.produce("x", 0, b"other")
    p2.close()
    p.close()
    assert wait_for(lambda: svc.stats()["grants"] == 0)  # released with the session
    assert svc.append("x", 0, build_batch([(None, b"gateway")])).base_offset == 1


@pytest.mark.parametrize("mode", ["exclusive", "shared"])
def test_flush_messages_1_fsyncs_before_the_acknowledgement(broker, mode, monkeypatch):
    """flush.messages=1: an RDMA write, and a gateway append ordered with a shared producer's
    writes, are acknowledged only once fsynced (the log's recovery point covers them), as Kafka
    produce responses are. The acknowledgement used to go out first, the fsync after it: a power
    cut in between lost an acknowledged record. (fsync is slowed down to widen that window.)"""
    st, svc = broker
    st.create_topic("fm", 1, {"flush.messages": "1"})
    plog = st.partition("fm", 0)
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        time.sleep(0.03)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    p = Producer(svc.control_address, mode=mode)
    for i in range(3):
        last = p.produce("fm", 0, b"v%d" % i)[1]
        assert plog.recovery_point > last
    if mode == "shared":  # the gateway's append through the reservation word
        res = svc.append("fm", 0, build_batch([(None, b"kafka")]))
        assert res.base_offset == 3 and plog.recovery_point > res.last_offset
    p.close()


def test_head_rolled_by_the_broker_under_a_producer(broker):
    """A roll the producer did not ask for (time roll, gateway append) revokes its grant; the
    next write fails one-sidedly or is answered REVOKED, and is resent to the new head."""
    st, svc = broker
    st.create_topic("g", 1)
    c = Consumer(svc.control_address)
    c.assign([("g", 0)])
    for mode in ("exclusive", "shared"):
        p = Producer(svc.control_address, mode=mode)
        p.produce("g", 0, b"%s-1" % mode.encode())
        st.partition("g", 0).roll()
        assert p.produce("g", 0, b"%s-2" % mode.encode())[0] > 0
        p.close()
    want = [b"exclusive-1", b"exclusive-2", b"shared-1", b"shared-2"]
    assert [r.value for r in store_records(st, "g")] == want
    assert [r.value for r in consume(c, 4)] == want
    c.close()


def test_close_releases_the_grant_at_once(broker):
    """close() says bye: the next producer (either mode) never finds the partition still held."""
    st, svc = broker
    st.create_topic("t", 1)
    for i in range(20):
        p = Producer(svc.control_address, mode="exclusive" if i % 2 else "shared")
        assert p.produce("t", 0, b"%d" % i) == (i, i)
        p.close()
    assert [r.value for r in store_records(st, "t")] == [b"%d" % i for i in range(20)]
    assert wait_for(lambda: svc.stats()["grants"] == 0 and svc.stats()["qps"] == 0)
