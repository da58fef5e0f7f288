package io.rdmalog.spark;

import java.io.Closeable;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The driver's offset logic, as rdmalog/spark/offsets.py (and spark-sql-kafka) do it: find the
 * subscribed partitions, resolve offset specs to exact offsets, share `maxOffsetsPerTrigger`
 * among partitions by backlog, and cut ranges into input partitions for `minPartitions`.
 */
final class OffsetPlanner implements Closeable {
  private static final Logger LOG = LoggerFactory.getLogger(OffsetPlanner.class);
  private static final int TIMEOUT_MS = 30_000;

  private final ReadOptions opts;
  private KafkaMetadata meta;

  OffsetPlanner(ReadOptions opts) {
    this.opts = opts;
  }

  private KafkaMetadata meta() {
    if (meta == null) {
      meta = new KafkaMetadata(opts.bootstrap, TIMEOUT_MS);
    }
    return meta;
  }

  /** Raise (failOnDataLoss=true) or log a warning and carry on, as spark-sql-kafka does. */
  static void reportDataLoss(boolean fail, String message) {
    if (fail) {
      throw new IllegalStateException(message + ". Some data may have been lost; set option "
          + "'failOnDataLoss' to 'false' to carry on instead.");
    }
    LOG.warn("{}. Some data may have been lost (deleted by retention, DeleteRecords or with its "
        + "topic); carrying on because failOnDataLoss is false.", message);
  }

  /**
   * The subscribed topic-partitions now, sorted. `checkAssigned` (a query's start): an assigned
   * partition that does not exist is a bad option; later it is left out (data loss to report).
   */
  List<TopicPartition> discover(boolean checkAssigned) {
    Map<String, List<Integer>> existing;
    try {
      existing = meta().topicPartitions();
    } catch (IOException e) {
      throw new UncheckedIOException("cannot read metadata from " + opts.bootstrap, e);
    }
    List<TopicPartition> out = new ArrayList<>();
    if (opts.subscriptionKind.equals("assign")) {
      List<String> missing = new ArrayList<>();
      for (TopicPartition tp : opts.assigned) {
        if (existing.getOrDefault(tp.topic(), List.of()).contains(tp.partition())) {
          out.add(tp);
        } else {
          missing.add(tp.toString());
        }
      }
      if (!missing.isEmpty() && checkAssigned) {
        throw new OptionException("option 'assign' names topic-partitions that do not exist: "
            + String.join(", ", missing));
      }
      return out;
    }
    for (Map.Entry<String, List<Integer>> e : existing.entrySet()) {
      if (opts.matches(e.getKey())) {
        for (int p : e.getValue()) {
          out.add(new TopicPartition(e.getKey(), p));
        }
      }
    }
    out.sort(null);
    return out;
  }

  Map<TopicPartition, Long> latest(List<TopicPartition> tps) {
    return resolve(new ReadOptions.OffsetSpec("latest", Map.of(), 0, ""), tps, false);
  }

  Map<TopicPartition, Long> earliest(List<TopicPartition> tps) {
    return resolve(new ReadOptions.OffsetSpec("earliest", Map.of(), 0, ""), tps, true);
  }

  /** Exact offsets for `spec` on `tps`, asked of the broker now. */
  Map<TopicPartition, Long> resolve(
      ReadOptions.OffsetSpec spec, List<TopicPartition> tps, boolean starting) {
    Map<TopicPartition, Long> out = new TreeMap<>();
    if (tps.isEmpty()) {
      return out;
    }
    try {
      Map<TopicPartition, long[]> marks = meta().watermarks(tps);
      switch (spec.kind) {
        case "earliest":
        case "latest":
          int i = spec.kind.equals("earliest") ? 0 : 1;
          for (TopicPartition tp : tps) {
            out.put(tp, marks.get(tp)[i]);
          }
          return out;
        case "offsets":
          checkCovers(spec, tps);
          for (TopicPartition tp : tps) {
            long low = marks.get(tp)[0];
            long high = marks.get(tp)[1];
            long off = spec.offsets.get(tp);
            if (off == ReadOptions.EARLIEST) {
              off = low;
            } else if (off == ReadOptions.LATEST) {
              off = high;
            } else if (off > high) {
              throw new OptionException("option '" + spec.option + "': offset " + off + " for "
                  + tp + " is past the latest offset " + high);
            } else if (off < low && starting) {
              reportDataLoss(opts.failOnDataLoss, "option '" + spec.option + "': offset " + off
                  + " for " + tp + " is before the earliest available offset " + low);
              off = low;
            }
            out.put(tp, off);
          }
          return out;
        default:
          Map<TopicPartition, Long> stamps = new TreeMap<>();
          if (spec.kind.equals("timestamps")) {
            checkCovers(spec, tps);
            stamps.putAll(spec.offsets);
          } else {
            for (TopicPartition tp : tps) {
              stamps.put(tp, spec.timestamp);
            }
          }
          Map<TopicPartition, Long> found = meta().offsetsForTimes(stamps);
          for (TopicPartition tp : tps) {
            Long off = found.get(tp);
            if (off == null) {
              if (starting && opts.timestampStrategy.equals("error")) {
                throw new OptionException("option '" + spec.option + "': no record in " + tp
                    + " has a timestamp >= " + stamps.get(tp) + "; set "
                    + "'startingOffsetsByTimestampStrategy' to 'latest' to start from the "
                    + "latest offset instead");
              }
              off = marks.get(tp)[1];
            }
            out.put(tp, Math.min(Math.max(off, marks.get(tp)[0]), marks.get(tp)[1]));
          }
          return out;
      }
    } catch (IOException e) {
      throw new UncheckedIOException("cannot list offsets at " + opts.bootstrap, e);
    }
  }

