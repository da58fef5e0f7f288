"""A copied-in Kafka partition keeps its records until its configs are known (issue 20 item 7).

The data dir is laid out as a Kafka KRaft log dir would be after docs/migration.md's copy: partition
directories with 30-day-old records, and a `__cluster_metadata-0` log with Kafka's metadata records.
`known` has a TopicRecord and a retention.ms override of 90 days there; `stranger` has no record.
With a retention check every 200 ms, `known` keeps its records (its own retention) and so does
`stranger` (deletion suspended: shown in DescribeConfigs) until an operator sets its configs, which
lifts the suspension: then retention deletes its old records.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from rdmalog.store import checkpoints as ck
from rdmalog.store.records import Record, build_batch
from tests.integration.rawkafka import RawClient, list_offset, produce
from tests.unit.store.kraft_records import config_record, topic_record, write_metadata_log

DAY_MS = 86_400_000
SUSPENDED = "rdmalog.deletion.suspended"
TIMEOUT_S = 60


def write_kafka_partition(data_dir: Path, topic: str, topic_id: uuid.UUID, count: int) -> None:
    """`topic-0` with `count` records, all written 30 days ago, and its partition.metadata."""
    d = data_dir / f"{topic}-0"
    d.mkdir(parents=True)
    old = int(time.time() * 1000) - 30 * DAY_MS
    records = [Record(None, b"v%d" % i, timestamp=old + i) for i in range(count)]
    (d / "00000000000000000000.log").write_bytes(build_batch(records, now_ms=old))
    ck.write_partition_metadata(d, topic_id)


def _earliest(c: RawClient, topic: str) -> int:
    return list_offset(c, topic, 0, -2)["offset"]


def _retention_pass(c: RawClient) -> None:
    """Wait for a whole retention pass of the broker: the probe topic (retention.ms=1000) loses
    freshly appended old records twice."""
    for _ in range(2):
        old = int(time.time() * 1000) - DAY_MS
        start = _earliest(c, "probe")
        produce(c, "probe", 0, build_batch([Record(None, b"x", timestamp=old)], now_ms=old))
        deadline = time.monotonic() + TIMEOUT_S
        while _earliest(c, "probe") == start:
            assert time.monotonic() < deadline, "no retention pass happened"
            time.sleep(0.05)


def _topic_configs(admin: AdminClient, topic: str) -> dict:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([resource])[resource].result(timeout=TIMEOUT_S)


def test_copied_in_partitions_keep_their_records_until_configs_are_known(broker_factory, tmp_path):
    data = tmp_path / "kafka-log-dir"
    known_id, stranger_id = uuid.uuid4(), uuid.uuid4()
    write_kafka_partition(data, "known", known_id, 50)
    write_kafka_partition(data, "stranger", stranger_id, 50)
    write_metadata_log(
        data,
        [
            topic_record("known", known_id),
            config_record(2, "known", "retention.ms", str(90 * DAY_MS)),
            config_record(2, "known", "segment.bytes", "1048576"),
        ],
    )
    from compat_tests.brokers import BrokerProcess

    broker = BrokerProcess(data, overrides={"log.retention.check.interval.ms": "200"})
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        with RawClient(broker.bootstrap) as c:
            topics = {"topics": [{"name": "probe", "num_partitions": 1, "replication_factor": 1,
                                  "configs": [{"name": "retention.ms", "value": "1000"}]}]}  # fmt: skip
            assert c.call(19, 7, {**topics, "timeout_ms": 30000})["topics"][0]["error_code"] == 0
            _retention_pass(c)
            assert _earliest(c, "known") == 0
            assert _earliest(c, "stranger") == 0

            known = _topic_configs(admin, "known")
            assert known["retention.ms"].value == str(90 * DAY_MS)
            assert known["segment.bytes"].value == "1048576"
            assert SUSPENDED not in known
            stranger = _topic_configs(admin, "stranger")
            assert stranger[SUSPENDED].value == "true" and stranger[SUSPENDED].is_read_only
            assert stranger["retention.ms"].value == str(7 * DAY_MS)  # the broker default

            broker.restart()  # the suspension is kept with the topic
            c.close()
        with RawClient(broker.bootstrap) as c:
            _retention_pass(c)
            assert _earliest(c, "stranger") == 0
            assert SUSPENDED in _topic_configs(admin, "stranger")

            # The operator sets the topic's configs: the suspension is lifted, retention applies.
            resource = ConfigResource(
                ConfigResource.Type.TOPIC,
                "stranger",
                incremental_configs=[
                    ConfigEntry(
                        "retention.ms", str(DAY_MS), incremental_operation=AlterConfigOpType.SET
                    )
                ],
            )
            admin.incremental_alter_configs([resource])[resource].result(timeout=TIMEOUT_S)
            assert SUSPENDED not in _topic_configs(admin, "stranger")
            deadline = time.monotonic() + TIMEOUT_S
            while _earliest(c, "stranger") != 50:
                assert time.monotonic() < deadline, "retention did not resume"
                time.sleep(0.05)
            assert _earliest(c, "known") == 0
    finally:
        broker.stop()
    log = broker.stderr_path.read_text()
    assert "adopting topic stranger (1 partitions)" in log and "deletion suspended" in log
    assert "the KRaft metadata log has no record of it" in log
    assert "deletion resumes" in log
