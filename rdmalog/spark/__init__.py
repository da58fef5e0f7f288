"""PySpark data source `rdmalog`: spark-sql-kafka's options and schema, read and written through
the Kafka protocol (any Kafka broker) or rdmalog's native transports.

    import rdmalog.spark
    rdmalog.spark.register(spark)
    spark.read.format("rdmalog").option("rdmalog.bootstrap", "host:9092").option("subscribe", "t")
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rdmalog.spark.source import RdmalogDataSource, RdmalogPythonDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["RdmalogDataSource", "RdmalogPythonDataSource", "register"]


def register(spark: SparkSession) -> None:
    """Register the `rdmalog` format with `spark`.

    Without the JVM reader's jar on the classpath this is the Python data source. With it,
    `format("rdmalog")` is the JVM reader (native tcp reads in the JVM) and the Python source is
    registered as `rdmalog-python`, to which the JVM reader hands what it does not do itself."""
    from rdmalog.spark import jvm

    if jvm.loaded(spark):
        spark.dataSource.register(RdmalogPythonDataSource)
    else:
        spark.dataSource.register(RdmalogDataSource)
