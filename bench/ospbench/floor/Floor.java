import io.rdmalog.rdma.KafkaRecord;
import io.rdmalog.rdma.PartitionConsumer;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.locks.LockSupport;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * The delay floor of a JVM reader without Spark: records of the OSPBench topics read as they come,
 * each one's delay = this JVM's clock when it is returned - the generation time in its JSON.
 *
 * <p>java Floor native|kafka BOOTSTRAP CONTROL SECONDS OUT_FILE
 *
 * <p>native: rdmalog's JVM reader's consumer (rdmalog/spark/java), one per topic, looking at the
 * metadata slot every 20-200 us as the JVM reader's live tasks do. kafka: Apache Kafka's Java
 * consumer (kafka-clients, which spark-sql-kafka's executors call) with its defaults, long-polling
 * the gateway. Prints "ready" once positioned at the topics' ends.
 */
public final class Floor {
  private static final String[] TOPICS = {"ndwflow", "ndwspeed"};

  public static void main(String[] args) throws Exception {
    String mode = args[0];
    long end = System.nanoTime() + Long.parseLong(args[3]) * 1_000_000_000L;
    List<Double> delays = new ArrayList<>();
    if (mode.equals("native")) {
      List<PartitionConsumer> consumers = new ArrayList<>();
      for (String t : TOPICS) {
        consumers.add(new PartitionConsumer(args[2], "tcp", t, 0, PartitionConsumer.LATEST, true,
            30_000));
      }
      System.out.println("ready");
      System.out.flush();
      long nap = 20_000;
      while (System.nanoTime() < end) {
        boolean any = false;
        for (PartitionConsumer c : consumers) {
          KafkaRecord r;
          while ((r = c.next()) != null) {
            any = true;
            add(delays, r.value);
          }
        }
        if (any) {
          nap = 20_000;
        } else {
          LockSupport.parkNanos(nap);
          nap = Math.min(2 * nap, 200_000);
        }
      }
      for (PartitionConsumer c : consumers) {
        c.close();
      }
    } else {
      Properties p = new Properties();
      p.put("bootstrap.servers", args[1]);
      p.put("key.deserializer", ByteArrayDeserializer.class.getName());
      p.put("value.deserializer", ByteArrayDeserializer.class.getName());
      p.put("enable.auto.commit", "false");
      p.put("auto.offset.reset", "none");
      try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
        List<TopicPartition> tps = new ArrayList<>();
        for (String t : TOPICS) {
          tps.add(new TopicPartition(t, 0));
        }
        consumer.assign(tps);
        consumer.seekToEnd(tps);
        for (TopicPartition tp : tps) {
          consumer.position(tp);
        }
        System.out.println("ready");
        System.out.flush();
        while (System.nanoTime() < end) {
          for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(100))) {
            add(delays, r.value());
          }
        }
      }
    }
    try (PrintWriter w = new PrintWriter(args[4], StandardCharsets.UTF_8)) {
      for (double d : delays) {
        w.println(d);
      }
    }
  }

  private static void add(List<Double> delays, byte[] value) {
    Instant now = Instant.now();
    String s = new String(value, StandardCharsets.UTF_8);
    int at = s.indexOf("\"timestamp\": ");
    if (at < 0) {
      return; // warm-up
    }
    int from = at + "\"timestamp\": ".length();
    int to = from;
    while (to < s.length() && s.charAt(to) != ',' && s.charAt(to) != '}') {
      to++;
    }
    double gen = Double.parseDouble(s.substring(from, to));
    delays.add(now.getEpochSecond() * 1000.0 + now.getNano() / 1e6 - gen);
  }
}
