"""`rdmalog mirror`: live migration from a running Kafka-compatible cluster, keeping offsets.

  start    create mirror topics here: the source's partitions and topic configs, and the config
           rdmalog.mirror.source=SOURCE; the broker then copies their batches with their offsets and
           the source groups' committed offsets (gateway/mirror)
  status   per partition: the source's end offset, the mirror's, the lag; per group: committed
           offsets at both ends. --wait-for-zero-lag blocks until nothing is left to copy
  promote  end the mirror: the topics become ordinary, writable topics here
  verify   offsets, record counts and every batch's CRC compared between both clusters

Cutover: stop producers; `status --wait-for-zero-lag`; `verify`; move consumers (their groups'
offsets are here); `promote`; move producers."""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from gateway.cli.common import CliError, add_connection_options, admin_client, out, split_list

SOURCE_CONFIG = "rdmalog.mirror.source"


def register(sub) -> list[argparse.ArgumentParser]:
    mirror = sub.add_parser(
        "mirror", help="copy topics live from another cluster, keeping offsets",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    add_connection_options(mirror, top=True)
    actions = mirror.add_subparsers(dest="action", required=True, metavar="ACTION")
    parsers = [mirror]
    for name, help in (
        ("start", "create mirror topics copying from the source"),
        ("status", "lag per partition, group offsets at both ends"),
        ("promote", "stop mirroring: the topics become writable here"),
        ("verify", "compare offsets, record counts and batch CRCs with the source"),
    ):
        p = actions.add_parser(name, help=help)
        add_connection_options(p)
        p.add_argument("--topic", action="append", default=[], metavar="TOPIC[,TOPIC]")
        p.add_argument("--all-topics", action="store_true")
        parsers.append(p)
    start, status, promote, verify = parsers[1:]
    start.add_argument("--source-bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    for p in (status, promote):
        p.add_argument("--wait-for-zero-lag", action="store_true")
        p.add_argument("--timeout", type=float, default=300, help="seconds to wait (default 300)")
    mirror.set_defaults(func=run)
    return parsers


def run(args: argparse.Namespace) -> int:
    with admin_client(args) as target:
        if args.action == "start":
            return _start(target, args)
        mirrors = _mirror_topics(target, args)
        if args.action == "status":
            return _status(target, mirrors, args)
        if args.action == "promote":
            return _promote(target, mirrors, args)
        return asyncio.run(_verify(args.bootstrap_server, mirrors))


def _source_admin(bootstrap: str) -> Any:
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(
        bootstrap_servers=bootstrap.split(","), client_id="rdmalog-mirror-cli",
        bootstrap_timeout_ms=10_000,
    )  # fmt: skip


def _start(target: Any, args: argparse.Namespace) -> int:
    from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

    from rdmalog.config import TOPIC_DEFS

    source = _source_admin(args.source_bootstrap_server)
    try:
        if args.all_topics:
            topics = sorted(t for t in source.list_topics() if not t.startswith("__"))
        else:
            topics = split_list(args.topic)
        if not topics:
            raise CliError("start: name topics (--topic) or --all-topics", code=2)
        described = {t["name"]: t for t in source.describe_topics(topics)}
        resources = [ConfigResource(ConfigResourceType.TOPIC, t) for t in topics]
        configs = source.describe_configs(resources).get("topic", {})
    finally:
        source.close()
    existing = set(target.list_topics())
    for name in topics:
        t = described.get(name)
        if t is None or t.get("error_code"):
            raise CliError(f"the source has no topic '{name}'")
        if name in existing:
            current = _mirror_topics(target, argparse.Namespace(topic=[name], all_topics=False))
            if current.get(name) == args.source_bootstrap_server:
                out(f"{name}: already mirrored from {args.source_bootstrap_server}")
                continue
            raise CliError(f"topic '{name}' exists here and is not a mirror of the source")
        wanted = {k: c.get("value") for k, c in configs.get(name, {}).items()}
        kept = {k: v for k, v in wanted.items() if k in TOPIC_DEFS and v is not None}
        dropped = sorted(set(wanted) - set(kept))
        kept[SOURCE_CONFIG] = args.source_bootstrap_server
        target.create_topics([NewTopic(name, len(t["partitions"]), -1, topic_configs=kept)])
        shown = ", ".join(f"{k}={v}" for k, v in sorted(kept.items()) if k != SOURCE_CONFIG)
        out(
            f"{name}: mirroring {len(t['partitions'])} partitions from "
            f"{args.source_bootstrap_server}, configs {shown or '(defaults)'}"
            + (f" (not applied here: {', '.join(dropped)})" if dropped else "")
        )
    return 0


def _mirror_topics(target: Any, args: argparse.Namespace) -> dict[str, str]:
    """{topic: source bootstrap} of the mirror topics here that the arguments name."""
    from kafka.admin import ConfigResource, ConfigResourceType

    names = split_list(args.topic) or sorted(target.list_topics())
    resources = [ConfigResource(ConfigResourceType.TOPIC, n) for n in names]
    found = target.describe_configs(resources).get("topic", {}) if resources else {}
    mirrors = {
        name: cfg[SOURCE_CONFIG]["value"]
        for name, cfg in found.items()
        if cfg.get(SOURCE_CONFIG, {}).get("value")
    }
    if args.topic and not args.all_topics:
        missing = [n for n in names if n not in mirrors]
        if missing:
            raise CliError(f"topic '{missing[0]}' is not a mirror topic here")
    return mirrors


def _partitions(admin: Any, topics: list[str]) -> list[Any]:
    from kafka import TopicPartition

    return sorted(
        TopicPartition(t["name"], p["partition_index"])
        for t in admin.describe_topics(topics)
        if not t.get("error_code")
        for p in t["partitions"]
    )


def _end_offsets(admin: Any, partitions: list[Any]) -> dict[Any, int]:
    from kafka.admin import OffsetSpec

    if not partitions:
        return {}
    answer = admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in partitions})
    return {tp: r.offset for tp, r in answer.items()}


