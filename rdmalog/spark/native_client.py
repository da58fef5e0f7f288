"""The `shm`/`tcp` transports: executors move records with rdmalog's native client.

Data goes through `rdmalog.rdma.Consumer`/`Producer` at the broker's RDMA control address
(`rdmalog.control`); the driver's offset lookups and partition metadata still use the Kafka
protocol at `rdmalog.bootstrap`, which only the driver (and a writer, once per topic) touches.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from rdmalog.spark.kafka_client import KafkaOffsets
from rdmalog.spark.offsets import report_data_loss
from rdmalog.spark.options import ConnectionOptions, OptionError, TopicPartition
from rdmalog.spark.schema import NO_TIMESTAMP_TYPE

POLL_STEP_S = 0.5
POLL_RECORDS = 5000
WRITE_CHUNK = 500  # records per native batch
CLIENT_TIMEOUT_S = 30.0
MAX_RESTARTS = 3  # broker restarts one read rides before its task fails
# control errors that mean records of a range are gone (deleted records, a deleted topic)
_GONE = ("offset_out_of_range", "UnknownTopicOrPartitionError")

NativeOffsets = KafkaOffsets  # the driver's lookups go through the Kafka protocol


def available() -> bool:
    """True when rdmalog.rdma provides the native Consumer and Producer."""
    try:
        from rdmalog.rdma.client.consumer import Consumer  # noqa: F401
        from rdmalog.rdma.client.producer import Producer  # noqa: F401
    except ImportError:
        return False
    return True


def _control(conn: ConnectionOptions) -> str:
    if not conn.control:
        raise OptionError(
            f"option 'rdmalog.control' must be set to the broker's RDMA control address "
            f"(host:port) when rdmalog.transport={conn.transport}"
        )
    return conn.control


# Per Python worker (Spark reuses them across tasks): consumers kept assigned to the partition
# they last read, so the next micro-batch's task for it continues where the previous one stopped
# without a new connection, queue pair or read grant (spark-sql-kafka pools its consumers alike).
_POOL: dict[tuple, object] = {}
_POOL_MAX = 8


def _take(conn: ConnectionOptions, tp: TopicPartition, start: int):
    """A consumer of `tp` positioned at `start`: the pooled one when there is one, else new."""
    from rdmalog.rdma.client.consumer import Consumer
    from rdmalog.rdma.client.endpoint import BrokerDisconnected

    key = (conn.transport, _control(conn), tp)
    consumer = _POOL.pop(key, None)
    if consumer is not None:
        try:
            consumer.check()  # the broker may have restarted since the consumer was pooled
        except BrokerDisconnected:
            consumer.close()
            consumer = None
    if consumer is None:
        # "none", as spark-sql-kafka sets for its executors: a start the log no longer holds is
        # data loss to report, not a position to reset; CRCs checked, as its Java consumer does
        consumer = Consumer(
            _control(conn),
            transport=conn.transport,
            timeout=CLIENT_TIMEOUT_S,
            auto_offset_reset="none",
            check_crcs=True,
        )
    try:
        if tp not in consumer.parts:
            consumer.assign([tp], offset=start)
        elif consumer.position(*tp) != start:
            consumer.seek(tp[0], tp[1], start)
    except BaseException:
        consumer.close()
        raise
    return consumer


def _give_back(conn: ConnectionOptions, tp: TopicPartition, consumer, reusable: bool) -> None:
    key = (conn.transport, _control(conn), tp)
    if reusable and key not in _POOL and len(_POOL) < _POOL_MAX:
        _POOL[key] = consumer
    else:
        consumer.close()


def read_range(
    conn: ConnectionOptions,
    tp: TopicPartition,
    start: int,
    end: int,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
) -> Iterator[tuple[bytes | None, bytes | None, int, int | None, int, list | None]]:
    """Records of [start, end) read one-sidedly from the partition's segment files.

    Records of the range that are gone (deleted by retention or DeleteRecords, before the read or
    while it runs, or with their topic) are data loss: an error with `fail_on_data_loss`, else a
    warning and, as spark-sql-kafka's executors do, the read goes on from the log start."""
    from rdmalog.rdma.client.consumer import EARLIEST
    from rdmalog.rdma.client.endpoint import BrokerDisconnected
    from rdmalog.rdma.control import ControlError

    if start >= end:
        return
    topic, part = tp
    consumer = None
    at, seek_to = start, start  # seek_to: where a new consumer starts
    clean = False
    last_progress = time.monotonic()
    restarts = 0
    try:
        while at < end:
            try:
                if consumer is not None and consumer.broken is not None:
                    # the session went away under the read: a new one continues at the
                    # position, as a Kafka consumer rides a broker restart
                    consumer.reconnect(CLIENT_TIMEOUT_S)
                if consumer is None:
                    consumer = _take(conn, tp, seek_to)
                    pos = consumer.position(topic, part)
                    if seek_to == EARLIEST and pos <= at:
                        return  # nothing was deleted below `at`: the log ends before it
                    at = max(at, pos)
                    continue
                records = consumer.poll(timeout=POLL_STEP_S, max_records=POLL_RECORDS)
            except BrokerDisconnected:
                restarts += 1
                if consumer is None or restarts > MAX_RESTARTS:
                    raise
                continue
            except ControlError as exc:  # executors' consumers never reset by themselves
                if exc.code not in _GONE:
                    raise
                report_data_loss(
                    fail_on_data_loss, f"{topic}-{part}: cannot read from offset {at}: {exc}"
                )
                if exc.code != "offset_out_of_range":
                    return  # the partition is gone
                if consumer is not None:
                    consumer.close()
                    consumer = None
                seek_to = EARLIEST  # skip what was deleted
                continue
            if records:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > poll_timeout_ms / 1000.0:
                raise TimeoutError(
                    f"no records from {topic}-{part} at offset {at} (reading up to {end}) within "
                    f"kafkaConsumer.pollTimeoutMs={poll_timeout_ms}"
                )
            for r in records:
                if r.offset < start:
                    continue
                if r.offset >= end:
                    break
                ts_type = NO_TIMESTAMP_TYPE if r.timestamp is None else r.timestamp_type
                yield r.key, r.value, r.offset, r.timestamp, ts_type, r.headers or None
            at = consumer.position(topic, part)
        clean = True
    finally:
        if consumer is not None:
            _give_back(conn, tp, consumer, clean)


