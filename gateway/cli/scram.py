"""`rdmalog scram`: SCRAM users of a data directory before the broker's first start (a running broker
takes them through AlterUserScramCredentials: kafka-configs.sh, the admin clients)."""

from __future__ import annotations

import argparse
import fcntl
import getpass
from pathlib import Path

from gateway.cli.common import CliError, out


def register(sub) -> list[argparse.ArgumentParser]:
    scram = sub.add_parser(
        "scram", help="SCRAM users of a data dir (before the broker starts)", description=__doc__
    )
    actions = scram.add_subparsers(dest="action", required=True, metavar="ACTION")
    parsers = [scram]
    for name in ("add", "delete", "list"):
        action = actions.add_parser(name)
        parsers.append(action)
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
    scram.set_defaults(func=run)
    return parsers


def run(args: argparse.Namespace) -> int:
    from rdmalog.security.entity_configs import (
        SCRAM_MECHANISMS,
        Entity,
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
            raise CliError(
                f"a broker is running on {data_dir}; change its users with kafka-configs.sh "
                "--alter --add-config 'SCRAM-SHA-256=[password=...]' or an admin client"
            ) from None
        credentials = ScramCredentials(EntityConfigs.in_data_dir(data_dir))
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
