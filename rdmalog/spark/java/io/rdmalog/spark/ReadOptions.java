package io.rdmalog.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.regex.Pattern;
import java.util.regex.PatternSyntaxException;

/**
 * The reader's options with spark-sql-kafka's names and rules, validated as the Python source's
 * rdmalog/spark/options.py does (same checks, same messages). `jvmCannotServe` says when a
 * query's options need the Python source instead (the Kafka transport, librdkafka settings).
 */
public final class ReadOptions implements Serializable {
  private static final long serialVersionUID = 1L;
  private static final ObjectMapper JSON = new ObjectMapper();
  public static final long LATEST = -1;
  public static final long EARLIEST = -2;
  static final long DEFAULT_POLL_TIMEOUT_MS = 120_000;
  private static final String[] UNSUPPORTED = {
    "minoffsetspertrigger", "maxtriggerdelay", "maxrecordsperpartition"
  };
  private static final Map<String, String> FORBIDDEN_KAFKA = Map.of(
      "auto.offset.reset", "use startingOffsets/endingOffsets instead",
      "enable.auto.commit", "the source never commits offsets to Kafka",
      "key.deserializer", "keys are always returned as binary",
      "value.deserializer", "values are always returned as binary",
      "key.serializer", "keys are always written as binary",
      "value.serializer", "values are always written as binary",
      "interceptor.classes", "not supported");
  // librdkafka settings the JVM reader honors itself (anything else needs the Python source)
  private static final List<String> JVM_KAFKA = List.of("check.crcs", "client.id");

  /** A starting or ending position (options.py's OffsetSpec). */
  public static final class OffsetSpec implements Serializable {
    private static final long serialVersionUID = 1L;
    public final String kind; // earliest, latest, offsets, timestamp, timestamps
    public final Map<TopicPartition, Long> offsets;
    public final long timestamp;
    public final String option;

    OffsetSpec(String kind, Map<TopicPartition, Long> offsets, long timestamp, String option) {
      this.kind = kind;
      this.offsets = offsets;
      this.timestamp = timestamp;
      this.option = option;
    }
  }

  public final String bootstrap;
  public final String transport;
  public final String control;
  public final Map<String, String> clientConf;
  public final String subscriptionKind; // subscribe, subscribePattern, assign
  public final List<String> topics;
  public final String pattern;
  public final List<TopicPartition> assigned;
  public final OffsetSpec starting;
  public final OffsetSpec ending;
  public final boolean includeHeaders;
  public final boolean failOnDataLoss;
  public final Long maxOffsetsPerTrigger;
  public final Integer minPartitions;
  public final long pollTimeoutMs;
  public final String timestampStrategy;
  public final boolean checkCrcs;