def _source_ends(bootstrap: str, topics: list[str], ours: dict[Any, int]) -> dict[Any, int]:
    """The source's high watermarks, from Fetch answers (as the mirror sees them)."""
    from kafka import TopicPartition

    from gateway.mirror.digest import high_watermarks
    from gateway.mirror.source import SourceCluster

    async def read() -> dict[tuple[str, int], int]:
        source = SourceCluster(bootstrap, "rdmalog-mirror-cli")
        try:
            await source.refresh(topics)
            return await high_watermarks(
                source, {(tp.topic, tp.partition): o for tp, o in ours.items()}
            )
        finally:
            await source.close()

    return {TopicPartition(*key): hw for key, hw in asyncio.run(read()).items()}


def _group_offsets(admin: Any, topics: set[str]) -> dict[tuple[str, Any], int]:
    out_: dict[tuple[str, Any], int] = {}
    for g in admin.list_groups():
        gid = g["group_id"]
        for tp, om in admin.list_group_offsets(gid).get(gid, {}).items():
            if tp.topic in topics and om is not None and om.offset >= 0:
                out_[(gid, tp)] = om.offset
    return out_


def _snapshot(target: Any, mirrors: dict[str, str]) -> tuple[list, list]:
    """(partition rows, group rows) comparing each source with this cluster."""
    rows, group_rows = [], []
    by_source: dict[str, list[str]] = {}
    for topic, source in mirrors.items():
        by_source.setdefault(source, []).append(topic)
    for source_bootstrap, topics in sorted(by_source.items()):
        source = _source_admin(source_bootstrap)
        try:
            parts = _partitions(target, topics)
            ours = _end_offsets(target, parts)
            theirs = _source_ends(source_bootstrap, topics, ours)
            for tp in parts:
                rows.append((tp.topic, tp.partition, theirs.get(tp), ours.get(tp)))
            source_groups = _group_offsets(source, set(topics))
        finally:
            source.close()
        here = _group_offsets(target, set(topics))
        for (gid, tp), offset in sorted(source_groups.items()):
            group_rows.append((gid, tp.topic, tp.partition, offset, here.get((gid, tp))))
    return rows, group_rows


