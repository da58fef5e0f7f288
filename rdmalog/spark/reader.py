"""Batch reader: the driver resolves exact offset ranges, executors read them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from rdmalog.spark.offsets import OffsetRange, discover, plan_ranges, report_data_loss, resolve
from rdmalog.spark.options import OptionError, ReadOptions
from rdmalog.spark.schema import RecordColumns, arrow_schema, kafka_schema
from rdmalog.spark.transport import open_offsets, read_range

ARROW_BATCH_ROWS = 8192


def check_schema(opts: ReadOptions, schema: StructType) -> None:
    """The source's schema is fixed (like spark-sql-kafka's): reject a user-specified one."""
    expected = kafka_schema(opts.include_headers)
    if [(f.name, f.dataType) for f in schema.fields] != [
        (f.name, f.dataType) for f in expected.fields
    ]:
        raise OptionError(
            "the rdmalog source has a fixed schema and cannot be set with a custom one "
            f"(expected {expected.simpleString()}; 'includeHeaders' adds the headers column)"
        )


def read_arrow(opts: ReadOptions, schema: StructType, part: OffsetRange) -> Iterator:
    """Arrow batches of one offset range, read on the executor running the task."""
    pa_schema = arrow_schema(schema)
    cols = RecordColumns(opts.include_headers)
    for key, value, offset, ts, ts_type, headers in read_range(
        opts.conn,
        (part.topic, part.partition),
        part.start,
        part.end,
        opts.fail_on_data_loss,
        opts.poll_timeout_ms,
    ):
        cols.add(key, value, offset, ts, ts_type, headers)
        if len(cols) >= ARROW_BATCH_ROWS:
            yield cols.to_batch(pa_schema, part.topic, part.partition)
    if len(cols):
        yield cols.to_batch(pa_schema, part.topic, part.partition)


class RdmalogBatchReader(DataSourceReader):
    """Reads [startingOffsets, endingOffsets) of every subscribed topic-partition."""

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        check_schema(opts, schema)
        self.opts = opts
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        """Runs on the driver: resolve both ends exactly, one range per topic-partition."""
        opts = self.opts
        assert opts.ending is not None
        client = open_offsets(opts.conn)
        try:
            tps = discover(client, opts.subscription)
            start = resolve(
                client,
                opts.starting,
                tps,
                starting=True,
                fail_on_data_loss=opts.fail_on_data_loss,
                timestamp_strategy=opts.timestamp_strategy,
            )
            end = resolve(
                client, opts.ending, tps, starting=False, fail_on_data_loss=opts.fail_on_data_loss
            )
        finally:
            client.close()
        for tp in tps:
            if start[tp] > end[tp]:
                report_data_loss(
                    opts.fail_on_data_loss,
                    f"{tp[0]}-{tp[1]}: the starting offset {start[tp]} is after the ending "
                    f"offset {end[tp]} (options '{opts.starting.option}' / '{opts.ending.option}')",
                )
        return plan_ranges(start, end, opts.min_partitions)

    def read(self, partition: InputPartition) -> Iterator:
        """Runs on an executor."""
        if not isinstance(partition, OffsetRange):  # nothing planned: Spark still runs one task
            return iter(())
        return read_arrow(self.opts, self.schema, partition)
