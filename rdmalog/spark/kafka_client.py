"""The `kafka` transport: offsets, range reads and writes through confluent-kafka.

No consumer group is used: consumers `assign` explicit offsets; `group.id` is set (librdkafka wants
one) but nothing is ever committed.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

from rdmalog.spark.offsets import report_data_loss
from rdmalog.spark.options import ConnectionOptions, OptionError, TopicPartition
from rdmalog.spark.schema import CREATE_TIME, LOG_APPEND_TIME, NO_TIMESTAMP_TYPE

REQUEST_TIMEOUT_S = 30.0
CONSUME_BATCH = 10_000
POLL_STEP_S = 1.0


def _client_conf(conn: ConnectionOptions, extra: dict[str, Any]) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": conn.bootstrap}
    conf.update(extra)
    conf.update(conn.client_conf)
    return conf


def _consumer(conn: ConnectionOptions, extra: dict[str, Any] | None = None):
    """A group-less confluent-kafka Consumer; bad `kafka.*` settings raise OptionError."""
    from confluent_kafka import Consumer, KafkaException

    defaults = {
        "group.id": f"rdmalog-spark-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": "read_uncommitted",  # what spark-sql-kafka's Java consumer uses
        "check.crcs": True,  # its Java consumer checks them too (librdkafka does not by default)
    }
    defaults.update(extra or {})
    conf = _client_conf(conn, defaults)
    try:
        return Consumer(conf)
    except (KafkaException, ValueError, TypeError) as exc:
        raise _bad_setting(conn, exc) from None


# Executors keep a few consumers per connection setting (as spark-sql-kafka caches its consumers):
# creating one costs milliseconds, more than reading a small offset range.
_POOL: dict[tuple, list] = {}
_POOL_MAX = 4


def _pool_key(conn: ConnectionOptions, extra: dict[str, Any]) -> tuple:
    return (conn.bootstrap, tuple(sorted(conn.client_conf.items())), tuple(sorted(extra.items())))


def _pooled_consumer(conn: ConnectionOptions, extra: dict[str, Any]):
    idle = _POOL.get(_pool_key(conn, extra))
    return idle.pop() if idle else _consumer(conn, extra)


def _release(conn: ConnectionOptions, extra: dict[str, Any], consumer, reusable: bool) -> None:
    """Back to the pool after a clean read (unassigned); closed after an error or when full."""
    idle = _POOL.setdefault(_pool_key(conn, extra), [])
    if reusable and len(idle) < _POOL_MAX:
        consumer.unassign()
        idle.append(consumer)
    else:
        consumer.close()


def _bad_setting(conn: ConnectionOptions, exc: Exception) -> OptionError:
    """Name the `kafka.*` option librdkafka refused (or all of them when it cannot tell)."""
    named = [k for k in conn.client_conf if k in str(exc)] or list(conn.client_conf)
    names = ", ".join(f"'kafka.{k}'" for k in named) or "'kafka.*'"
    return OptionError(f"option {names} is not a valid librdkafka setting: {exc}")


def _ts_type(kind: int) -> int:
    from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME

    if kind == TIMESTAMP_CREATE_TIME:
        return CREATE_TIME
    if kind == TIMESTAMP_LOG_APPEND_TIME:
        return LOG_APPEND_TIME
    return NO_TIMESTAMP_TYPE


class KafkaOffsets:
    """Driver-side metadata: partitions of topics and their earliest/latest/by-time offsets."""

    def __init__(self, conn: ConnectionOptions) -> None:
        self._consumer = _consumer(conn)

    def topic_partitions(self) -> dict[str, list[int]]:
        """Every topic (internal `__*` ones excluded) and its partition ids."""
        from confluent_kafka import KafkaException

        try:
            md = self._consumer.list_topics(timeout=REQUEST_TIMEOUT_S)
        except KafkaException as exc:
            raise ConnectionError(f"cannot read metadata from the broker: {exc}") from None
        return {
            name: sorted(t.partitions)
            for name, t in md.topics.items()
            if t.error is None and not name.startswith("__")
        }

    def watermarks(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        """(earliest, latest) per topic-partition, asked of the broker (never cached)."""
        from confluent_kafka import TopicPartition as CkTp

        return {
            tp: self._consumer.get_watermark_offsets(
                CkTp(tp[0], tp[1]), timeout=REQUEST_TIMEOUT_S, cached=False
            )
            for tp in tps
        }

    def offsets_for_times(
        self, stamps: dict[TopicPartition, int]
    ) -> dict[TopicPartition, int | None]:
        """The first offset with timestamp >= the given one, or None when there is none."""
        from confluent_kafka import TopicPartition as CkTp

        if not stamps:
            return {}
        asked = [CkTp(t, p, ts) for (t, p), ts in stamps.items()]
        answer = self._consumer.offsets_for_times(asked, timeout=REQUEST_TIMEOUT_S)
        result: dict[TopicPartition, int | None] = {}
        for item in answer:
            if item.error is not None:
                raise ConnectionError(
                    f"offsets by timestamp for {item.topic}-{item.partition}: {item.error}"
                )
            result[(item.topic, item.partition)] = item.offset if item.offset >= 0 else None
        return result

    def close(self) -> None:
        self._consumer.close()


def read_range(
    conn: ConnectionOptions,
    tp: TopicPartition,
    start: int,
    end: int,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
) -> Iterator[tuple[bytes | None, bytes | None, int, int | None, int, list | None]]:
    """Yield (key, value, offset, timestamp_ms, timestampType, headers) for offsets [start, end).

    Offsets missing inside the range (compaction, transaction markers) are skipped. Records gone
    before `start` (retention) or a log ending before `end` are data loss: an error when
    `fail_on_data_loss`, otherwise the reader skips ahead / stops.
    """
    from confluent_kafka import KafkaError
    from confluent_kafka import TopicPartition as CkTp

    if start >= end:
        return
    extra = {
        "enable.partition.eof": True,
        "auto.offset.reset": "error" if fail_on_data_loss else "earliest",
        # the range is known to exist: a long-poll only delays the next task of a pooled consumer
        # (its parked fetch holds the connection up to this long)
        "fetch.wait.max.ms": 10,
    }
    consumer = _pooled_consumer(conn, extra)
    reusable = False
    try:
        consumer.assign([CkTp(tp[0], tp[1], start)])
        next_offset = start
        idle_limit = poll_timeout_ms / 1000.0
        last_progress = time.monotonic()
        while next_offset < end:
            # never ask for more than the range holds: consume() returns early only when full
            want = min(CONSUME_BATCH, end - next_offset)
            msgs = consumer.consume(num_messages=want, timeout=POLL_STEP_S)
            if not msgs:
                if time.monotonic() - last_progress > idle_limit:
                    raise TimeoutError(
                        f"no records from {tp[0]}-{tp[1]} at offset {next_offset} (reading up to "
                        f"{end}) within kafkaConsumer.pollTimeoutMs={poll_timeout_ms}"
                    )
                continue
            last_progress = time.monotonic()
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if msg.offset() >= end:
                            return
                        report_data_loss(
                            fail_on_data_loss,
                            f"{tp[0]}-{tp[1]} ends at offset {msg.offset()} but the query must read "
                            f"up to {end}: records [{msg.offset()}, {end}) are gone",
                        )
                        return
                    if err.code() in (
                        KafkaError._AUTO_OFFSET_RESET,
                        KafkaError.OFFSET_OUT_OF_RANGE,
                    ):
                        report_data_loss(
                            True,
                            f"{tp[0]}-{tp[1]}: offset {next_offset} is out of range (records "
                            f"deleted by retention?): {err.str()}",
                        )
                    raise RuntimeError(f"reading {tp[0]}-{tp[1]}: {err.str()}")
                offset = msg.offset()
                if offset < next_offset:
                    continue
                if offset > start and next_offset == start and not fail_on_data_loss:
                    _warn_if_reset(consumer, tp, start, offset)
                if offset >= end:
                    return
                kind, ts = msg.timestamp()
                ts_type = _ts_type(kind)
                yield (
                    msg.key(),
                    msg.value(),
                    offset,
                    ts if ts_type != NO_TIMESTAMP_TYPE else None,
                    ts_type,
                    msg.headers(),
                )
                next_offset = offset + 1
        reusable = True
    finally:
        _release(conn, extra, consumer, reusable)


def _warn_if_reset(consumer, tp: TopicPartition, start: int, first: int) -> None:
    """The first record of a range came after its start: with failOnDataLoss=false the consumer
    resets to the log start by itself (auto.offset.reset=earliest) when `start` was deleted, so
    say so, as spark-sql-kafka does; a gap of compaction or transaction markers is no loss."""
    from confluent_kafka import TopicPartition as CkTp

    try:
        low, _ = consumer.get_watermark_offsets(CkTp(tp[0], tp[1]), timeout=5, cached=False)
    except Exception:  # noqa: BLE001 - only a warning is at stake
        return
    if low > start:
        report_data_loss(
            False,
            f"{tp[0]}-{tp[1]}: offsets [{start}, {min(low, first)}) are gone (log start {low})",
        )


class KafkaSink:
    """Executor-side producer: `send` records, `close` waits for every acknowledgement."""

    def __init__(self, conn: ConnectionOptions) -> None:
        from confluent_kafka import KafkaException, Producer

        try:
            self._producer = Producer(_client_conf(conn, {}))
        except (KafkaException, ValueError, TypeError) as exc:
            raise _bad_setting(conn, exc) from None
        self._errors: list[str] = []
        self.sent = 0

    def _on_delivery(self, err, msg) -> None:  # noqa: ANN001
        if err is not None and len(self._errors) < 10:
            self._errors.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        headers: list[tuple[str, bytes | None]] | None,
    ) -> None:
        """Queue one record; blocks (bounded) while the local queue is full."""
        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": self._on_delivery}
        if partition is not None:
            kwargs["partition"] = partition
        if headers:
            kwargs["headers"] = headers
        for _ in range(6000):  # queue full: wait for acknowledgements, at most ~10 minutes
            try:
                self._producer.produce(topic, **kwargs)
                break
            except BufferError:
                self._producer.poll(0.1)
        else:
            raise TimeoutError(f"producer queue stayed full while writing to {topic}")
        self.sent += 1
        if self.sent % 1000 == 0:
            self._producer.poll(0)
        if self._errors:
            raise RuntimeError("writes failed: " + "; ".join(self._errors))

    def close(self, timeout_s: float = 120.0) -> None:
        """Flush; raise if any record was not acknowledged."""
        remaining = self._producer.flush(timeout_s)
        if self._errors:
            raise RuntimeError("writes failed: " + "; ".join(self._errors))
        if remaining:
            raise TimeoutError(f"{remaining} records not acknowledged within {timeout_s}s")
