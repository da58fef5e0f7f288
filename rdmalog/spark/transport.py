"""Pick the client behind `rdmalog.transport`: `kafka` (confluent-kafka) or native `shm`/`tcp`."""

from __future__ import annotations

from collections.abc import Iterator

from rdmalog.spark.interface import Offsets, Record, Sink
from rdmalog.spark.options import ConnectionOptions, OptionError, TopicPartition


def _native_unavailable(conn: ConnectionOptions) -> OptionError:
    return OptionError(
        f"option 'rdmalog.transport'={conn.transport!r} needs the native client "
        "(rdmalog.rdma.Consumer/Producer), which this installation does not provide; "
        "use rdmalog.transport=kafka"
    )


def _native(conn: ConnectionOptions):  # -> module
    try:
        from rdmalog.spark import native_client
    except ImportError:
        raise _native_unavailable(conn) from None
    if not native_client.available():
        raise _native_unavailable(conn)
    return native_client


def open_offsets(conn: ConnectionOptions) -> Offsets:
    """Offsets client for the driver."""
    if conn.transport == "kafka":
        from rdmalog.spark.kafka_client import KafkaOffsets

        return KafkaOffsets(conn)
    return _native(conn).NativeOffsets(conn)


def read_range(
    conn: ConnectionOptions,
    tp: TopicPartition,
    start: int,
    end: int,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
) -> Iterator[Record]:
    """Records of one topic-partition in [start, end), read on the executor."""
    if conn.transport == "kafka":
        from rdmalog.spark.kafka_client import read_range as kafka_read

        return kafka_read(conn, tp, start, end, fail_on_data_loss, poll_timeout_ms)
    return _native(conn).read_range(conn, tp, start, end, fail_on_data_loss, poll_timeout_ms)


def open_sink(conn: ConnectionOptions) -> Sink:
    """Producer for an executor's write task."""
    if conn.transport == "kafka":
        from rdmalog.spark.kafka_client import KafkaSink

        return KafkaSink(conn)
    return _native(conn).NativeSink(conn)
