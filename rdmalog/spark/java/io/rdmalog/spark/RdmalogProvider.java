package io.rdmalog.spark;

import java.util.Map;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * `format("rdmalog")` when this jar is on Spark's classpath. Reads over the native tcp datapath
 * (rdmalog.transport=tcp, no librdkafka settings) run in the JVM, in every trigger mode Spark
 * offers JVM sources; everything else (the Kafka transport, shm, writes) is handed to the Python
 * data source, which `rdmalog.spark.register(spark)` registers as `rdmalog-python` when it finds
 * this class (two sources may not share a name).
 */
public final class RdmalogProvider implements TableProvider, DataSourceRegister {
  public static final String PYTHON_NAME = "rdmalog-python";
  private static final Logger LOG = LoggerFactory.getLogger(RdmalogProvider.class);

  @Override
  public String shortName() {
    return "rdmalog";
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    String headers = options.getOrDefault("includeHeaders", "false").strip();
    if (!headers.equalsIgnoreCase("true") && !headers.equalsIgnoreCase("false")) {
      throw new OptionException(
          "option 'includeHeaders' must be 'true' or 'false', got '" + headers + "'");
    }
    return KafkaSchema.of(headers.equalsIgnoreCase("true"));
  }

  /** A write's table has the data's schema; a read's is checked against the source's. */
  @Override
  public boolean supportsExternalMetadata() {
    return true;
  }

  @Override
  public Table getTable(
      StructType schema, Transform[] partitioning, Map<String, String> properties) {
    String why = ReadOptions.jvmCannotServe(properties);
    if (why != null) {
      LOG.info("format('rdmalog'): the Python data source reads and writes this one: {}", why);
      return python(schema, partitioning, properties);
    }
    return new TableImpl(schema, () -> python(schema, partitioning, properties));
  }

  private static Table python(
      StructType schema, Transform[] partitioning, Map<String, String> properties) {
    boolean registered = org.apache.spark.sql.classic.SparkSession.active().sessionState()
        .dataSourceManager().dataSourceExists(PYTHON_NAME);
    if (!registered) {
      throw new OptionException("format('rdmalog') with these options (or a write) needs the "
          + "Python data source: call rdmalog.spark.register(spark) first");
    }
    PythonDataSourceV2 source = new PythonDataSourceV2();
    source.setShortName(PYTHON_NAME);
    return source.getTable(schema, partitioning, properties);
  }
}
