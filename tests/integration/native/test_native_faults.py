"""Bad bytes and bad accesses: corrupt batches on either side, one-sided accesses out of bounds, a
crash after refused bytes."""

from __future__ import annotations

import struct
import threading

import pytest

from rdmalog.errors import CorruptRecordError
from rdmalog.rdma import Consumer, Producer
from rdmalog.rdma.control import ControlError
from rdmalog.rdma.transport.interface import Status
from rdmalog.rdma.wire import (
    imm_encode,
)
from rdmalog.store.log_manager import Store
from rdmalog.store.records import build_batch
from tests.integration.native.helpers import consume, store_records
from tests.unit.store.helpers import crash


def test_check_crcs_stops_at_a_corrupt_batch_until_the_application_seeks_past(broker):
    """check_crcs=True (Kafka's check.crcs): the records before a batch whose bytes changed on
    the broker (its CRC-32C no longer matches) are returned, then CorruptRecordError, again on
    every poll, the position at the batch, until a seek past it. Without it the bytes come as
    they are (librdkafka's default)."""
    st, svc = broker
    st.create_topic("crc", 1)
    p = Producer(svc.control_address)
    for v in (b"first-value", b"second-value", b"third-value"):
        p.produce("crc", 0, v)
    mm = st.partition("crc", 0).active_segment.mmap
    at = mm.find(b"second-value")
    mm[at] = ord("S")  # a bit flip on disk, say
    c = Consumer(svc.control_address, check_crcs=True)
    c.assign([("crc", 0)], offset=0)
    assert [r.value for r in c.poll(1.0)] == [b"first-value"]
    for _ in range(2):
        with pytest.raises(CorruptRecordError, match="offsets 1-1 fails its CRC-32C"):
            c.poll(0.1)
        assert c.position("crc", 0) == 1
    with pytest.raises(CorruptRecordError):
        c.poll_batches(0.1)
    c.seek("crc", 0, 2)
    assert [r.value for r in consume(c, 1)] == [b"third-value"]
    c.close()
    unchecked = Consumer(svc.control_address)
    unchecked.assign([("crc", 0)], offset=0)
    got = [r.value for r in consume(unchecked, 3)]
    assert got == [b"first-value", b"Second-value", b"third-value"]
    unchecked.close()
    p.close()


