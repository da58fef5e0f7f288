"""The `rdmalog` Python data source: spark-sql-kafka's options and schema over rdmalog."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from rdmalog.spark.options import OptionError, parse_bool, parse_read, parse_write
from rdmalog.spark.schema import kafka_schema


class RdmalogDataSource(DataSource):
    """`spark.read/readStream/write/writeStream.format("rdmalog")`."""

    @classmethod
    def name(cls) -> str:
        return "rdmalog"

    def schema(self) -> StructType:
        opts = {str(k).lower(): str(v) for k, v in self.options.items()}
        return kafka_schema(parse_bool(opts, "includeHeaders", False))

    def reader(self, schema: StructType) -> DataSourceReader:
        from rdmalog.spark.reader import RdmalogBatchReader

        return RdmalogBatchReader(parse_read(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from rdmalog.spark.stream_reader import RdmalogStreamReader

        return RdmalogStreamReader(parse_read(self.options, streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from rdmalog.spark.writer import RdmalogWriter

        if overwrite:
            raise OptionError(
                "save mode 'overwrite' is not allowed for the rdmalog source: use mode('append')"
            )
        return RdmalogWriter(parse_write(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from rdmalog.spark.writer import RdmalogStreamWriter

        return RdmalogStreamWriter(parse_write(self.options), schema)


class RdmalogPythonDataSource(RdmalogDataSource):
    """The same source under the name the JVM reader hands it what it does not do itself (the
    Kafka transport, writes): two sources may not share `rdmalog` (see rdmalog/spark/jvm.py)."""

    @classmethod
    def name(cls) -> str:
        from rdmalog.spark.jvm import PYTHON_NAME

        return PYTHON_NAME
