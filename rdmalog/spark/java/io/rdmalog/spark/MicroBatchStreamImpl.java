package io.rdmalog.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.PartitionOffset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeMode;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;

/**
 * Micro-batches (processing-time triggers, Trigger.AvailableNow, maxOffsetsPerTrigger) and Spark's
 * real-time mode (`trigger(realTime=...)`: each batch's tasks read from its start offsets until
 * the batch duration ends, returning every record as it arrives; their positions make the next
 * batch's start). Offsets are spark-sql-kafka's JSON.
 */
final class MicroBatchStreamImpl extends StreamBase
    implements MicroBatchStream, SupportsTriggerAvailableNow, SupportsRealTimeMode {
  private Map<TopicPartition, Long> target; // Trigger.AvailableNow's end
  private Map<TopicPartition, Long> lastLatest;

  MicroBatchStreamImpl(ReadOptions opts) {
    super(opts);
  }

  @Override
  public ReadLimit getDefaultReadLimit() {
    return opts.maxOffsetsPerTrigger == null
        ? ReadLimit.allAvailable()
        : ReadLimit.maxRows(opts.maxOffsetsPerTrigger);
  }

  @Override
  public Offset latestOffset() {
    throw new UnsupportedOperationException("latestOffset(Offset, ReadLimit) is to be called");
  }

  /** Latest offsets now (capped by Trigger.AvailableNow's target, never below `begin`). */
  private Map<TopicPartition, Long> latestNow(Map<TopicPartition, Long> begin) {
    Map<TopicPartition, Long> latest = planner.latest(planner.discover(false));
    if (target != null) {
      Map<TopicPartition, Long> capped = new TreeMap<>();
      for (Map.Entry<TopicPartition, Long> e : latest.entrySet()) {
        Long cap = target.get(e.getKey());
        if (cap != null) {
          long floor = begin == null ? 0 : begin.getOrDefault(e.getKey(), 0L);
          capped.put(e.getKey(), Math.min(e.getValue(), Math.max(cap, floor)));
        }
      }
      latest = capped;
    }
    lastLatest = latest;
    return latest;
  }

  @Override
  public Offset latestOffset(Offset start, ReadLimit limit) {
    Map<TopicPartition, Long> begin = new TreeMap<>(((KafkaOffsets) start).offsets);
    Map<TopicPartition, Long> latest = latestNow(begin);
    startNewAtEarliest(begin, latest.keySet());
    if (limit instanceof ReadMaxRows) {
      latest = OffsetPlanner.rateLimit(((ReadMaxRows) limit).maxRows(), begin, latest);
    }
    return new KafkaOffsets(latest);
  }

  @Override
  public Offset reportLatestOffset() {
    return lastLatest == null ? null : new KafkaOffsets(lastLatest);
  }

  @Override
  public void prepareForTriggerAvailableNow() {
    target = null;
    target = latestNow(null);
  }

  @Override
  public InputPartition[] planInputPartitions(Offset start, Offset end) {
    Map<TopicPartition, Long> begin = new TreeMap<>(((KafkaOffsets) start).offsets);
    Map<TopicPartition, Long> until = ((KafkaOffsets) end).offsets;
    List<String> gone = new ArrayList<>();
    for (TopicPartition tp : begin.keySet()) {
      if (!until.containsKey(tp)) {
        gone.add(tp.toString());
      }
    }
    if (!gone.isEmpty()) {
      OffsetPlanner.reportDataLoss(opts.failOnDataLoss,
          "topic-partitions " + String.join(", ", gone) + " are gone");
    }
    startNewAtEarliest(begin, until.keySet());
    for (Map.Entry<TopicPartition, Long> e : until.entrySet()) {
      if (e.getValue() < begin.get(e.getKey())) {
        OffsetPlanner.reportDataLoss(opts.failOnDataLoss, e.getKey() + ": offset went back from "
            + begin.get(e.getKey()) + " to " + e.getValue());
      }
    }
    return OffsetPlanner.planRanges(begin, until, opts.minPartitions)
        .toArray(new InputPartition[0]);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new ReaderFactory(ReaderConfig.of(opts));
  }

  // -- real-time mode ----------------------------------------------------------------------------

  @Override
  public InputPartition[] planInputPartitions(Offset start) {
    return livePartitions(start);
  }

  @Override
  public Offset mergeOffsets(PartitionOffset[] offsets) {
    return merge(offsets);
  }

  @Override
  public String toString() {
    return "rdmalog[jvm, " + opts.transport + " " + opts.control + "]";
  }
}
