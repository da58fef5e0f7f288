"""`rdmalog serve`: run a broker.

It takes Kafka's own configuration: a `server.properties` file and `--override key=value`
with Kafka's names (`log.dirs`, `num.partitions`, `log.segment.bytes`, ...). `--listen` and `--data-dir`
are shorthands for `listeners` and `log.dirs`. Without any of them the broker listens on
127.0.0.1:9092 and keeps its data in ./rdmalog-data.
"""

from __future__ import annotations

import argparse
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


def register(sub) -> list[argparse.ArgumentParser]:
    """The `serve` subcommand."""
    serve = sub.add_parser("serve", help="run a broker", description=__doc__)
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
    return [serve]
