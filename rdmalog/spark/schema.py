"""The fixed output schema (spark-sql-kafka's) and Arrow batches in that schema."""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)

# Kafka's TimestampType ids, as spark-sql-kafka reports them
NO_TIMESTAMP_TYPE = -1
CREATE_TIME = 0
LOG_APPEND_TIME = 1


def kafka_schema(include_headers: bool) -> StructType:
    """key, value, topic, partition, offset, timestamp, timestampType[, headers]."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


def arrow_schema(schema: StructType):  # -> pa.Schema
    """The Arrow schema Spark expects for `schema` (UTC timestamps)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        return to_arrow_schema(schema, timezone="UTC")
    except TypeError:  # older signature without timezone
        return to_arrow_schema(schema)


@dataclass
class RecordColumns:
    """Column buffers for one Arrow batch of Kafka records."""

    include_headers: bool
    keys: list = field(default_factory=list)
    values: list = field(default_factory=list)
    offsets: list = field(default_factory=list)
    timestamps: list = field(default_factory=list)
    ts_types: list = field(default_factory=list)
    headers: list = field(default_factory=list)

    def add(
        self,
        key: bytes | None,
        value: bytes | None,
        offset: int,
        timestamp_ms: int | None,
        ts_type: int,
        headers: list[tuple[str, bytes | None]] | None,
    ) -> None:
        """Append one record."""
        self.keys.append(key)
        self.values.append(value)
        self.offsets.append(offset)
        self.timestamps.append(timestamp_ms)
        self.ts_types.append(ts_type)
        if self.include_headers:
            self.headers.append([{"key": k, "value": v} for k, v in headers] if headers else None)

    def __len__(self) -> int:
        return len(self.offsets)

    def to_batch(self, pa_schema, topic: str, partition: int):  # -> pa.RecordBatch
        """Build the batch (topic/partition are constant for one input partition) and reset."""
        import pyarrow as pa

        n = len(self.offsets)
        ts_field = pa_schema.field("timestamp").type
        arrays = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.array([topic] * n, pa.string()),
            pa.array([partition] * n, pa.int32()),
            pa.array(self.offsets, pa.int64()),
            pa.array([None if t is None else t * 1000 for t in self.timestamps], pa.int64()).cast(
                ts_field
            ),
            pa.array(self.ts_types, pa.int32()),
        ]
        if self.include_headers:
            arrays.append(pa.array(self.headers, pa_schema.field("headers").type))
        batch = pa.RecordBatch.from_arrays(arrays, schema=pa_schema)
        self.keys, self.values, self.offsets = [], [], []
        self.timestamps, self.ts_types, self.headers = [], [], []
        return batch
