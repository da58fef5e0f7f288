package io.rdmalog.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.ContinuousPartitionReader;
import org.apache.spark.sql.connector.read.streaming.ContinuousPartitionReaderFactory;

/** Executors' readers: a bounded range (batch, micro-batch) or a live one (real-time mode). */
final class ReaderFactory implements PartitionReaderFactory {
  private static final long serialVersionUID = 1L;
  private final ReaderConfig cfg;

  ReaderFactory(ReaderConfig cfg) {
    this.cfg = cfg;
  }

  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    OffsetRange r = (OffsetRange) partition;
    if (r.end() == OffsetRange.UNBOUNDED) {
      return new LiveReader(cfg, r.tp(), r.start());
    }
    return new RangeReader(cfg, r);
  }

  /** Continuous processing's readers: live from the epoch's start offset. */
  static final class Continuous implements ContinuousPartitionReaderFactory {
    private static final long serialVersionUID = 1L;
    private final ReaderConfig cfg;

    Continuous(ReaderConfig cfg) {
      this.cfg = cfg;
    }

    @Override
    public ContinuousPartitionReader<InternalRow> createReader(InputPartition partition) {
      OffsetRange r = (OffsetRange) partition;
      return new LiveReader(cfg, r.tp(), r.start());
    }
  }
}
