"""The `rdmalog` tools against a real broker (`rdmalog serve`), run as an operator runs them: the
console script in a subprocess, its output and exit code checked, the effect checked with a
Kafka client."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from compat_tests.brokers import serve_command


def rdmalog(
    *args: str, stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    cmd = serve_command()[:-1] + list(args)
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)


def ok(res: subprocess.CompletedProcess) -> str:
    assert res.returncode == 0, (res.returncode, res.stdout, res.stderr)
    return res.stdout


def one_line_error(res: subprocess.CompletedProcess, *words: str) -> str:
    """A failure: non-zero exit, one line on stderr naming the problem, no traceback."""
    assert res.returncode != 0, (res.stdout, res.stderr)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    for word in words:
        assert word.lower() in lines[0].lower(), lines[0]
    return lines[0]


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_version_and_help() -> None:
    assert ok(rdmalog("--version")).startswith("rdmalog ")
    commands = (
        "serve topics configs groups offsets dump-log produce consume cluster import export mirror"
    )
    for command in commands.split():
        assert "usage:" in ok(rdmalog(command, "--help")), command


def test_topics_describe_missing_and_alter(broker) -> None:
    bs = broker.bootstrap
    one_line_error(
        rdmalog("topics", "describe", "no-such-topic", "--bootstrap-server", bs), "no-such-topic"
    )
    topic = name("alter")
    # --bootstrap-server after the action as well as before it
    ok(rdmalog("topics", "create", topic, "--partitions", "2", "--bootstrap-server", bs))
    ok(rdmalog("topics", "--bootstrap-server", bs, "alter", "--topic", topic, "--partitions", "5"))
    ok(rdmalog("topics", "alter", topic, "--config", "retention.ms=60000,segment.bytes=1048576",
               "--bootstrap-server", bs))  # fmt: skip
    out = ok(rdmalog("topics", "describe", topic, "--bootstrap-server", bs))
    assert "PartitionCount: 5" in out and "retention.ms=60000" in out, out
    ok(
        rdmalog(
            "topics", "alter", topic, "--delete-config", "retention.ms", "--bootstrap-server", bs
        )
    )
    assert "retention.ms" not in ok(rdmalog("topics", "describe", topic, "--bootstrap-server", bs))
    one_line_error(
        rdmalog("topics", "alter", topic, "--partitions", "3", "--bootstrap-server", bs),
        "partition",
    )
    one_line_error(
        rdmalog("topics", "alter", topic, "--config", "retention.ms=abc", "--bootstrap-server", bs),
        "retention.ms",
    )


def test_unreachable_broker_is_one_line() -> None:
    res = rdmalog("topics", "list", "--bootstrap-server", "127.0.0.1:1")
    one_line_error(res, "127.0.0.1:1")


def test_configs_describe_alter(broker) -> None:
    bs = broker.bootstrap
    topic = name("cfg")
    ok(rdmalog("topics", "create", topic, "--bootstrap-server", bs))
    ok(rdmalog("configs", "alter", "--entity-type", "topics", "--entity-name", topic,
               "--add-config", "retention.ms=86400000,cleanup.policy=delete", "--bootstrap-server", bs))  # fmt: skip
    out = ok(rdmalog("configs", "--bootstrap-server", bs, "describe", "--entity-type", "topics",
                     "--entity-name", topic))  # fmt: skip
    assert f"Dynamic configs for topic {topic} are:" in out
    assert "retention.ms=86400000" in out and "DYNAMIC_TOPIC_CONFIG" in out, out
    as_json = json.loads(ok(rdmalog("configs", "describe", "--entity-type", "topics", "--entity-name",
                                    topic, "--json", "--bootstrap-server", bs)))  # fmt: skip
    assert as_json == {topic: {"retention.ms": "86400000", "cleanup.policy": "delete"}}
    ok(rdmalog("configs", "alter", "--entity-type", "topics", "--entity-name", topic,
               "--delete-config", "retention.ms", "--bootstrap-server", bs))  # fmt: skip
    assert "retention.ms" not in ok(rdmalog("configs", "describe", "--entity-type", "topics",
                                            "--entity-name", topic, "--bootstrap-server", bs))  # fmt: skip
    everything = ok(rdmalog("configs", "describe", "--entity-type", "brokers", "--all",
                            "--bootstrap-server", bs))  # fmt: skip
    assert "All configs for broker" in everything and "log.segment.bytes=" in everything
    # dynamic broker configs: per broker and the cluster-wide <default>; read-only keys refused
    ok(rdmalog("configs", "alter", "--entity-type", "brokers", "--entity-name", "0",
               "--add-config", "max.connections=5000", "--bootstrap-server", bs))  # fmt: skip
    ok(rdmalog("configs", "alter", "--entity-type", "brokers", "--entity-default",
               "--add-config", "log.retention.ms=86400000", "--bootstrap-server", bs))  # fmt: skip
    shown = ok(rdmalog("configs", "describe", "--entity-type", "brokers", "--entity-name", "0",
                       "--bootstrap-server", bs))  # fmt: skip
    assert "max.connections=5000" in shown and "DYNAMIC_BROKER_CONFIG:max.connections" in shown
    assert "log.retention.ms" not in shown  # as kafka-configs.sh: only this broker's own
    every = ok(rdmalog("configs", "describe", "--entity-type", "brokers", "--entity-name", "0",
                       "--all", "--bootstrap-server", bs))  # fmt: skip
    assert "DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=86400000" in every
    defaults = ok(rdmalog("configs", "describe", "--entity-type", "brokers", "--entity-default",
                          "--bootstrap-server", bs))  # fmt: skip
    assert "Dynamic configs for brokers default are:" in defaults
    assert "log.retention.ms=86400000" in defaults and "max.connections" not in defaults
    one_line_error(rdmalog("configs", "alter", "--entity-type", "brokers", "--entity-name", "0",
                           "--add-config", "log.dirs=/tmp/x", "--bootstrap-server", bs),
                   "Cannot update these configs dynamically: log.dirs")  # fmt: skip
    ok(rdmalog("configs", "alter", "--entity-type", "brokers", "--entity-default",
               "--delete-config", "log.retention.ms", "--bootstrap-server", bs))  # fmt: skip
    ok(rdmalog("configs", "alter", "--entity-type", "brokers", "--entity-name", "0",
               "--delete-config", "max.connections", "--bootstrap-server", bs))  # fmt: skip
    one_line_error(rdmalog("configs", "describe", "--entity-type", "topics", "--entity-name",
                           "nope-" + topic, "--bootstrap-server", bs), "does not exist")  # fmt: skip


def _produce(bs: str, topic: str, n: int, partitions: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bs)
    for i in range(n):
        producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % partitions)
    producer.flush()
    producer.close()


def test_produce_consume_offsets(broker) -> None:
    bs = broker.bootstrap
    topic = name("console")
    ok(rdmalog("topics", "create", topic, "--partitions", "1", "--bootstrap-server", bs))
    lines = "".join(f"key{i}:value {i}\n" for i in range(25))
    ok(rdmalog("produce", "--topic", topic, "--property", "parse.key=true",
               "--property", "key.separator=:", "--bootstrap-server", bs, stdin=lines))  # fmt: skip
    consumer = KafkaConsumer(bootstrap_servers=bs, auto_offset_reset="earliest",
                             consumer_timeout_ms=5000)  # fmt: skip
    consumer.assign([TopicPartition(topic, 0)])
    got = [(r.key, r.value) for r in consumer]
    consumer.close()
    assert got == [(b"key%d" % i, b"value %d" % i) for i in range(25)]

    out = ok(rdmalog("consume", "--topic", topic, "--from-beginning", "--max-messages", "10",
                     "--property", "print.key=true,print.offset=true,key.separator=|",
                     "--bootstrap-server", bs))  # fmt: skip
    assert out.splitlines() == [f"Offset:{i}|key{i}|value {i}" for i in range(10)]
    out = ok(rdmalog("consume", "--topic", topic, "--partition", "0", "--offset", "20",
                     "--timeout-ms", "3000", "--bootstrap-server", bs))  # fmt: skip
    assert out.splitlines() == [f"value {i}" for i in range(20, 25)]

    assert ok(rdmalog("offsets", "--topic", topic, "--bootstrap-server", bs)).split() == [
        f"{topic}:0:25"
    ]
    assert ok(
        rdmalog("offsets", "--topic", topic, "--time", "-2", "--bootstrap-server", bs)
    ).split() == [f"{topic}:0:0"]
    one_line_error(rdmalog("offsets", "--topic", "nope-" + topic, "--bootstrap-server", bs))


def test_groups_describe_reset_delete(broker) -> None:
    bs = broker.bootstrap
    topic, group = name("grp"), name("g")
    ok(rdmalog("topics", "create", topic, "--partitions", "2", "--bootstrap-server", bs))
    _produce(bs, topic, 40, 2)
    consumer = KafkaConsumer(topic, bootstrap_servers=bs, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False)  # fmt: skip
    seen = 0
    for _ in range(100):
        seen += sum(len(v) for v in consumer.poll(500).values())
        if seen >= 30:
            break
    consumer.commit({TopicPartition(topic, p): _meta(15) for p in (0, 1)})
    members = ok(
        rdmalog("groups", "describe", "--group", group, "--members", "--bootstrap-server", bs)
    )
    assert group in members and "kafka-python" in members, members
    # a reset while the group has members is refused
    one_line_error(rdmalog("groups", "reset-offsets", "--group", group, "--all-topics",
                           "--to-earliest", "--execute", "--bootstrap-server", bs), "inactive")  # fmt: skip
    consumer.close(autocommit=False)

    described = ok(rdmalog("groups", "describe", "--group", group, "--bootstrap-server", bs))
    rows = [line.split() for line in described.splitlines() if line.startswith(group)]
    assert sorted((r[1], r[2], r[3], r[4], r[5]) for r in rows) == [
        (topic, "0", "15", "20", "5"),
        (topic, "1", "15", "20", "5"),
    ], described
    assert group in ok(rdmalog("groups", "list", "--bootstrap-server", bs)).split()

    dry = ok(rdmalog("groups", "reset-offsets", "--group", group, "--topic", f"{topic}:0",
                     "--to-earliest", "--bootstrap-server", bs))  # fmt: skip
    assert "dry run" in dry and _committed(bs, group, topic) == {0: 15, 1: 15}
    for flags, expected in (
        (["--to-earliest"], {0: 0, 1: 0}),
        (["--to-latest"], {0: 20, 1: 20}),
        (["--shift-by", "-7"], {0: 13, 1: 13}),
        (["--to-offset", "3"], {0: 3, 1: 3}),
        (["--to-offset", "999"], {0: 20, 1: 20}),  # kept within the log
        (["--to-datetime", "2000-01-01T00:00:00.000"], {0: 0, 1: 0}),
    ):
        ok(rdmalog("groups", "reset-offsets", "--group", group, "--topic", topic, *flags,
                   "--execute", "--bootstrap-server", bs))  # fmt: skip
        assert _committed(bs, group, topic) == expected, flags
    ok(rdmalog("groups", "delete", "--group", group, "--bootstrap-server", bs))
    assert group not in ok(rdmalog("groups", "list", "--bootstrap-server", bs)).split()
    one_line_error(rdmalog("groups", "delete", "--group", group, "--bootstrap-server", bs), group)


def _meta(offset: int):
    from kafka.structs import OffsetAndMetadata

    return OffsetAndMetadata(offset, "", -1)


def _committed(bs: str, group: str, topic: str) -> dict[int, int]:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        found = admin.list_group_offsets(group)[group]
    finally:
        admin.close()
    return {tp.partition: om.offset for tp, om in found.items() if tp.topic == topic}


def test_cluster_describe_and_log_dirs(broker) -> None:
    bs = broker.bootstrap
    topic = name("dirs")
    ok(rdmalog("topics", "create", topic, "--partitions", "2", "--bootstrap-server", bs))
    _produce(bs, topic, 10, 2)
    out = ok(rdmalog("cluster", "describe", "--bootstrap-server", bs))
    assert "Cluster ID:" in out and f"Port: {broker.port}" in out, out
    dirs = json.loads(ok(rdmalog("cluster", "log-dirs", "--topic-list", topic, "--json",
                                 "--bootstrap-server", bs)))  # fmt: skip
    parts = {p["partition"]: p for d in dirs["brokers"][0]["logDirs"] for p in d["partitions"]}
    assert set(parts) == {f"{topic}-0", f"{topic}-1"} and all(p["size"] > 0 for p in parts.values())


def test_dump_log_checks_crcs_and_indexes(broker_factory, tmp_path: Path) -> None:
    broker = broker_factory({"log.index.interval.bytes": "100"}, local=True)
    bs = broker.bootstrap
    topic = name("dump")
    ok(rdmalog("topics", "create", topic, "--bootstrap-server", bs))
    for _ in range(5):
        ok(rdmalog("produce", "--topic", topic, "--bootstrap-server", bs,
                   stdin="".join(f"record {i}\n" for i in range(30))))  # fmt: skip
    broker.stop()  # indexes are written at close
    seg = broker.data_dir / f"{topic}-0" / "00000000000000000000"
    out = ok(rdmalog("dump-log", "--files", f"{seg}.log", "--print-data-log"))
    assert "isvalid: true" in out and "isvalid: false" not in out
    assert "payload: record 29" in out and "150 records" in out, out
    index = ok(rdmalog("dump-log", "--files", f"{seg}.index,{seg}.timeindex"))
    assert "offset: " in index and "timestamp: " in index and "mismatch" not in index

    bad = tmp_path / "00000000000000000000.log"
    data = bytearray(Path(f"{seg}.log").read_bytes())
    first_batch_end = 12 + int.from_bytes(data[8:12], "big")  # offset, length, then the batch
    data[first_batch_end - 1] ^= 0xFF  # its records' last byte: its CRC no longer matches
    bad.write_bytes(bytes(data))
    res = rdmalog("dump-log", "--files", str(bad))
    assert res.returncode == 1 and "isvalid: false" in res.stdout, res.stdout
    one_line_error(rdmalog("dump-log", "--files", str(tmp_path / "missing.log")), "missing.log")


@pytest.mark.parametrize("where", ["before", "after"])
def test_command_config_is_read(broker, tmp_path: Path, where: str) -> None:
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=PLAINTEXT\nclient.id=ops-test\n")
    base = ["topics", "list"]
    flags = ["--command-config", str(props), "--bootstrap-server", broker.bootstrap]
    args = [base[0], *flags, base[1]] if where == "before" else [*base, *flags]
    ok(rdmalog(*args))
    props.write_text("ssl.truststore.location=/x.jks\n")
    one_line_error(rdmalog("topics", "list", *flags), "keystore")
