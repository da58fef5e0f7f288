"""`rdmalog configs`: kafka-configs.sh's jobs for topics and brokers: describe (the overrides, or
`--all` with each value's source) and alter (`--add-config k=v,k2=v2`, `--delete-config k`).
`--json` prints `{name: {key: value}}`, which `rdmalog import --configs-from FILE` reads."""

from __future__ import annotations

import argparse
import json
from typing import Any

from gateway.cli.common import (
    CliError,
    add_connection_options,
    admin_client,
    out,
    parse_key_values,
    split_list,
)
from gateway.cli.topics import check_alter_result

ENTITY_TYPES = {"topics": "TOPIC", "brokers": "BROKER"}
DEFAULT_NAME = ""  # a BROKER resource named "" is the cluster-wide <default> entity


def _send_anywhere(admin: Any, request: Any) -> Any:
    """Send `request` to any broker: kafka-python's public calls route a BROKER resource by its
    name as a broker id, which the default entity ("") is not."""
    return admin._manager.run(admin._manager.send, request)


def _describe_configs(admin: Any, resources: list, filter: str) -> dict:
    if [r.name for r in resources] != [DEFAULT_NAME]:
        return admin.describe_configs(resources, include_synonyms=True, config_filter=filter)
    request = admin._describe_configs_request(resources, True)
    # the answer holds <default>'s own keys only, which kafka-python's "modified" would drop
    return admin._describe_configs_process_responses([_send_anywhere(admin, request)], "all")


def _alter_configs(admin: Any, resource: Any) -> dict:
    if resource.name != DEFAULT_NAME:
        return admin.alter_configs([resource], raise_on_unknown=False)
    request = admin._alter_configs_request([resource], incremental=True)
    return admin._alter_configs_process_responses(_send_anywhere(admin, request).responses)


def register(sub) -> list[argparse.ArgumentParser]:
    configs = sub.add_parser(
        "configs", help="describe or alter topic and broker configs", description=__doc__
    )
    add_connection_options(configs, top=True)
    actions = configs.add_subparsers(dest="action", required=True, metavar="ACTION")
    parsers = [configs]
    for name, help in (("describe", "show configs"), ("alter", "set or remove configs")):
        p = actions.add_parser(name, help=help)
        add_connection_options(p)
        p.add_argument("--entity-type", choices=sorted(ENTITY_TYPES), required=True)
        p.add_argument(
            "--entity-name",
            action="append",
            default=[],
            help="a topic name or broker id (repeatable; describe: default all)",
        )
        p.add_argument(
            "--entity-default",
            action="store_true",
            help="brokers: the cluster-wide dynamic defaults (<default>)",
        )
        parsers.append(p)
    describe, alter = parsers[1], parsers[2]
    describe.add_argument("--all", action="store_true", help="every config, not only overrides")
    describe.add_argument("--json", action="store_true", help="print {name: {key: value}}")
    alter.add_argument("--add-config", action="append", default=[], metavar="K=V[,K=V]")
    alter.add_argument("--delete-config", action="append", default=[], metavar="K[,K]")
    configs.set_defaults(func=run)
    return parsers


def run(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        if args.action == "describe":
            return _describe(admin, args)
        return _alter(admin, args)


def _names(admin: Any, args: argparse.Namespace) -> list[str]:
    names = split_list(args.entity_name)
    if args.entity_default:
        if args.entity_type != "brokers":
            raise CliError("--entity-default applies to --entity-type brokers", code=2)
        if names:
            raise CliError("give --entity-name or --entity-default, not both", code=2)
        return [DEFAULT_NAME]
    if names:
        return names
    if args.action == "alter":
        raise CliError("alter: name the entity (--entity-name)", code=2)
    if args.entity_type == "topics":
        return sorted(admin.list_topics())
    return [str(b["broker_id"]) for b in admin.describe_cluster()["brokers"]]


def _describe(admin: Any, args: argparse.Namespace) -> int:
    from kafka.admin import ConfigResource, ConfigResourceType

    kind = ConfigResourceType[ENTITY_TYPES[args.entity_type]]
    names = _names(admin, args)
    resources = [ConfigResource(kind, name) for name in names]
    if not resources:
        return 0
    answer = _describe_configs(admin, resources, "all" if args.all else "modified")
    found = answer.get(kind.name.lower(), {})
    if args.entity_type == "topics":
        existing = set(admin.list_topics())
        missing = [n for n in names if n not in found or n not in existing]
        if missing:
            raise CliError(f"Topic '{missing[0]}' does not exist.")
    if args.json:
        shown = {n: {k: c.get("value") for k, c in found.get(n, {}).items()} for n in names}
        out(json.dumps(shown, indent=2, sort_keys=True))
        return 0
    for name in names:
        out(f"{'All' if args.all else 'Dynamic'} configs for {_what(args, name)} are:")
        for key, config in sorted(found.get(name, {}).items()):
            out(f"  {key}={_shown_value(config)} {_details(config)}")
    return 0


def _what(args: argparse.Namespace, name: str) -> str:
    if args.entity_type == "topics":
        return f"topic {name}"
    return "brokers default" if name == DEFAULT_NAME else f"broker {name}"


def _shown_value(config: dict[str, Any]) -> str:
    if config.get("is_sensitive"):
        return "null"
    value = config.get("value")
    return "null" if value is None else str(value)


def _details(config: dict[str, Any]) -> str:
    synonyms = config.get("synonyms") or []
    shown = ", ".join(
        f"{_source_name(s.get('source'))}:{s.get('name')}={s.get('value')}" for s in synonyms
    )
    sensitive = "true" if config.get("is_sensitive") else "false"
    return f"sensitive={sensitive} synonyms={{{shown}}}"


def _source_name(source: Any) -> str:
    names = {
        1: "DYNAMIC_TOPIC_CONFIG",
        2: "DYNAMIC_BROKER_CONFIG",
        3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
        4: "STATIC_BROKER_CONFIG",
        5: "DEFAULT_CONFIG",
        6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    }
    return names.get(getattr(source, "value", source), str(source))


def _alter(admin: Any, args: argparse.Namespace) -> int:
    from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType

    sets = parse_key_values(args.add_config, "--add-config")
    deletes = split_list(args.delete_config)
    if not sets and not deletes:
        raise CliError("alter: give --add-config or --delete-config", code=2)
    kind = ConfigResourceType[ENTITY_TYPES[args.entity_type]]
    changes: dict[str, Any] = {k: (AlterConfigOp.SET, v) for k, v in sets.items()}
    changes.update({k: (AlterConfigOp.DELETE, None) for k in deletes})
    for name in _names(admin, args):
        resource = ConfigResource(kind, name, configs=changes)
        check_alter_result(_alter_configs(admin, resource))
        out(f"Completed updating config for {_what(args, name)}.")
    return 0
