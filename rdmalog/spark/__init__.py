"""PySpark data source `rdmalog`: spark-sql-kafka's options and schema, read and written through
the Kafka protocol (any Kafka broker) or rdmalog's native transports.

    import rdmalog.spark
    rdmalog.spark.register(spark)
    spark.read.format("rdmalog").option("rdmalog.bootstrap", "host:9092").option("subscribe", "t")
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rdmalog.spark.source import RdmalogDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["RdmalogDataSource", "register"]


def register(spark: SparkSession) -> None:
    """Register the `rdmalog` format with `spark`."""
    spark.dataSource.register(RdmalogDataSource)
