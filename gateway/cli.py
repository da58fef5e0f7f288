"""The `rdmalog` command: `serve` runs a broker, `topics` manages topics on a running one, `scram`
adds SCRAM users to a data directory before the broker's first start.

`rdmalog serve` takes Kafka's own configuration: a `server.properties` file and `--override key=value`
with Kafka's names (`log.dirs`, `num.partitions`, `log.segment.bytes`, ...). `--listen` and `--data-dir`
are shorthands for `listeners` and `log.dirs`. Without any of them the broker listens on
127.0.0.1:9092 and keeps its data in ./rdmalog-data.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

DEFAULT_LISTEN = "127.0.0.1:9092"
DEFAULT_DATA_DIR = "rdmalog-data"


def parse_host_port(text: str) -> tuple[str, int]:
    """Split `HOST:PORT` (or `[v6]:PORT`) into its parts; raise ValueError when malformed."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def parse_overrides(items: list[str]) -> dict[str, str]:
    """Turn `key=value` strings into a dict; raise ValueError naming the malformed one."""
    overrides = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--override expects key=value, got {item!r}")
        overrides[key.strip()] = value.strip()
    return overrides


def _serve(args: argparse.Namespace) -> int:
    from rdmalog.config import BrokerConfig
    from rdmalog.errors import InvalidConfigError

    try:
        overrides = parse_overrides(args.override)
        listen = parse_host_port(args.listen) if args.listen else None
        if listen:
            overrides.setdefault("listeners", f"PLAINTEXT://{listen[0]}:{listen[1]}")
        if args.data_dir:
            overrides["log.dirs"] = str(Path(args.data_dir).resolve())
        props = Path(args.properties) if args.properties else None
        if props is not None and not props.is_file():
            raise ValueError(f"properties file not found: {props}")
        if props is None and "log.dirs" not in overrides and "log.dir" not in overrides:
            overrides["log.dirs"] = str(Path(DEFAULT_DATA_DIR).resolve())
        if "listeners" not in overrides and (props is None or not _mentions(props, "listeners")):
            host, port = parse_host_port(DEFAULT_LISTEN)
            overrides["listeners"] = f"PLAINTEXT://{host}:{port}"
        config = BrokerConfig.from_sources(props, overrides)
    except (ValueError, InvalidConfigError) as exc:
        print(f"rdmalog serve: configuration error: {exc}", file=sys.stderr)
        return 2

    from gateway.app import run

    run(config, listen)
    return 0


def _mentions(props: Path, key: str) -> bool:
    """True when a properties file sets `key` (used only to pick defaults)."""
    for line in props.read_text().splitlines():
        name = line.split("=", 1)[0].split(":", 1)[0].strip()
        if name == key:
            return True
    return False


def _admin(bootstrap: str):
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=bootstrap, client_id="rdmalog-topics")


def _topics(args: argparse.Namespace) -> int:
    logging.getLogger("kafka").setLevel(logging.WARNING)  # the client's INFO chatter is not output
    from kafka.admin import NewTopic
    from kafka.errors import KafkaError

    try:
        admin = _admin(args.bootstrap_server)
    except KafkaError as exc:
        print(f"rdmalog topics: cannot reach {args.bootstrap_server}: {exc}", file=sys.stderr)
        return 1
    try:
        if args.action == "create":
            configs = parse_overrides(args.config)
            topic = NewTopic(
                args.topic, args.partitions, args.replication_factor, topic_configs=configs
            )
            admin.create_topics([topic])
            print(f"Created topic {args.topic}.")
        elif args.action == "delete":
            admin.delete_topics([args.topic])
            print(f"Deleted topic {args.topic}.")
        elif args.action == "list":
            for name in sorted(admin.list_topics()):
                print(name)
        elif args.action == "describe":
            names = [args.topic] if args.topic else None
            for topic in admin.describe_topics(names):
                _print_topic(topic)
    except (KafkaError, ValueError) as exc:
        print(f"rdmalog topics {args.action}: {exc}", file=sys.stderr)
        return 1
    finally:
        admin.close()
    return 0


