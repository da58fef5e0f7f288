"""`rdmalog offsets`: kafka-get-offsets.sh's job: an offset per partition, printed `topic:partition:offset`,
for the latest (`--time -1`, the default), the earliest (`-2`), the record with the largest timestamp
(`-3`), or the first record at or after a timestamp in milliseconds."""

from __future__ import annotations

import argparse
from typing import Any

from gateway.cli.common import CliError, add_connection_options, admin_client, out, split_list

LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3


def register(sub) -> list[argparse.ArgumentParser]:
    offsets = sub.add_parser("offsets", help="offsets of partitions", description=__doc__)
    add_connection_options(offsets, top=True)
    offsets.add_argument("--topic", help="a topic (default: all but internal ones)")
    offsets.add_argument("--partitions", action="append", default=[], metavar="P1,P2")
    offsets.add_argument("--time", default="-1", help="-1 latest, -2 earliest, -3 max timestamp")
    offsets.set_defaults(func=run)
    return [offsets]


def spec_for(time: int) -> Any:
    """kafka-python's OffsetSpec for a kafka-get-offsets.sh --time value."""
    from kafka.admin import OffsetSpec

    return {
        LATEST: OffsetSpec.LATEST,
        EARLIEST: OffsetSpec.EARLIEST,
        MAX_TIMESTAMP: OffsetSpec.MAX_TIMESTAMP,
    }.get(time, time)


def partitions_of(admin: Any, topic: str | None, wanted: list[int] | None = None) -> list[Any]:
    """TopicPartitions of `topic` (all non-internal topics when None), `wanted` ones only."""
    from kafka import TopicPartition

    described = admin.describe_topics([topic] if topic else None)
    found = []
    for t in described:
        if t.get("error_code"):
            from gateway.cli.common import error_for_code

            raise error_for_code(t["error_code"], f"topic '{t['name']}'")
        if topic is None and t.get("is_internal"):
            continue
        for p in t["partitions"]:
            if wanted is None or p["partition_index"] in wanted:
                found.append(TopicPartition(t["name"], p["partition_index"]))
    return sorted(found)


def list_offsets(admin: Any, partitions: list[Any], time: int) -> dict[Any, int]:
    """{TopicPartition: offset} (-1 where no record matches a timestamp)."""
    if not partitions:
        return {}
    spec = spec_for(time)
    answer = admin.list_partition_offsets({tp: spec for tp in partitions})
    return {tp: r.offset for tp, r in answer.items()}


def run(args: argparse.Namespace) -> int:
    try:
        time = int(args.time)
    except ValueError:
        raise CliError(f"--time expects -1, -2, -3 or milliseconds, got {args.time!r}", 2) from None
    wanted = [int(p) for p in split_list(args.partitions)] or None
    with admin_client(args) as admin:
        partitions = partitions_of(admin, args.topic, wanted)
        if wanted and len(partitions) != len(wanted):
            raise CliError(f"topic '{args.topic}' has no partition among {wanted}")
        for tp, offset in sorted(list_offsets(admin, partitions, time).items()):
            out(f"{tp.topic}:{tp.partition}:{offset if offset is not None else ''}")
    return 0
