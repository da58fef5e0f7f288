"""The `rdmalog` command: run a broker, do the jobs of Kafka's tools, move data in and out.

`serve` runs a broker; the other subcommands work against a running one (`topics`, `configs`,
`groups`, `offsets`, `produce`, `consume`, `cluster`), on files (`dump-log`, `scram`), or move data
in and out (`import`, `export`, `mirror`). One module per subcommand; each registers its parser and
the function that runs it."""

from __future__ import annotations

import argparse
import logging
import sys
from importlib import metadata

from gateway.cli import (
    cluster,
    configs,
    console,
    dump_log,
    export,
    groups,
    migrate_import,
    mirror,
    offsets,
    scram,
    serve,
    topics,
)
from gateway.cli.common import CliError, describe_error
from gateway.log_format import LOG_FORMATS, configure_logging

SUBCOMMANDS = (
    serve,
    topics,
    configs,
    groups,
    offsets,
    dump_log,
    console,
    cluster,
    migrate_import,
    export,
    mirror,
    scram,
)
LOG_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]


def version() -> str:
    try:
        return metadata.version("rdmalog")
    except metadata.PackageNotFoundError:
        return "unknown"


def add_logging_options(parser: argparse.ArgumentParser, top: bool = False) -> None:
    """`--log-level` and `--log-format`, accepted before or after the subcommand."""
    parser.add_argument(
        "--log-level", choices=LOG_LEVELS, default=None if top else argparse.SUPPRESS
    )
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text" if top else argparse.SUPPRESS,
        help="text lines, or one JSON object per line",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `rdmalog` command."""
    parser = argparse.ArgumentParser(prog="rdmalog", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"rdmalog {version()}")
    add_logging_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in SUBCOMMANDS:
        for command in module.register(sub):
            add_logging_options(command)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `rdmalog` command."""
    args = build_parser().parse_args(argv)
    serving = args.command == "serve"
    # a tool prints its results; the client library's INFO chatter is not output
    level = args.log_level or ("INFO" if serving else "WARNING")
    configure_logging(level, args.log_format)
    if level != "DEBUG":  # kafka-python's chatter (the tools' clients, the broker's mirror links)
        logging.getLogger("kafka").setLevel(logging.WARNING if serving else logging.CRITICAL)
    try:
        return args.func(args) or 0
    except CliError as e:
        print(f"rdmalog {args.command}: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `rdmalog consume ... | head`
        sys.stderr.close()
        return 0
    except Exception as e:  # a client or file error: one line, not a traceback
        from kafka.errors import KafkaError

        if not isinstance(e, KafkaError | OSError | ValueError):
            raise
        print(f"rdmalog {args.command}: {describe_error(e)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
