package io.rdmalog.rdma;

/** One record as the Kafka protocol hands it out: offset, timestamp (and its type), key, value,
 * headers (null when there are none). */
public final class KafkaRecord {
  public static final int CREATE_TIME = 0;
  public static final int LOG_APPEND_TIME = 1;

  public final long offset;
  public final long timestamp;
  public final int timestampType;
  public final byte[] key;
  public final byte[] value;
  public final String[] headerKeys;
  public final byte[][] headerValues;

  KafkaRecord(
      long offset,
      long timestamp,
      int timestampType,
      byte[] key,
      byte[] value,
      String[] headerKeys,
      byte[][] headerValues) {
    this.offset = offset;
    this.timestamp = timestamp;
    this.timestampType = timestampType;
    this.key = key;
    this.value = value;
    this.headerKeys = headerKeys;
    this.headerValues = headerValues;
  }
}
