"""The compat scenarios of every client kind against a three-broker cluster: Java kafka-clients,
KafkaJS, kafka-python, confluent-kafka and aiokafka find each partition's leader, produce, consume
in groups, manage topics and look up offsets across brokers (the scenarios' topics have one
replica, so leaders spread over the brokers)."""

from __future__ import annotations

import pytest

from compat_tests.common import ScenarioSkip
from compat_tests.scenarios import load

CHOSEN = (
    "java-group-commit-resume-and-admin",
    "kafkajs-produce-consume-group",
    "kafkajs-group-rebalance",
    "kafkajs-admin",
    "kafkajs-idempotent-producer",
    "kafka-python-roundtrip-lz4",
    "confluent-roundtrip-zstd",
    "aiokafka-roundtrip-gzip",
    "kafka-python-idempotent-producer",
    "confluent-offsets-watermarks-and-for-times",
    "kafka-python-seek-past-end-reset-earliest",
    "confluent-delete-records",
    "confluent-admin-topics",
    "kafka-python-admin-topics",
)
SCENARIOS = load()


@pytest.mark.parametrize("name", CHOSEN)
def test_scenario_on_a_cluster(name: str, module_cluster) -> None:
    try:
        SCENARIOS[name].fn(module_cluster.bootstrap)
    except ScenarioSkip as e:
        pytest.skip(str(e))
