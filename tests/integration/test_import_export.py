"""Offline migration: `rdmalog export` writes a Kafka log directory (read back: its files, then served
again after `rdmalog import`), and `rdmalog import` adopts one with its topic configs from the KRaft
metadata log or an operator's file, its groups' committed offsets, and every batch CRC-checked."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
from kafka.structs import OffsetAndMetadata

from compat_tests.brokers import serve_command
from rdmalog.store import checkpoints as ck
from tests.unit.store.kraft_records import config_record, topic_record, write_metadata_log

TOPICS = {"orders": 3, "audit": 1}


def rdmalog(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = serve_command()[:-1] + list(args)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def ok(res: subprocess.CompletedProcess) -> str:
    assert res.returncode == 0, (res.returncode, res.stdout, res.stderr)
    return res.stdout


def _fill(bs: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bs)
    from kafka.admin import NewTopic

    admin.create_topics([NewTopic(t, n, 1) for t, n in TOPICS.items()])
    producer = KafkaProducer(bootstrap_servers=bs, compression_type="gzip")
    for t, n in TOPICS.items():
        for i in range(200):
            producer.send(t, key=b"%d" % i, value=b"%s-%d" % (t.encode(), i), partition=i % n)
        producer.flush()
    producer.close()
    admin.alter_group_offsets(
        "billing",
        {TopicPartition("orders", p): OffsetAndMetadata(10 + p, "", -1) for p in range(3)},
    )
    admin.close()


def _contents(bs: str) -> dict[tuple[str, int], list[tuple[int, bytes, bytes]]]:
    consumer = KafkaConsumer(bootstrap_servers=bs, auto_offset_reset="earliest",
                             consumer_timeout_ms=4000)  # fmt: skip
    parts = [TopicPartition(t, p) for t, n in TOPICS.items() for p in range(n)]
    consumer.assign(parts)
    out: dict = {(tp.topic, tp.partition): [] for tp in parts}
    for r in consumer:
        out[(r.topic, r.partition)].append((r.offset, r.key, r.value))
    consumer.close()
    return out


def _group(bs: str) -> dict[int, int]:
    admin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        found = admin.list_group_offsets("billing").get("billing", {})
    finally:
        admin.close()
    return {tp.partition: om.offset for tp, om in found.items()}


def _topic_configs(bs: str, topic: str) -> dict[str, str]:
    admin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        answer = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    finally:
        admin.close()
    return {k: c.get("value") for k, c in answer["topic"][topic].items()}


def test_export_then_import_round_trip(broker_factory, tmp_path: Path) -> None:
    source = broker_factory(local=True)
    _fill(source.bootstrap)
    before = _contents(source.bootstrap)
    assert sum(len(v) for v in before.values()) == 400
    source.stop()

    kafka_dir = tmp_path / "kafka-logs"
    out = ok(rdmalog("export", str(kafka_dir), "--data-dir", str(source.data_dir),
                     "--node-id", "1"))  # fmt: skip
    assert "orders-0: offsets 0-67" in out, out
    # a Kafka log dir: Kafka's files only, its checkpoints naming every partition's offsets
    names = {p.name for p in kafka_dir.iterdir()}
    assert "__rdmalog_metadata" not in names and "rdmalog-producer-id-block" not in names
    props = ck.read_meta_properties(kafka_dir)
    assert props["version"] == "1" and props["node.id"] == "1" and props["cluster.id"]
    ends = ck.read_offset_checkpoint(kafka_dir / ck.REPLICATION_CHECKPOINT)
    assert ends[("orders", 0)] == 67 and ends[("audit", 0)] == 200
    assert ck.read_offset_checkpoint(kafka_dir / ck.RECOVERY_POINT_CHECKPOINT) == ends
    kafka_names = {"leader-epoch-checkpoint", "partition.metadata"}
    for d in kafka_dir.glob("orders-*"):
        kinds = {f.name if f.name in kafka_names else f.suffix for f in d.iterdir()}
        assert kinds <= {".log", ".index", ".timeindex", *kafka_names}, kinds
    orders_id = ck.read_partition_metadata(kafka_dir / "orders-0")
    assert orders_id == ck.read_partition_metadata(source.data_dir / "orders-0")

    # the Kafka cluster's metadata knows orders (with a retention override), not audit
    write_metadata_log(kafka_dir, [
        topic_record("orders", orders_id),
        config_record(2, "orders", "retention.ms", "2592000000"),
    ])  # fmt: skip
    target = tmp_path / "rdmalog-data"
    res = rdmalog("import", str(kafka_dir), "--data-dir", str(target))
    report = ok(res)
    assert "Topic configs (from __cluster_metadata-0)" in report
    assert "orders: retention.ms=2592000000" in report
    assert "audit: not known: adopted with deletion suspended" in report
    assert "billing" in report and "CRC" in report and " BAD" not in report
    assert "verifying: 100%" in res.stderr  # the progress

    served = broker_factory(local=True)
    served.stop()
    served.data_dir = target
    served.start()
    assert _contents(served.bootstrap) == before
    assert _group(served.bootstrap) == {0: 10, 1: 11, 2: 12}
    assert _topic_configs(served.bootstrap, "orders")["retention.ms"] == "2592000000"
    assert _topic_configs(served.bootstrap, "audit").get("rdmalog.deletion.suspended") == "true"


def test_import_configs_from_kafka_configs_output_and_crc_refusal(broker_factory, tmp_path) -> None:
    source = broker_factory(local=True)
    _fill(source.bootstrap)
    source.stop()
    kafka_dir = tmp_path / "kafka-logs"
    ok(rdmalog("export", str(kafka_dir), "--data-dir", str(source.data_dir)))
    configs = tmp_path / "topic-configs.txt"
    configs.write_text(  # kafka-configs.sh --describe --all --entity-type topics, abridged
        "All configs for topic orders are:\n"
        "  retention.ms=86400000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms="
        "86400000, DEFAULT_CONFIG:log.retention.hours=168}\n"
        "  segment.bytes=1073741824 sensitive=false synonyms={DEFAULT_CONFIG:log.segment.bytes="
        "1073741824}\n"
        "All configs for topic audit are:\n"
        "  cleanup.policy=delete sensitive=false synonyms={DEFAULT_CONFIG:log.cleanup.policy=delete}\n"
    )
    dry = ok(rdmalog("import", str(kafka_dir), "--configs-from", str(configs), "--dry-run"))
    assert "orders: retention.ms=86400000" in dry and "audit: (defaults)" in dry, dry
    assert "segment.bytes" not in dry.split("Topic configs")[1].split("Consumer groups")[0]
    assert not (kafka_dir / "__rdmalog_metadata").exists()  # a dry run changes nothing

    # or from the source cluster while it still runs (here: the exporting broker, started again)
    source.start()
    ok(rdmalog("configs", "alter", "--entity-type", "topics", "--entity-name", "orders",
               "--add-config", "retention.ms=3600000", "--bootstrap-server", source.bootstrap))  # fmt: skip
    asked = ok(rdmalog("import", str(kafka_dir), "--source-bootstrap-server", source.bootstrap,
                       "--dry-run"))  # fmt: skip
    assert f"Topic configs (from {source.bootstrap})" in asked, asked
    orders_line = next(line for line in asked.splitlines() if line.startswith("  orders: "))
    assert "retention.ms=3600000" in orders_line, orders_line
    source.stop()

    # a batch whose CRC fails stops the import, naming it
    seg = kafka_dir / "audit-0" / "00000000000000000000.log"
    data = bytearray(seg.read_bytes())
    data[70] ^= 0x01
    seg.write_bytes(bytes(data))
    res = rdmalog("import", str(kafka_dir), "--data-dir", str(tmp_path / f"t-{uuid.uuid4().hex}"))
    assert res.returncode == 1 and "fail their CRC" in res.stderr, (res.stdout, res.stderr)
    assert "audit-0/00000000000000000000.log" in res.stdout


def _add_kafka_only_files(kafka_dir: Path) -> None:
    """What a stopped KRaft broker leaves in its log dir besides the partitions an export writes:
    its clean-shutdown marker, the cleaner's and the bootstrap checkpoints, producer snapshots,
    the metadata log's quorum state and a partition directory deleted but not yet removed."""
    (kafka_dir / ".kafka_cleanshutdown").write_text('{"version":0,"brokerEpoch":7}')
    ck.write_offset_checkpoint(kafka_dir / "cleaner-offset-checkpoint", {("orders", 0): 0})
    (kafka_dir / "bootstrap.checkpoint").write_bytes(b"\x00\x01bootstrap-records")
    for part in kafka_dir.glob("orders-*"):
        end = ck.read_offset_checkpoint(kafka_dir / ck.REPLICATION_CHECKPOINT)[
            ("orders", int(part.name.rsplit("-", 1)[1]))
        ]
        (part / f"{end:020d}.snapshot").write_bytes(b"\x00\x01" + b"\x00" * 30)
    (kafka_dir / "__cluster_metadata-0" / "quorum-state").write_text(
        '{"clusterId":"","leaderId":1,"leaderEpoch":3,"votedId":-1,"appliedOffset":0,'
        '"currentVoters":[{"voterId":1}],"data_version":0}'
    )
    gone = kafka_dir / f"orders-0.{uuid.uuid4().hex}-delete"
    gone.mkdir()
    (gone / "00000000000000000000.log").write_bytes(b"")