  private static void checkCovers(ReadOptions.OffsetSpec spec, List<TopicPartition> tps) {
    Set<TopicPartition> given = spec.offsets.keySet();
    Set<TopicPartition> have = new HashSet<>(tps);
    if (!given.equals(have)) {
      List<String> missing = new ArrayList<>();
      List<String> extra = new ArrayList<>();
      for (TopicPartition tp : tps) {
        if (!given.contains(tp)) {
          missing.add(tp.toString());
        }
      }
      for (TopicPartition tp : given) {
        if (!have.contains(tp)) {
          extra.add(tp.toString());
        }
      }
      throw new OptionException("option '" + spec.option + "' must specify every "
          + "topic-partition of the subscription (missing: "
          + (missing.isEmpty() ? "none" : String.join(", ", missing)) + "; not in the "
          + "subscription: " + (extra.isEmpty() ? "none" : String.join(", ", extra)) + ")");
    }
  }

  /** spark-sql-kafka's maxOffsetsPerTrigger split: `limit` offsets shared by backlog size. */
  static Map<TopicPartition, Long> rateLimit(
      long limit, Map<TopicPartition, Long> start, Map<TopicPartition, Long> end) {
    Map<TopicPartition, Long> sizes = new TreeMap<>();
    double total = 0;
    for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
      Long from = start.get(e.getKey());
      if (from != null && e.getValue() - from > 0) {
        sizes.put(e.getKey(), e.getValue() - from);
        total += e.getValue() - from;
      }
    }
    if (total < 1) {
      return new TreeMap<>(end);
    }
    Map<TopicPartition, Long> out = new TreeMap<>();
    for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
      Long size = sizes.get(e.getKey());
      if (size == null) {
        out.put(e.getKey(), e.getValue());
        continue;
      }
      double prorate = limit * (size / total);
      long step = (long) (prorate < 1 ? Math.ceil(prorate) : Math.floor(prorate));
      out.put(e.getKey(), Math.min(e.getValue(), start.get(e.getKey()) + step));
    }
    return out;
  }

  /**
   * Non-empty ranges, one per topic-partition, split further toward `minPartitions` (as
   * KafkaOffsetRangeCalculator: ranges too small to split count one partition each).
   */
  static List<OffsetRange> planRanges(
      Map<TopicPartition, Long> start, Map<TopicPartition, Long> end, Integer minPartitions) {
    List<OffsetRange> ranges = new ArrayList<>();
    for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
      Long from = start.get(e.getKey());
      if (from != null && e.getValue() > from) {
        ranges.add(new OffsetRange(e.getKey(), from, e.getValue()));
      }
    }
    if (minPartitions == null || ranges.size() >= minPartitions) {
      return ranges;
    }
    long total = 0;
    for (OffsetRange r : ranges) {
      total += r.size();
    }
    List<OffsetRange> unsplit = new ArrayList<>();
    long unsplitSize = 0;
    for (OffsetRange r : ranges) {
      if (parts(r.size(), total, minPartitions) == 1) {
        unsplit.add(r);
        unsplitSize += r.size();
      }
    }
    long splitTotal = total - unsplitSize;
    int splitMin = Math.max(minPartitions - unsplit.size(), 1);
    List<OffsetRange> out = new ArrayList<>();
    for (OffsetRange r : ranges) {
      int n = unsplit.contains(r) ? 1 : parts(r.size(), splitTotal, splitMin);
      long remaining = r.size();
      long begin = r.start();
      for (int i = 0; i < n; i++) {
        long size = remaining / (n - i);
        remaining -= size;
        long stop = Math.min(begin + size, r.end());
        if (stop > begin) {
          out.add(new OffsetRange(r.tp(), begin, stop));
        }
        begin = stop;
      }
    }
    return out;
  }

  private static int parts(long size, long total, int parts) {
    return (int) Math.max(Math.floor((double) size / total * parts + 0.5), 1);
  }

  @Override
  public void close() {
    if (meta != null) {
      meta.close();
      meta = null;
    }
  }
}
