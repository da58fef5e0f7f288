"""Native consumers: seeks and resets, pause, poll limits, metadata slots, what is served and how it
is decoded."""

from __future__ import annotations

import pytest

from rdmalog.rdma import Consumer, Producer
from rdmalog.rdma.control import ControlError
from rdmalog.rdma.transport.interface import Status
from rdmalog.store.records import build_batch
from tests.integration.native.helpers import consume, store_records, writer_and_reader


def test_seek_outside_the_log_resets_as_kafka_consumers_do(broker):
    """An offset the log does not hold is reset by auto_offset_reset (Kafka's OFFSET_OUT_OF_RANGE
    handling); a negative offset or a partition not assigned is refused at once and changes
    nothing - a refused seek used to leave the partition unread, silently, from then on."""
    st, svc = broker
    st.create_topic("sk", 1)
    p = Producer(svc.control_address)
    for v in (b"a", b"b", b"c"):
        p.send("sk", 0, v)
    p.flush()
    with pytest.raises(ValueError, match="cannot hold a record batch"):
        p.send_batch("sk", 0, b"")
    early = Consumer(svc.control_address)
    early.assign([("sk", 0)], offset=1)
    early.seek("sk", 0, 100)
    assert early.position("sk", 0) == 0
    assert [r.value for r in consume(early, 3)] == [b"a", b"b", b"c"]
    late = Consumer(svc.control_address, auto_offset_reset="latest")
    late.assign([("sk", 0)], offset=0)
    late.seek("sk", 0, 100)
    assert late.position("sk", 0) == 3 and late.poll(0.05) == []
    with pytest.raises(ValueError, match="offsets are >= 0"):
        late.seek("sk", 0, -7)
    with pytest.raises(ValueError, match="not assigned"):
        late.seek("sk", 9, 0)
    assert late.position("sk", 0) == 3
    p.produce("sk", 0, b"d")
    assert [r.value for r in consume(late, 1)] == [b"d"]
    strict = Consumer(svc.control_address, auto_offset_reset="none")  # Kafka's "none"
    strict.assign([("sk", 0)], offset=2)
    with pytest.raises(ControlError, match="offset_out_of_range"):
        strict.seek("sk", 0, 100)
    with pytest.raises(ValueError, match="no reset policy"):
        strict.assign([("sk", 0), ("sk2", 0)])
    for c in (early, late, strict):
        c.close()
    p.close()


def test_paused_partitions_return_nothing_until_resumed(broker):
    """pause/resume as in Kafka clients: a paused partition's records stay where they are (its
    position too) while the others are read; producer and consumer close as context managers."""
    st, svc = broker
    st.create_topic("pz", 2)
    with Producer(svc.control_address) as p:
        for i in range(4):
            p.send("pz", i % 2, b"r%d" % i)
    with Consumer(svc.control_address) as c:
        c.assign([("pz", 0), ("pz", 1)])
        c.pause([("pz", 0)])
        assert c.paused() == [("pz", 0)] and c.assignment() == [("pz", 0), ("pz", 1)]
        got = consume(c, 2)
        assert [(r.partition, r.value) for r in got] == [(1, b"r1"), (1, b"r3")]
        assert c.poll(0.1) == [] and c.position("pz", 0) == 0
        c.resume([("pz", 0)])
        assert [(r.partition, r.value) for r in consume(c, 2)] == [(0, b"r0"), (0, b"r2")]
        with pytest.raises(ValueError, match="not assigned"):
            c.pause([("pz", 7)])
    assert not c.ctl.alive() and not p.ctl.alive()


def test_a_partition_whose_seek_was_refused_is_sought_again_by_poll(broker):
    """assign() of a topic that does not exist yet raises and the partition stays assigned: poll
    raises the same while it lasts, then reads once the topic exists; likewise after a refused
    seek. Such a partition used to stay without a file - never read again, silently, position
    -2 - and assigning it again skipped it. One refused for having no reset policy is not left
    assigned (poll would read it from 0)."""
    st, svc = broker
    c = Consumer(svc.control_address)
    with pytest.raises(ControlError, match="UnknownTopicOrPartition"):
        c.assign([("later", 0)])
    assert c.assignment() == [("later", 0)]
    with pytest.raises(ControlError, match="UnknownTopicOrPartition"):
        c.poll(0.05)
    st.create_topic("later", 1)
    p = Producer(svc.control_address)
    p.produce("later", 0, b"x")
    c.assign([("later", 0)])
    assert [(r.offset, r.value) for r in consume(c, 1)] == [(0, b"x")]
    assert c.position("later", 0) == 1
    st.delete_topic("later")
    with pytest.raises(ControlError, match="UnknownTopicOrPartition"):
        c.seek("later", 0, 0)
    st.create_topic("later", 1)
    p.produce("later", 0, b"y")
    assert [(r.offset, r.value) for r in consume(c, 1)] == [(0, b"y")]
    strict = Consumer(svc.control_address, auto_offset_reset="none")
    with pytest.raises(ValueError, match="no reset policy"):
        strict.assign([("later", 0)])
    assert strict.assignment() == [] and strict.poll(0.05) == []
    for client in (c, strict, p):
        client.close()