  private ReadOptions(Map<String, String> o, boolean streaming) {
    String boot = o.getOrDefault("rdmalog.bootstrap", o.getOrDefault("kafka.bootstrap.servers", ""));
    bootstrap = boot.strip();
    if (bootstrap.isEmpty()) {
      throw new OptionException("option 'rdmalog.bootstrap' (or 'kafka.bootstrap.servers') must "
          + "be set to the broker's host:port list");
    }
    transport = o.getOrDefault("rdmalog.transport", "kafka").strip().toLowerCase(Locale.ROOT);
    if (!List.of("kafka", "shm", "tcp").contains(transport)) {
      throw new OptionException("option 'rdmalog.transport' must be one of kafka, shm, tcp, got '"
          + o.get("rdmalog.transport") + "'");
    }
    Map<String, String> conf = new TreeMap<>();
    for (Map.Entry<String, String> e : o.entrySet()) {
      String k = e.getKey();
      if (!k.startsWith("kafka.") || k.equals("kafka.bootstrap.servers")) {
        continue;
      }
      String name = k.substring("kafka.".length());
      if (FORBIDDEN_KAFKA.containsKey(name)) {
        throw new OptionException(
            "option '" + k + "' is not supported: " + FORBIDDEN_KAFKA.get(name));
      }
      conf.put(name, e.getValue());
    }
    clientConf = Collections.unmodifiableMap(conf);
    control = o.getOrDefault("rdmalog.control", "").strip();
    if (!transport.equals("kafka") && control.isEmpty()) {
      throw new OptionException("option 'rdmalog.control' must be set to the broker's RDMA "
          + "control address (host:port) when rdmalog.transport=" + transport);
    }
    if (!control.isEmpty()) {
      checkAddress("rdmalog.control", control);
    }
    checkCrcs = !"false".equalsIgnoreCase(conf.getOrDefault("check.crcs", "true").strip());

    List<String> given = new ArrayList<>();
    for (String name : List.of("subscribe", "subscribePattern", "assign")) {
      if (o.containsKey(name.toLowerCase(Locale.ROOT))) {
        given.add(name);
      }
    }
    if (given.size() != 1) {
      throw new OptionException("exactly one of the options 'subscribe', 'subscribePattern', "
          + "'assign' must be specified for the rdmalog source, got "
          + (given.isEmpty() ? "none" : String.join(", ", given)));
    }
    subscriptionKind = given.get(0);
    String raw = o.get(subscriptionKind.toLowerCase(Locale.ROOT));
    List<String> ts = new ArrayList<>();
    List<TopicPartition> tps = new ArrayList<>();
    String pat = "";
    if (subscriptionKind.equals("subscribe")) {
      for (String t : raw.split(",")) {
        if (!t.strip().isEmpty()) {
          ts.add(t.strip());
        }
      }
      if (ts.isEmpty()) {
        throw new OptionException(
            "option 'subscribe' must name at least one topic, got '" + raw + "'");
      }
    } else if (subscriptionKind.equals("subscribePattern")) {
      pat = raw.strip();
      if (pat.isEmpty()) {
        throw new OptionException("option 'subscribePattern' must not be empty");
      }
      try {
        Pattern.compile(pat);
      } catch (PatternSyntaxException e) {
        throw new OptionException(
            "option 'subscribePattern' is not a valid regex: " + e.getMessage());
      }
    } else {
      JsonNode parsed = object("assign", raw);
      TreeSet<TopicPartition> set = new TreeSet<>();
      for (Map.Entry<String, JsonNode> e : parsed.properties()) {
        JsonNode parts = e.getValue();
        if (!parts.isArray()) {
          throw badAssign(e.getKey(), parts);
        }
        for (JsonNode p : parts) {
          if (!p.isIntegralNumber() || p.asLong() < 0) {
            throw badAssign(e.getKey(), parts);
          }
          set.add(new TopicPartition(e.getKey(), p.asInt()));
        }
      }
      if (set.isEmpty()) {
        throw new OptionException("option 'assign' must name at least one topic-partition");
      }
      tps.addAll(set);
    }
    topics = Collections.unmodifiableList(ts);
    pattern = pat;
    assigned = Collections.unmodifiableList(tps);

    OffsetSpec start = offsetSpec(o, "starting", streaming ? "latest" : "earliest");
    OffsetSpec end = offsetSpec(o, "ending", null);
    if (streaming) {
      if (end != null) {
        throw new OptionException(
            "option '" + end.option + "' is not valid in streaming queries");
      }
    } else {
      if (start.kind.equals("latest")) {
        throw new OptionException(
            "option 'startingOffsets': starting offset can't be latest for batch queries");
      }
      for (Map.Entry<TopicPartition, Long> e : offsetsOf(start).entrySet()) {
        if (e.getValue() == LATEST) {
          throw new OptionException("option 'startingOffsets': starting offset for " + e.getKey()
              + " can't be latest (-1) for batch queries");
        }
      }
      if (end == null) {
        end = new OffsetSpec("latest", Map.of(), 0, "endingOffsets");
      }
      if (end.kind.equals("earliest")) {
        throw new OptionException(
            "option 'endingOffsets': ending offset can't be earliest for batch queries");
      }
      for (Map.Entry<TopicPartition, Long> e : offsetsOf(end).entrySet()) {
        if (e.getValue() == EARLIEST) {
          throw new OptionException("option 'endingOffsets': ending offset for " + e.getKey()
              + " can't be earliest (-2) for batch queries");
        }
      }
    }
    starting = start;
    ending = end;
    Long perTrigger = positiveLong(o, "maxOffsetsPerTrigger");
    maxOffsetsPerTrigger = streaming ? perTrigger : null; // spark-sql-kafka: ignored for batch
    String strategy = o.getOrDefault("startingoffsetsbytimestampstrategy", "error").strip()
        .toLowerCase(Locale.ROOT);
    if (!strategy.equals("error") && !strategy.equals("latest")) {
      throw new OptionException("option 'startingOffsetsByTimestampStrategy' must be 'error' or "
          + "'latest', got '" + o.get("startingoffsetsbytimestampstrategy") + "'");
    }
    timestampStrategy = strategy;
    Long poll = positiveLong(o, "kafkaConsumer.pollTimeoutMs");
    pollTimeoutMs = poll == null ? DEFAULT_POLL_TIMEOUT_MS : poll;
    includeHeaders = bool(o, "includeHeaders", false);
    failOnDataLoss = bool(o, "failOnDataLoss", true);
    Long minParts = positiveLong(o, "minPartitions");
    minPartitions = minParts == null ? null : (int) Math.min(minParts, Integer.MAX_VALUE);
  }

