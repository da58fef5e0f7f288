package io.rdmalog.spark;

import io.rdmalog.rdma.BrokerDisconnectedException;
import io.rdmalog.rdma.ControlException;
import io.rdmalog.rdma.KafkaRecord;
import io.rdmalog.rdma.PartitionConsumer;
import java.io.Closeable;
import java.io.IOException;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.locks.LockSupport;

/**
 * An executor's read position in one topic-partition over a native consumer, with the source's
 * rules (rdmalog/spark/native_client.py): consumers are pooled per executor between tasks, so the
 * next micro-batch's task continues on the same session without a new connection or read grant;
 * records gone from the log are data loss (an error with failOnDataLoss, else a warning and the
 * read goes on from the log start); a broker restart under a read is ridden on a new session.
 */
final class PartitionCursor implements Closeable {
  private static final int MAX_RESTARTS = 3;
  private static final int CLIENT_TIMEOUT_MS = 30_000;
  private static final int POOL_MAX = 64;
  private static final long NAP_MIN_NS = 20_000;
  private static final long NAP_MAX_NS = 200_000; // the tcp soft-RNIC's look costs the broker CPU
  // idle consumers of this executor, by (control, topic-partition), least recently used first
  private static final Map<String, PartitionConsumer> POOL = new LinkedHashMap<>();

  private final ReaderConfig cfg;
  final TopicPartition tp;
  private PartitionConsumer consumer;
  private long position;
  private boolean gone; // the partition went away (failOnDataLoss=false): nothing more
  private int restarts;
  private boolean clean = true;
  private long nap = NAP_MIN_NS;

  PartitionCursor(ReaderConfig cfg, TopicPartition tp, long start) {
    this.cfg = cfg;
    this.tp = tp;
    this.position = start;
  }

  long position() {
    return position;
  }

  /**
   * The next record readable now at or after the position, not consumed (null: none yet, or
   * `exhausted()`). `bounded`: a task's range, whose records exist; the log ending before its
   * start means there is nothing more to read rather than a position to wait at.
   */
  KafkaRecord peek(boolean bounded) throws IOException {
    while (!gone) {
      try {
        if (consumer == null) {
          consumer = take(position);
        }
        KafkaRecord r = consumer.peek();
        if (r != null) {
          nap = NAP_MIN_NS;
        }
        return r;
      } catch (BrokerDisconnectedException e) {
        drop();
        if (++restarts > MAX_RESTARTS) {
          clean = false;
          throw e;
        }
        awaitBroker(e);
      } catch (ControlException e) {
        drop();
        if (!e.code.equals("offset_out_of_range")
            && !e.code.equals("UnknownTopicOrPartitionError")) {
          clean = false;
          throw e;
        }
        OffsetPlanner.reportDataLoss(cfg.failOnDataLoss(),
            tp + ": cannot read from offset " + position + ": " + e.getMessage());
        if (!e.code.equals("offset_out_of_range")) {
          gone = true; // the partition is gone
          return null;
        }
        consumer = take(PartitionConsumer.EARLIEST);
        long start = consumer.position();
        if (bounded && start <= position) { // nothing was deleted below: the log ends before it
          gone = true;
          return null;
        }
        position = start;
      }
    }
    return null;
  }

  /** Consume the record `peek` returned. */
  void advance(KafkaRecord r) throws IOException {
    consumer.next();
    position = r.offset + 1;
  }

  boolean exhausted() {
    return gone;
  }

  /** Wait a little for records: a short nap, doubling while nothing comes (each look is a READ
   * the broker's tcp engine serves). */
  void nap() {
    LockSupport.parkNanos(nap);
    nap = Math.min(2 * nap, NAP_MAX_NS);
  }

  private void awaitBroker(BrokerDisconnectedException e) throws IOException {
    long deadline = System.nanoTime() + CLIENT_TIMEOUT_MS * 1_000_000L;
    while (true) {
      try {
        consumer = open(position);
        return;
      } catch (IOException again) {
        boolean refused = again instanceof ControlException
            && !((ControlException) again).code.equals("disconnected");
        if (refused) {
          clean = false;
          throw again;
        }
        if (System.nanoTime() > deadline) {
          clean = false;
          throw new BrokerDisconnectedException("the broker at " + cfg.control()
              + " did not come back within " + CLIENT_TIMEOUT_MS + " ms: " + e.getMessage());
        }
        LockSupport.parkNanos(100_000_000L);
        if (Thread.currentThread().isInterrupted()) {
          throw new java.io.InterruptedIOException("interrupted");
        }
      }
    }
  }

  private PartitionConsumer take(long start) throws IOException {
    PartitionConsumer c;
    synchronized (POOL) {
      c = POOL.remove(key());
    }
    if (c != null) {
      if (!c.alive()) { // the broker restarted since it was pooled
        c.close();
      } else {
        try {
          if (start < 0 || c.position() != start) {
            c.seek(start);
          }
          return c;
        } catch (IOException | RuntimeException e) {
          c.close();
          throw e;
        }
      }
    }
    return open(start);
  }

  private PartitionConsumer open(long start) throws IOException {
    return new PartitionConsumer(cfg.control(), cfg.transport(), tp.topic(), tp.partition(),
        start, cfg.checkCrcs(), CLIENT_TIMEOUT_MS);
  }

  private String key() {
    return cfg.transport() + "|" + cfg.control() + "|" + tp;
  }

  private void drop() {
    if (consumer != null) {
      consumer.close();
      consumer = null;
    }
  }

  /** Mark the read as failed: its consumer is closed rather than pooled. */
  void failed() {
    clean = false;
  }

  /** Back to the executor's pool after a clean read; closed otherwise. */
  @Override
  public void close() {
    PartitionConsumer c = consumer;
    consumer = null;
    if (c == null) {
      return;
    }
    if (!clean || Thread.currentThread().isInterrupted()) {
      c.close();
      return;
    }
    PartitionConsumer evicted = null;
    synchronized (POOL) {
      PartitionConsumer old = POOL.put(key(), c);
      if (old != null && old != c) {
        evicted = old;
      } else if (POOL.size() > POOL_MAX) {
        String eldest = POOL.keySet().iterator().next();
        evicted = POOL.remove(eldest);
      }
    }
    if (evicted != null) {
      evicted.close();
    }
  }
}