def test_import_in_place_a_log_dir_as_kafka_leaves_it(broker_factory, tmp_path: Path) -> None:
    """`rdmalog import DIR` without --data-dir: the Kafka log directory, with the files only Kafka
    writes, becomes rdmalog's data dir where it lies and a broker serves it unchanged."""
    source = broker_factory(local=True)
    _fill(source.bootstrap)
    before = _contents(source.bootstrap)
    source.stop()
    kafka_dir = tmp_path / "kafka-logs"
    ok(rdmalog("export", str(kafka_dir), "--data-dir", str(source.data_dir)))
    orders_id = ck.read_partition_metadata(kafka_dir / "orders-0")
    audit_id = ck.read_partition_metadata(kafka_dir / "audit-0")
    write_metadata_log(kafka_dir, [
        topic_record("orders", orders_id),
        topic_record("audit", audit_id),
        config_record(2, "orders", "cleanup.policy", "compact"),
    ])  # fmt: skip
    _add_kafka_only_files(kafka_dir)
    segments = {
        p.relative_to(kafka_dir): p.read_bytes()
        for p in kafka_dir.glob("*-*/*.log")
        if not p.parent.name.endswith("-delete")  # removed at start-up, as Kafka does
    }

    report = ok(rdmalog("import", str(kafka_dir)))
    assert "orders: cleanup.policy=compact" in report and "audit: (defaults)" in report, report
    assert "-delete" not in report.split("Topic configs")[0], report  # not taken for a partition
    # the batches are adopted as they lie, byte for byte
    assert {p: (kafka_dir / p).read_bytes() for p in segments} == segments

    served = broker_factory(local=True)
    served.stop()
    served.data_dir = kafka_dir
    served.start()
    assert _contents(served.bootstrap) == before
    assert _group(served.bootstrap) == {0: 10, 1: 11, 2: 12}
    assert _topic_configs(served.bootstrap, "orders")["cleanup.policy"] == "compact"
    # and it starts again after a stop, with the same records
    served.restart()
    assert _contents(served.bootstrap) == before


def test_import_refusals_are_one_line(broker_factory, tmp_path: Path) -> None:
    """A directory a running broker holds, a missing one, a target that is not empty: exit 1 and
    one line saying so (after the progress lines), nothing copied."""
    broker = broker_factory(local=True)
    in_use = rdmalog("import", str(broker.data_dir), "--dry-run")
    broker.stop()
    full = tmp_path / "full"
    full.mkdir()
    (full / "something").write_text("x")
    for res, words in (
        (in_use, "stop it first"),
        (rdmalog("import", str(tmp_path / "nowhere")), "not a directory"),
        (rdmalog("import", str(broker.data_dir), "--data-dir", str(full)), "not empty"),
    ):
        assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
        assert words in res.stderr.strip().splitlines()[-1], res.stderr
    assert [p.name for p in full.iterdir()] == ["something"]
