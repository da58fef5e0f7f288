"""The broker's metrics: plain counters the hot paths bump (a dict increment per request or per
partition of a request, never per record), turned into Prometheus families only when scraped.

Names follow what Prometheus' JMX exporter makes of Kafka's MBeans with its Kafka example rules
(`lowercaseOutputName`, `kafka.<domain><type=T, name=NPerSec, topic=x><>Count` becomes
`kafka_<domain>_<t>_<n>_total{topic="x"}`), so dashboards and alerts written for Kafka read them:

| metric | Kafka MBean |
| --- | --- |
| `kafka_server_brokertopicmetrics_bytesin_total{topic}` | BrokerTopicMetrics BytesInPerSec |
| `kafka_server_brokertopicmetrics_messagesin_total{topic}` | BrokerTopicMetrics MessagesInPerSec |
| `kafka_server_brokertopicmetrics_bytesout_total{topic}` | BrokerTopicMetrics BytesOutPerSec |
| `kafka_network_requestmetrics_requests_total{request}` | RequestMetrics RequestsPerSec |
| `kafka_network_requestmetrics_totaltimems{request}` (histogram, ms) | RequestMetrics TotalTimeMs |
| `kafka_server_replicamanager_underreplicatedpartitions` | ReplicaManager UnderReplicatedPartitions |
| `kafka_controller_kafkacontroller_offlinepartitionscount` | KafkaController OfflinePartitionsCount |
| `kafka_server_replicamanager_isrshrinks_total`, `..._isrexpands_total` | ReplicaManager IsrShrinks/ExpandsPerSec |
| `kafka_server_replicamanager_partitioncount`, `..._leadercount` | ReplicaManager |
| `kafka_coordinator_group_groupmetadatamanager_numgroups{state}` | GroupMetadataManager NumGroups* |
| `kafka_log_logflushstats_logflushrateandtimems` (histogram, ms) | LogFlushStats LogFlushRateAndTimeMs |
| `kafka_log_log_size`, `..._logendoffset`, `..._logstartoffset`, `..._numlogsegments` `{topic,partition}` | Log |

Kafka's brokers do not export consumer lag; `kafka_consumergroup_lag{consumergroup,topic,partition}`
and `kafka_consumergroup_current_offset` are kafka-exporter's names for it. rdmalog's own:
`rdmalog_rdma_*_total` (the native datapaths), `rdmalog_build_info`, and the process collector's
`process_*`. The histograms are Prometheus histograms (buckets), where the JMX exporter would give
quantile gauges.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from rdmalog.store.stats import LOG_STATS, Histogram

if TYPE_CHECKING:
    from gateway.broker import Broker


def _histogram(h: Histogram, name: str, doc: str) -> Metric:
    fam = HistogramMetricFamily(name, doc)
    fam.add_metric([], h.buckets(), h.total)
    return fam


class BrokerMetrics:
    """What the broker's request paths count. ISR shrinks and expands are hooks the replica
    manager calls (`isr_shrunk`, `isr_expanded`)."""

    def __init__(self) -> None:
        self.started = time.time()
        self.bytes_in: defaultdict[str, int] = defaultdict(int)
        self.messages_in: defaultdict[str, int] = defaultdict(int)
        self.bytes_out: defaultdict[str, int] = defaultdict(int)
        self.requests: dict[int, Histogram] = {}
        self.isr_shrinks = 0
        self.isr_expands = 0

    # --- hot paths: one call per request, or per partition of a request ----------------------
    def request_done(self, api_key: int, ms: float) -> None:
        h = self.requests.get(api_key)
        if h is None:
            h = self.requests[api_key] = Histogram()
        h.observe(ms)

    def produced(self, topic: str, nbytes: int, records: int) -> None:
        self.bytes_in[topic] += nbytes
        self.messages_in[topic] += records

    def fetched(self, by_topic: dict[str, int]) -> None:
        for topic, nbytes in by_topic.items():
            self.bytes_out[topic] += nbytes

    def isr_shrunk(self, partitions: int = 1) -> None:
        self.isr_shrinks += partitions

    def isr_expanded(self, partitions: int = 1) -> None:
        self.isr_expands += partitions


def _api_name(api_key: int) -> str:
    from gateway.handlers.registry import REGISTRY

    entry = REGISTRY.get(api_key)
    if entry is None:
        return str(api_key)
    return (
        entry.name.rsplit(".", 1)[-1].removeprefix("k").split("_", 1)[-1].title().replace("_", "")
    )


class BrokerCollector:
    """A prometheus_client collector reading a running broker at scrape time (on its loop)."""

    def __init__(self, broker: Broker, version: str) -> None:
        self.broker = broker
        self.version = version

    def collect(self) -> Iterator[Metric]:
        b = self.broker
        m: BrokerMetrics = b.metrics
        info = GaugeMetricFamily(
            "rdmalog_build_info",
            "rdmalog's version and cluster id",
            labels=["version", "cluster_id"],
        )
        info.add_metric([self.version, b.cluster_id or ""], 1)
        yield info
        live = {t.name for t in b.topics()}
        yield from self._per_topic(m, live)
        requests = CounterMetricFamily(
            "kafka_network_requestmetrics_requests", "requests answered, by API", labels=["request"]
        )
        latency = HistogramMetricFamily(
            "kafka_network_requestmetrics_totaltimems",
            "time from a request's arrival to its answer being written, in milliseconds",
            labels=["request"],
        )
        for key, h in sorted(m.requests.items()):
            name = _api_name(key)
            buckets = h.buckets()
            requests.add_metric([name], buckets[-1][1])
            latency.add_metric([name], buckets, h.total)
        yield requests
        yield latency
        yield _histogram(
            LOG_STATS.flush,
            "kafka_log_logflushstats_logflushrateandtimems",
            "log flushes (fsync), in milliseconds",
        )
        yield from self._partitions(b)
        yield from self._groups(b)
        yield from self._rdma(b)
        yield from self._mirror(b)

    def _per_topic(self, m: BrokerMetrics, live: set[str]) -> Iterator[Metric]:
        for attr, name, doc in (
            ("bytes_in", "bytesin", "bytes produced to the topic"),
            ("messages_in", "messagesin", "records produced to the topic"),
            ("bytes_out", "bytesout", "bytes fetched from the topic"),
        ):
            fam = CounterMetricFamily(
                f"kafka_server_brokertopicmetrics_{name}", doc, labels=["topic"]
            )
            counts: dict[str, int] = getattr(m, attr)
            for topic in [t for t in counts if t not in live]:  # deleted topics go away
                del counts[topic]
            for topic, n in sorted(counts.items()):
                fam.add_metric([topic], n)
            yield fam

    def _partitions(self, b: Broker) -> Iterator[Metric]:
        size = GaugeMetricFamily("kafka_log_log_size", "bytes", labels=["topic", "partition"])
        end = GaugeMetricFamily(
            "kafka_log_log_logendoffset", "log end offset", labels=["topic", "partition"]
        )
        start = GaugeMetricFamily(
            "kafka_log_log_logstartoffset", "log start offset", labels=["topic", "partition"]
        )
        segments = GaugeMetricFamily(
            "kafka_log_log_numlogsegments", "segments", labels=["topic", "partition"]
        )
        count = 0
        for topic in b.topics():
            for plog in topic.partitions:
                labels = [topic.name, str(plog.partition)]
                size.add_metric(labels, plog.size_in_bytes)
                end.add_metric(labels, plog.log_end_offset)
                start.add_metric(labels, plog.log_start_offset)
                segments.add_metric(labels, len(plog.segments))
                count += 1
        yield from (size, end, start, segments)
        replicas = b.cluster.replicas if b.cluster is not None else None
        under, offline, leaders = (
            (0, 0, count) if replicas is None else replicas.replication_state()
        )
        yield _gauge(
            "kafka_server_replicamanager_underreplicatedpartitions",
            "partitions led here whose ISR is smaller than their replica set",
            under,
        )
        yield _gauge(
            "kafka_controller_kafkacontroller_offlinepartitionscount",
            "partitions without a live leader",
            offline,
        )
        yield _gauge("kafka_server_replicamanager_partitioncount", "partitions here", count)
        yield _gauge("kafka_server_replicamanager_leadercount", "partitions led here", leaders)
        m = b.metrics
        for name, value in (("isrshrinks", m.isr_shrinks), ("isrexpands", m.isr_expands)):
            fam = CounterMetricFamily(f"kafka_server_replicamanager_{name}", f"ISR {name[3:]}")
            fam.add_metric([], value)
            yield fam

    def _groups(self, b: Broker) -> Iterator[Metric]:
        service = b.groups
        if service is None:
            return
        coordinator = service.coordinator
        groups = GaugeMetricFamily(
            "kafka_coordinator_group_groupmetadatamanager_numgroups",
            "consumer groups by state",
            labels=["state"],
        )
        states: defaultdict[str, int] = defaultdict(int)
        lag = GaugeMetricFamily(
            "kafka_consumergroup_lag",
            "log end offset minus the group's committed offset",
            labels=["consumergroup", "topic", "partition"],
        )
        current = GaugeMetricFamily(
            "kafka_consumergroup_current_offset",
            "the group's committed offset",
            labels=["consumergroup", "topic", "partition"],
        )
        for name, group in list(coordinator.groups.items()):
            states[_state_name(group)] += 1
            for (topic, partition), committed in list(group.offsets.items()):
                plog = b.partition(topic, partition)
                if isinstance(plog, int):
                    continue
                labels = [name, topic, str(partition)]
                current.add_metric(labels, committed.offset)
                lag.add_metric(labels, max(plog.high_watermark - committed.offset, 0))
        for state, n in sorted(states.items()):
            groups.add_metric([state], n)
        yield groups
        yield lag
        yield current

    def _mirror(self, b: Broker) -> Iterator[Metric]:
        yield from _mirror_lag(b)

    def _rdma(self, b: Broker) -> Iterator[Metric]:
        counters = getattr(b.rdma, "counters", None)
        if counters is None:
            return
        for key, doc in RDMA_COUNTERS.items():
            fam = CounterMetricFamily(f"rdmalog_rdma_{key}", doc)
            fam.add_metric([], counters.get(key, 0))
            yield fam


RDMA_COUNTERS = {
    "produce_grants": "head files granted to native producers for RDMA writes",
    "read_grants": "segments registered for native consumers' RDMA reads (reads served)",
    "writes_committed": "RDMA writes validated and committed in place",
    "bytes_committed": "bytes of RDMA writes committed in place",
    "revocations": "produce grants withdrawn (roll, timeout, a dead predecessor, leadership)",
}


def _mirror_lag(b: Broker) -> Iterator[Metric]:
    mirror = getattr(b, "mirror", None)
    lag = GaugeMetricFamily(
        "rdmalog_mirror_lag",
        "records a mirror topic's partition lacks of its source's high watermark",
        labels=["topic", "partition"],
    )
    for (topic, partition), n in sorted(getattr(mirror, "lag", {}).items()):
        lag.add_metric([topic, str(partition)], n)
    yield lag


def _state_name(group: Any) -> str:
    state = getattr(group, "state", "")
    return str(getattr(state, "value", state))


def _gauge(name: str, doc: str, value: float) -> Metric:
    fam = GaugeMetricFamily(name, doc)
    fam.add_metric([], value)
    return fam
