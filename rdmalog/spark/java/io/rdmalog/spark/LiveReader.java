package io.rdmalog.spark;

import io.rdmalog.rdma.KafkaRecord;
import java.io.IOException;
import java.io.InterruptedIOException;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.streaming.ContinuousPartitionReader;
import org.apache.spark.sql.connector.read.streaming.PartitionOffset;
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeRead;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Reads a topic-partition from a position for as long as its task runs: a continuous-processing
 * task (`next()` waits for the next record) or a real-time-mode batch (`nextWithTimeout` waits
 * until the batch's end). Each record is returned as soon as a look at the partition's metadata
 * slot shows it committed; `getOffset()` is where the next batch or epoch starts.
 */
final class LiveReader
    implements ContinuousPartitionReader<InternalRow>, SupportsRealTimeRead<InternalRow> {
  private final ReaderConfig cfg;
  private final PartitionCursor cursor;
  private final UTF8String topic;
  private final int partition;
  private InternalRow row;
  private long arrival;
  private boolean logAppend;

  LiveReader(ReaderConfig cfg, TopicPartition tp, long start) {
    this.cfg = cfg;
    this.cursor = new PartitionCursor(cfg, tp, start);
    this.topic = UTF8String.fromString(tp.topic());
    this.partition = tp.partition();
  }

  /** Continuous processing: the next record, waiting as long as it takes. */
  @Override
  public boolean next() throws IOException {
    return await(Long.MAX_VALUE);
  }

  @Override
  public RecordStatus nextWithTimeout(Long timeoutMs) throws IOException {
    return status(await(System.nanoTime() + timeoutMs * 1_000_000L));
  }

  @Override
  public RecordStatus nextWithTimeout(Long startTimeMs, Long timeoutMs) throws IOException {
    long leftMs = startTimeMs + timeoutMs - System.currentTimeMillis();
    return status(await(System.nanoTime() + Math.max(leftMs, 0) * 1_000_000L));
  }

  private RecordStatus status(boolean has) {
    if (has && logAppend) { // the broker's append time, as spark-sql-kafka reports it
      return RecordStatus.newStatusWithArrivalTimeMs(arrival);
    }
    return RecordStatus.newStatusWithoutArrivalTime(has);
  }

  private boolean await(long deadlineNanos) throws IOException {
    while (true) {
      KafkaRecord r;
      try {
        r = cursor.peek(false);
      } catch (IOException | RuntimeException e) {
        cursor.failed();
        throw e;
      }
      if (r != null) {
        cursor.advance(r);
        row = KafkaSchema.row(r, topic, partition, cfg.includeHeaders());
        logAppend = r.timestampType == KafkaRecord.LOG_APPEND_TIME;
        arrival = r.timestamp;
        return true;
      }
      if (cursor.exhausted() || System.nanoTime() >= deadlineNanos) {
        return false;
      }
      if (Thread.currentThread().isInterrupted()) {
        cursor.failed();
        throw new InterruptedIOException("the task was stopped");
      }
      cursor.nap();
    }
  }

  @Override
  public InternalRow get() {
    return row;
  }

  @Override
  public PartitionOffset getOffset() {
    return new PartitionPosition(cursor.tp, cursor.position());
  }

  @Override
  public void close() {
    cursor.close();
  }
}
