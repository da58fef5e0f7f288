"""`rdmalog groups`: kafka-consumer-groups.sh's jobs: list, describe (offsets and lag by default,
`--members`, `--state`), reset-offsets (`--to-earliest`, `--to-latest`, `--to-datetime`,
`--to-offset`, `--shift-by`, `--to-current`; a dry run unless `--execute`), delete.

Offsets are reset only while the group has no members, as Kafka requires; new offsets are kept
within each partition's [earliest, latest] range."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from gateway.cli.common import CliError, add_connection_options, admin_client, out, split_list
from gateway.cli.offsets import EARLIEST, LATEST, list_offsets, partitions_of

SCENARIOS = ("to_earliest", "to_latest", "to_datetime", "to_offset", "shift_by", "to_current")


def register(sub) -> list[argparse.ArgumentParser]:
    groups = sub.add_parser(
        "groups", help="list, describe, reset offsets of, or delete consumer groups",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    add_connection_options(groups, top=True)
    actions = groups.add_subparsers(dest="action", required=True, metavar="ACTION")

    def action(name: str, help: str) -> argparse.ArgumentParser:
        p = actions.add_parser(name, help=help)
        add_connection_options(p)
        if name != "list":
            p.add_argument("--group", action="append", default=[], metavar="GROUP")
            p.add_argument("--all-groups", action="store_true")
        return p

    action("list", "list group ids").add_argument(
        "--state", action="store_true", help="show each group's state"
    )
    describe = action("describe", "a group's offsets and lag, members or state")
    shown = describe.add_mutually_exclusive_group()
    shown.add_argument("--offsets", action="store_true", help="the default")
    shown.add_argument("--members", action="store_true")
    shown.add_argument("--state", action="store_true")
    reset = action("reset-offsets", "move a group's committed offsets")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P1,P2|:P1-P3]")
    target.add_argument("--all-topics", action="store_true")
    how = reset.add_mutually_exclusive_group(required=True)
    how.add_argument("--to-earliest", action="store_true")
    how.add_argument("--to-latest", action="store_true")
    how.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss[+HH:MM]")
    how.add_argument("--to-offset", type=int, metavar="OFFSET")
    how.add_argument("--shift-by", type=int, metavar="N")
    how.add_argument("--to-current", action="store_true")
    run_mode = reset.add_mutually_exclusive_group()
    run_mode.add_argument("--dry-run", action="store_true", help="show the plan (the default)")
    run_mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    action("delete", "delete groups and their committed offsets")
    groups.set_defaults(func=run)
    return [groups, *actions.choices.values()]


def run(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        if args.action == "list":
            return _list(admin, args)
        names = _group_names(admin, args)
        if args.action == "describe":
            return _describe(admin, args, names)
        if args.action == "reset-offsets":
            return _reset(admin, args, names)
        return _delete(admin, names)


def _group_names(admin: Any, args: argparse.Namespace) -> list[str]:
    if args.all_groups:
        return sorted(g["group_id"] for g in admin.list_groups())
    names = split_list(args.group)
    if not names:
        raise CliError(f"{args.action}: give --group or --all-groups", code=2)
    return names


def _list(admin: Any, args: argparse.Namespace) -> int:
    found = sorted(admin.list_groups(), key=lambda g: g["group_id"])
    if args.state:
        out(f"{'GROUP':<40} STATE")
        for g in found:
            out(f"{g['group_id']:<40} {g.get('group_state') or ''}")
    else:
        for g in found:
            out(g["group_id"])
    return 0


def _describe_one(admin: Any, group: str) -> dict[str, Any]:
    info = admin.describe_groups([group])[group]
    if info.get("error"):
        raise CliError(f"group '{group}': {info['error']}")
    return info


def committed(admin: Any, group: str) -> dict[Any, int]:
    """{TopicPartition: committed offset} of `group`."""
    answer = admin.list_group_offsets(group).get(group, {})
    return {tp: om.offset for tp, om in answer.items() if om is not None and om.offset >= 0}


def _describe(admin: Any, args: argparse.Namespace, names: list[str]) -> int:
    for group in names:
        info = _describe_one(admin, group)
        state = info.get("group_state") or ""
        members = info.get("members") or []
        if state == "Dead":
            raise CliError(f"Consumer group '{group}' does not exist.")
        if args.state:
            out(f"{'GROUP':<30} {'ASSIGNMENT-STRATEGY':<20} {'STATE':<20} #MEMBERS")
            out(f"{group:<30} {info.get('protocol_data') or '':<20} {state:<20} {len(members)}")
        elif args.members:
            out(f"{'GROUP':<30} {'CONSUMER-ID':<60} {'HOST':<16} {'CLIENT-ID':<24} #PARTITIONS")
            for m in members:
                count = sum(len(a["partitions"]) for a in _assigned(m))
                out(
                    f"{group:<30} {m['member_id']:<60} {m['client_host']:<16} "
                    f"{m['client_id']:<24} {count}"
                )
        else:
            _print_offsets(admin, group, state, members)
        out()
    return 0


def _assigned(member: dict[str, Any]) -> list[dict[str, Any]]:
    assignment = member.get("member_assignment") or {}
    return assignment.get("assigned_partitions") or [] if isinstance(assignment, dict) else []


def _print_offsets(admin: Any, group: str, state: str, members: list[dict[str, Any]]) -> None:
    from kafka import TopicPartition

    owner = {}
    for m in members:
        for a in _assigned(m):
            for p in a["partitions"]:
                owner[TopicPartition(a["topic"], p)] = m
    offsets = committed(admin, group)
    partitions = sorted(set(offsets) | set(owner))
    ends = list_offsets(admin, partitions, LATEST)
    if not members and state in ("Empty", ""):
        out(f"Consumer group '{group}' has no active members.")
    out(
        f"{'GROUP':<30} {'TOPIC':<30} {'PARTITION':<10} {'CURRENT-OFFSET':<15} "
        f"{'LOG-END-OFFSET':<15} {'LAG':<8} {'CONSUMER-ID':<50} {'HOST':<16} CLIENT-ID"
    )
    for tp in partitions:
        current, end = offsets.get(tp), ends.get(tp)
        lag = end - current if current is not None and end is not None else None
        m = owner.get(tp, {})
        out(
            f"{group:<30} {tp.topic:<30} {tp.partition:<10} {_or_dash(current):<15} "
            f"{_or_dash(end):<15} {_or_dash(lag):<8} {m.get('member_id', '-'):<50} "
            f"{m.get('client_host', '-'):<16} {m.get('client_id', '-')}"
        )


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def parse_datetime(text: str) -> int:
    """Milliseconds since the epoch of kafka-consumer-groups.sh's --to-datetime format (local
    time when no zone is given)."""
    cleaned = text.replace("Z", "+00:00")
    try:
        when = datetime.fromisoformat(cleaned)
    except ValueError:
        raise CliError(f"--to-datetime expects YYYY-MM-DDTHH:mm:SS.sss, got {text!r}", 2) from None
    if when.tzinfo is None:
        when = when.astimezone()  # local time, as Kafka's tool reads it
    return int(when.astimezone(UTC).timestamp() * 1000)


def _topic_partitions(admin: Any, args: argparse.Namespace, group: str) -> list[Any]:
    if args.all_topics:
        return sorted(committed(admin, group))
    found = []
    for item in args.topic:
        topic, _, parts = item.partition(":")
        wanted = None
        if parts:
            wanted = []
            for part in parts.split(","):
                lo, _, hi = part.partition("-")
                wanted += list(range(int(lo), int(hi or lo) + 1))
        found += partitions_of(admin, topic, wanted)
    return found


def plan_reset(admin: Any, args: argparse.Namespace, group: str) -> dict[Any, int]:
    """{TopicPartition: new offset} of a reset of `group`, within [earliest, latest]."""
    partitions = _topic_partitions(admin, args, group)
    if not partitions:
        raise CliError(f"group '{group}': no partitions to reset (it committed none)")
    earliest = list_offsets(admin, partitions, EARLIEST)
    latest = list_offsets(admin, partitions, LATEST)
    current = committed(admin, group)
    if args.to_earliest:
        wanted = earliest
    elif args.to_latest:
        wanted = latest
    elif args.to_datetime:
        at = list_offsets(admin, partitions, parse_datetime(args.to_datetime))
        wanted = {tp: (o if o is not None and o >= 0 else latest[tp]) for tp, o in at.items()}
    elif args.to_offset is not None:
        wanted = {tp: args.to_offset for tp in partitions}
    elif args.shift_by is not None:
        wanted = {tp: current.get(tp, latest[tp]) + args.shift_by for tp in partitions}
    else:  # --to-current
        wanted = {tp: current.get(tp, latest[tp]) for tp in partitions}
    return {tp: min(max(wanted[tp], earliest[tp]), latest[tp]) for tp in partitions}


def _reset(admin: Any, args: argparse.Namespace, names: list[str]) -> int:
    from kafka.structs import OffsetAndMetadata

    for group in names:
        state = _describe_one(admin, group).get("group_state") or ""
        if state not in ("Empty", "Dead", ""):
            raise CliError(
                f"Assignments can only be reset if the group '{group}' is inactive, but the "
                f"current state is {state}."
            )
        plan = plan_reset(admin, args, group)
        out(f"{'GROUP':<30} {'TOPIC':<30} {'PARTITION':<10} NEW-OFFSET")
        for tp, offset in sorted(plan.items()):
            out(f"{group:<30} {tp.topic:<30} {tp.partition:<10} {offset}")
        if args.execute:
            result = admin.alter_group_offsets(
                group, {tp: OffsetAndMetadata(o, "", -1) for tp, o in plan.items()}
            )
            failed = {tp: e for tp, e in result.items() if getattr(e, "errno", 0)}
            if failed:
                tp, err = next(iter(failed.items()))
                raise CliError(f"group '{group}' {tp.topic}-{tp.partition}: {err.__name__}")
    if not args.execute:
        out("(dry run: nothing changed; add --execute to commit these offsets)")
    return 0


def _delete(admin: Any, names: list[str]) -> int:
    result = admin.delete_groups(names)
    for group, outcome in dict(result).items():  # {group: 'OK' or the error's class name}
        if outcome != "OK":
            raise CliError(f"group '{group}': {outcome}")
        out(f"Deletion of requested consumer group ('{group}') was successful.")
    return 0
