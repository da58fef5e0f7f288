"""Where a native producer's batches come from: the staging ring and application buffers it
registered."""

from __future__ import annotations

import pytest

from rdmalog.rdma import Producer
from rdmalog.rdma.client.producer import RegisteredSlice
from rdmalog.store.records import build_batch
from tests.integration.native.helpers import store_records


def test_staging_area_is_reused_as_a_ring_without_draining(broker, monkeypatch):
    """Batches of uneven sizes streamed through a staging area 30x smaller than the data: the
    area is reused as acknowledgements free its oldest bytes (never a flush), and every batch is
    committed intact and in order."""
    st, svc = broker
    st.create_topic("s", 1)
    p = Producer(svc.control_address, staging_bytes=40_000)
    monkeypatch.setattr(p, "flush", lambda *a: pytest.fail("the staging area was drained"))
    values = [bytes([65 + i % 26]) * (2000 + 997 * (i % 9)) for i in range(200)]
    ds = [p.send("s", 0, v) for v in values]
    for d in ds:
        d.wait(10)
    assert [d.result for d in ds] == [(i, i) for i in range(200)]
    assert [r.value for r in store_records(st, "s")] == values
    monkeypatch.undo()
    p.close()


def test_batches_built_in_a_registered_buffer_are_sent_without_staging(broker):
    """send_batch of a registered buffer's slice: the WRITE reads the batch where the application
    built it (the staging area stays untouched), in both modes, across a roll the producer did
    not ask for (the revoked write is resent from the same bytes); a Kafka-path read returns them."""
    st, svc = broker
    st.create_topic("z", 1)
    for mode in ("exclusive", "shared"):
        p = Producer(svc.control_address, mode=mode)
        buf = p.register(bytearray(1 << 16))
        spans, pos = [], 0
        for i in range(3):
            b = bytes(build_batch([(b"k", b"%s-%d" % (mode.encode(), i))]))
            buf.view[pos : pos + len(b)] = b
            spans.append((pos, pos + len(b)))
            pos += len(b)
        p.stage.buf[:pos] = b"\xee" * pos  # a WRITE from staging would now commit garbage
        ds = [p.send_batch("z", 0, buf[a:b]) for a, b in spans[:2]]
        p.flush()
        st.partition("z", 0).roll()  # revokes the grant under the producer
        ds.append(p.send_batch("z", 0, buf[slice(*spans[2])]))
        p.flush()
        assert all(d.error is None for d in ds)
        p.close()
    values = [r.value for r in store_records(st, "z")]
    assert values == [b"%s-%d" % (m, i) for m in (b"exclusive", b"shared") for i in range(3)]
    p = Producer(svc.control_address)
    with pytest.raises(ValueError):
        p.register(b"read-only bytes")
    other = Producer(svc.control_address)
    theirs = other.register(bytearray(64))
    with pytest.raises(ValueError):
        p.send_batch("z", 0, theirs[0:64])
    other.close()
    p.close()


def test_a_registered_buffer_is_unregistered_once_its_batches_are_answered(broker):
    """close() on a registered buffer waits for its batches in flight (a resend would read them
    again), then deregisters it: its slices are refused, the producer goes on with others."""
    st, svc = broker
    st.create_topic("u", 1)
    p = Producer(svc.control_address)
    batch = bytes(build_batch([(None, b"x" * 100)]))
    with p.register(bytearray(len(batch) * 8)) as buf:
        for i in range(8):
            buf.view[i * len(batch) : (i + 1) * len(batch)] = batch
        ds = [p.send_batch("u", 0, buf[i * len(batch) : (i + 1) * len(batch)]) for i in range(8)]
        rkey = buf.mr.rkey
    assert all(d.done and d.error is None for d in ds)  # answered before the deregistration
    assert buf.closed and buf not in p._buffers and rkey not in p.device._mrs
    with pytest.raises(ValueError, match="unregistered"):
        buf[0 : len(batch)]
    with pytest.raises(ValueError, match="unregistered"):
        p.send_batch("u", 0, RegisteredSlice(buf, 0, len(batch)))
    buf.close()  # idempotent
    assert p.produce("u", 0, b"after") == (8, 8)
    p.close()
    assert len(store_records(st, "u")) == 9


def test_a_registered_buffer_closed_after_its_producer_does_nothing_more(broker):
    """A registered buffer closed after its producer (clean-up in any order, `with` blocks): on
    shm it raised TypeError from the device the producer's close() had freed. The producer's
    close() gives its buffers' registrations back with its device; their close() does nothing."""
    st, svc = broker
    st.create_topic("rc", 1)
    with Producer(svc.control_address) as p:
        buf = p.register(bytearray(4096))
        batch = bytes(build_batch([(None, b"x")]))
        buf.view[: len(batch)] = batch
        p.send_batch("rc", 0, buf[0 : len(batch)]).wait(5)
    buf.close()
    assert buf.closed
    with pytest.raises(ValueError, match="unregistered"):
        buf[0 : len(batch)]
    assert [r.value for r in store_records(st, "rc")] == [b"x"]
