"""Option validation and offset planning of the `rdmalog` Spark source (no Spark session needed)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", minversion="4.0")

from rdmalog.spark.offsets import OffsetRange, from_json, plan_ranges, rate_limit, to_json  # noqa: E402
from rdmalog.spark.options import (  # noqa: E402
    EARLIEST,
    LATEST,
    OptionError,
    parse_read,
    parse_write,
)

BS = {"rdmalog.bootstrap": "127.0.0.1:9092"}
C = "rdmalog.control"


@pytest.mark.parametrize(
    ("options", "streaming", "named"),
    [
        ({"subscribe": "t"} | {}, False, None),
        ({"subscribe": "t", "kafka.bootstrap.servers": "h:1"}, False, None),
        ({"subscribe": "t", "rdmalog.bootstrap": ""}, False, "rdmalog.bootstrap"),
        ({}, False, "subscribe"),
        ({"subscribe": "a", "subscribePattern": "b.*"}, False, "subscribePattern"),
        ({"subscribePattern": "(unclosed"}, False, "subscribePattern"),
        ({"assign": '{"t": "0"}'}, False, "assign"),
        ({"assign": "[1]"}, False, "assign"),
        ({"subscribe": "t", "startingOffsets": "latest"}, False, "startingOffsets"),
        ({"subscribe": "t", "startingOffsets": '{"t":{"0":-1}}'}, False, "startingOffsets"),
        ({"subscribe": "t", "startingOffsets": '{"t":{"0":-3}}'}, False, "startingOffsets"),
        ({"subscribe": "t", "startingOffsets": '{"t":{"x":1}}'}, False, "startingOffsets"),
        ({"subscribe": "t", "endingOffsets": "earliest"}, False, "endingOffsets"),
        ({"subscribe": "t", "endingOffsets": '{"t":{"0":-2}}'}, False, "endingOffsets"),
        ({"subscribe": "t", "endingOffsets": "latest"}, True, "endingOffsets"),
        ({"subscribe": "t", "endingTimestamp": "5"}, True, "endingTimestamp"),
        ({"subscribe": "t", "startingTimestamp": "soon"}, True, "startingTimestamp"),
        (
            {"subscribe": "t", "startingOffsetsByTimestamp": "{}x"},
            True,
            "startingOffsetsByTimestamp",
        ),
        ({"subscribe": "t", "maxOffsetsPerTrigger": "-5"}, True, "maxOffsetsPerTrigger"),
        ({"subscribe": "t", "minPartitions": "zero"}, False, "minPartitions"),
        ({"subscribe": "t", "includeHeaders": "1"}, False, "includeHeaders"),
        ({"subscribe": "t", "failOnDataLoss": "no"}, True, "failOnDataLoss"),
        (
            {"subscribe": "t", "kafkaConsumer.pollTimeoutMs": "0"},
            True,
            "kafkaConsumer.pollTimeoutMs",
        ),
        ({"subscribe": "t", "rdmalog.transport": "udp"}, True, "rdmalog.transport"),
        ({"subscribe": "t", "rdmalog.transport": "tcp"}, True, "rdmalog.control"),
        ({"subscribe": "t", "rdmalog.transport": "shm", "rdmalog.control": "h:1"}, True, None),
        # not host:port: an executor's task failed instead, with int()'s ValueError
        *(
            ({"subscribe": "t", "rdmalog.transport": "tcp", "rdmalog.control": bad}, True, C)
            for bad in ("127.0.0.1", "h:port", "h:0", "h:70000", ":9093", "h:1,h:2")
        ),
        (
            {"subscribe": "t", "kafka.group.id": "g", "kafka.enable.auto.commit": "true"},
            True,
            "kafka.enable.auto.commit",
        ),
        ({"subscribe": "t", "minOffsetsPerTrigger": "5"}, True, "minOffsetsPerTrigger"),
        (
            {"subscribe": "t", "startingOffsetsByTimestampStrategy": "x"},
            True,
            "startingOffsetsByTimestampStrategy",
        ),
    ],
)
def test_read_options(options: dict, streaming: bool, named: str | None) -> None:
    if "rdmalog.bootstrap" not in options and "kafka.bootstrap.servers" not in options:
        options = BS | options
    if named is None:
        parse_read(options, streaming)
        return
    with pytest.raises(OptionError, match=f"'{named}'"):
        parse_read(options, streaming)


def test_read_defaults_and_priorities() -> None:
    batch = parse_read(BS | {"SUBSCRIBE": "a, b"}, streaming=False)  # names are case-insensitive
    assert batch.subscription.topics == ("a", "b")
    assert batch.starting.kind == "earliest" and batch.ending.kind == "latest"
    assert batch.fail_on_data_loss and not batch.include_headers
    stream = parse_read(
        BS
        | {
            "subscribe": "t",
            "startingOffsets": "earliest",
            "startingOffsetsByTimestamp": '{"t":{"0":5}}',
            "startingTimestamp": "7",
            "maxOffsetsPerTrigger": "100",
        },
        streaming=True,
    )
    assert stream.starting.kind == "timestamp" and stream.starting.timestamp == 7  # wins
    assert stream.ending is None and stream.max_offsets_per_trigger == 100
    assert parse_read(BS | {"subscribe": "t"}, True).starting.kind == "latest"
    spec = parse_read(BS | {"subscribe": "t", "startingOffsets": '{"t":{"0":-2,"1":4}}'}, False)
    assert spec.starting.offsets == {("t", 0): EARLIEST, ("t", 1): 4}
    spec = parse_read(BS | {"subscribe": "t", "endingOffsets": '{"t":{"0":-1}}'}, False)
    assert spec.ending.offsets == {("t", 0): LATEST}
    assign = parse_read(BS | {"assign": '{"b":[1,0],"a":[2]}'}, False).subscription
    assert assign.assigned == (("a", 2), ("b", 0), ("b", 1))


def test_write_options() -> None:
    assert parse_write(BS | {"topic": "t"}).topic == "t"
    assert parse_write(BS).topic is None
    with pytest.raises(OptionError, match="'rdmalog.bootstrap'"):
        parse_write({"topic": "t"})
    with pytest.raises(OptionError, match="'kafka.value.serializer'"):
        parse_write(BS | {"kafka.value.serializer": "x"})
    assert parse_write(BS | {"kafka.acks": "1"}).conn.client_conf == {"acks": "1"}


def test_offset_json_is_spark_sql_kafka_shape() -> None:
    offsets = {("b", 10): 3, ("b", 2): 7, ("a", 0): 0}
    assert to_json(offsets) == {"a": {"0": 0}, "b": {"2": 7, "10": 3}}
    assert list(to_json(offsets)["b"]) == ["2", "10"]  # numeric partition order
    assert from_json(to_json(offsets)) == offsets


def test_rate_limit_like_spark_sql_kafka() -> None:
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 5}
    end = {("t", 0): 33, ("t", 1): 10, ("t", 2): 5}
    # prorated by backlog; a partition's share below 1 is rounded up, otherwise down
    assert rate_limit(8, start, end) == {("t", 0): 6, ("t", 1): 1, ("t", 2): 5}
    assert rate_limit(1, start, end) == {("t", 0): 1, ("t", 1): 1, ("t", 2): 5}
    assert rate_limit(1000, start, end) == end
    assert rate_limit(8, end, end) == end


def test_plan_ranges_and_min_partitions() -> None:
    start = {("t", 0): 0, ("t", 1): 5, ("t", 2): 9}
    end = {("t", 0): 100, ("t", 1): 5, ("t", 2): 19}
    assert plan_ranges(start, end, None) == [
        OffsetRange("t", 0, 0, 100),
        OffsetRange("t", 2, 9, 19),
    ]
    split = plan_ranges(start, end, 6)
    assert len(split) >= 6
    assert sum(r.size for r in split) == 110
    for tp in (0, 2):
        parts = [r for r in split if r.partition == tp]
        assert parts[0].start == start[("t", tp)] and parts[-1].end == end[("t", tp)]
        assert all(a.end == b.start for a, b in zip(parts, parts[1:], strict=False))


def test_min_partitions_leaves_small_ranges_out_of_the_split() -> None:
    """spark-sql-kafka's KafkaOffsetRangeCalculator: small ranges stay whole and count against
    minPartitions, so a skewed backlog gives 10 partitions for minPartitions=10, not 13."""
    start = {("t", p): 0 for p in range(4)}
    end = {("t", 0): 100, ("t", 1): 1, ("t", 2): 1, ("t", 3): 1}
    split = plan_ranges(start, end, 10)
    assert [r.size for r in split if r.partition == 0] == [14, 14, 14, 14, 14, 15, 15]
    assert [r for r in split if r.partition != 0] == [OffsetRange("t", p, 0, 1) for p in (1, 2, 3)]


def _topic_and_producer(bootstrap: str, topic: str):
    """Create a one-partition topic; returns produce(n), which writes n records and flushes."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    producer = Producer({"bootstrap.servers": bootstrap})

    def produce(n: int) -> None:
        for i in range(n):
            producer.produce(topic, b"%d" % i)
        assert producer.flush(15) == 0

    return produce