  /** Validate `options` (any key case) for a batch (`streaming` false) or streaming read. */
  public static ReadOptions parse(Map<String, String> options, boolean streaming) {
    for (String key : options.keySet()) {
      if (List.of(UNSUPPORTED).contains(key.toLowerCase(Locale.ROOT))) {
        throw new OptionException("option '" + key + "' is not supported by the rdmalog source");
      }
    }
    return new ReadOptions(lower(options), streaming);
  }

  /**
   * Why the JVM reader cannot serve these options (then the Python source does), or null: it
   * reads the native tcp transport and resolves offsets with its own Kafka-protocol requests,
   * which take no librdkafka settings.
   */
  public static String jvmCannotServe(Map<String, String> options) {
    Map<String, String> o = lower(options);
    String transport = o.getOrDefault("rdmalog.transport", "kafka").strip()
        .toLowerCase(Locale.ROOT);
    if (!transport.equals("tcp")) {
      return "rdmalog.transport=" + transport + " (the JVM reader speaks the native tcp transport)";
    }
    for (String k : o.keySet()) {
      if (k.startsWith("kafka.") && !k.equals("kafka.bootstrap.servers")
          && !JVM_KAFKA.contains(k.substring("kafka.".length()))) {
        return "option '" + k + "' is a librdkafka setting";
      }
    }
    return null;
  }

  boolean matches(String topic) {
    if (subscriptionKind.equals("subscribe")) {
      return topics.contains(topic);
    }
    return Pattern.compile(pattern).matcher(topic).matches();
  }

  static Map<String, String> lower(Map<String, String> options) {
    Map<String, String> out = new TreeMap<>();
    for (Map.Entry<String, String> e : options.entrySet()) {
      out.put(e.getKey().toLowerCase(Locale.ROOT), e.getValue());
    }
    return out;
  }

  private static Map<TopicPartition, Long> offsetsOf(OffsetSpec spec) {
    return spec.kind.equals("offsets") ? spec.offsets : Map.of();
  }

  private static OptionException badAssign(String topic, JsonNode parts) {
    return new OptionException("option 'assign' expects JSON like {\"topicA\":[0,1]}; topic '"
        + topic + "' has " + parts);
  }

  private static void checkAddress(String name, String value) {
    int colon = value.lastIndexOf(':');
    String host = colon < 0 ? "" : value.substring(0, colon);
    String port = colon < 0 ? "" : value.substring(colon + 1);
    boolean ok = !host.isEmpty() && !host.contains(",") && port.matches("[0-9]{1,5}")
        && Integer.parseInt(port) > 0 && Integer.parseInt(port) < 65536;
    if (!ok) {
      throw new OptionException(
          "option '" + name + "' must be one host:port address, got '" + value + "'");
    }
  }

  private static boolean bool(Map<String, String> o, String name, boolean dflt) {
    String raw = o.get(name.toLowerCase(Locale.ROOT));
    if (raw == null) {
      return dflt;
    }
    String v = raw.strip().toLowerCase(Locale.ROOT);
    if (!v.equals("true") && !v.equals("false")) {
      throw new OptionException(
          "option '" + name + "' must be 'true' or 'false', got '" + raw + "'");
    }
    return v.equals("true");
  }