def _print_topic(topic: dict) -> None:
    """Print one topic (a kafka-python Metadata topic dict) the way kafka-topics.sh --describe does."""
    name = topic["name"]
    if topic.get("error_code"):
        print(f"Topic: {name}\tError: {topic['error_code']}")
        return
    parts = sorted(topic["partitions"], key=lambda p: p["partition_index"])
    print(f"Topic: {name}\tTopicId: {topic.get('topic_id')}\tPartitionCount: {len(parts)}")
    for p in parts:
        replicas = ",".join(map(str, p["replica_nodes"]))
        isr = ",".join(map(str, p["isr_nodes"]))
        print(
            f"\tTopic: {name}\tPartition: {p['partition_index']}\tLeader: {p['leader_id']}"
            f"\tReplicas: {replicas}\tIsr: {isr}"
        )


def _scram(args: argparse.Namespace) -> int:
    """SCRAM credentials in a data dir the broker is not running on (a running broker takes them
    through AlterUserScramCredentials: kafka-configs.sh, the admin clients)."""
    import fcntl
    import getpass

    from rdmalog.security.entity_configs import (
        SCRAM_MECHANISMS,
        EntityConfigs,
        ScramCredential,
        ScramCredentials,
        iterations_error,
    )

    data_dir = Path(args.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / ".lock", "a") as lock:  # the store's lock: held while a broker runs
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(
                f"rdmalog scram: a broker is running on {data_dir}; change its users with "
                "kafka-configs.sh --alter --add-config 'SCRAM-SHA-256=[password=...]' or an admin "
                "client",
                file=sys.stderr,
            )
            return 1
        credentials = ScramCredentials(EntityConfigs.in_data_dir(data_dir))
        if args.action == "list":
            for user, mechanisms in sorted(credentials.users().items()):
                items = ", ".join(f"{m} (iterations={i})" for m, i in sorted(mechanisms.items()))
                print(f"{user}: {items}")
            return 0
        mechanisms = args.mechanism or list(SCRAM_MECHANISMS)
        if args.action == "delete":
            entity_user = {m: None for m in mechanisms}
            credentials.configs.alter({_entity(args.user): entity_user})
            print(f"Deleted {', '.join(mechanisms)} credentials of {args.user}.")
            return 0
        for mechanism in mechanisms:
            problem = iterations_error(mechanism, args.iterations)
            if problem:
                print(f"rdmalog scram add: {problem}", file=sys.stderr)
                return 2
        password = args.password
        if password is None:
            password = getpass.getpass(f"password of {args.user}: ")
        for mechanism in mechanisms:
            credentials.set(
                args.user,
                mechanism,
                ScramCredential.from_password(mechanism, password, args.iterations),
            )
        print(f"Added {', '.join(mechanisms)} credentials for {args.user}.")
    return 0


def _entity(user: str):
    from rdmalog.security.entity_configs import Entity

    return Entity(user)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `rdmalog` command."""
    parser = argparse.ArgumentParser(prog="rdmalog", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run a broker")
    serve.add_argument("properties", nargs="?", help="a Kafka server.properties file")
    serve.add_argument("--listen", help=f"HOST:PORT to listen on (default {DEFAULT_LISTEN})")
    serve.add_argument("--data-dir", help=f"the log directory (default ./{DEFAULT_DATA_DIR})")
    serve.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Kafka broker config, e.g. log.segment.bytes=1048576 (repeatable)",
    )
    serve.set_defaults(func=_serve)

    topics = sub.add_parser("topics", help="create, list, describe or delete topics")
    topics.add_argument("--bootstrap-server", default=DEFAULT_LISTEN)
    actions = topics.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create")
    create.add_argument("topic")
    create.add_argument("--partitions", type=int, default=1)
    create.add_argument("--replication-factor", type=int, default=1)
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    actions.add_parser("list")
    describe = actions.add_parser("describe")
    describe.add_argument("topic", nargs="?")
    delete = actions.add_parser("delete")
    delete.add_argument("topic")
    topics.set_defaults(func=_topics)

    scram = sub.add_parser("scram", help="SCRAM users of a data dir (before the broker starts)")
    scram_actions = scram.add_subparsers(dest="action", required=True)
    for name in ("add", "delete", "list"):
        action = scram_actions.add_parser(name)
        action.add_argument("--data-dir", required=True, help="the broker's log dir")
        if name == "list":
            continue
        action.add_argument("--user", required=True)
        action.add_argument(
            "--mechanism",
            action="append",
            choices=["SCRAM-SHA-256", "SCRAM-SHA-512"],
            help="repeatable; default both",
        )
        if name == "add":
            action.add_argument("--password", help="default: asked for on the terminal")
            action.add_argument("--iterations", type=int, default=4096)
    scram.set_defaults(func=_scram)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `rdmalog` command."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
