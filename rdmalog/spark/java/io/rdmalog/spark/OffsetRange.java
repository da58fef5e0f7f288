package io.rdmalog.spark;

import org.apache.spark.sql.connector.read.InputPartition;

/**
 * One Spark input partition: offsets [start, end) of one topic-partition; end = UNBOUNDED for a
 * real-time-mode or continuous task, which reads from `start` for as long as it runs.
 */
public record OffsetRange(TopicPartition tp, long start, long end) implements InputPartition {
  public static final long UNBOUNDED = Long.MAX_VALUE;

  long size() {
    return end - start;
  }
}
