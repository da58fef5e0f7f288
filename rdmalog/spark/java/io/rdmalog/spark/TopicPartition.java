package io.rdmalog.spark;

import java.io.Serializable;

/** A topic and one of its partitions (ordered by topic, then partition). */
public record TopicPartition(String topic, int partition)
    implements Serializable, Comparable<TopicPartition> {

  @Override
  public int compareTo(TopicPartition o) {
    int c = topic.compareTo(o.topic);
    return c != 0 ? c : Integer.compare(partition, o.partition);
  }

  @Override
  public String toString() {
    return topic + "-" + partition;
  }
}