class NativeSink:
    """Shared-mode native producer (several tasks may write one partition at once)."""

    def __init__(self, conn: ConnectionOptions) -> None:
        from rdmalog.rdma.client.producer import Producer

        self._producer = Producer(
            _control(conn), transport=conn.transport, mode="shared", timeout=CLIENT_TIMEOUT_S
        )
        self._pending: dict[TopicPartition, list] = {}
        self._deliveries: list = []
        self.sent = 0

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        headers: list[tuple[str, bytes | None]] | None,
    ) -> None:
        """Buffer one record; full chunks go out as one native batch."""
        from rdmalog.store.records import Record

        # no partition column: Kafka's default partitioner, as the Kafka transport's writes
        part = self._producer.partition_for(topic, key) if partition is None else partition
        chunk = self._pending.setdefault((topic, part), [])
        chunk.append(Record(key, value, headers or [], None))
        self.sent += 1
        if len(chunk) >= WRITE_CHUNK:
            self._send_chunk((topic, part))

    def _send_chunk(self, tp: TopicPartition) -> None:
        records = self._pending.pop(tp, [])
        if records:
            self._deliveries.append(self._producer.send_records(tp[0], tp[1], records))

    def close(self) -> None:
        """Send what is buffered and wait until the broker acknowledged every batch."""
        try:
            for tp in list(self._pending):
                self._send_chunk(tp)
            for delivery in self._deliveries:
                delivery.wait(CLIENT_TIMEOUT_S)
        finally:
            self._producer.close()
