"""Batch and streaming writers: each task produces its rows (spark-sql-kafka's sink columns)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructType,
)

from rdmalog.spark.options import OptionError, WriteOptions
from rdmalog.spark.transport import open_sink

try:  # Arrow batches for streaming writes: pyspark >= 4.1
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase
except ImportError:  # pragma: no cover - older pyspark hands over Rows
    _StreamWriterBase = DataSourceStreamWriter


@dataclass
class WriteSummary(WriterCommitMessage):
    """What one task wrote."""

    records: int


def check_columns(opts: WriteOptions, schema: StructType) -> None:
    """value (string/binary) required; topic unless the option is set; key, partition, headers."""
    types = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in types:
        raise OptionError("required attribute 'value' not found in the DataFrame to write")
    for name in ("key", "value"):
        if name in types and not isinstance(types[name], StringType | BinaryType):
            raise OptionError(
                f"{name} attribute type must be a string or binary, got {types[name].simpleString()}"
            )
    if opts.topic is None:
        if "topic" not in types:
            raise OptionError(
                "topic option required when no 'topic' attribute is present: use the 'topic' "
                "option for setting a topic"
            )
        if not isinstance(types["topic"], StringType):
            raise OptionError(
                f"topic attribute type must be a string, got {types['topic'].simpleString()}"
            )
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        raise OptionError(
            f"partition attribute type must be an int, got {types['partition'].simpleString()}"
        )
    if "headers" in types:
        t = types["headers"]
        ok = (
            isinstance(t, ArrayType)
            and isinstance(t.elementType, StructType)
            and [f.name for f in t.elementType.fields] == ["key", "value"]
            and isinstance(t.elementType.fields[0].dataType, StringType)
            and isinstance(t.elementType.fields[1].dataType, BinaryType)
        )
        if not ok:
            raise OptionError(
                "headers attribute type must be array<struct<key:string,value:binary>>, "
                f"got {t.simpleString()}"
            )


def _bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)


Row = tuple[str | None, Any, Any, int | None, list | None]  # topic, key, value, partition, headers


def _rows(iterator: Iterator) -> Iterator[Row]:
    """(topic, key, value, partition, headers) from Arrow record batches or Spark Rows."""
    for item in iterator:
        if hasattr(item, "num_rows"):  # pyarrow.RecordBatch: convert column by column
            cols = {n.lower(): item.column(i).to_pylist() for i, n in enumerate(item.schema.names)}
            none = [None] * item.num_rows
            yield from zip(
                cols.get("topic", none),
                cols.get("key", none),
                cols["value"],
                cols.get("partition", none),
                cols.get("headers", none),
                strict=True,
            )
        else:
            row = {k.lower(): v for k, v in item.asDict(recursive=False).items()}
            headers = row.get("headers")
            yield (
                row.get("topic"),
                row.get("key"),
                row.get("value"),
                row.get("partition"),
                [(h["key"], h["value"]) for h in headers] if headers else None,
            )


def write_rows(opts: WriteOptions, iterator: Iterator) -> WriteSummary:
    """Produce every row; returns once each record is acknowledged."""
    sink = open_sink(opts.conn)
    try:
        for topic, key, value, partition, headers in _rows(iterator):
            topic = opts.topic or topic
            if not topic:
                raise ValueError("null topic present in the data; use the 'topic' option")
            sink.send(
                topic,
                _bytes(key),
                _bytes(value),
                partition,
                [(_header(h)[0], _bytes(_header(h)[1])) for h in headers] if headers else None,
            )
    finally:
        sink.close()
    return WriteSummary(sink.sent)


def _header(h: Any) -> tuple[str, Any]:
    return (h["key"], h["value"]) if isinstance(h, dict) else (h[0], h[1])


class RdmalogWriter(DataSourceArrowWriter):
    """Batch write: at-least-once per task, like spark-sql-kafka."""

    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        check_columns(opts, schema)
        self.opts = opts

    def write(self, iterator: Iterator) -> WriteSummary:
        return write_rows(self.opts, iterator)


class RdmalogStreamWriter(_StreamWriterBase):
    """Streaming write: each micro-batch's tasks produce their rows; commit has nothing to do."""

    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        check_columns(opts, schema)
        self.opts = opts

    def write(self, iterator: Iterator) -> WriteSummary:
        return write_rows(self.opts, iterator)

    def commit(self, messages: list, batchId: int) -> None:  # noqa: N803 - Spark's name
        """Records are acknowledged by the broker when write() returns."""

    def abort(self, messages: list, batchId: int) -> None:  # noqa: N803 - Spark's name
        """Produced records cannot be taken back (at-least-once, like spark-sql-kafka)."""
