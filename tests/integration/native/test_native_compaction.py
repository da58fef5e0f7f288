"""Native consumers of a compacted topic whose segments the cleaner swaps under them."""

from __future__ import annotations

from rdmalog.rdma import Consumer, Producer
from tests.integration.native.helpers import wait_for


def test_a_consumer_reading_a_segment_swapped_for_its_cleaned_copy_reads_on_correctly(broker):
    """The consumer is inside the first segment when the cleaner swaps it: the registration of
    the old file is withdrawn, its next READ fails and it seeks again from its position into the
    cleaned file. What it returns stays the log's data at each offset, in order, with no offset
    twice; past what it had already READ it gets the compacted log (gaps included)."""
    st, svc = broker
    st.create_topic("cmp", 1, {"cleanup.policy": "compact", "segment.bytes": "4096"})
    p = Producer(svc.control_address)
    produced = {}
    for i in range(400):
        key, value = b"key-%d" % (i % 9), b"value-%04d-" % i + b"x" * 40
        produced[p.produce("cmp", 0, value, key=key)[0]] = (key, value)
    plog = st.partition("cmp", 0)
    plog.roll()
    c = Consumer(svc.control_address, fetch_size=256)  # many READs per file
    c.assign([("cmp", 0)], offset=0)
    got = []
    assert wait_for(lambda: (got.extend(c.poll(0.05, max_records=5 - len(got))), len(got) == 5)[1])
    assert [r.offset for r in got] == [0, 1, 2, 3, 4]
    first_file = svc.parts[("cmp", 0)].readers[0]

    assert st.cleaner.clean_once()

    assert first_file.mr.rkey == 0  # the old file's registration was withdrawn
    cleaned = {r.offset: (r.key, r.value) for seg in plog.segments for r in _records(seg)}
    assert len(cleaned) < 20
    assert wait_for(lambda: (got.extend(c.poll(0.05)), c.position("cmp", 0) == 400)[1], 20)
    offsets = [r.offset for r in got]
    assert offsets == sorted(set(offsets))  # in order, none twice
    assert all(produced[r.offset] == (r.key, r.value) for r in got)  # the log's data, each
    late = [r.offset for r in got[5:] if r.offset not in cleaned]
    assert len(late) < 10  # only what it had READ before the swap came from the old file
    assert set(cleaned) <= set(offsets)  # and every record the compacted log holds

    fresh = Consumer(svc.control_address)  # from the start after the clean: the compacted log
    fresh.assign([("cmp", 0)], offset=0)
    seen = []
    assert wait_for(lambda: (seen.extend(fresh.poll(0.05)), fresh.position("cmp", 0) == 400)[1])
    assert {r.offset: (r.key, r.value) for r in seen} == cleaned
    for client in (fresh, c, p):
        client.close()


def _records(seg):
    from rdmalog.store.records import decode_all

    with open(seg.path, "rb") as f:
        return [r for r in decode_all(f.read(seg.size))]
