package io.rdmalog.spark;

import java.util.List;
import java.util.Map;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;

/** A batch query: [startingOffsets, endingOffsets) of every subscribed partition, resolved
 * exactly on the driver, read by the executors. */
final class BatchImpl implements Batch {
  private final ReadOptions opts;

  BatchImpl(ReadOptions opts) {
    this.opts = opts;
  }

  @Override
  public InputPartition[] planInputPartitions() {
    try (OffsetPlanner planner = new OffsetPlanner(opts)) {
      List<TopicPartition> tps = planner.discover(true);
      Map<TopicPartition, Long> start = planner.resolve(opts.starting, tps, true);
      Map<TopicPartition, Long> end = planner.resolve(opts.ending, tps, false);
      for (TopicPartition tp : tps) {
        if (start.get(tp) > end.get(tp)) {
          OffsetPlanner.reportDataLoss(opts.failOnDataLoss, tp + ": the starting offset "
              + start.get(tp) + " is after the ending offset " + end.get(tp) + " (options '"
              + opts.starting.option + "' / '" + opts.ending.option + "')");
        }
      }
      return OffsetPlanner.planRanges(start, end, opts.minPartitions)
          .toArray(new InputPartition[0]);
    }
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new ReaderFactory(ReaderConfig.of(opts));
  }
}