  private static Long positiveLong(Map<String, String> o, String name) {
    String raw = o.get(name.toLowerCase(Locale.ROOT));
    if (raw == null) {
      return null;
    }
    long v;
    try {
      v = Long.parseLong(raw.strip());
    } catch (NumberFormatException e) {
      v = 0;
    }
    if (v <= 0) {
      throw new OptionException(
          "option '" + name + "' must be a positive integer, got '" + raw + "'");
    }
    return v;
  }

  private static JsonNode object(String name, String raw) {
    JsonNode n;
    try {
      n = JSON.readTree(raw);
    } catch (java.io.IOException e) {
      throw new OptionException(
          "option '" + name + "' is neither a keyword nor valid JSON: " + e.getMessage());
    }
    if (n == null || !n.isObject()) {
      throw new OptionException("option '" + name + "' must be a JSON object, got '" + raw + "'");
    }
    return n;
  }

  /** spark-sql-kafka's {"topic":{"0":23,"1":-1}}. */
  static Map<TopicPartition, Long> partitionMap(String name, String raw) {
    Map<TopicPartition, Long> out = new TreeMap<>();
    for (Map.Entry<String, JsonNode> e : object(name, raw).properties()) {
      if (!e.getValue().isObject()) {
        throw new OptionException("option '" + name + "' expects JSON like {\"topic\":{\"0\":23}};"
            + " topic '" + e.getKey() + "' has " + e.getValue());
      }
      for (Map.Entry<String, JsonNode> p : e.getValue().properties()) {
        int index;
        try {
          index = Integer.parseInt(p.getKey());
        } catch (NumberFormatException x) {
          throw new OptionException("option '" + name + "': partition '" + p.getKey()
              + "' of topic '" + e.getKey() + "' is not an integer");
        }
        if (!p.getValue().isIntegralNumber()) {
          throw new OptionException("option '" + name + "': value for " + e.getKey() + "-" + index
              + " must be an integer, got " + p.getValue());
        }
        out.put(new TopicPartition(e.getKey(), index), p.getValue().asLong());
      }
    }
    return out;
  }

  private static OffsetSpec offsetSpec(Map<String, String> o, String prefix, String dflt) {
    String tsName = prefix + "Timestamp";
    String byTsName = prefix + "OffsetsByTimestamp";
    String offName = prefix + "Offsets";
    String raw = o.get(tsName.toLowerCase(Locale.ROOT));
    if (raw != null) {
      long ts;
      try {
        ts = Long.parseLong(raw.strip());
      } catch (NumberFormatException e) {
        throw new OptionException(
            "option '" + tsName + "' must be a timestamp in milliseconds, got '" + raw + "'");
      }
      if (ts < 0) {
        throw new OptionException("option '" + tsName + "' must be >= 0, got '" + raw + "'");
      }
      return new OffsetSpec("timestamp", Map.of(), ts, tsName);
    }
    raw = o.get(byTsName.toLowerCase(Locale.ROOT));
    if (raw != null) {
      Map<TopicPartition, Long> stamps = partitionMap(byTsName, raw);
      for (Map.Entry<TopicPartition, Long> e : stamps.entrySet()) {
        if (e.getValue() < 0) {
          throw new OptionException(
              "option '" + byTsName + "': timestamp for " + e.getKey() + " must be >= 0");
        }
      }
      return new OffsetSpec("timestamps", stamps, 0, byTsName);
    }
    raw = o.getOrDefault(offName.toLowerCase(Locale.ROOT), dflt);
    if (raw == null) {
      return null;
    }
    String word = raw.strip().toLowerCase(Locale.ROOT);
    if (word.equals("earliest") || word.equals("latest")) {
      return new OffsetSpec(word, Map.of(), 0, offName);
    }
    Map<TopicPartition, Long> offsets = partitionMap(offName, raw);
    for (Map.Entry<TopicPartition, Long> e : offsets.entrySet()) {
      if (e.getValue() < EARLIEST) {
        throw new OptionException("option '" + offName + "': offset " + e.getValue() + " for "
            + e.getKey() + " is invalid (use an offset >= 0, -1 for latest or -2 for earliest)");
      }
    }
    return new OffsetSpec("offsets", offsets, 0, offName);
  }
}
