package io.rdmalog.spark;

import java.util.HashSet;
import java.util.Set;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.streaming.ContinuousPartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.ContinuousStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.PartitionOffset;

/**
 * Continuous processing (`trigger(continuous=...)`): one long-running task per topic-partition,
 * records returned as they arrive, epochs checkpointed at the trigger interval. A partition set
 * that changed (a topic created, partitions added) restarts the tasks with the new set.
 */
final class ContinuousStreamImpl extends StreamBase implements ContinuousStream {
  private Set<TopicPartition> known = Set.of();

  ContinuousStreamImpl(ReadOptions opts) {
    super(opts);
  }

  @Override
  public InputPartition[] planInputPartitions(Offset start) {
    InputPartition[] parts = livePartitions(start);
    Set<TopicPartition> tps = new HashSet<>();
    for (InputPartition p : parts) {
      tps.add(((OffsetRange) p).tp());
    }
    known = tps;
    return parts;
  }

  @Override
  public ContinuousPartitionReaderFactory createContinuousReaderFactory() {
    return new ReaderFactory.Continuous(ReaderConfig.of(opts));
  }

  @Override
  public Offset mergeOffsets(PartitionOffset[] offsets) {
    return merge(offsets);
  }

  @Override
  public boolean needsReconfiguration() {
    return !new HashSet<>(planner.discover(false)).equals(known);
  }

  @Override
  public String toString() {
    return "rdmalog[jvm continuous, " + opts.transport + " " + opts.control + "]";
  }
}
