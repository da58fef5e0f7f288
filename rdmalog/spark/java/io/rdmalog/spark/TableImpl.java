package io.rdmalog.spark;

import java.util.EnumSet;
import java.util.Set;
import java.util.function.Supplier;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** `format("rdmalog")` over the native tcp datapath: the JVM reads (batch, micro-batch,
 * real-time mode, continuous); writes go to the Python data source's writer. */
final class TableImpl implements SupportsRead, SupportsWrite {
  private final StructType schema;
  private final Supplier<Table> python;

  TableImpl(StructType schema, Supplier<Table> python) {
    this.schema = schema;
    this.python = python;
  }

  @Override
  public String name() {
    return "rdmalog";
  }

  @Override
  @SuppressWarnings("deprecation") // Spark still asks a table for its schema
  public StructType schema() {
    return schema;
  }

  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ,
        TableCapability.CONTINUOUS_READ, TableCapability.BATCH_WRITE,
        TableCapability.STREAMING_WRITE, TableCapability.TRUNCATE);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    return new ScanImpl(schema, options.asCaseSensitiveMap());
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    return ((SupportsWrite) python.get()).newWriteBuilder(info);
  }
}
