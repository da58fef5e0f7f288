package io.rdmalog.rdma;

import java.io.Closeable;
import java.io.IOException;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * A native consumer of one topic-partition: what rdmalog.rdma.Consumer (client/consumer.py) does,
 * with the same control requests and metadata slots, from the JVM.
 *
 * <p>A session is a control connection plus one queue pair, bound by the token of `hello`.
 * `read_access` grants the segment file holding an offset: a region to READ, where to start, the
 * last readable byte (LRB) and, while the file is mutable, a metadata slot in the session's slot
 * region whose first word carries the LRB (48 bits) | VALID (bit 62) | MUTABLE (bit 63) and whose
 * second the file's base offset. Records are READ straight out of the file, whole batches decoded
 * and partial ones kept for the next READ; a file read to its sealed end is swapped for the next
 * one (`next_file`, which also releases it). The broker's CPU serves only those requests: every
 * READ, of data or of the slot, is one-sided.
 */
public final class PartitionConsumer implements Closeable {
  static final long SLOT_VALID = 1L << 62;
  static final long LRB_MASK = (1L << 48) - 1;
  static final int SLOT_SIZE = 16;
  public static final long EARLIEST = -2;
  public static final long LATEST = -1;
  private static final int FETCH = 1 << 20; // bytes per READ at most

  public final String control;
  public final String topic;
  public final int partition;
  private final boolean checkCrcs;
  private final int timeoutMs;
  private ControlClient ctl;
  private TcpQueuePair qp;
  private boolean closed;

  // the file granted: region, its base offset, the next byte to READ, the last readable one
  private long fileAddr;
  private int fileRkey;
  private long base = -1;
  private long pos;
  private long lrb;
  private boolean mutable;
  private int slot = -1;
  private boolean active;
  private long slotsAddr = -1;
  private int slotsRkey;
  private final byte[] slotWords = new byte[SLOT_SIZE];

  private byte[] buf = new byte[1 << 16]; // kept bytes: buf[head, head + have)
  private int head;
  private int have;
  private long offset; // the next offset not yet decoded
  private final ArrayDeque<KafkaRecord> ready = new ArrayDeque<>();
  private final List<KafkaRecord> decoded = new ArrayList<>();

  /**
   * A new session reading `topic`-`partition` from `offset` (EARLIEST = -2, LATEST = -1). An offset
   * the log does not hold raises ControlException offset_out_of_range: Spark's executors never
   * reset by themselves (spark-sql-kafka's auto.offset.reset=none).
   */
  public PartitionConsumer(
      String control, String transport, String topic, int partition, long offset,
      boolean checkCrcs, int timeoutMs) throws IOException {
    if (!"tcp".equals(transport)) {
      throw new IllegalArgumentException("the JVM client speaks the tcp transport, not " + transport);
    }
    this.control = control;
    this.topic = topic;
    this.partition = partition;
    this.checkCrcs = checkCrcs;
    this.timeoutMs = timeoutMs;
    connect();
    try {
      seek(offset);
    } catch (IOException | RuntimeException e) {
      close();
      throw e;
    }
  }

  private void connect() throws IOException {
    ctl = new ControlClient(control, timeoutMs);
    try {
      Map<String, Object> hello = ctl.request("hello");
      String kind = String.valueOf(hello.get("transport"));
      if (!"tcp".equals(kind)) {
        throw new IOException("the broker at " + control + " serves " + kind + ", not tcp");
      }
      qp = TcpQueuePair.connect(String.valueOf(hello.get("rdma_address")), timeoutMs);
      long token = ControlClient.num(hello, "token");
      byte[] le = new byte[8];
      for (int i = 0; i < 8; i++) {
        le[i] = (byte) (token >>> (8 * i));
      }
      int st = qp.send(le);
      if (st != TcpQueuePair.SUCCESS) {
        throw new IOException("hello on the queue pair failed: status " + st);
      }
      ctl.request("attach");
    } catch (IOException | RuntimeException e) {
      teardown();
      throw e;
    }
  }

  /** Read `to` next (EARLIEST/LATEST, or an offset the log holds). */
  public void seek(long to) throws IOException {
    release();
    ready.clear();
    head = have = 0;
    offset = to;
    Map<String, Object> r = control("read_access", "topic", topic, "partition", partition,
        "offset", to);
    offset = ControlClient.num(r, "offset");
    open(r);
  }

  /** The offset of the next record `next()` returns. */
  public long position() {
    KafkaRecord r = ready.peekFirst();
    return r != null ? r.offset : offset;
  }

  /** The next record readable now, or null when the log has nothing more yet. */
  public KafkaRecord next() throws IOException {
    KafkaRecord r = peek();
    if (r != null) {
      ready.pollFirst();
    }
    return r;
  }

  /** The next record readable now, left to be returned again (null: nothing more yet). */
  public KafkaRecord peek() throws IOException {
    KafkaRecord r = ready.peekFirst();
    if (r == null) {
      fill();
      r = ready.peekFirst();
    }
    return r;
  }

  /** Whether the session is still there (one look at the control connection, no wait). */
  public boolean alive() {
    return !closed && !qp.isClosed() && ctl.alive();
  }

  @SuppressWarnings("unchecked")
  private void open(Map<String, Object> r) {
    Map<String, Object> region = (Map<String, Object>) r.get("region");
    fileAddr = ControlClient.num(region, "addr");
    fileRkey = (int) ControlClient.num(region, "rkey");
    base = ControlClient.num(r, "base_offset");
    pos = ControlClient.num(r, "start");
    lrb = ControlClient.num(r, "lrb");
    mutable = Boolean.TRUE.equals(r.get("mutable"));
    slot = (int) ControlClient.num(r, "slot");
    Object slots = r.get("slots");
    if (slots instanceof Map && slotsAddr < 0) {
      Map<String, Object> s = (Map<String, Object>) slots;
      slotsAddr = ControlClient.num(s, "addr");
      slotsRkey = (int) ControlClient.num(s, "rkey");
    }
    head = have = 0;
    active = true;
  }

