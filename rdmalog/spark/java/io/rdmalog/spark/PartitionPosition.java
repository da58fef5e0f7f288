package io.rdmalog.spark;

import org.apache.spark.sql.connector.read.streaming.PartitionOffset;

/** A reader's position in its topic-partition (continuous and real-time mode): the next offset. */
public record PartitionPosition(TopicPartition tp, long offset) implements PartitionOffset {}
