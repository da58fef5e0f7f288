"""The `rdmalog topics` command against a running broker: create, list, describe, delete."""

from __future__ import annotations

import subprocess
import uuid

from compat_tests.brokers import serve_command
from compat_tests.common import admin


def rdmalog_topics(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = serve_command()[:-1] + ["topics", "--bootstrap-server", bootstrap, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_topics_create_list_describe_delete(broker) -> None:
    name = f"cli-{uuid.uuid4().hex[:8]}"
    bs = broker.bootstrap

    res = rdmalog_topics(bs, "create", name, "--partitions", "3", "--replication-factor", "1")
    assert res.returncode == 0, res.stderr
    md = admin(bs).list_topics(topic=name, timeout=10)
    assert md.topics[name].error is None and len(md.topics[name].partitions) == 3

    res = rdmalog_topics(bs, "list")
    assert res.returncode == 0, res.stderr
    assert name in res.stdout.split(), res.stdout

    res = rdmalog_topics(bs, "describe", name)
    assert res.returncode == 0, res.stderr
    lines = [line for line in res.stdout.splitlines() if line.strip()]
    assert f"Topic: {name}" in lines[0] and "PartitionCount: 3" in lines[0], res.stdout
    for p in range(3):
        assert any(f"Partition: {p}" in line and "Leader:" in line for line in lines), res.stdout

    # a duplicate is refused with a non-zero exit and a reason
    res = rdmalog_topics(bs, "create", name, "--partitions", "3")
    assert res.returncode != 0 and "exist" in res.stderr.lower(), (res.returncode, res.stderr)

    res = rdmalog_topics(bs, "delete", name)
    assert res.returncode == 0, res.stderr
    res = rdmalog_topics(bs, "list")
    assert res.returncode == 0 and name not in res.stdout.split(), res.stdout

    res = rdmalog_topics(bs, "delete", name)
    assert res.returncode != 0, "deleting a missing topic succeeded"


def test_topics_create_with_config(broker) -> None:
    name = f"cli-cfg-{uuid.uuid4().hex[:8]}"
    res = rdmalog_topics(
        broker.bootstrap, "create", name, "--partitions", "1", "--config", "retention.ms=3600000"
    )
    assert res.returncode == 0, res.stderr
    from confluent_kafka.admin import ConfigResource

    client = admin(broker.bootstrap)
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    configs = client.describe_configs([resource])[resource].result(timeout=20)
    assert configs["retention.ms"].value == "3600000"
