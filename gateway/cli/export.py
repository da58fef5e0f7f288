"""`rdmalog export`: write an rdmalog data dir (its broker stopped) as a Kafka log directory.

Copies each partition's segments, indexes, leader-epoch-checkpoint and partition.metadata (every
batch CRC-checked on the way, progress on stderr), and writes what a Kafka broker reads at start-up:
meta.properties (KRaft's version 1: cluster.id, node.id), recovery-point-offset-checkpoint,
log-start-offset-checkpoint and replication-offset-checkpoint. rdmalog's own files (topic registry,
producer id block, producer state) are left out. __consumer_offsets goes along in Kafka's record
schema, so groups keep their committed offsets when Kafka's offsets.topic.num.partitions is the
same (50 by default).

A KRaft broker keeps a partition only when partition.metadata names the topic id its metadata has:
create the topics in the Kafka cluster first (same names and partition counts) and pass
`--topic-ids-from KAFKA:9092`, which writes Kafka's ids instead of rdmalog's."""

from __future__ import annotations

import argparse
import shutil
import uuid
from pathlib import Path

from gateway.cli.common import CliError, out, split_list

KAFKA_FILES = (".log", ".index", ".timeindex")
KAFKA_NAMES = ("leader-epoch-checkpoint", "partition.metadata")


def register(sub) -> list[argparse.ArgumentParser]:
    exp = sub.add_parser(
        "export", help="write rdmalog's data as a Kafka log directory", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    exp.add_argument("output", help="the Kafka log directory to write (new or empty)")
    exp.add_argument("--data-dir", required=True, help="rdmalog's data dir (its broker stopped)")
    exp.add_argument("--topic", action="append", default=[], metavar="T[,T]", help="default: all")
    exp.add_argument("--node-id", type=int, help="the Kafka broker's node.id (default: rdmalog's)")
    exp.add_argument("--cluster-id", help="the Kafka cluster's id (default: rdmalog's)")
    exp.add_argument(
        "--topic-ids-from", metavar="HOST:PORT", help="a Kafka cluster holding the topics"
    )
    exp.set_defaults(func=run)
    return [exp]


def run(args: argparse.Namespace) -> int:
    from gateway.cli.migrate_import import locked
    from gateway.migration.inventory import Progress, partition_dirs
    from rdmalog.store import checkpoints as ck
    from rdmalog.store.verify import check_partition, data_bytes

    source, output = Path(args.data_dir).resolve(), Path(args.output).resolve()
    if not (source / "__rdmalog_metadata").is_dir():
        raise CliError(f"{source} is not an rdmalog data dir")
    if (source / ".lock").exists() and locked(source / ".lock"):
        raise CliError(f"{source} is in use by a running broker: stop it first")
    if output.exists() and any(output.iterdir()):
        raise CliError(f"{output} is not empty")
    wanted = set(split_list(args.topic))
    dirs = [(d, t, p) for d, t, p in partition_dirs(source) if not wanted or t in wanted]
    missing = wanted - {t for _, t, _ in dirs}
    if missing:
        raise CliError(f"no topic '{sorted(missing)[0]}' in {source}")
    ids = (
        _kafka_topic_ids(args.topic_ids_from, {t for _, t, _ in dirs})
        if args.topic_ids_from
        else {}
    )
    props = ck.read_meta_properties(source) or {}
    output.mkdir(parents=True, exist_ok=True)
    starts = ck.read_offset_checkpoint(source / ck.LOG_START_OFFSET_CHECKPOINT)
    recovery, log_starts, ends = {}, {}, {}
    progress = Progress(sum(data_bytes(d) for d, _, _ in dirs), "exporting")
    bad = 0
    for d, topic, partition in dirs:
        check = check_partition(d, progress.advance)
        bad += check.invalid_batches
        dest = output / d.name
        dest.mkdir()
        for f in d.iterdir():
            if f.suffix in KAFKA_FILES or f.name in KAFKA_NAMES:
                shutil.copy2(f, dest / f.name)
        if topic in ids:
            ck.write_partition_metadata(dest, ids[topic])
        key = (topic, partition)
        ends[key] = recovery[key] = check.end_offset
        first = check.start_offset if check.start_offset is not None else check.end_offset
        log_starts[key] = max(starts.get(key, 0), first)
    progress.finish()
    if bad:
        shutil.rmtree(output, ignore_errors=True)
        raise CliError(f"{bad} batch(es) fail their CRC: nothing exported")
    node = args.node_id if args.node_id is not None else int(props.get("node.id", 1))
    cluster = args.cluster_id or props.get("cluster.id") or ck.uuid_to_kafka(uuid.uuid4())
    ck.write_meta_properties(output, cluster, node)
    ck.write_offset_checkpoint(output / ck.RECOVERY_POINT_CHECKPOINT, recovery)
    ck.write_offset_checkpoint(output / ck.LOG_START_OFFSET_CHECKPOINT, log_starts)
    ck.write_offset_checkpoint(output / ck.REPLICATION_CHECKPOINT, ends)
    topics = sorted({t for _, t, _ in dirs})
    out(f"Exported {len(dirs)} partitions of {len(topics)} topics to {output} "
        f"(cluster.id={cluster}, node.id={node}).")  # fmt: skip
    for (topic, partition), end in sorted(ends.items()):
        out(f"  {topic}-{partition}: offsets {log_starts[(topic, partition)]}-{end}")
    return 0


def _kafka_topic_ids(bootstrap: str, topics: set[str]) -> dict[str, uuid.UUID]:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","), bootstrap_timeout_ms=10_000)
    try:
        found = {t["name"]: t for t in admin.describe_topics(sorted(topics))}
    finally:
        admin.close()
    ids = {}
    for name in topics:
        t = found.get(name)
        if t is None or t.get("error_code") or not t.get("topic_id"):
            raise CliError(f"{bootstrap} has no topic '{name}': create it there first")
        ids[name] = uuid.UUID(str(t["topic_id"]))
    return ids
