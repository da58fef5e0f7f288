package io.rdmalog.spark;

import java.io.ByteArrayOutputStream;
import java.io.Closeable;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * The driver's Kafka-protocol lookups, as the Python source makes them through librdkafka: which
 * partitions topics have (Metadata v4) and their earliest, latest and by-time offsets
 * (ListOffsets v2, read_uncommitted: "latest" is the high watermark), each asked of the
 * partition's leader. Plain TCP only (ReadOptions sends librdkafka settings to the Python source).
 */
final class KafkaMetadata implements Closeable {
  private static final short METADATA = 3;
  private static final short LIST_OFFSETS = 2;
  private static final int MAX_RESPONSE = 64 << 20;
  private static final int ATTEMPTS = 10;
  // errors a retry after fresh metadata can cure (leadership moved, a topic still being created)
  private static final List<Integer> RETRIABLE = List.of(3, 5, 6, 7, 13, 15, 78);

  private final String[] bootstrap;
  private final int timeoutMs;
  private final Map<Integer, Conn> conns = new HashMap<>();
  private final Map<Integer, String> brokers = new HashMap<>();
  private final Map<TopicPartition, Integer> leaders = new HashMap<>();
  private Conn seed;

  KafkaMetadata(String bootstrap, int timeoutMs) {
    this.bootstrap = bootstrap.split(",");
    this.timeoutMs = timeoutMs;
  }

  /** Every topic's partitions (internal `__*` topics and topics in error left out). */
  Map<String, List<Integer>> topicPartitions() throws IOException {
    ByteArrayOutputStream body = new ByteArrayOutputStream();
    DataOutputStream w = new DataOutputStream(body);
    w.writeInt(-1); // all topics
    w.writeBoolean(false); // allow_auto_topic_creation
    ByteBuffer r = seed().call(METADATA, (short) 4, body.toByteArray());
    r.getInt(); // throttle
    brokers.clear();
    for (int i = r.getInt(); i > 0; i--) {
      int node = r.getInt();
      String host = string(r);
      int port = r.getInt();
      string(r); // rack
      brokers.put(node, host + ":" + port);
    }
    string(r); // cluster id
    r.getInt(); // controller
    Map<String, List<Integer>> out = new TreeMap<>();
    leaders.clear();
    for (int t = r.getInt(); t > 0; t--) {
      short error = r.getShort();
      String name = string(r);
      r.get(); // is_internal
      List<Integer> parts = new ArrayList<>();
      for (int p = r.getInt(); p > 0; p--) {
        r.getShort();
        int index = r.getInt();
        int leader = r.getInt();
        skipInts(r);
        skipInts(r);
        parts.add(index);
        leaders.put(new TopicPartition(name, index), leader);
      }
      if (error == 0 && !name.startsWith("__")) {
        parts.sort(null);
        out.put(name, parts);
      }
    }
    return out;
  }

  /** (earliest, latest) of each partition, asked now. */
  Map<TopicPartition, long[]> watermarks(Collection<TopicPartition> tps) throws IOException {
    Map<TopicPartition, Long> earliest = new TreeMap<>();
    Map<TopicPartition, Long> latest = new TreeMap<>();
    for (TopicPartition tp : tps) {
      earliest.put(tp, ReadOptions.EARLIEST);
      latest.put(tp, ReadOptions.LATEST);
    }
    Map<TopicPartition, Long> lo = listOffsets(earliest);
    Map<TopicPartition, Long> hi = listOffsets(latest);
    Map<TopicPartition, long[]> out = new TreeMap<>();
    for (TopicPartition tp : tps) {
      out.put(tp, new long[] {lo.get(tp), hi.get(tp)});
    }
    return out;
  }

  /** The first offset at or after each timestamp; null where no record is that recent. */
  Map<TopicPartition, Long> offsetsForTimes(Map<TopicPartition, Long> stamps) throws IOException {
    Map<TopicPartition, Long> found = listOffsets(stamps);
    Map<TopicPartition, Long> out = new TreeMap<>();
    for (Map.Entry<TopicPartition, Long> e : found.entrySet()) {
      out.put(e.getKey(), e.getValue() < 0 ? null : e.getValue());
    }
    return out;
  }

  private Map<TopicPartition, Long> listOffsets(Map<TopicPartition, Long> query)
      throws IOException {
    Map<TopicPartition, Long> out = new TreeMap<>();
    Map<TopicPartition, Long> left = new TreeMap<>(query);
    String why = "";
    for (int attempt = 0; attempt < ATTEMPTS && !left.isEmpty(); attempt++) {
      if (attempt > 0 || !leaders.keySet().containsAll(left.keySet())) {
        if (attempt > 0) {
          sleep(100L * attempt);
        }
        topicPartitions();
      }
      Map<Integer, Map<TopicPartition, Long>> byLeader = new HashMap<>();
      for (Map.Entry<TopicPartition, Long> e : left.entrySet()) {
        Integer leader = leaders.get(e.getKey());
        if (leader == null || leader < 0 || !brokers.containsKey(leader)) {
          why = e.getKey() + " has no leader (unknown topic or partition?)";
          continue;
        }
        byLeader.computeIfAbsent(leader, k -> new TreeMap<>()).put(e.getKey(), e.getValue());
      }
      for (Map.Entry<Integer, Map<TopicPartition, Long>> e : byLeader.entrySet()) {
        ByteBuffer r = conn(e.getKey()).call(LIST_OFFSETS, (short) 2, listBody(e.getValue()));
        r.getInt(); // throttle
        for (int t = r.getInt(); t > 0; t--) {
          String topic = string(r);
          for (int p = r.getInt(); p > 0; p--) {
            TopicPartition tp = new TopicPartition(topic, r.getInt());
            short error = r.getShort();
            r.getLong(); // timestamp
            long offset = r.getLong();
            if (error == 0) {
              out.put(tp, offset);
              left.remove(tp);
            } else if (!RETRIABLE.contains((int) error)) {
              throw new IOException("ListOffsets for " + tp + " failed: Kafka error " + error);
            } else {
              why = "ListOffsets for " + tp + ": Kafka error " + error;
            }
          }
        }
      }
    }
    if (!left.isEmpty()) {
      throw new IOException("cannot list offsets of " + left.keySet() + ": " + why);
    }
    return out;
  }

