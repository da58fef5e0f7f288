"""The replication gauges and counters of /metrics in a cluster: a leader reports its partition
under-replicated and counts the ISR shrink when a follower stops fetching (frozen, still
registered: the leader shrinks the ISR itself, as Kafka's IsrShrinksPerSec counts), and the expand
when it fetches again (UnderReplicatedPartitions, IsrShrinksPerSec, IsrExpandsPerSec)."""

from __future__ import annotations

import re
import signal
import urllib.request
from pathlib import Path

from compat_tests.brokers import free_port
from compat_tests.cluster import BrokerCluster, wait_for
from tests.cluster.clients import create_topic

PREFIX = "kafka_server_replicamanager_"


def _scrape(port: int) -> dict[str, float]:
    """The unlabelled samples of a broker's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {
        m.group(1): float(m.group(2)) for m in re.finditer(r"^([a-z_]+) ([0-9.e+-]+)$", text, re.M)
    }


def test_replication_metrics_follow_the_isr(tmp_path: Path, zk_connect: str) -> None:
    ports: dict[int, int] = {}

    def metrics_port(broker_id: int, port: int) -> dict[str, str]:
        chosen = free_port()
        while chosen == port or chosen in ports.values():  # those ports are not bound yet
            chosen = free_port()
        ports[broker_id] = chosen
        return {"metrics.port": str(ports[broker_id])}

    # a session long enough that the frozen follower stays registered while it lags
    overrides = {"zookeeper.session.timeout.ms": "30000", "replica.lag.time.max.ms": "1500"}
    with BrokerCluster(tmp_path, zk_connect, 3, overrides, per_broker=metrics_port) as cluster:
        create_topic(cluster.bootstrap, "watched")
        cluster.wait_isr("watched", {1, 2, 3})
        leader = cluster.leader("watched")
        before = _scrape(ports[leader])
        assert before[PREFIX + "underreplicatedpartitions"] == 0
        assert before[PREFIX + "leadercount"] >= 1
        assert before["kafka_controller_kafkacontroller_offlinepartitionscount"] == 0

        follower = min(set(cluster.brokers) - {leader})
        proc = cluster.broker(follower).proc
        proc.send_signal(signal.SIGSTOP)
        try:
            cluster.wait_isr("watched", set(cluster.brokers) - {follower})
            shrunk = wait_for(
                "the leader to report the partition under-replicated",
                lambda: (
                    (m := _scrape(ports[leader]))[PREFIX + "underreplicatedpartitions"] == 1 and m
                ),
            )
        finally:
            proc.send_signal(signal.SIGCONT)
        assert shrunk[PREFIX + "isrshrinks_total"] >= before[PREFIX + "isrshrinks_total"] + 1

        cluster.wait_isr("watched", {1, 2, 3})
        back = wait_for(
            "the leader to report the partition fully replicated again",
            lambda: (m := _scrape(ports[leader]))[PREFIX + "underreplicatedpartitions"] == 0 and m,
        )
        assert back[PREFIX + "isrexpands_total"] >= shrunk[PREFIX + "isrexpands_total"] + 1
