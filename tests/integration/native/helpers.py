"""What the native datapath tests share: the store's own read of a partition, bounded polling and
waiting."""

from __future__ import annotations

import time

from rdmalog.rdma import Consumer, Producer
from rdmalog.store.log_manager import Store
from rdmalog.store.records import decode_all


def store_records(st: Store, topic: str, partition: int = 0):
    """What the store serves over the Kafka path: every committed record."""
    plog = st.partition(topic, partition)
    out, off = [], plog.log_start_offset
    while off < plog.high_watermark:
        fs = plog.read(off, 1 << 20)
        recs = decode_all(fs.read())
        out += [r for r in recs if r.offset >= off]
        off = recs[-1].offset + 1
    return out


def consume(c: Consumer, n: int, rounds: int = 400):
    got = []
    for _ in range(rounds):
        got += c.poll(0.02)
        if len(got) >= n:
            break
    return got


def writer_and_reader(st: Store, svc, topic: str, value: bytes) -> tuple[Producer, Consumer]:
    """A new one-partition topic holding `value`: its producer, and a consumer that read it."""
    st.create_topic(topic, 1)
    p = Producer(svc.control_address)
    p.produce(topic, 0, value)
    c = Consumer(svc.control_address)
    c.assign([(topic, 0)])
    assert [r.value for r in consume(c, 1)] == [value]
    return p, c


def wait_for(pred, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.01)
    return pred()
