"""Durability across restarts of `rdmalog serve` on the same data dir: a clean stop (SIGTERM) keeps
everything; a crash (SIGKILL) mid-stream keeps every acknowledged record and leaves a valid log."""

from __future__ import annotations

import signal
import threading
import uuid
from pathlib import Path

import pytest
from batches import base_offset, crc_valid, record_count, split_batches
from confluent_kafka import TopicPartition

from compat_tests import clients
from compat_tests.common import TIMEOUT_S, Deadline, compare, create_topic, make_records

PARTITIONS = 3


def watermarks(bootstrap: str, topic: str, partitions: int) -> list[tuple[int, int]]:
    consumer = clients.ck_consumer(bootstrap)
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT_S)
            for p in range(partitions)
        ]
    finally:
        consumer.close()


def test_clean_restart_keeps_everything(broker_factory) -> None:
    broker = broker_factory({"log.segment.bytes": str(8 << 10)}, local=True)
    topic = f"restart-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    recs = make_records(240, PARTITIONS, "restart")
    # several batches per partition, two codecs, and enough bytes to roll 8 KiB segments
    clients.ck_produce(broker.bootstrap, topic, recs[:120], "lz4", **{"batch.size": 2048})
    clients.kp_produce(broker.bootstrap, topic, recs[120:], "none", batch_size=2048)
    before = watermarks(broker.bootstrap, topic, PARTITIONS)
    rolled = [
        len(list((broker.data_dir / f"{topic}-{p}").glob("*.log"))) for p in range(PARTITIONS)
    ]
    assert max(rolled) > 1, f"segments per partition {rolled}: expected a roll"

    code = broker.stop(signal.SIGTERM)
    assert code == 0, f"rdmalog serve exited {code} on SIGTERM"
    broker.start()

    assert watermarks(broker.bootstrap, topic, PARTITIONS) == before
    compare(recs, clients.ck_consume(broker.bootstrap, topic, PARTITIONS, len(recs)))
    # the log continues where it stopped
    more = make_records(PARTITIONS * 2, PARTITIONS, "after")
    clients.ck_produce(broker.bootstrap, topic, more, "gzip")
    after = watermarks(broker.bootstrap, topic, PARTITIONS)
    assert [hi for _, hi in after] == [hi + 2 for _, hi in before]
    compare(
        [r for p in range(PARTITIONS) for r in recs + more if r.partition == p],
        clients.ck_consume(broker.bootstrap, topic, PARTITIONS, len(recs) + len(more)),
    )


def test_crash_keeps_acknowledged_records(broker_factory) -> None:
    broker = broker_factory(
        {"log.flush.interval.messages": "1", "log.segment.bytes": str(256 << 10)}, local=True
    )
    topic = f"crash-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    producer = clients.ck_producer(
        broker.bootstrap,
        **{"acks": "1", "linger.ms": 2, "message.timeout.ms": 4000, "retries": 0},
    )
    acked: dict[tuple[int, int], bytes] = {}
    failed = 0
    lock = threading.Lock()

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        nonlocal failed
        with lock:
            if err is None:
                acked[(msg.partition(), msg.offset())] = msg.value()
            else:
                failed += 1

    killed_at = None
    sent = 0
    deadline = Deadline(30)
    # keep producing; once some records are acknowledged, SIGKILL the broker with more in flight
    while deadline and sent < 20_000:
        value = f"crash-{sent:06d}-".encode() + b"x" * (sent % 200)
        producer.produce(topic, value=value, key=str(sent).encode(), partition=sent % PARTITIONS,
                         on_delivery=on_delivery)  # fmt: skip
        sent += 1
        producer.poll(0)
        while sent - len(acked) - failed > 100 and deadline:  # bound what is in flight
            producer.poll(0.05)
        if killed_at is None and len(acked) >= 300:
            broker.stop(signal.SIGKILL)
            killed_at = sent
        elif killed_at is not None and sent >= killed_at + 200:
            break
    producer.flush(15)
    assert killed_at is not None, f"{sent} sent, only {len(acked)} acknowledged before the deadline"
    assert len(acked) + failed == sent, f"{sent} sent, {len(acked)} acked, {failed} failed"
    assert failed > 0, "nothing was in flight when the broker was killed"

    broker.start()
    marks = watermarks(broker.bootstrap, topic, PARTITIONS)
    for p, (lo, hi) in enumerate(marks):
        top = max((o for (q, o) in acked if q == p), default=-1)
        assert lo == 0 and hi > top, f"partition {p}: watermarks {(lo, hi)}, last acked {top}"
    total = sum(hi for _, hi in marks)
    got = clients.ck_consume(broker.bootstrap, topic, PARTITIONS, total)
    by_pos = {(r.partition, r.offset): r.value for r in got}
    for p, (_, hi) in enumerate(marks):
        offsets = sorted(o for (q, o) in by_pos if q == p)
        assert offsets == list(range(hi)), f"partition {p}: offsets not contiguous 0..{hi - 1}"
    missing = {k: v for k, v in acked.items() if by_pos.get(k) != v}
    assert not missing, (
        f"{len(missing)} acknowledged records lost or changed, e.g. {list(missing.items())[:3]}"
    )
    # and the recovered log takes new records
    clients.ck_produce(broker.bootstrap, topic, make_records(3, PARTITIONS, "post"))
    assert [hi for _, hi in watermarks(broker.bootstrap, topic, PARTITIONS)] == [
        hi + 1 for _, hi in marks
    ]


