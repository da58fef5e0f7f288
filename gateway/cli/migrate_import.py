"""`rdmalog import`: adopt a Kafka log directory (the broker stopped), offline.

Every partition's batches are CRC-checked (progress on stderr); the report lists topics, partitions,
offsets, record counts, the consumer groups' committed offsets (from __consumer_offsets) and each
topic's configs with where they came from: `--configs-from FILE` (JSON, or the output of
`kafka-configs.sh --describe --entity-type topics`), `--source-bootstrap-server` (the running source
cluster's DescribeConfigs), or the directory's KRaft metadata log (`__cluster_metadata-0`). A topic
whose configs none of them knows is adopted with deletion suspended: retention deletes nothing of it
until its configs are set. Then the directory is copied into `--data-dir` (or adopted where it
lies when both are the same) and the store opens it once, adopting every topic. `--dry-run`
checks and reports only. A batch failing its CRC stops the import."""

from __future__ import annotations

import argparse
import shutil
import uuid
from pathlib import Path
from typing import Any

from gateway.cli.common import CliError, out
from gateway.migration.inventory import SKIPPED_DIRS, Inventory, take_inventory

# rdmalog's own files in a data dir, never copied from a Kafka log dir
_NOT_COPIED = {".lock", "__rdmalog_metadata", "rdmalog-producer-id-block", *SKIPPED_DIRS}


def register(sub) -> list[argparse.ArgumentParser]:
    imp = sub.add_parser(
        "import", help="adopt a Kafka log directory, offline", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    imp.add_argument("log_dir", help="the Kafka log directory (its broker stopped)")
    imp.add_argument("--data-dir", help="rdmalog's data dir to import into (default: in place)")
    configs = imp.add_mutually_exclusive_group()
    configs.add_argument(
        "--configs-from", metavar="FILE", help="topic configs: JSON or kafka-configs.sh output"
    )
    configs.add_argument(
        "--source-bootstrap-server",
        metavar="HOST:PORT",
        help="read topic configs from the running source cluster",
    )
    imp.add_argument(
        "--properties", metavar="FILE", help="the broker's server.properties (static defaults)"
    )
    imp.add_argument("--dry-run", action="store_true", help="check and report; change nothing")
    imp.set_defaults(func=run)
    return [imp]


def run(args: argparse.Namespace) -> int:
    source = Path(args.log_dir).resolve()
    if not source.is_dir():
        raise CliError(f"{source}: not a directory")
    if (source / ".lock").exists() and locked(source / ".lock"):
        raise CliError(f"{source} is in use by a running broker: stop it first")
    target = Path(args.data_dir).resolve() if args.data_dir else source
    inv = take_inventory(source)
    metadata, origin = _configs(args, source, inv)
    _report(inv, metadata, origin)
    problems = inv.problems
    for line in problems:
        out(f"PROBLEM {line}")
    if inv.invalid_batches:
        raise CliError(f"{inv.invalid_batches} batch(es) fail their CRC: not imported (see above)")
    if args.dry_run:
        out("(dry run: nothing copied or adopted)")
        return 0
    if target != source:
        _copy(source, target)
    _adopt(target, metadata, args.properties)
    out(f"Imported {len(inv.partitions)} partitions into {target}.")
    return 0


def locked(lock: Path) -> bool:
    """True when another process holds a directory's lock file: rdmalog's flock, or Kafka's
    (a Java FileChannel lock, an fcntl record lock)."""
    import fcntl
    import os

    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # releases what this process took
    return False


def _configs(args: argparse.Namespace, source: Path, inv: Inventory) -> tuple[Any, str]:
    """(ClusterMetadata for the store's adoption or None, where the configs came from)."""
    from rdmalog.store import checkpoints as ck
    from rdmalog.store.kraft_metadata import ClusterMetadata, read_cluster_metadata

    ids: dict[str, uuid.UUID] = {}
    for topic, parts in inv.topics().items():
        found = (ck.read_partition_metadata(source / f"{topic}-{p}") for p in parts)
        ids[topic] = next((i for i in found if i is not None), None) or uuid.uuid4()
    if args.configs_from:
        from gateway.migration.inventory import read_configs_file

        given = read_configs_file(Path(args.configs_from))
        known = {t: i for t, i in ids.items() if t in given}  # the others: deletion suspended
        return ClusterMetadata(known, given), f"file {args.configs_from}"
    if args.source_bootstrap_server:
        return _from_cluster(args.source_bootstrap_server, ids), args.source_bootstrap_server
    try:
        kraft = read_cluster_metadata(source)
    except (OSError, ValueError) as e:
        raise CliError(f"cannot read {source}/__cluster_metadata-0: {e}") from None
    if kraft is not None:
        return kraft, "__cluster_metadata-0"
    return None, "none (deletion suspended)"


def _from_cluster(bootstrap: str, ids: dict[str, uuid.UUID]) -> Any:
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    from rdmalog.store.kraft_metadata import ClusterMetadata

    admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","), bootstrap_timeout_ms=10_000)
    try:
        names = [t for t in ids if t in set(admin.list_topics())]
        resources = [ConfigResource(ConfigResourceType.TOPIC, t) for t in names]
        answer = admin.describe_configs(resources).get("topic", {}) if resources else {}
    finally:
        admin.close()
    configs = {t: {k: c.get("value") for k, c in answer.get(t, {}).items()} for t in names}
    return ClusterMetadata({t: ids[t] for t in names}, configs)


