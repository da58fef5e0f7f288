"""Topics and records deleted (DeleteRecords, retention, topic deletion) under native consumers."""

from __future__ import annotations

import pytest

from rdmalog.rdma import Consumer, Producer
from rdmalog.rdma.control import ControlError
from tests.integration.native.helpers import consume, writer_and_reader


def test_a_deleted_topic_is_reported_and_a_new_one_of_its_name_read_on(broker):
    """A consumer of a deleted topic is told (UnknownTopicOrPartition from poll, as long as it
    stays so) instead of polling its old file forever; once a topic of that name exists again it
    keeps its position there, as a Kafka consumer does, and the old log's registrations and
    slots are given back (they used to stay until the session ended)."""
    st, svc = broker
    p, c = writer_and_reader(st, svc, "del", b"x")
    grant = svc.parts[("del", 0)].produce
    st.delete_topic("del")
    assert grant.revoked and not grant.mr.rkey  # the deleted head file is no longer registered
    for _ in range(2):
        with pytest.raises(ControlError, match="UnknownTopicOrPartition"):
            c.poll(0.5)
    st.create_topic("del", 1)
    assert p.produce("del", 0, b"y") == (0, 0)
    assert c.poll(0.2) == [] and c.position("del", 0) == 1
    assert p.produce("del", 0, b"z") == (1, 1)
    assert [(r.offset, r.value) for r in consume(c, 1)] == [(1, b"z")]
    assert svc.stats()["readers"] == 1 and svc.stats()["slots"] == 1
    c.close()
    p.close()


def test_records_deleted_under_a_consumer_are_not_served(broker):
    """DeleteRecords (or retention) deletes whole segments a consumer is reading: their read
    registrations are withdrawn before it returns (they were, up to ~20 ms later), its next READ
    fails, and it resets as a Kafka consumer does on OFFSET_OUT_OF_RANGE - it used to read the
    deleted file's records to its end. Only records it had already READ into its own buffer
    before the deletion still come."""
    st, svc = broker
    st.create_topic("dr", 1, {"segment.bytes": "4096"})
    p = Producer(svc.control_address)
    for i in range(100):
        p.send("dr", 0, b"v%03d" % i + b"x" * 100)
    p.flush()
    c = Consumer(svc.control_address)  # 2 KiB READs: about 11 of these batches each
    c.assign([("dr", 0)], offset=0)
    assert [r.offset for r in c.poll(1.0, max_records=3)] == [0, 1, 2]
    plog = st.partition("dr", 0)
    (cut,) = [g for g in plog.segments if g.base_offset < 60 < g.next_offset - 3]
    inside = Consumer(svc.control_address)  # in the segment the deletion cuts into, below 60
    inside.assign([("dr", 0)], offset=cut.base_offset)
    assert [r.offset for r in inside.poll(1.0, max_records=1)] == [cut.base_offset]
    ahead = Consumer(svc.control_address)  # in the same segment, past the new log start
    ahead.assign([("dr", 0)], offset=61)
    assert [r.offset for r in ahead.poll(1.0, max_records=1)] == [61]
    gone = {g.base_offset for g in plog.segments if g.base_offset < 60}
    assert gone & set(svc.parts[("dr", 0)].readers) == {0, cut.base_offset}
    assert plog.delete_records(60) == 60
    assert not gone & set(svc.parts[("dr", 0)].readers)  # withdrawn before DeleteRecords returns
    for consumer, first in ((c, 3), (inside, cut.base_offset + 1), (ahead, 62)):
        got = []
        for _ in range(200):
            got += [r.offset for r in consumer.poll(0.02)]
            if got and got[-1] == 99:
                break
        # only what its one 2 KiB READ before the deletion held (11 batches at most) may come
        # from below the log start; then 60 on, as a Kafka consumer resets
        below = [o for o in got if o < 60]
        assert below == list(range(first, first + len(below))) and len(below) <= 11, got
        assert [o for o in got if o >= 60] == list(range(max(60, first), 100)), got
        consumer.close()
    p.close()


def test_segments_deleted_by_retention_are_withdrawn_before_it_returns(broker):
    """Retention deletes the segments a consumer reads: their read registrations are withdrawn
    by the time the maintenance pass returns, and the consumer resets to the new log start."""
    st, svc = broker
    st.create_topic("rt", 1, {"segment.bytes": "4096", "retention.ms": "60000"})
    p = Producer(svc.control_address)
    for i in range(100):
        p.send("rt", 0, b"v%03d" % i + b"x" * 100)
    p.flush()
    c = Consumer(svc.control_address)
    c.assign([("rt", 0)], offset=0)
    assert [r.offset for r in c.poll(1.0, max_records=3)] == [0, 1, 2]
    assert 0 in svc.parts[("rt", 0)].readers
    plog = st.partition("rt", 0)
    assert plog.apply_retention(plog.clock() + 120_000) > 0  # every segment is past retention
    start = plog.log_start_offset
    assert start == 100 and not svc.parts[("rt", 0)].readers  # the head rolled and went too
    for i in range(100, 105):
        p.send("rt", 0, b"v%03d" % i)
    p.flush()
    got = []
    for _ in range(200):
        got += [r.offset for r in c.poll(0.02)]
        if got and got[-1] == 104:
            break
    below = [o for o in got if o < start]  # what its one READ before the deletion held
    assert below == list(range(3, 3 + len(below))) and len(below) <= 11
    assert [o for o in got if o >= start] == list(range(start, 105))
    c.close()
    p.close()


def test_a_caught_up_consumer_reads_on_after_its_head_file_is_withdrawn(broker):
    """A consumer that has read everything waits on its head file's metadata slot. DeleteRecords
    up to the high watermark, and time retention (which rolls the head and deletes it), withdraw
    that registration: the slot now says the file is sealed and gone, the consumer seeks again
    and reads what comes next. The slot used to be cleared, which the consumer took for
    'nothing new': it waited forever while records arrived."""
    st, svc = broker
    st.create_topic("cw", 2, {"retention.ms": "60000"})
    p = Producer(svc.control_address)
    c = Consumer(svc.control_address)
    c.assign([("cw", 0), ("cw", 1)], offset=0)
    for part in (0, 1):  # the other partition takes the freed slot first, its base is 0 too
        p.produce("cw", part, b"first")
    assert len(consume(c, 2)) == 2 and c.poll(0.05) == []
    plog = st.partition("cw", 0)
    assert plog.delete_records(-1) == 1  # cuts into the head: its registration is withdrawn
    p.produce("cw", 0, b"after-delete")
    assert [(r.offset, r.value) for r in consume(c, 1)] == [(1, b"after-delete")]
    assert c.poll(0.05) == []
    assert plog.apply_retention(plog.clock() + 120_000) == 1  # the head rolled and went
    p.produce("cw", 0, b"after-retention")
    assert [(r.offset, r.value) for r in consume(c, 1)] == [(2, b"after-retention")]
    p.produce("cw", 1, b"other")
    assert [(r.partition, r.value) for r in consume(c, 1)] == [(1, b"other")]
    assert svc.stats()["slots"] == 2
    c.close()
    p.close()