  /** One step: look at the slot when caught up, move to the next file at a sealed end, READ. */
  private void fill() throws IOException {
    if (!active) { // the last seek was refused: again (raises while it lasts)
      seek(offset);
    }
    if (pos >= lrb && slot >= 0) {
      lookAtSlot();
    }
    if (pos >= lrb && !mutable) {
      nextFile();
    }
    if (pos < lrb) {
      fetch();
    }
  }

  private void lookAtSlot() throws IOException {
    int st = qp.read(slotsAddr + (long) slot * SLOT_SIZE, slotsRkey, slotWords, 0, SLOT_SIZE);
    if (st != TcpQueuePair.SUCCESS) {
      throw lost("metadata slot READ failed: status " + st);
    }
    long w0 = le64(slotWords, 0);
    if ((w0 & SLOT_VALID) != 0 && le64(slotWords, 8) == base) {
      long readable = w0 & LRB_MASK;
      if (readable > lrb) {
        lrb = readable;
      }
      mutable = w0 < 0; // MUTABLE is the sign bit
    }
  }

  private void nextFile() throws IOException {
    if (have > 0) { // the sealed file ends inside a batch: its length is corrupt
      throw new CorruptRecordException(topic + "-" + partition + ": the record batch at offset "
          + offset + " runs past the end of its file");
    }
    Map<String, Object> r;
    try {
      r = control("next_file", "topic", topic, "partition", partition, "base_offset", base);
    } catch (ControlException e) {
      if ("no_next_file".equals(e.code)) {
        return; // the roll is not visible yet
      }
      if ("file_gone".equals(e.code)) { // its log was replaced: find the position again
        seek(offset);
        return;
      }
      throw e;
    }
    active = false; // next_file released the old one
    open(r);
  }

  private void fetch() throws IOException {
    int want = FETCH;
    if (have >= RecordBatches.LOG_OVERHEAD) { // a kept partial batch says what it still needs
      want = Math.max(want, RecordBatches.size(buf, head) - have);
    }
    int n = (int) Math.min(want, lrb - pos);
    if (head + have + n > buf.length) {
      if (have + n > buf.length) {
        byte[] bigger = new byte[Math.max(have + n, 2 * buf.length)];
        System.arraycopy(buf, head, bigger, 0, have);
        buf = bigger;
      } else {
        System.arraycopy(buf, head, buf, 0, have);
      }
      head = 0;
    }
    int st = qp.read(fileAddr + pos, fileRkey, buf, head + have, n);
    if (st != TcpQueuePair.SUCCESS) {
      // the file went away under the read (retention, a revoked registration): ask again from
      // the next offset; a gone offset raises offset_out_of_range from there
      if (qp.isClosed() || !ctl.alive()) {
        throw lost("READ of " + topic + "-" + partition + " failed: status " + st);
      }
      seek(offset);
      return;
    }
    pos += n;
    have += n;
    take();
  }

  /** Decode the whole batches kept; keep a partial one where it is. */
  private void take() throws IOException {
    int p = head;
    int end = head + have;
    while (end - p >= RecordBatches.BATCH_OVERHEAD) {
      int size = RecordBatches.size(buf, p);
      if (size < RecordBatches.BATCH_OVERHEAD) {
        throw new CorruptRecordException(topic + "-" + partition + ": the record batch at offset "
            + RecordBatches.baseOffset(buf, p) + " has an impossible length");
      }
      if (size > end - p) {
        break;
      }
      long last = RecordBatches.lastOffset(buf, p);
      if (last >= offset) {
        decoded.clear();
        try {
          RecordBatches.decode(buf, p, size, offset, checkCrcs, decoded);
        } catch (CorruptRecordException e) {
          head = p; // it stays the position: found again until a seek past it
          have = end - p;
          throw new CorruptRecordException(topic + "-" + partition + ": " + e.getMessage());
        }
        ready.addAll(decoded);
        offset = last + 1;
      }
      p += size;
    }
    head = p < end ? p : 0;
    have = end - p;
  }

  private Map<String, Object> control(String op, Object... kv) throws IOException {
    if (closed) {
      throw new BrokerDisconnectedException("this consumer is closed");
    }
    try {
      return ctl.request(op, kv);
    } catch (ControlException e) {
      if ("disconnected".equals(e.code)) {
        throw lost(e.getMessage());
      }
      throw e;
    }
  }

  private BrokerDisconnectedException lost(String why) {
    return new BrokerDisconnectedException(
        "the broker's RDMA service at " + control + " went away (" + why + ")");
  }

  private void release() {
    if (active) {
      active = false;
      try {
        control("release", "topic", topic, "partition", partition, "base_offset", base);
      } catch (IOException ignored) {
        // the session's end releases it too
      }
    }
  }

  private void teardown() {
    if (qp != null) {
      qp.close();
    }
    if (ctl != null) {
      ctl.close();
    }
  }

  /** Say bye (everything the session holds is released before the reply) and disconnect. */
  @Override
  public void close() {
    if (closed) {
      return;
    }
    try {
      if (ctl != null && !qp.isClosed()) {
        ctl.request("bye");
      }
    } catch (IOException | RuntimeException ignored) {
      // gone already: the closed connection releases it
    }
    closed = true;
    teardown();
  }

  static long le64(byte[] b, int p) {
    long v = 0;
    for (int i = 7; i >= 0; i--) {
      v = (v << 8) | (b[p + i] & 0xFF);
    }
    return v;
  }
}
