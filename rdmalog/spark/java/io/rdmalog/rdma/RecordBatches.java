package io.rdmalog.rdma;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.zip.CRC32C;
import java.util.zip.GZIPInputStream;

/**
 * Kafka v2 record batches as the log stores them (rdmalog/store/records.py keeps Kafka's exact
 * format): a 61-byte header (base offset, length, epoch, magic, CRC-32C, attributes, last offset
 * delta, first and max timestamp, producer id/epoch, base sequence, record count), then the
 * records, each a varint-framed run of zig-zag varints and bytes, compressed as a whole by the
 * codec in the attributes (gzip, snappy, lz4, zstd; the codecs' jars come with Spark).
 */
public final class RecordBatches {
  public static final int LOG_OVERHEAD = 12; // base offset + length: not counted by the length
  public static final int BATCH_OVERHEAD = 61;
  static final int LENGTH_POS = 8;
  static final int MAGIC_POS = 16;
  static final int CRC_POS = 17;
  static final int ATTRIBUTES_POS = 21;
  static final int LAST_DELTA_POS = 23;
  static final int BASE_TS_POS = 27;
  static final int MAX_TS_POS = 35;
  static final int COUNT_POS = 57;
  static final int CODEC_MASK = 0x07;
  static final int TIMESTAMP_TYPE_BIT = 0x08;
  static final int CONTROL_BIT = 0x20;

  private RecordBatches() {}

  /** Size in bytes of the batch at buf[p] (header included), from its length field. */
  public static int size(byte[] buf, int p) {
    return be32(buf, p + LENGTH_POS) + LOG_OVERHEAD;
  }

  public static long baseOffset(byte[] buf, int p) {
    return be64(buf, p);
  }

  public static long lastOffset(byte[] buf, int p) {
    return be64(buf, p) + be32(buf, p + LAST_DELTA_POS);
  }

  /**
   * Append the records of the batch at buf[p, p + size) with offsets >= `from` to `out`
   * (transaction markers are not records: none). CorruptRecordException when its bytes are not a
   * v2 batch, fail the CRC-32C check (with `checkCrc`) or cannot be decoded.
   */
  public static void decode(
      byte[] buf, int p, int size, long from, boolean checkCrc, List<KafkaRecord> out)
      throws CorruptRecordException {
    long base = be64(buf, p);
    long last = lastOffset(buf, p);
    if (size < BATCH_OVERHEAD || buf[p + MAGIC_POS] != 2) {
      throw corrupt(base, last, "is not a v2 record batch");
    }
    if (checkCrc) {
      CRC32C crc = new CRC32C();
      crc.update(buf, p + ATTRIBUTES_POS, size - ATTRIBUTES_POS);
      if (crc.getValue() != (be32(buf, p + CRC_POS) & 0xFFFFFFFFL)) {
        throw corrupt(base, last, "fails its CRC-32C check");
      }
    }
    int attrs = ((buf[p + ATTRIBUTES_POS] & 0xFF) << 8) | (buf[p + ATTRIBUTES_POS + 1] & 0xFF);
    if ((attrs & CONTROL_BIT) != 0 || last < from) {
      return;
    }
    boolean logAppend = (attrs & TIMESTAMP_TYPE_BIT) != 0;
    long baseTs = be64(buf, p + BASE_TS_POS);
    long maxTs = be64(buf, p + MAX_TS_POS);
    int count = be32(buf, p + COUNT_POS);
    ByteBuffer records;
    try {
      int codec = attrs & CODEC_MASK;
      if (codec == 0) {
        records = ByteBuffer.wrap(buf, p + BATCH_OVERHEAD, size - BATCH_OVERHEAD);
      } else {
        records = ByteBuffer.wrap(inflate(codec, buf, p + BATCH_OVERHEAD, size - BATCH_OVERHEAD));
      }
      records.order(ByteOrder.BIG_ENDIAN);
      int type = logAppend ? KafkaRecord.LOG_APPEND_TIME : KafkaRecord.CREATE_TIME;
      for (int i = 0; i < count; i++) {
        int length = varint(records);
        int end = records.position() + length;
        records.get(); // attributes
        long tsDelta = varlong(records);
        long offset = base + varint(records);
        byte[] key = bytes(records);
        byte[] value = bytes(records);
        int headers = varint(records);
        String[] hk = null;
        byte[][] hv = null;
        if (headers > 0) {
          if (headers > length) {
            throw new IllegalArgumentException(headers + " headers in a record of " + length);
          }
          hk = new String[headers];
          hv = new byte[headers][];
          for (int h = 0; h < headers; h++) {
            byte[] k = bytes(records);
            hk[h] = k == null ? null : new String(k, StandardCharsets.UTF_8);
            hv[h] = bytes(records);
          }
        }
        if (records.position() != end) {
          throw new IllegalArgumentException("a record's fields do not fill its length");
        }
        if (offset >= from) {
          long ts = logAppend ? maxTs : baseTs + tsDelta;
          out.add(new KafkaRecord(offset, ts, type, key, value, hk, hv));
        }
      }
    } catch (IOException | RuntimeException e) {
      throw corrupt(base, last, "cannot be decoded (" + e + ")");
    }
  }

  private static CorruptRecordException corrupt(long first, long last, String why) {
    return new CorruptRecordException(
        "the record batch of offsets " + first + "-" + last + " " + why);
  }

  private static byte[] inflate(int codec, byte[] buf, int off, int len) throws IOException {
    InputStream raw = new ByteArrayInputStream(buf, off, len);
    InputStream in;
    switch (codec) {
      case 1:
        in = new GZIPInputStream(raw);
        break;
      case 2:
        in = new org.xerial.snappy.SnappyInputStream(raw);
        break;
      case 3:
        in = new net.jpountz.lz4.LZ4FrameInputStream(raw);
        break;
      case 4:
        in = new com.github.luben.zstd.ZstdInputStream(raw);
        break;
      default:
        throw new IOException("unknown compression codec " + codec);
    }
    try (InputStream s = in) {
      return s.readAllBytes();
    }
  }

  private static byte[] bytes(ByteBuffer b) {
    int n = varint(b);
    if (n < 0) {
      return null;
    }
    byte[] out = new byte[n];
    b.get(out);
    return out;
  }

  static int varint(ByteBuffer b) {
    int raw = 0;
    for (int shift = 0; shift < 35; shift += 7) {
      int x = b.get();
      raw |= (x & 0x7F) << shift;
      if ((x & 0x80) == 0) {
        return (raw >>> 1) ^ -(raw & 1);
      }
    }
    throw new IllegalArgumentException("varint too long");
  }

  static long varlong(ByteBuffer b) {
    long raw = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      long x = b.get();
      raw |= (x & 0x7F) << shift;
      if ((x & 0x80) == 0) {
        return (raw >>> 1) ^ -(raw & 1);
      }
    }
    throw new IllegalArgumentException("varlong too long");
  }

  static int be32(byte[] b, int p) {
    return ((b[p] & 0xFF) << 24) | ((b[p + 1] & 0xFF) << 16) | ((b[p + 2] & 0xFF) << 8)
        | (b[p + 3] & 0xFF);
  }

  static long be64(byte[] b, int p) {
    return ((long) be32(b, p) << 32) | (be32(b, p + 4) & 0xFFFFFFFFL);
  }
}
