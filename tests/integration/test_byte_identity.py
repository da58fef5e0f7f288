"""Record batches from real producers land in the segment file byte for byte: only baseOffset
(bytes 0-7) and partitionLeaderEpoch (bytes 12-15) differ, and the CRC-32C stays valid. Fetch
responses then carry exactly the segment's bytes to consumers."""

from __future__ import annotations

import uuid

import pytest
from batches import (
    base_offset,
    crc_valid,
    log_file,
    magic,
    record_count,
    segment_batches,
    split_batches,
)
from kafka_tap import KafkaTap

from compat_tests import clients
from compat_tests.common import compare, create_topic, make_records

CASES = [
    ("confluent", "none"),
    ("confluent", "zstd"),
    ("confluent", "snappy"),
    ("kafka-python", "none"),
    ("kafka-python", "gzip"),
    ("kafka-python", "lz4"),
]


@pytest.fixture
def tap():
    t = KafkaTap()
    yield t
    t.close()


@pytest.mark.parametrize("client,codec", CASES, ids=[f"{c}-{z}" for c, z in CASES])
def test_produced_batches_stored_byte_for_byte(broker_factory, tap, client, codec) -> None:
    broker = broker_factory(
        {"advertised.listeners": f"PLAINTEXT://{tap.address}", "log.segment.bytes": str(4 << 20)},
        local=True,
    )
    tap.upstream = (broker.host, broker.port)
    topic = f"bytes-{client}-{codec}-{uuid.uuid4().hex[:6]}"
    create_topic(tap.address, topic, 1)
    recs = make_records(24, 1, f"{client}/{codec}")
    linger = {"linger.ms": 1000} if client == "confluent" else {"linger_ms": 1000}
    # two rounds, each flushed: at least two batches, each holding several records
    clients.PRODUCERS[client](tap.address, topic, recs[:16], codec, **linger)
    clients.PRODUCERS[client](tap.address, topic, recs[16:], codec, **linger)

    assert not tap.errors, tap.errors
    sent = [
        batch
        for p in tap.produced
        if p.partition == 0 and (p.topic == topic or isinstance(p.topic, uuid.UUID))
        for batch in split_batches(p.records)
    ]
    assert sum(record_count(b) for b in sent) == len(recs), "tap missed produced batches"
    assert max(record_count(b) for b in sent) > 1, "the client sent one record per batch"

    stored = segment_batches(log_file(broker.data_dir, topic))
    assert len(stored) == len(sent), f"{len(stored)} batches in the segment, {len(sent)} sent"
    next_offset = 0
    for i, (want, have) in enumerate(zip(sent, stored, strict=True)):
        assert magic(have) == 2
        assert len(have) == len(want), f"batch {i}: length {len(have)} != sent {len(want)}"
        assert base_offset(have) == next_offset, f"batch {i}: baseOffset {base_offset(have)}"
        assert have[8:12] == want[8:12], f"batch {i}: batchLength changed"
        assert have[16:] == want[16:], f"batch {i}: bytes from magic on differ from the client's"
        assert crc_valid(have), f"batch {i}: CRC-32C invalid"
        next_offset += record_count(want)

    # consumers read exactly what was produced, and the batches on the wire are the segment's
    compare(recs, clients.ck_consume(tap.address, topic, 1, len(recs)))
    compare(recs, clients.kp_consume(tap.address, topic, 1, len(recs)))
    assert not tap.errors, tap.errors
    fetched: dict[int, bytes] = {}
    for f in tap.fetched:
        if f.partition == 0 and (f.topic == topic or isinstance(f.topic, uuid.UUID)):
            for batch in split_batches(f.records):
                if fetched.setdefault(base_offset(batch), batch) != batch:
                    raise AssertionError(
                        f"two fetches returned different bytes at {base_offset(batch)}"
                    )
    assert [fetched[k] for k in sorted(fetched)] == stored, (
        "fetched batches differ from the segment"
    )
