package io.rdmalog.spark;

import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.PartitionOffset;

/** What the micro-batch and the continuous stream share: where a query starts, partitions that
 * appear or disappear while it runs, and live tasks' positions merged into a stream offset. */
abstract class StreamBase {
  final ReadOptions opts;
  final OffsetPlanner planner;
  private Map<TopicPartition, Long> initial;

  StreamBase(ReadOptions opts) {
    this.opts = opts;
    this.planner = new OffsetPlanner(opts);
  }

  /**
   * startingOffsets, resolved once: Spark asks again when it plans the first batch, and `latest`
   * must not move between the two (spark-sql-kafka keeps the first answer too).
   */
  public Offset initialOffset() {
    if (initial == null) {
      initial = planner.resolve(opts.starting, planner.discover(true), true);
    }
    return new KafkaOffsets(initial);
  }

  public Offset deserializeOffset(String json) {
    return KafkaOffsets.fromJson(json);
  }

  public void commit(Offset end) {
    // progress lives in Spark's checkpoint, never in the broker
  }

  public void stop() {
    planner.close();
  }

  /** Partitions in `seen` but not in `begin` appeared while the query runs: from the earliest. */
  void startNewAtEarliest(Map<TopicPartition, Long> begin, Collection<TopicPartition> seen) {
    List<TopicPartition> fresh = new ArrayList<>();
    for (TopicPartition tp : seen) {
      if (!begin.containsKey(tp)) {
        fresh.add(tp);
      }
    }
    if (!fresh.isEmpty()) {
      begin.putAll(planner.earliest(fresh));
    }
  }

  /** Unbounded ranges from `start` over the partitions subscribed now (live tasks). */
  InputPartition[] livePartitions(Offset start) {
    Map<TopicPartition, Long> begin = new TreeMap<>(((KafkaOffsets) start).offsets);
    List<TopicPartition> now = planner.discover(false);
    List<String> gone = new ArrayList<>();
    for (TopicPartition tp : begin.keySet()) {
      if (!now.contains(tp)) {
        gone.add(tp.toString());
      }
    }
    if (!gone.isEmpty()) {
      OffsetPlanner.reportDataLoss(opts.failOnDataLoss,
          "topic-partitions " + String.join(", ", gone) + " are gone");
    }
    startNewAtEarliest(begin, now);
    List<InputPartition> out = new ArrayList<>();
    for (TopicPartition tp : now) {
      out.add(new OffsetRange(tp, begin.get(tp), OffsetRange.UNBOUNDED));
    }
    return out.toArray(new InputPartition[0]);
  }

  /** The live tasks' positions as one stream offset. */
  Offset merge(PartitionOffset[] offsets) {
    Map<TopicPartition, Long> out = new TreeMap<>();
    for (PartitionOffset o : offsets) {
      PartitionPosition p = (PartitionPosition) o;
      out.put(p.tp(), p.offset());
    }
    return new KafkaOffsets(out);
  }
}