def _status(target: Any, mirrors: dict[str, str], args: argparse.Namespace) -> int:
    if not mirrors:
        raise CliError("no mirror topics here")
    deadline = time.monotonic() + args.timeout
    while True:
        rows, group_rows = _snapshot(target, mirrors)
        lagging = [r for r in rows if r[2] is None or r[3] is None or r[2] != r[3]]
        groups_behind = [g for g in group_rows if g[3] != g[4]]
        if not args.wait_for_zero_lag or (not lagging and not groups_behind):
            break
        if time.monotonic() > deadline:
            _print_status(rows, group_rows)
            raise CliError(
                f"still lagging after {args.timeout:.0f}s: {len(lagging)} partitions, "
                f"{len(groups_behind)} group offsets"
            )
        time.sleep(1)
    _print_status(rows, group_rows)
    return 0


def _print_status(rows: list, group_rows: list) -> None:
    out(f"{'TOPIC':<30} {'PARTITION':<10} {'SOURCE-END':<12} {'MIRROR-END':<12} LAG")
    for topic, partition, theirs, ours in rows:
        lag = theirs - ours if theirs is not None and ours is not None else "-"
        out(f"{topic:<30} {partition:<10} {theirs!s:<12} {ours!s:<12} {lag}")
    if group_rows:
        out()
        out(f"{'GROUP':<30} {'TOPIC':<30} {'PARTITION':<10} {'SOURCE-OFFSET':<14} MIRROR-OFFSET")
        for gid, topic, partition, theirs, ours in group_rows:
            shown = "-" if ours is None else ours
            out(f"{gid:<30} {topic:<30} {partition:<10} {theirs!s:<14} {shown}")


def _promote(target: Any, mirrors: dict[str, str], args: argparse.Namespace) -> int:
    from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType

    from gateway.cli.topics import check_alter_result

    if not mirrors:
        raise CliError("no mirror topics to promote")
    if args.wait_for_zero_lag:
        _status(target, mirrors, args)
    for topic, source in sorted(mirrors.items()):
        change = {SOURCE_CONFIG: (AlterConfigOp.DELETE, None)}
        resource = ConfigResource(ConfigResourceType.TOPIC, topic, configs=change)
        check_alter_result(target.alter_configs([resource], raise_on_unknown=False))
        out(f"{topic}: no longer a mirror of {source}; writable here")
    return 0


async def _verify(bootstrap: str, mirrors: dict[str, str]) -> int:
    from gateway.mirror.digest import digest_partition
    from gateway.mirror.source import SourceCluster

    if not mirrors:
        raise CliError("no mirror topics to verify")
    here = SourceCluster(bootstrap, "rdmalog-verify")
    failed = 0
    try:
        topics = sorted(mirrors)
        await here.refresh(topics)
        for source_bootstrap in sorted(set(mirrors.values())):
            mine = [t for t in topics if mirrors[t] == source_bootstrap]
            source = SourceCluster(source_bootstrap, "rdmalog-verify")
            try:
                await source.refresh(mine)
                for key in sorted(k for k in here.leaders if k[0] in mine):
                    theirs = await digest_partition(source, *key)
                    ours = await digest_partition(here, *key, from_offset=max(theirs.start, 0))
                    same = theirs.key() == ours.key() and not theirs.invalid and not ours.invalid
                    failed += not same
                    out(
                        f"{key[0]}-{key[1]}: {'OK' if same else 'DIFFERENT'} source offsets "
                        f"{theirs.start}-{theirs.end} {theirs.records} records {theirs.batches} "
                        f"batches crc {theirs.digest}; mirror offsets {ours.start}-{ours.end} "
                        f"{ours.records} records {ours.batches} batches crc {ours.digest}"
                    )
            finally:
                await source.close()
    finally:
        await here.close()
    if failed:
        raise CliError(f"{failed} partitions differ from their source")
    return 0