def test_a_corrupt_batch_length_is_reported_instead_of_skipped_or_spun_on(broker):
    """A batch length changed on the broker (the CRC does not cover it) is CorruptRecordError
    after the batches before it, as a CRC mismatch is. One running past the end of its sealed
    file used to make the consumer swap to the next file, silently skipping the rest of this
    one (check_crcs too); one too small for a batch made poll_batches() spin forever."""
    st, svc = broker
    st.create_topic("len", 1, {"segment.bytes": "400"})
    p = Producer(svc.control_address)
    for i in range(6):
        p.produce("len", 0, b"value-%02d" % i + b"." * 30)
    seg = st.partition("len", 0).segments[0]
    assert (seg.base_offset, seg.next_offset) == (0, 3)  # sealed: three batches of one size
    size = struct.unpack_from(">i", seg.mmap, 8)[0] + 12
    struct.pack_into(">i", seg.mmap, 2 * size + 8, size + 40)  # the last runs past the end
    c = Consumer(svc.control_address, check_crcs=True)
    c.assign([("len", 0)], offset=0)
    assert [r.offset for r in c.poll(1.0)] == [0, 1]
    for _ in range(2):
        with pytest.raises(CorruptRecordError, match="offsets 2-2 runs past the end of its"):
            c.poll(0.1)
        assert c.position("len", 0) == 2
    c.seek("len", 0, 3)
    assert [r.offset for r in consume(c, 3)] == [3, 4, 5]
    struct.pack_into(">i", seg.mmap, size + 8, -12)  # the second: 0 bytes, with its header
    raw = Consumer(svc.control_address)
    raw.assign([("len", 0)], offset=0)
    got: list = []
    t = threading.Thread(target=lambda: got.append(raw.poll_batches(1.0)), daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive() and [b.base_offset for b in got[0]] == [0]
    with pytest.raises(CorruptRecordError, match="offsets 1-1 has an impossible length -12"):
        raw.poll_batches(0.1)
    for client in (c, raw, p):
        client.close()


@pytest.mark.parametrize("decoder", ["c", "python"])
def test_a_batch_that_cannot_be_decoded_comes_after_the_records_before_it(
    broker, monkeypatch, decoder
):
    """Without check_crcs, a batch whose records are malformed (bytes changed on the broker) is
    reported as check_crcs reports a CRC mismatch: CorruptRecordError once the records before it
    are returned, again on every poll, the position at it, until a seek past it. The decoder's
    error used to escape poll(), taking with it the records decoded before it (the position
    already past them), and later polls returned nothing, silently."""
    from rdmalog.rdma.client import consumer as consumer_module

    if decoder == "python":
        monkeypatch.setattr(consumer_module, "_c_decode_plain", None)
    st, svc = broker
    st.create_topic("bad", 1)
    p = Producer(svc.control_address)
    for v in (b"first-value", b"second-value", b"third-value", b"fourth-value"):
        p.produce("bad", 0, v)
    mm = st.partition("bad", 0).active_segment.mmap
    mm[mm.find(b"third-value") - 1] = 0x7E  # its length varint now runs past the record
    c = Consumer(svc.control_address)
    c.assign([("bad", 0)], offset=0)
    assert [r.value for r in c.poll(1.0)] == [b"first-value", b"second-value"]
    for _ in range(2):
        with pytest.raises(CorruptRecordError, match="offsets 2-2 cannot be decoded"):
            c.poll(0.1)
        assert c.position("bad", 0) == 2
    c.seek("bad", 0, 3)
    assert [r.value for r in consume(c, 1)] == [b"fourth-value"]
    c.close()
    p.close()


@pytest.mark.parametrize("mode", ["exclusive", "shared"])
def test_corrupt_batch_is_refused(broker, mode):
    st, svc = broker
    st.create_topic("c", 1)
    p = Producer(svc.control_address, mode=mode)
    p.produce("c", 0, b"good0")
    bad = build_batch([(None, b"evil")])
    bad[-1] ^= 0xFF  # breaks the CRC
    d = p.send_batch("c", 0, bad)
    with pytest.raises(CorruptRecordError):
        d.wait(5)
    assert p.produce("c", 0, b"good1") == (1, 1)  # a new grant continues at the committed end
    assert [r.value for r in store_records(st, "c")] == [b"good0", b"good1"]
    p.close()


def test_refused_bytes_in_a_rolled_file_do_not_cost_later_segments_after_a_crash(broker):
    """A refused write leaves its bytes past the head's committed end; the head rolls while a
    consumer's read registration keeps its trim waiting. A crash then (flushed, checkpointed)
    must lose nothing: recovery cuts those bytes, and the file still ends where the next one
    begins. It used to take the cut as a torn log and delete every later segment."""
    st, svc = broker
    st.create_topic("k", 1)
    p = Producer(svc.control_address)
    p.produce("k", 0, b"a")
    c = Consumer(svc.control_address)  # reads the head: its registration holds the mapping
    c.assign([("k", 0)])
    assert [r.value for r in consume(c, 1)] == [b"a"]
    bad = build_batch([(None, b"x" * 500)])
    bad[-1] ^= 0xFF  # breaks the CRC: refused, its bytes stay where they were written
    with pytest.raises(CorruptRecordError):
        p.send_batch("k", 0, bad).wait(5)
    plog = st.partition("k", 0)
    plog.roll()  # segment.ms, say
    assert plog.segments[0].trim_pending
    assert p.produce("k", 0, b"b") == (1, 1) and p.produce("k", 0, b"c") == (2, 2)
    plog.flush()
    st.checkpoint()
    crash(plog)  # kill -9: no trim, no close
    st.opened = False
    st._unlock_dir()
    st2 = Store(st.dir, st.config).open(start_maintenance=False)
    try:
        assert [r.value for r in store_records(st2, "k")] == [b"a", b"b", b"c"]
        assert st2.partition("k", 0).append(build_batch([(None, b"d")])).base_offset == 3
    finally:
        st2.close()
        c.close()
        p.close()


def test_out_of_bounds_refused(broker):
    st, svc = broker
    st.create_topic("o", 1)
    p = Producer(svc.control_address)
    p.produce("o", 0, b"x")
    with pytest.raises(ControlError, match="offset_out_of_range"):
        p.ctl.request("read_access", topic="o", partition=0, offset=5)
    with pytest.raises(ControlError):
        p.ctl.request("produce_access", topic="nope", partition=0, mode="exclusive")
    g = p.grants[("o", 0)]
    p.stage.buf[:8] = b"garbage!"
    p.qp.post_write(
        99, p.stage, 0, 8, g.region.addr + g.length - 4, g.region.rkey, imm=imm_encode(g.file_id, 9)
    )
    wcs = p.cq.wait(5)
    assert wcs and wcs[0].status != Status.SUCCESS  # past the end of the file: refused
    c = Consumer(svc.control_address)
    c.assign([("o", 0)])
    a = c.parts[("o", 0)]
    assert (
        c.qp.read_now(a.mr, 0, 64, a.region.addr + a.region.length, a.region.rkey) != Status.SUCCESS
    )
    c.close()  # outside its window: its queue pair went to error and its session with it
    c = Consumer(svc.control_address)
    c.assign([("o", 0)])
    assert [r.value for r in consume(c, 1)] == [b"x"]
    c.close()
    p.close()
    assert st.partition("o", 0).log_end_offset == 1