def _report(inv: Inventory, metadata: Any, origin: str) -> None:
    out(f"Kafka log directory {inv.directory}")
    out(f"{'TOPIC':<30} {'PARTITION':<10} {'OFFSETS':<22} {'RECORDS':<10} {'BATCHES':<9} CRC")
    for (topic, p), check in sorted(inv.partitions.items()):
        first = check.start_offset if check.start_offset is not None else check.end_offset
        span = f"{first}-{check.end_offset}"
        crc = "ok" if not check.invalid_batches else f"{check.invalid_batches} BAD"
        out(f"{topic:<30} {p:<10} {span:<22} {check.records:<10} {check.batches:<9} {crc}")
    out()
    out(f"Topic configs (from {origin}):")
    for topic in inv.topics():
        known = metadata is not None and topic in metadata.topic_ids
        if not known:
            out(f"  {topic}: not known: adopted with deletion suspended")
            continue
        configs = metadata.topic_configs.get(topic, {})
        shown = ", ".join(f"{k}={v}" for k, v in sorted(configs.items())) or "(defaults)"
        out(f"  {topic}: {shown}")
    out()
    out(f"Consumer groups ({len(inv.groups)}):")
    for group, offsets in inv.groups.items():
        for (topic, p), offset in sorted(offsets.items()):
            out(f"  {group:<30} {topic:<30} {p:<10} {offset}")
    if inv.skipped:
        out()
        out(f"Not imported: {', '.join(inv.skipped)}")


def _copy(source: Path, target: Path) -> None:
    from gateway.migration.inventory import Progress

    if target.exists() and any(target.iterdir()):
        raise CliError(f"{target} is not empty: import into a new data dir")
    files = [
        p for p in source.rglob("*")
        if p.is_file() and p.relative_to(source).parts[0] not in _NOT_COPIED
    ]  # fmt: skip
    progress = Progress(sum(p.stat().st_size for p in files), "copying")
    for path in files:
        dest = target / path.relative_to(source)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)
        progress.advance(path.stat().st_size)
    progress.finish()


def _adopt(target: Path, metadata: Any, properties: str | None) -> None:
    """Open the store on `target` once: it adopts every partition directory (with `metadata`'s
    configs) and writes its checkpoints; then close it cleanly."""
    from rdmalog.config import BrokerConfig
    from rdmalog.store.log_manager import Store

    props = Path(properties) if properties else None
    config = BrokerConfig.from_sources(props, {"log.dirs": str(target)})
    store = Store(target, config, adoption_metadata=metadata)
    store.open(start_maintenance=False)
    try:
        for topic in sorted(store.topics.values(), key=lambda t: t.name):
            if topic.deletion_suspended:
                out(f"{topic.name}: deletion suspended until its configs are set")
    finally:
        store.close()