def test_initial_offset_is_resolved_once(bootstrap: str) -> None:
    """Spark asks initialOffset() twice for a new query; `latest` must not move in between, or the
    query fails with "offset went back" under traffic (spark-sql-kafka keeps its first answer too)."""
    from rdmalog.spark import RdmalogDataSource
    from rdmalog.spark.schema import kafka_schema

    topic = "initial-offset-once"
    produce = _topic_and_producer(bootstrap, topic)
    produce(3)
    source = RdmalogDataSource({"subscribe": topic, "rdmalog.bootstrap": bootstrap})
    reader = source.streamReader(kafka_schema(False))
    first = reader.initialOffset()
    produce(4)
    assert reader.initialOffset() == first
    assert from_json(first) == {(topic, 0): 3}
    assert from_json(reader.latestOffset(first)) == {(topic, 0): 7}


def test_assigned_topic_deleted_mid_stream_is_data_loss(bootstrap: str) -> None:
    """A deleted topic under `assign` is a partition gone, as with `subscribe`: with
    failOnDataLoss=false the stream carries on (spark-sql-kafka's AssignStrategy keeps only the
    partitions that exist), it does not fail on the 'assign' option."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from rdmalog.spark import RdmalogDataSource
    from rdmalog.spark.schema import kafka_schema

    topic = "assign-deleted-mid-stream"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    options = {"assign": f'{{"{topic}":[0]}}', "rdmalog.bootstrap": bootstrap}
    reader = RdmalogDataSource(options | {"failOnDataLoss": "false"}).streamReader(
        kafka_schema(False)
    )
    strict = RdmalogDataSource(options).streamReader(kafka_schema(False))
    first = reader.initialOffset()
    assert strict.initialOffset() == first == {topic: {"0": 0}}
    admin.delete_topics([topic])[topic].result(15)
    latest = reader.latestOffset(first)
    assert latest == {}
    assert reader.partitions(first, latest) == []
    with pytest.raises(Exception, match="failOnDataLoss"):
        strict.partitions(first, strict.latestOffset(first))
    reader.stop()
    strict.stop()


def test_available_now_target_before_initial_offset(bootstrap: str) -> None:
    """Spark calls prepareForTriggerAvailableNow() when it builds the plan, before it asks a new
    query's initialOffset(). Records produced in between put `latest` (the default start) past the
    target; that is nothing to read, not offsets going back (which failed the query)."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from rdmalog.spark import RdmalogDataSource
    from rdmalog.spark.schema import kafka_schema

    topic = "available-now-target-first"
    produce = _topic_and_producer(bootstrap, topic)
    produce(3)
    source = RdmalogDataSource({"subscribe": topic, "rdmalog.bootstrap": bootstrap})
    reader = source.streamReader(kafka_schema(False))
    reader.prepareForTriggerAvailableNow()
    produce(4)
    first = reader.initialOffset()
    assert from_json(first) == {(topic, 0): 7}
    end = reader.latestOffset(first, ReadAllAvailable())
    assert end == first
    assert reader.partitions(first, end) == []
    reader.stop()