def _active_segment(data_dir: Path, topic: str, partition: int) -> Path:
    return max((data_dir / f"{topic}-{partition}").glob("*.log"))


@pytest.mark.parametrize("damage", ["torn", "bad-crc"])
def test_recovery_truncates_a_damaged_tail(broker_factory, damage: str) -> None:
    """After a crash, a partial batch or a batch failing its CRC at the end of the active segment
    is cut off at start-up (as Kafka's recovery does); everything before it stays readable."""
    broker = broker_factory({"log.segment.bytes": str(8 << 10)}, local=True)
    topic = f"torn-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, 1)
    recs = make_records(60, 1, "torn")
    clients.ck_produce(broker.bootstrap, topic, recs[:30], "none", **{"batch.size": 2048})
    clients.ck_produce(broker.bootstrap, topic, recs[30:], "gzip", **{"batch.size": 2048})
    segments = sorted((broker.data_dir / f"{topic}-0").glob("*.log"))
    assert len(segments) > 1, "expected the 8 KiB segments to roll"
    broker.stop(signal.SIGKILL)

    path = _active_segment(broker.data_dir, topic, 0)
    data = path.read_bytes()
    batches = split_batches(data)
    assert batches, f"no batches in the active segment {path.name}"
    end = sum(len(b) for b in batches)
    last = batches[-1]
    bogus = bytearray(last)
    bogus[0:8] = (base_offset(last) + record_count(last)).to_bytes(8, "big")
    if damage == "torn":
        bogus = bogus[: len(bogus) // 2]  # the length field promises more than is there
    else:
        bogus[-1] ^= 0xFF  # complete, but the CRC-32C no longer matches
    with open(path, "r+b") as f:
        f.seek(end)
        f.write(bytes(bogus))

    broker.start()
    assert f"{path.name}: invalid or torn data at byte {end}; truncating" in broker.stderr_tail()
    [(lo, hi)] = watermarks(broker.bootstrap, topic, 1)
    assert (lo, hi) == (0, len(recs)), f"watermarks after recovery {(lo, hi)}"
    compare(recs, clients.ck_consume(broker.bootstrap, topic, 1, len(recs)))
    more = make_records(2, 1, "after-torn")
    clients.ck_produce(broker.bootstrap, topic, more)
    got = clients.ck_consume(broker.bootstrap, topic, 1, len(recs) + 2)
    assert [r.offset for r in got] == list(range(len(recs) + 2))
    assert [r.value for r in got[-2:]] == [r.value for r in more]
    # the damaged bytes are gone from the file: whatever follows the old end is a valid batch
    after = split_batches(_active_segment(broker.data_dir, topic, 0).read_bytes())
    assert all(crc_valid(b) for b in after)
    assert sum(record_count(b) for b in after) == (
        sum(record_count(b) for b in batches) + 2
        if _active_segment(broker.data_dir, topic, 0) == path
        else 2
    )
