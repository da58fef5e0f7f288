"""What-if variants of the `rdmalog` Spark source, applied inside the executors by the benchmark.

Not part of rdmalog: each subclass changes one thing in the executor's read path at run time, to
measure what a fix in rdmalog/spark would give. This module must be importable by the Python
workers (job.py puts its folder on PYTHONPATH), so its classes pickle by reference and its
consumer cache lives as long as the (reused) worker process.

- `nowait`: rdmalog.spark.kafka_client.read_range calls `consume(num_messages=10000,
  timeout=1.0)`, which waits the whole second unless 10000 records arrive; set to 1, consume()
  returns as soon as a record is there.
- `cached`: keep one client per topic-partition open across tasks (spark-sql-kafka pools its
  consumers the same way) instead of creating, connecting and closing one per task.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from rdmalog.spark import RdmalogDataSource
from rdmalog.spark.options import parse_read
from rdmalog.spark.schema import CREATE_TIME, NO_TIMESTAMP_TYPE
from rdmalog.spark.stream_reader import RdmalogStreamReader

_CACHE: dict[tuple, object] = {}  # per worker process: (transport, address, topic, partition)


def _native_range(conn, tp, start: int, end: int, timeout_ms: int) -> Iterator[tuple]:
    """[start, end) through a native Consumer kept open for this topic-partition."""
    from rdmalog.rdma.consumer import Consumer

    key = (conn.transport, conn.control, tp)
    c = _CACHE.get(key)
    if c is None:
        c = Consumer(conn.control, transport=conn.transport, timeout=30.0)
        c.assign([tp], offset=start)
        _CACHE[key] = c
    elif c.position(*tp) != start:
        c.seek(tp[0], tp[1], start)
    deadline = time.monotonic() + timeout_ms / 1000.0
    while c.position(*tp) < end:
        records = c.poll(timeout=0.05, max_records=end - c.position(*tp))
        if not records and time.monotonic() > deadline:
            raise TimeoutError(f"no records from {tp} at {c.position(*tp)} (reading to {end})")
        for r in records:
            if start <= r.offset < end:
                ts_type = NO_TIMESTAMP_TYPE if r.timestamp is None else CREATE_TIME
                yield r.key, r.value, r.offset, r.timestamp, ts_type, r.headers or None
        if records and records[-1].offset >= end:
            c.seek(tp[0], tp[1], end)  # read past the range: the next task starts at `end`


def _kafka_range(conn, tp, start: int, end: int, timeout_ms: int) -> Iterator[tuple]:
    """[start, end) through a confluent-kafka Consumer kept assigned to this topic-partition."""
    from confluent_kafka import TopicPartition as CkTp

    from rdmalog.spark import kafka_client

    key = ("kafka", conn.bootstrap, tp)
    entry = _CACHE.get(key)
    if entry is None or entry[1] != start:
        if entry is not None:
            entry[0].close()
        c = kafka_client._consumer(conn, {"auto.offset.reset": "error"})
        c.assign([CkTp(tp[0], tp[1], start)])
        entry = [c, start]
        _CACHE[key] = entry
    c = entry[0]
    deadline = time.monotonic() + timeout_ms / 1000.0
    while entry[1] < end:
        msgs = c.consume(num_messages=end - entry[1], timeout=0.05)
        if not msgs and time.monotonic() > deadline:
            raise TimeoutError(f"no records from {tp} at {entry[1]} (reading to {end})")
        for m in msgs:
            if m.error() is not None:
                raise RuntimeError(f"reading {tp}: {m.error().str()}")
            if m.offset() < entry[1]:
                continue
            kind, ts = m.timestamp()
            yield m.key(), m.value(), m.offset(), ts, kafka_client._ts_type(kind), m.headers()
            entry[1] = m.offset() + 1


def cached_range(conn, tp, start, end, fail_on_data_loss, poll_timeout_ms) -> Iterator[tuple]:
    """Drop-in for rdmalog.spark.transport.read_range with clients cached per worker."""
    if start >= end:
        return iter(())
    if conn.transport == "kafka":
        return _kafka_range(conn, tp, start, end, poll_timeout_ms)
    return _native_range(conn, tp, start, end, poll_timeout_ms)


class NoWaitReader(RdmalogStreamReader):
    """The stock reader with kafka_client.CONSUME_BATCH = 1 in the worker."""

    def read(self, partition):
        from rdmalog.spark import kafka_client

        kafka_client.CONSUME_BATCH = 1
        return super().read(partition)


class CachedReader(RdmalogStreamReader):
    """The stock reader with clients kept open across tasks in the worker."""

    def read(self, partition):
        from rdmalog.spark import reader

        reader.read_range = cached_range
        return super().read(partition)


class NoWaitSource(RdmalogDataSource):
    """`rdmalog` with the `nowait` change."""

    def streamReader(self, schema):
        return NoWaitReader(parse_read(self.options, streaming=True), schema)


class CachedSource(RdmalogDataSource):
    """`rdmalog` with the `cached` change."""

    def streamReader(self, schema):
        return CachedReader(parse_read(self.options, streaming=True), schema)
