"""`rdmalog serve` configuration as clients observe it: a server.properties file, --override on
top of it, and a refused configuration."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from compat_tests import clients
from compat_tests.brokers import BrokerProcess, BrokerStartError
from compat_tests.common import TIMEOUT_S, Rec, admin, now_ms


def auto_created_partitions(bootstrap: str) -> int:
    topic = f"auto-{uuid.uuid4().hex[:8]}"
    clients.ck_produce(bootstrap, topic, [Rec(0, b"k", b"v", (), now_ms())])
    md = admin(bootstrap).list_topics(topic=topic, timeout=TIMEOUT_S)
    assert md.topics[topic].error is None, md.topics[topic].error
    return len(md.topics[topic].partitions)


def test_properties_file_and_override_precedence(broker_factory, tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text(
        "# a Kafka server.properties\nnum.partitions=4\nauto.create.topics.enable=true\n"
    )
    from_file = broker_factory(properties_file=props, local=True)
    assert auto_created_partitions(from_file.bootstrap) == 4
    overridden = broker_factory({"num.partitions": "2"}, properties_file=props)
    assert auto_created_partitions(overridden.bootstrap) == 2


def test_invalid_configuration_is_refused(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", {"num.partitions": "0"}, log_dir=tmp_path)
    with pytest.raises(BrokerStartError):
        broker.start(timeout=60)
    assert broker.proc is not None and broker.proc.returncode not in (0, None)
    said = [line for line in broker.stderr_tail().splitlines() if not line.startswith("====")]
    assert any("num.partitions" in line for line in said), said
