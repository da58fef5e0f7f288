"""The broker's signals, from outside as Prometheus and an operator see them: /metrics scraped and
parsed with prometheus_client's parser after real produce/fetch/group traffic, /health, SIGHUP
survived, JSON log lines and `rdmalog serve --log-level` after the subcommand."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata
from prometheus_client.parser import text_string_to_metric_families

from compat_tests.brokers import free_port, free_ports, port_open, serve_command


class Served:
    """`rdmalog serve` with the metrics endpoint, DEBUG and JSON logs, stderr kept."""

    def __init__(self, tmp: Path, overrides: dict[str, str] | None = None) -> None:
        self.port, self.metrics_port = free_ports(2)
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.stderr_path = tmp / "broker.stderr"
        cmd = serve_command() + [
            "--log-level", "DEBUG", "--log-format", "json",
            "--listen", self.bootstrap, "--data-dir", str(tmp / "data"),
            "--override", f"metrics.port={self.metrics_port}",
            "--override", "log.flush.interval.messages=1",
        ]  # fmt: skip
        for key, value in (overrides or {}).items():
            cmd += ["--override", f"{key}={value}"]
        self.stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.stderr, stderr=self.stderr)
        deadline = time.monotonic() + 30
        while not port_open("127.0.0.1", self.port) and time.monotonic() < deadline:
            assert self.proc.poll() is None, self.stderr_path.read_text()
            time.sleep(0.05)

    def get(self, path: str) -> tuple[int, bytes]:
        url = f"http://127.0.0.1:{self.metrics_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def scrape(self) -> dict[str, dict[tuple, float]]:
        status, body = self.get("/metrics")
        assert status == 200
        samples: dict[str, dict[tuple, float]] = {}
        for family in text_string_to_metric_families(body.decode()):
            for s in family.samples:
                samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
        return samples

    def log_lines(self) -> list[dict]:
        return [json.loads(line) for line in self.stderr_path.read_text().splitlines() if line]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(20)
        self.stderr.close()
        return self.proc.returncode


def test_metrics_health_sighup_and_json_logs(tmp_path: Path) -> None:
    served = Served(tmp_path)
    try:
        _traffic(served.bootstrap)
        m = served.scrape()
        assert m["kafka_server_brokertopicmetrics_messagesin_total"][(("topic", "signals"),)] == 60
        bytes_in = m["kafka_server_brokertopicmetrics_bytesin_total"][(("topic", "signals"),)]
        assert bytes_in > 60 * 10
        assert (
            m["kafka_server_brokertopicmetrics_bytesout_total"][(("topic", "signals"),)] >= bytes_in
        )
        produce = (("request", "Produce"),)
        assert m["kafka_network_requestmetrics_requests_total"][produce] >= 3
        assert m["kafka_network_requestmetrics_totaltimems_count"][produce] >= 3
        inf = (("le", "+Inf"), ("request", "Produce"))
        assert m["kafka_network_requestmetrics_totaltimems_bucket"][inf] >= 3
        assert m["kafka_log_logflushstats_logflushrateandtimems_count"][()] >= 1
        assert m["kafka_log_log_logendoffset"][(("partition", "0"), ("topic", "signals"))] == 30
        assert m["kafka_server_replicamanager_underreplicatedpartitions"][()] == 0
        assert m["kafka_controller_kafkacontroller_offlinepartitionscount"][()] == 0
        assert "kafka_server_replicamanager_isrshrinks_total" in m
        lag = m["kafka_consumergroup_lag"]
        assert lag[(("consumergroup", "lagging"), ("partition", "1"), ("topic", "signals"))] == 20
        assert (
            m["kafka_coordinator_group_groupmetadatamanager_numgroups"][(("state", "Empty"),)] >= 1
        )
        assert m["process_resident_memory_bytes"][()] > 0

        status, body = served.get("/health")
        health = json.loads(body)
        assert status == 200 and health["status"] == "ok" and health["partitions"] >= 2
        assert served.get("/nothing")[0] == 404

        served.proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        assert served.proc.poll() is None, "SIGHUP stopped the broker"
        assert served.scrape()  # still serving
    finally:
        code = served.stop()
    assert code == 0
    lines = served.log_lines()  # every line is JSON
    messages = [line["message"] for line in lines]
    assert any("SIGHUP" in msg for msg in messages)
    assert any(line["level"] == "DEBUG" for line in lines)  # --log-level after `serve`
    start = next(msg for msg in messages if "starting: cluster id" in msg)
    assert start.startswith("rdmalog ")
    assert any(m.startswith("listeners: PLAINTEXT://127.0.0.1:") for m in messages)
    assert any("metrics.port=" in m and "configs set" in m for m in messages)
    assert any(m.startswith("created topic signals") for m in messages)


def _traffic(bs: str) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bs)
    admin.create_topics([NewTopic("signals", 2, 1)])
    producer = KafkaProducer(bootstrap_servers=bs, linger_ms=0)
    for _ in range(3):
        for i in range(20):
            producer.send("signals", value=b"x" * 20, partition=i % 2)
        producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bs, auto_offset_reset="earliest",
                             consumer_timeout_ms=3000)  # fmt: skip
    consumer.assign([TopicPartition("signals", 0), TopicPartition("signals", 1)])
    assert sum(1 for _ in consumer) == 60
    consumer.close()
    admin.alter_group_offsets(
        "lagging", {TopicPartition("signals", p): OffsetAndMetadata(10, "", -1) for p in (0, 1)}
    )
    admin.close()


def test_metrics_port_refusals_are_one_line(tmp_path: Path) -> None:
    """A metrics.port no socket can have is a configuration error before anything opens; one in
    use stops the start with a line naming it."""
    import socket

    listen = f"127.0.0.1:{free_port()}"
    serve = [*serve_command()[:-1], "serve", "--listen", listen, "--data-dir", str(tmp_path / "d")]
    for value in ("70000", "-2", "nine"):
        res = subprocess.run([*serve, "--override", f"metrics.port={value}"],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        assert res.stderr.count("\n") == 1 and "metrics.port" in res.stderr, res.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        res = subprocess.run([*serve, "--override", f"metrics.port={busy}"],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert "address already in use" in res.stderr.lower().splitlines()[-1], res.stderr


def test_rdma_datapath_counters(tmp_path: Path) -> None:
    """Native (shm) produce and consume through a served broker show in its RDMA counters: grants
    for producers and readers, writes and bytes committed, and the revocations its rolls made."""
    from kafka.admin import KafkaAdminClient, NewTopic

    from rdmalog.rdma import Consumer, Producer

    control_port = free_port()
    served = Served(tmp_path, {"rdma.transport": "shm", "rdma.control.port": str(control_port)})
    control = f"127.0.0.1:{control_port}"
    try:
        admin = KafkaAdminClient(bootstrap_servers=served.bootstrap)
        admin.create_topics([NewTopic("native", 1, 1, topic_configs={"segment.bytes": "4096"})])
        admin.close()
        producer = Producer(control, "shm")
        values = [b"v%03d" % i + b"." * 60 for i in range(200)]
        for value in values:
            producer.send("native", 0, value)
        producer.flush()
        producer.close()
        consumer = Consumer(control, "shm")
        consumer.assign([("native", 0)])
        got: list[bytes] = []
        for _ in range(300):
            got += [r.value for r in consumer.poll(0.1)]
            if len(got) >= len(values):
                break
        consumer.close()
        assert got == values
        m = served.scrape()
    finally:
        assert served.stop() == 0
    count = {k: m[f"rdmalog_rdma_{k}_total"][()] for k in (
        "produce_grants", "read_grants", "writes_committed", "bytes_committed", "revocations"
    )}  # fmt: skip
    rolls = m["kafka_log_log_numlogsegments"][(("partition", "0"), ("topic", "native"))] - 1
    assert rolls >= 2, m["kafka_log_log_numlogsegments"]
    # a roll withdraws the head file's grant; the producer is granted the new head
    assert count["revocations"] >= rolls and count["produce_grants"] >= rolls + 1, count
    assert 1 <= count["writes_committed"] <= len(values), count
    assert count["bytes_committed"] > sum(map(len, values)), count
    assert count["read_grants"] >= rolls + 1, count  # every segment read
