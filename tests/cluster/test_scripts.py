"""scripts/cluster.sh starts ZooKeeper and three brokers a client can use, reports them, kills one
and stops them; docker/compose.cluster.yml passes brokers only configuration they accept."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from compat_tests.brokers import free_port
from compat_tests.cluster import wait_for
from compat_tests.zookeeper import missing_reason
from rdmalog.config import BrokerConfig

ROOT = Path(__file__).resolve().parents[2]


def test_cluster_script_starts_serves_and_stops(tmp_path: Path) -> None:
    if missing_reason():
        pytest.skip(missing_reason())
    ports = set()
    while len(ports) < 4:
        ports.add(free_port())
    zk_port, *rest = sorted(ports)
    base = free_port()
    while any(p in ports for p in range(base, base + 3)):
        base = free_port()
    env = {
        **os.environ,
        "RDMALOG_CLUSTER_DIR": str(tmp_path / "c"),
        "ZK_PORT": str(zk_port),
        "BASE_PORT": str(base),
    }

    def script(*args: str) -> str:
        out = subprocess.run(
            [str(ROOT / "scripts" / "cluster.sh"), *args],
            env=env, cwd=ROOT, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert out.returncode == 0, f"cluster.sh {shlex.join(args)}: {out.stdout}{out.stderr}"
        return out.stdout

    try:
        started = script("start", "--override", "zookeeper.session.timeout.ms=4000")
        bootstrap = f"127.0.0.1:{base},127.0.0.1:{base + 1},127.0.0.1:{base + 2}"
        assert f"bootstrap: {bootstrap}" in started
        wait_for(
            "three brokers registered", lambda: "registered brokers: [1, 2, 3]" in script("status")
        )
        from kafka import KafkaConsumer, KafkaProducer, TopicPartition

        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
        producer.send("try-it", b"hello").get(60)
        producer.close()
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=20000)
        consumer.assign([TopicPartition("try-it", 0)])
        consumer.seek_to_beginning()
        assert next(iter(consumer)).value == b"hello"
        consumer.close()
        assert "broker 2 killed" in script("kill", "2")
        assert "broker 2: stopped" in script("status")
        script("start")
        assert "broker 2: running" in script("status")
    finally:
        script("stop")
    assert "zookeeper: stopped" in script("status")


def test_compose_cluster_passes_known_configuration() -> None:
    doc = yaml.safe_load((ROOT / "docker" / "compose.cluster.yml").read_text())
    brokers = [s for s in doc["services"].values() if "command" in s]
    assert len(brokers) == 3
    ids = set()
    for svc in brokers:
        cmd = svc["command"]
        overrides = dict(cmd[i + 1].split("=", 1) for i, a in enumerate(cmd) if a == "--override")
        cfg = BrokerConfig.from_sources(None, overrides)  # an unknown or bad key raises
        assert cfg.get("zookeeper.connect")
        ids.add(cfg.node_id)
    assert ids == {1, 2, 3}
