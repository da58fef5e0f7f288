package io.rdmalog.spark;

import java.util.Map;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.ContinuousStream;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.types.StructType;

/** A read of the source: options are validated for the kind of query that reads them. */
final class ScanImpl implements Scan, ScanBuilder {
  private final StructType schema;
  private final Map<String, String> options;

  ScanImpl(StructType schema, Map<String, String> options) {
    this.schema = schema;
    this.options = options;
  }

  private ReadOptions parse(boolean streaming) {
    ReadOptions opts = ReadOptions.parse(options, streaming);
    if (!KafkaSchema.same(schema, opts.includeHeaders)) {
      throw new OptionException("the rdmalog source has a fixed schema and cannot be set with a "
          + "custom one (expected " + KafkaSchema.of(opts.includeHeaders).simpleString()
          + "; 'includeHeaders' adds the headers column)");
    }
    return opts;
  }

  @Override
  public Scan build() {
    return this;
  }

  @Override
  public StructType readSchema() {
    return schema;
  }

  @Override
  public String description() {
    return "rdmalog (JVM reader, native tcp datapath)";
  }

  @Override
  public Batch toBatch() {
    return new BatchImpl(parse(false));
  }

  @Override
  public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
    return new MicroBatchStreamImpl(parse(true));
  }

  @Override
  public ContinuousStream toContinuousStream(String checkpointLocation) {
    return new ContinuousStreamImpl(parse(true));
  }
}