  private static byte[] listBody(Map<TopicPartition, Long> query) throws IOException {
    Map<String, Map<Integer, Long>> byTopic = new TreeMap<>();
    for (Map.Entry<TopicPartition, Long> e : query.entrySet()) {
      byTopic.computeIfAbsent(e.getKey().topic(), k -> new TreeMap<>())
          .put(e.getKey().partition(), e.getValue());
    }
    ByteArrayOutputStream body = new ByteArrayOutputStream();
    DataOutputStream w = new DataOutputStream(body);
    w.writeInt(-1); // replica id: a consumer
    w.writeByte(0); // read_uncommitted
    w.writeInt(byTopic.size());
    for (Map.Entry<String, Map<Integer, Long>> t : byTopic.entrySet()) {
      writeString(w, t.getKey());
      w.writeInt(t.getValue().size());
      for (Map.Entry<Integer, Long> p : t.getValue().entrySet()) {
        w.writeInt(p.getKey());
        w.writeLong(p.getValue());
      }
    }
    return body.toByteArray();
  }

  private Conn seed() throws IOException {
    if (seed != null && !seed.broken) {
      return seed;
    }
    IOException last = null;
    for (String address : bootstrap) {
      try {
        seed = new Conn(address.strip(), timeoutMs);
        return seed;
      } catch (IOException e) {
        last = e;
      }
    }
    throw new IOException("cannot connect to any of " + String.join(",", bootstrap), last);
  }

  private Conn conn(int node) throws IOException {
    Conn c = conns.get(node);
    if (c == null || c.broken) {
      c = new Conn(brokers.get(node), timeoutMs);
      conns.put(node, c);
    }
    return c;
  }

  @Override
  public void close() {
    if (seed != null) {
      seed.close();
    }
    for (Conn c : conns.values()) {
      c.close();
    }
    conns.clear();
    seed = null;
  }

  private static void sleep(long ms) throws IOException {
    try {
      Thread.sleep(ms);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new java.io.InterruptedIOException("interrupted");
    }
  }

  private static void writeString(DataOutputStream w, String s) throws IOException {
    byte[] b = s.getBytes(StandardCharsets.UTF_8);
    w.writeShort(b.length);
    w.write(b);
  }

  private static String string(ByteBuffer r) {
    short n = r.getShort();
    if (n < 0) {
      return null;
    }
    byte[] b = new byte[n];
    r.get(b);
    return new String(b, StandardCharsets.UTF_8);
  }

  private static void skipInts(ByteBuffer r) {
    int n = r.getInt();
    r.position(r.position() + 4 * Math.max(n, 0));
  }

  /** One connection to one broker: request, then its response (one at a time). */
  private static final class Conn implements Closeable {
    private final Socket sock;
    private final DataInputStream in;
    private final OutputStream out;
    private int correlation;
    boolean broken;

    Conn(String address, int timeoutMs) throws IOException {
      int colon = address.lastIndexOf(':');
      sock = new Socket();
      try {
        sock.connect(new InetSocketAddress(address.substring(0, colon),
            Integer.parseInt(address.substring(colon + 1))), timeoutMs);
        sock.setSoTimeout(timeoutMs);
        sock.setTcpNoDelay(true);
        in = new DataInputStream(sock.getInputStream());
        out = sock.getOutputStream();
      } catch (IOException | RuntimeException e) {
        sock.close();
        throw e;
      }
    }

    synchronized ByteBuffer call(short api, short version, byte[] body) throws IOException {
      try {
        return exchange(api, version, body);
      } catch (IOException e) { // the next call connects again
        broken = true;
        close();
        throw e;
      }
    }

    private ByteBuffer exchange(short api, short version, byte[] body) throws IOException {
      int id = ++correlation;
      ByteArrayOutputStream req = new ByteArrayOutputStream(body.length + 32);
      DataOutputStream w = new DataOutputStream(req);
      w.writeInt(0); // size, filled in below
      w.writeShort(api);
      w.writeShort(version);
      w.writeInt(id);
      writeString(w, "rdmalog-spark-jvm");
      w.write(body);
      byte[] bytes = req.toByteArray();
      ByteBuffer.wrap(bytes).putInt(0, bytes.length - 4);
      out.write(bytes);
      out.flush();
      int size = in.readInt();
      if (size < 4 || size > MAX_RESPONSE) {
        throw new IOException("a response of " + size + " bytes");
      }
      byte[] resp = new byte[size];
      in.readFully(resp);
      ByteBuffer r = ByteBuffer.wrap(resp);
      if (r.getInt() != id) {
        throw new IOException("a response to another request");
      }
      return r;
    }

    @Override
    public void close() {
      try {
        sock.close();
      } catch (IOException ignored) {
        // closing
      }
    }
  }
}
