"""`rdmalog scram`: SCRAM users before the brokers start: of a data directory (one broker), or of a
cluster's ZooKeeper (`--zookeeper`, as `kafka-configs.sh --zookeeper` writes them, so the brokers can
authenticate each other from their first start). Running brokers take users through
AlterUserScramCredentials: kafka-configs.sh --bootstrap-server, the admin clients."""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import getpass
from collections.abc import Iterator
from pathlib import Path

from gateway.cli.common import CliError, out


def register(sub) -> list[argparse.ArgumentParser]:
    scram = sub.add_parser(
        "scram",
        help="SCRAM users of a data dir or a cluster's ZooKeeper (before the brokers start)",
        description=__doc__,
    )
    actions = scram.add_subparsers(dest="action", required=True, metavar="ACTION")
    parsers = [scram]
    for name in ("add", "delete", "list"):
        action = actions.add_parser(name)
        parsers.append(action)
        where = action.add_mutually_exclusive_group(required=True)
        where.add_argument("--data-dir", help="the broker's log dir (a single broker)")
        where.add_argument(
            "--zookeeper", metavar="HOST:PORT[/CHROOT]", help="the cluster's zookeeper.connect"
        )
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
    scram.set_defaults(func=run)
    return parsers


@contextlib.contextmanager
def _data_dir_configs(data_dir: Path) -> Iterator:
    """The data dir's user settings, while no broker runs on it (the store's lock held)."""
    from rdmalog.security.entity_configs import EntityConfigs

    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / ".lock", "a") as lock:  # the store's lock: held while a broker runs
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CliError(
                f"a broker is running on {data_dir}; change its users with kafka-configs.sh "
                "--alter --add-config 'SCRAM-SHA-256=[password=...]' or an admin client"
            ) from None
        yield EntityConfigs.in_data_dir(data_dir)


@contextlib.contextmanager
def _zookeeper_configs(connect: str) -> Iterator:
    """The cluster's user settings in ZooKeeper (/config/users, with a change notification that
    running brokers follow)."""
    from rdmalog.cluster.registry import Registry, RegistryError
    from rdmalog.cluster.security_store import ZkEntityConfigs

    registry = Registry(connect, connection_timeout_ms=10_000)
    try:
        registry.start()
    except RegistryError as exc:
        raise CliError(str(exc)) from None
    try:
        configs = ZkEntityConfigs(registry.zk).start()
        try:
            yield configs
        finally:
            configs.stop()
    finally:
        registry.stop()


def run(args: argparse.Namespace) -> int:
    from rdmalog.security.entity_configs import (
        SCRAM_MECHANISMS,
        Entity,
        ScramCredential,
        ScramCredentials,
        iterations_error,
    )

    if args.zookeeper:
        where = _zookeeper_configs(args.zookeeper)
    else:
        where = _data_dir_configs(Path(args.data_dir))
    with where as configs:
        credentials = ScramCredentials(configs)
        if args.action == "list":
            for user, mechanisms in sorted(credentials.users().items()):
                items = ", ".join(f"{m} (iterations={i})" for m, i in sorted(mechanisms.items()))
                out(f"{user}: {items}")
            return 0
        mechanisms = args.mechanism or list(SCRAM_MECHANISMS)
        if args.action == "delete":
            credentials.configs.alter({Entity(args.user): dict.fromkeys(mechanisms)})
            out(f"Deleted {', '.join(mechanisms)} credentials of {args.user}.")
            return 0
        for mechanism in mechanisms:
            problem = iterations_error(mechanism, args.iterations)
            if problem:
                raise CliError(problem, code=2)
        password = args.password
        if password is None:
            password = getpass.getpass(f"password of {args.user}: ")
        for mechanism in mechanisms:
            credentials.set(
                args.user,
                mechanism,
                ScramCredential.from_password(mechanism, password, args.iterations),
            )
        out(f"Added {', '.join(mechanisms)} credentials for {args.user}.")
    return 0
