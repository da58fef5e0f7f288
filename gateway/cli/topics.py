"""`rdmalog topics`: kafka-topics.sh's jobs: create, list, describe, alter (partitions, configs), delete."""

from __future__ import annotations

import argparse
from typing import Any

from gateway.cli.common import (
    CliError,
    add_connection_options,
    admin_client,
    error_for_code,
    out,
    parse_key_values,
)


def register(sub) -> list[argparse.ArgumentParser]:
    topics = sub.add_parser(
        "topics", help="create, list, describe, alter or delete topics", description=__doc__
    )
    add_connection_options(topics, top=True)
    actions = topics.add_subparsers(dest="action", required=True, metavar="ACTION")

    def action(name: str, help: str, topic: str | None = "required") -> argparse.ArgumentParser:
        p = actions.add_parser(name, help=help)
        add_connection_options(p)
        if topic is not None:
            p.add_argument("topic", nargs="?", help="the topic (or --topic)")
            p.add_argument("--topic", dest="topic_flag", metavar="TOPIC")
        return p

    create = action("create", "create a topic")
    create.add_argument("--partitions", type=int, default=-1, help="default: num.partitions")
    create.add_argument("--replication-factor", type=int, default=-1)
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    create.add_argument("--if-not-exists", action="store_true")
    action("list", "list topic names", topic=None).add_argument(
        "--exclude-internal", action="store_true"
    )
    describe = action("describe", "partitions, leaders, replicas and configs of topics")
    describe.add_argument("--exclude-internal", action="store_true")
    alter = action("alter", "add partitions or change topic configs")
    alter.add_argument("--partitions", type=int, help="the new (larger) partition count")
    alter.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    alter.add_argument("--delete-config", action="append", default=[], metavar="KEY")
    delete = action("delete", "delete a topic and its data")
    delete.add_argument("--if-exists", action="store_true")
    topics.set_defaults(func=run)
    return [topics, *actions.choices.values()]


def _topic(args: argparse.Namespace, required: bool = True) -> str | None:
    name = getattr(args, "topic_flag", None) or getattr(args, "topic", None)
    if required and not name:
        raise CliError(f"{args.action}: name a topic (TOPIC or --topic)", code=2)
    return name


def run(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        return ACTIONS[args.action](admin, args)


def _create(admin: Any, args: argparse.Namespace) -> int:
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    name = _topic(args)
    configs = parse_key_values(args.config, "--config")
    topic = NewTopic(name, args.partitions, args.replication_factor, topic_configs=configs)
    try:
        admin.create_topics([topic])
    except TopicAlreadyExistsError:
        if not args.if_not_exists:
            raise CliError(f"Topic '{name}' already exists.") from None
        return 0
    out(f"Created topic {name}.")
    return 0


def _list(admin: Any, args: argparse.Namespace) -> int:
    for name in sorted(admin.list_topics()):
        if not (args.exclude_internal and name.startswith("__")):
            out(name)
    return 0


def _describe(admin: Any, args: argparse.Namespace) -> int:
    from kafka.admin import ConfigResource, ConfigResourceType

    name = _topic(args, required=False)
    described = admin.describe_topics([name] if name else None)
    for topic in described:
        if topic.get("error_code"):
            raise error_for_code(topic["error_code"], f"topic '{topic['name']}'")
    shown = [
        t
        for t in sorted(described, key=lambda t: t["name"])
        if not (args.exclude_internal and t.get("is_internal"))
    ]
    resources = [ConfigResource(ConfigResourceType.TOPIC, t["name"]) for t in shown]
    configs = admin.describe_configs(resources) if resources else {}
    by_topic = configs.get("topic", {})
    for topic in shown:
        overrides = by_topic.get(topic["name"], {})
        _print_topic(topic, {k: v.get("value") for k, v in overrides.items()})
    return 0


def _print_topic(topic: dict, configs: dict[str, Any]) -> None:
    """One topic (a Metadata topic dict) the way kafka-topics.sh --describe prints it."""
    name = topic["name"]
    parts = sorted(topic["partitions"], key=lambda p: p["partition_index"])
    rf = len(parts[0]["replica_nodes"]) if parts else 0
    shown = ",".join(f"{k}={v}" for k, v in sorted(configs.items()))
    out(
        f"Topic: {name}\tTopicId: {topic.get('topic_id')}\tPartitionCount: {len(parts)}"
        f"\tReplicationFactor: {rf}\tConfigs: {shown}"
    )
    for p in parts:
        replicas = ",".join(map(str, p["replica_nodes"]))
        isr = ",".join(map(str, p["isr_nodes"]))
        line = (
            f"\tTopic: {name}\tPartition: {p['partition_index']}\tLeader: {p['leader_id']}"
            f"\tReplicas: {replicas}\tIsr: {isr}"
        )
        offline = p.get("offline_replicas") or []
        if offline:
            line += "\tOffline: " + ",".join(map(str, offline))
        out(line)


def _alter(admin: Any, args: argparse.Namespace) -> int:
    from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType

    name = _topic(args)
    sets = parse_key_values(args.config, "--config")
    if args.partitions is None and not sets and not args.delete_config:
        raise CliError("alter: give --partitions, --config or --delete-config", code=2)
    if args.partitions is not None:
        admin.create_partitions({name: args.partitions})
        out(f"Topic {name} now has {args.partitions} partitions.")
    if sets or args.delete_config:
        changes: dict[str, Any] = {k: (AlterConfigOp.SET, v) for k, v in sets.items()}
        changes.update({k: (AlterConfigOp.DELETE, None) for k in args.delete_config})
        resource = ConfigResource(ConfigResourceType.TOPIC, name, configs=changes)
        check_alter_result(admin.alter_configs([resource], raise_on_unknown=False))
        out(f"Completed updating config for topic {name}.")
    return 0


def check_alter_result(result: Any) -> None:
    """Raise CliError when kafka-python's AlterConfigs answer ({type: {name: 'OK' or the error's
    text}}) carries an error."""
    for kind, resources in (result or {}).items():
        for name, outcome in resources.items():
            if outcome != "OK":
                raise CliError(f"{kind} {name}: {outcome}")


def _delete(admin: Any, args: argparse.Namespace) -> int:
    from kafka.errors import UnknownTopicOrPartitionError

    name = _topic(args)
    try:
        admin.delete_topics([name])
    except UnknownTopicOrPartitionError:
        if args.if_exists:
            return 0
        raise CliError(f"Topic '{name}' does not exist.") from None
    out(f"Deleted topic {name}.")
    return 0


ACTIONS = {
    "create": _create,
    "list": _list,
    "describe": _describe,
    "alter": _alter,
    "delete": _delete,
}