def test_records_polled_before_a_refused_seek_are_returned_first(broker):
    """A poll that has taken other partitions' records (their positions moved) when a refused
    seek raises returns those records, and the error with the next poll: raising at once lost
    them. Committing by default skips the partition that has no position yet."""
    st, svc = broker
    st.create_topic("ok", 1)
    p = Producer(svc.control_address)
    for v in (b"a", b"b", b"c"):
        p.produce("ok", 0, v)
    c = Consumer(svc.control_address)
    with pytest.raises(ControlError, match="UnknownTopicOrPartition"):
        c.assign([("ok", 0), ("later", 0)])
    assert [r.value for r in c.poll(1.0)] == [b"a", b"b", b"c"]
    assert c.position("ok", 0) == 3
    with pytest.raises(ControlError, match="UnknownTopicOrPartition"):
        c.poll(0.05)
    assert c._to_commit(None) == {("ok", 0): 3}  # "later" holds -2 (earliest), not a position
    with pytest.raises(ValueError, match="negative"):
        c._to_commit({("ok", 0): -1})
    with pytest.raises(ValueError, match="fetch_size"):
        Consumer(svc.control_address, fetch_size=0)
    c.close()
    p.close()


@pytest.mark.parametrize("codec", [None, "lz4"])
def test_poll_returns_at_most_max_records_and_keeps_the_rest(broker, codec):
    """poll(max_records=k) returns at most k records - a 256 KiB fetch used to return all it
    decoded - and the rest in order on later polls, the position always the next offset it
    returns (what commit() commits); a batch larger than k is returned across polls.
    poll_batches(max_batches=k) likewise. Compressed batches take the Python decoder."""
    from rdmalog.store.compression import Codec

    st, svc = broker
    st.create_topic("mx", 1)
    p = Producer(svc.control_address)
    kw = {"compression": Codec.LZ4} if codec else {}
    for i in range(0, 50, 10):  # five batches of ten records
        p.send_batch("mx", 0, build_batch([(None, b"v%d" % j) for j in range(i, i + 10)], **kw))
    p.flush()
    c = Consumer(svc.control_address, fetch_size=1 << 18)
    c.assign([("mx", 0)])
    got, sizes = [], []
    for _ in range(100):
        if len(got) == 50:
            break
        recs = c.poll(0.05, max_records=3)
        sizes.append(len(recs))
        got += recs
        assert c.position("mx", 0) == (recs[-1].offset + 1 if recs else len(got))
    assert [r.offset for r in got] == list(range(50)) and max(sizes) == 3
    c.seek("mx", 0, 0)
    batches = c.poll_batches(0.5, max_batches=2)
    assert [b.base_offset for b in batches] == [0, 10] and c.position("mx", 0) == 20
    assert [b.base_offset for b in c.poll_batches(0.5, max_batches=10)] == [20, 30, 40]
    c.close()
    p.close()


def test_a_consumer_reads_hundreds_of_partitions_at_their_heads(broker):
    """Every head file a consumer reads takes a metadata slot of its session: a session had 64,
    so a consumer of more partitions was refused (no_slot) - rdma.consumer.slots, 1024 now."""
    st, svc = broker
    st.create_topic("wide", 300)
    c = Consumer(svc.control_address)
    c.assign([("wide", i) for i in range(300)])
    assert svc.stats()["slots"] == 300
    p = Producer(svc.control_address)
    p.produce("wide", 299, b"last")
    assert [(r.partition, r.value) for r in consume(c, 1)] == [(299, b"last")]
    c.close()
    p.close()


def test_only_committed_data_is_served(broker):
    st, svc = broker
    p, c = writer_and_reader(st, svc, "u", b"one")
    g = p.grants[("u", 0)]
    batch = build_batch([(None, b"uncommitted")])
    p.stage.buf[: len(batch)] = batch
    p.qp.post_write(7, p.stage, 0, len(batch), g.region.addr + g.position, g.region.rkey)  # no imm
    assert p.cq.wait(5)[0].status == Status.SUCCESS
    assert c.poll(0.1) == []  # written but never committed: invisible
    assert store_records(st, "u")[-1].value == b"one"
    c.close()
    p.close()


def test_poll_batches_returns_the_stored_bytes(broker):
    st, svc = broker
    st.create_topic("t", 1)
    p = Producer(svc.control_address)
    for i in range(5):
        p.send_records("t", 0, [(None, b"%d-%d" % (i, j)) for j in range(3)])
    p.flush()
    p.close()
    c = Consumer(svc.control_address, fetch_size=100)  # batches span reads: kept and completed
    c.assign([("t", 0)])
    got = []
    for _ in range(200):
        got += c.poll_batches(0.02)
        if len(got) >= 5:
            break
    assert [(b.base_offset, b.last_offset) for b in got] == [(3 * i, 3 * i + 2) for i in range(5)]
    assert b"".join(b.data for b in got) == st.partition("t", 0).read(0, 1 << 20).read()
    assert c.position("t", 0) == 15
    c.close()


def test_consumer_without_the_c_decoder_reads_the_same(broker, kind, monkeypatch):
    """Where the C helper is not built, the consumer decodes with the store's own decoder."""
    from rdmalog.rdma.client import consumer as consumer_module

    st, svc = broker
    st.create_topic("no-c", 1, {})
    producer = Producer(svc.control_address, kind)
    for i in range(5):
        producer.send("no-c", 0, b"v%d" % i, key=b"k", headers=[("h", b"x")])
    producer.flush()
    producer.close()
    monkeypatch.setattr(consumer_module, "_c_decode_plain", None)
    c = Consumer(svc.control_address, kind)
    c.assign([("no-c", 0)])
    got = consume(c, 5)
    c.close()
    assert [(r.offset, r.key, r.value, r.headers) for r in got] == [
        (i, b"k", b"v%d" % i, (("h", b"x"),)) for i in range(5)
    ]


def test_commit_slots_need_a_group_coordinator(broker):
    """A service started without a coordinator to fold into (the store alone) refuses commit
    slots with a reason instead of taking commits it could never make durable."""
    st, svc = broker
    st.create_topic("cs", 1)
    c = Consumer(svc.control_address)
    with pytest.raises(ControlError, match="coordinator"):
        c.control("commit_slot", group="g", topic="cs", partition=0)
    c.close()
