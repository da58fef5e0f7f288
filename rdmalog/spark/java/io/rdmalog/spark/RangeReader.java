package io.rdmalog.spark;

import io.rdmalog.rdma.KafkaRecord;
import java.io.IOException;
import java.util.concurrent.TimeoutException;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Reads one micro-batch's (or batch query's) range [start, end) of a topic-partition. The driver
 * saw the records exist; waiting longer than kafkaConsumer.pollTimeoutMs for them fails the task.
 * The record at `end` is left unconsumed, so the pooled consumer is where the next batch starts.
 */
final class RangeReader implements PartitionReader<InternalRow> {
  private final ReaderConfig cfg;
  private final OffsetRange range;
  private final PartitionCursor cursor;
  private final UTF8String topic;
  private InternalRow row;

  RangeReader(ReaderConfig cfg, OffsetRange range) {
    this.cfg = cfg;
    this.range = range;
    this.cursor = new PartitionCursor(cfg, range.tp(), range.start());
    this.topic = UTF8String.fromString(range.tp().topic());
  }

  @Override
  public boolean next() throws IOException {
    if (cursor.position() >= range.end()) {
      return false;
    }
    long waitingSince = 0;
    while (true) {
      KafkaRecord r;
      try {
        r = cursor.peek(true);
      } catch (IOException | RuntimeException e) {
        cursor.failed();
        throw e;
      }
      if (r != null) {
        if (r.offset >= range.end()) {
          return false;
        }
        cursor.advance(r);
        row = KafkaSchema.row(r, topic, range.tp().partition(), cfg.includeHeaders());
        return true;
      }
      if (cursor.exhausted()) {
        return false;
      }
      long now = System.nanoTime();
      if (waitingSince == 0) {
        waitingSince = now;
      } else if (now - waitingSince > cfg.pollTimeoutMs() * 1_000_000L) {
        cursor.failed();
        throw new IOException(new TimeoutException("no records from " + range.tp()
            + " at offset " + cursor.position() + " (reading up to " + range.end()
            + ") within kafkaConsumer.pollTimeoutMs=" + cfg.pollTimeoutMs()));
      }
      cursor.nap();
    }
  }

  @Override
  public InternalRow get() {
    return row;
  }

  @Override
  public void close() {
    cursor.close();
  }
}
