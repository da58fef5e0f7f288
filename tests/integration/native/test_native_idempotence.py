"""Idempotent native producers: producer ids and sequences, duplicates answered, refusals gone
past."""

from __future__ import annotations

import pytest

from rdmalog.errors import KafkaError
from rdmalog.rdma import Producer
from rdmalog.store.records import build_batch
from tests.integration.native.helpers import store_records


@pytest.mark.parametrize("mode", ["exclusive", "shared"])
def test_a_duplicate_idempotent_batch_is_answered_and_what_follows_still_commits(broker, mode):
    """A batch of an idempotent producer that was already committed (a resend) is answered with
    the original's offsets and not committed again; the write after it, which sits behind its
    uncommitted bytes, is resent under a new grant and committed - not answered as the duplicate
    (it was, with the duplicate's offsets, and lost, when both had the same length)."""
    st, svc = broker
    st.create_topic("dup", 1)
    p = Producer(svc.control_address, mode=mode)
    idem = bytes(build_batch([(b"k", b"A" * 50)], producer_id=7, producer_epoch=0, base_sequence=0))
    plain = bytes(build_batch([(b"k", b"B" * 50)]))  # same length
    assert len(idem) == len(plain)
    assert p.send_batch("dup", 0, idem).wait(10) == (0, 0)
    again = p.send_batch("dup", 0, idem)
    after = p.send_batch("dup", 0, plain)
    p.flush()
    assert again.result == (0, 0) and again.error is None
    assert after.result == (1, 1) and after.error is None
    assert p.produce("dup", 0, b"C" * 50) == (2, 2)
    # A refusal names its reason with the Kafka error code: here a gap in the sequence.
    gap = build_batch([(b"k", b"D")], producer_id=7, producer_epoch=0, base_sequence=5)
    refused = p.send_batch("dup", 0, gap)
    with pytest.raises(KafkaError) as e:
        refused.wait(10)
    assert e.value.error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER, not "corrupt"
    assert p.produce("dup", 0, b"E") == (3, 3)
    p.close()
    assert [r.value[:1] for r in store_records(st, "dup")] == [b"A", b"B", b"C", b"E"]


def test_a_resend_after_delete_records_is_still_answered_as_a_duplicate(broker):
    """DeleteRecords (or retention) removing the segments that held an idempotent producer's last
    batches made the log forget the producer, so the resend of a batch whose acknowledgement was
    lost was committed a second time. Kafka keeps producer state when the log start offset moves
    (producer.id.expiration.ms bounds it): the resend is answered with the original's offsets."""
    st, svc = broker
    st.create_topic("dr", 1)
    p = Producer(svc.control_address)
    first = bytes(build_batch([(b"k", b"A")], producer_id=11, producer_epoch=0, base_sequence=0))
    assert p.send_batch("dr", 0, first).wait(10) == (0, 0)
    assert st.partition("dr", 0).delete_records(-1) == 1
    assert p.send_batch("dr", 0, first).wait(10) == (0, 0)  # the resend: not stored again
    gap = build_batch([(b"k", b"B")], producer_id=11, producer_epoch=0, base_sequence=5)
    with pytest.raises(KafkaError) as e:
        p.send_batch("dr", 0, gap).wait(10)
    assert e.value.error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER: the sequence is still known
    nxt = build_batch([(b"k", b"C")], producer_id=11, producer_epoch=0, base_sequence=1)
    assert p.send_batch("dr", 0, nxt).wait(10) == (1, 1)
    p.close()
    assert [r.value for r in store_records(st, "dr")] == [b"C"]


def test_idempotent_producer_stamps_every_batch_with_its_id_and_sequences(broker):
    """idempotent=True: the broker hands out a producer id; every batch - built by send(), given
    as bytes (two batches in one write) or built in registered memory - carries it and its
    partition's next sequence numbers, as a Kafka idempotent producer's batches do."""
    from rdmalog.store.records import validate_batches

    st, svc = broker
    st.create_topic("ip", 2)
    p = Producer(svc.control_address, idempotent=True)
    other = Producer(svc.control_address, idempotent=True)
    assert p.producer_id >= 0 and other.producer_id not in (-1, p.producer_id)
    other.close()
    p.send("ip", 0, b"a")
    p.send_records("ip", 0, [(None, b"b"), (None, b"c")])
    p.send_batch("ip", 0, build_batch([(None, b"d")]) + build_batch([(None, b"e")]))
    b = build_batch([(None, b"f")])
    buf = p.register(bytearray(len(b)))
    buf.view[:] = b
    p.send_batch("ip", 0, buf[0 : len(b)])
    p.send_batch("ip", 0, buf[0 : len(b)])  # sent again: waits for the first, then restamps
    p.send("ip", 1, b"x")
    garbage = p.send_batch("ip", 1, b"\xff" * 100)  # not a batch: left alone, refused
    p.flush()
    assert isinstance(garbage.error, KafkaError)
    assert p.produce("ip", 1, b"y") == (1, 1)
    p.close()
    for partition, seqs in ((0, [0, 1, 3, 4, 5, 6]), (1, [0, 1])):
        seg = st.partition("ip", partition).active_segment
        infos = validate_batches(memoryview(bytes(seg.mmap[: seg.size])), 1 << 20)
        assert [(i.producer_id, i.producer_epoch) for i in infos] == [(p.producer_id, 0)] * len(
            seqs
        )
        assert [i.base_sequence for i in infos] == seqs
    assert [r.value for r in store_records(st, "ip")] == [b"a", b"b", b"c", b"d", b"e", b"f", b"f"]


def test_an_idempotent_producer_goes_on_after_a_refused_batch(broker):
    """A batch the broker refuses (here larger than max.message.bytes) took sequence numbers that
    were never appended: later batches of its partition followed a gap and were all refused with
    OUT_OF_ORDER_SEQUENCE_NUMBER, for good. The producer starts a new epoch instead, as Kafka's
    does, so what it sends next is stored - also behind a refusal in the middle of a pipeline."""
    st, svc = broker
    st.create_topic("gap", 2, {"max.message.bytes": "2000"})
    p = Producer(svc.control_address, idempotent=True)
    assert p.produce("gap", 0, b"a") == (0, 0)
    assert p.produce("gap", 1, b"q") == (0, 0)
    with pytest.raises(KafkaError):
        p.send("gap", 0, b"x" * 5000).wait(10)
    assert p.produce("gap", 0, b"b") == (1, 1)
    assert p.produce("gap", 1, b"r") == (1, 1)  # the new epoch starts every partition over
    pipelined = [p.send("gap", 0, b"y" * 5000 if i == 1 else b"c%d" % i) for i in range(4)]
    p.flush()
    with pytest.raises(KafkaError):
        pipelined[1].wait(10)
    assert p.produce("gap", 0, b"d") is not None
    p.close()
    stored = [r.value for r in store_records(st, "gap")]
    assert stored[:2] == [b"a", b"b"] and stored[-1] == b"d"
    assert b"c0" in stored and not any(v.startswith(b"y") for v in stored)
    assert [r.value for r in store_records(st, "gap", 1)] == [b"q", b"r"]
