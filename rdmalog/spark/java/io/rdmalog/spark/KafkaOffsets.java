package io.rdmalog.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.Collections;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.sql.connector.read.streaming.Offset;

/**
 * A stream position: the next offset to read of every topic-partition, as spark-sql-kafka's (and
 * the Python source's) JSON {"topic": {"0": 1234}}, topics and partitions sorted. Spark
 * checkpoints this JSON, so a query may move between the Python and the JVM reader.
 */
public final class KafkaOffsets extends Offset {
  private static final ObjectMapper JSON = new ObjectMapper();
  public final Map<TopicPartition, Long> offsets;

  public KafkaOffsets(Map<TopicPartition, Long> offsets) {
    this.offsets = Collections.unmodifiableMap(new TreeMap<>(offsets));
  }

  @Override
  public String json() {
    ObjectNode root = JSON.createObjectNode();
    for (Map.Entry<TopicPartition, Long> e : offsets.entrySet()) {
      JsonNode t = root.get(e.getKey().topic());
      ObjectNode parts = t == null ? root.putObject(e.getKey().topic()) : (ObjectNode) t;
      parts.put(Integer.toString(e.getKey().partition()), e.getValue().longValue());
    }
    try {
      return JSON.writeValueAsString(root);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  public static KafkaOffsets fromJson(String json) {
    Map<TopicPartition, Long> out = new TreeMap<>();
    try {
      JsonNode root = JSON.readTree(json);
      for (Map.Entry<String, JsonNode> topic : root.properties()) {
        for (Map.Entry<String, JsonNode> part : topic.getValue().properties()) {
          out.put(new TopicPartition(topic.getKey(), Integer.parseInt(part.getKey())),
              part.getValue().asLong());
        }
      }
    } catch (IOException e) {
      throw new IllegalArgumentException("not a stream offset: " + json, e);
    }
    return new KafkaOffsets(out);
  }
}
