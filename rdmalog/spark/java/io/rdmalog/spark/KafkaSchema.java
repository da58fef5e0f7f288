package io.rdmalog.spark;

import io.rdmalog.rdma.KafkaRecord;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/** spark-sql-kafka's read schema (rdmalog/spark/schema.py) and records as rows of it. */
final class KafkaSchema {
  private KafkaSchema() {}

  static StructType of(boolean includeHeaders) {
    StructType s = new StructType()
        .add("key", DataTypes.BinaryType)
        .add("value", DataTypes.BinaryType)
        .add("topic", DataTypes.StringType)
        .add("partition", DataTypes.IntegerType)
        .add("offset", DataTypes.LongType)
        .add("timestamp", DataTypes.TimestampType)
        .add("timestampType", DataTypes.IntegerType);
    if (includeHeaders) {
      StructType header = new StructType()
          .add("key", DataTypes.StringType)
          .add("value", DataTypes.BinaryType);
      s = s.add(new StructField("headers", new ArrayType(header, true), true,
          org.apache.spark.sql.types.Metadata.empty()));
    }
    return s;
  }

  /** Whether `schema` is the source's (names and types; a user-specified schema must be). */
  static boolean same(StructType schema, boolean includeHeaders) {
    StructType want = of(includeHeaders);
    if (schema.fields().length != want.fields().length) {
      return false;
    }
    for (int i = 0; i < want.fields().length; i++) {
      if (!schema.fields()[i].name().equals(want.fields()[i].name())
          || !schema.fields()[i].dataType().sameType(want.fields()[i].dataType())) {
        return false;
      }
    }
    return true;
  }

  /** One record of `topic`/`partition` as a row (timestamps are microseconds). */
  static InternalRow row(KafkaRecord r, UTF8String topic, int partition, boolean headers) {
    Object[] v = new Object[headers ? 8 : 7];
    v[0] = r.key;
    v[1] = r.value;
    v[2] = topic;
    v[3] = partition;
    v[4] = r.offset;
    v[5] = r.timestamp * 1000L;
    v[6] = r.timestampType;
    if (headers && r.headerKeys != null) {
      Object[] hs = new Object[r.headerKeys.length];
      for (int i = 0; i < hs.length; i++) {
        hs[i] = new GenericInternalRow(new Object[] {
            r.headerKeys[i] == null ? null : UTF8String.fromString(r.headerKeys[i]),
            r.headerValues[i]});
      }
      v[7] = new GenericArrayData(hs);
    }
    return new GenericInternalRow(v);
  }
}
