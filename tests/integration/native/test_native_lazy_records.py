"""The records a shm poll returns are lazy (client/_lazy_records.c): they read as ConsumerRecords do,
and they stay what they were when the consumer reads into the same buffer again, or goes away."""

from __future__ import annotations

import copy
import gc
import pickle

import pytest

from rdmalog.rdma import Consumer, Producer
from rdmalog.rdma.client import consumer as consumer_module
from rdmalog.rdma.client.consumer import ConsumerRecord
from rdmalog.store.records import Record, build_batch
from tests.integration.native.helpers import consume

pytestmark = pytest.mark.skipif(
    consumer_module._c_read_take is None, reason="rdmalog.rdma.client._batch is not built"
)


@pytest.fixture
def kind():  # lazy records are shm's (read_take): tcp and verbs READ through their engines
    return "shm"


def _expected(r) -> ConsumerRecord:
    return ConsumerRecord(*(getattr(r, f) for f in ConsumerRecord._fields))


def test_lazy_records_read_as_consumer_records(broker):
    st, svc = broker
    st.create_topic("lz", 1)
    recs = [
        Record(b"k%d" % i, b"v%d" % i, [("h", b"%d" % i), ("n", None)], 1000 + i) for i in range(3)
    ]
    recs.append(Record(None, None, [], 2000))
    with Producer(svc.control_address) as p:
        p.send_batch("lz", 0, build_batch(recs))
        p.send("lz", 0, b"plain", key=b"pk")
        p.flush()
    with Consumer(svc.control_address, "shm", fetch_size=64) as c:
        c.assign([("lz", 0)], offset=0)
        consume(c, 1)  # a region's first READ takes the general path (tuples), then read_take
        c.seek("lz", 0, 0)
        got = consume(c, 5)
    assert [type(r).__name__ for r in got] == ["LazyRecord"] * 5
    r = got[1]
    want = ConsumerRecord("lz", 0, 1, 1001, b"k1", b"v1", (("h", b"1"), ("n", None)), 0)
    assert r == want and want == r and hash(r) == hash(want) and r != want[:7]
    assert tuple(r) == want and list(r) == list(want) and len(r) == 8
    topic, partition, offset, ts, key, value, headers, ts_type = r
    assert (topic, partition, offset, key, value, headers) == ("lz", 0, 1, b"k1", b"v1", want[6])
    assert r[5] == b"v1" and r[-1] == 0 and r[2:4] == (1, 1001)
    assert r._asdict() == want._asdict() and type(r)._fields == ConsumerRecord._fields
    assert repr(r) == repr(want)
    assert pickle.loads(pickle.dumps(r)) == want and type(copy.copy(r)) is ConsumerRecord
    assert r.value is r.value  # made once
    nulls = got[3]
    assert (nulls.key, nulls.value, nulls.headers, nulls.timestamp) == (None, None, (), 2000)
    assert _expected(got[4]) == ConsumerRecord("lz", 0, 4, got[4].timestamp, b"pk", b"plain", (), 0)
    with pytest.raises(IndexError):
        r[8]


def test_lazy_records_outlive_the_buffer_they_were_read_from(broker):
    """Records kept across polls (their bytes copied out before the buffer is read into again),
    records never looked at until the consumer is closed, and records dropped at once (nothing
    copied) all read what was written."""
    st, svc = broker
    st.create_topic("keep", 1)
    n = 200
    with Producer(svc.control_address) as p:
        for i in range(n):
            p.send("keep", 0, b"value-%d-" % i * 20, key=b"key-%d" % i)
        p.flush()
    c = Consumer(svc.control_address, "shm", fetch_size=1024)  # many READs into one buffer
    c.assign([("keep", 0)], offset=0)
    kept = []
    for _ in range(400):
        if len(kept) >= n:
            break
        got = c.poll(0.2, max_records=7)
        kept += got
        if got:
            assert got[0].key == b"key-%d" % got[0].offset  # looked at before the next READ
    c.close()
    gc.collect()
    assert [r.offset for r in kept] == list(range(n))
    assert [(r.key, r.value) for r in kept] == [
        (b"key-%d" % i, b"value-%d-" % i * 20) for i in range(n)
    ]
    assert sum(type(r).__name__ == "LazyRecord" for r in kept) > n // 2
