"""What the `rdmalog` subcommands share: the connection options of Kafka's tools (`--bootstrap-server`,
`--command-config`), clients made from them, and errors reported as one line with a non-zero exit.

`--command-config FILE` takes Kafka client properties as Kafka's tools do (`security.protocol`,
`sasl.mechanism`, `sasl.jaas.config` or librdkafka's `sasl.username`/`sasl.password`, PEM files as
`ssl.ca.location`/`ssl.certificate.location`/`ssl.key.location`, `client.id`, `request.timeout.ms`) and
turns them into kafka-python's settings. Java keystores (`ssl.truststore.location`) are refused with
a line saying what to give instead.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_TIMEOUT_MS = 10_000


class CliError(Exception):
    """A failure to report as one line (`rdmalog CMD: message`) and exit with `code`."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def add_connection_options(parser: argparse.ArgumentParser, top: bool = False) -> None:
    """`--bootstrap-server` and `--command-config`, accepted before or after the action: the
    action's copy leaves what the subcommand's copy parsed alone unless given (SUPPRESS)."""
    default = DEFAULT_BOOTSTRAP if top else argparse.SUPPRESS
    parser.add_argument(
        "--bootstrap-server",
        default=default,
        metavar="HOST:PORT[,...]",
        help=f"the broker(s) to connect to (default {DEFAULT_BOOTSTRAP})",
    )
    parser.add_argument(
        "--command-config",
        default=None if top else argparse.SUPPRESS,
        metavar="FILE",
        help="a properties file of client settings (security.protocol, sasl.*, ssl.*)",
    )


def read_properties(path: str | Path) -> dict[str, str]:
    """A Java-style properties file (key=value or key: value, # and ! comments)."""
    props: dict[str, str] = {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror or e}") from None
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        m = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)", line)
        if m:
            props[m.group(1)] = m.group(2)
    return props


def _jaas_credentials(jaas: str) -> tuple[str | None, str | None]:
    user = re.search(r'username\s*=\s*"([^"]*)"', jaas)
    password = re.search(r'password\s*=\s*"([^"]*)"', jaas)
    return (user.group(1) if user else None), (password.group(1) if password else None)


def client_settings(props: dict[str, str]) -> dict[str, Any]:
    """kafka-python settings from Kafka client properties; CliError for what cannot be mapped."""
    out: dict[str, Any] = {}
    for key, value in props.items():
        if key == "security.protocol":
            out["security_protocol"] = value.upper()
        elif key == "sasl.mechanism" or key == "sasl.mechanisms":
            out["sasl_mechanism"] = value.upper()
        elif key == "sasl.jaas.config":
            user, password = _jaas_credentials(value)
            if user is not None:
                out["sasl_plain_username"] = user
            if password is not None:
                out["sasl_plain_password"] = password
        elif key == "sasl.username":
            out["sasl_plain_username"] = value
        elif key == "sasl.password":
            out["sasl_plain_password"] = value
        elif key in ("ssl.ca.location", "ssl.cafile"):
            out["ssl_cafile"] = value
        elif key in ("ssl.certificate.location", "ssl.certfile"):
            out["ssl_certfile"] = value
        elif key in ("ssl.key.location", "ssl.keyfile"):
            out["ssl_keyfile"] = value
        elif key in ("ssl.key.password", "ssl.key.location.password"):
            out["ssl_password"] = value
        elif key == "ssl.endpoint.identification.algorithm":
            out["ssl_check_hostname"] = value.strip().lower() == "https"
        elif key == "client.id":
            out["client_id"] = value
        elif key == "request.timeout.ms":
            out["request_timeout_ms"] = int(value)
        elif key in ("ssl.truststore.location", "ssl.keystore.location"):
            raise CliError(
                f"{key}: Java keystores are not read here; give PEM files as ssl.ca.location, "
                "ssl.certificate.location and ssl.key.location"
            )
        else:
            logging.getLogger("rdmalog.cli").info("--command-config: %s is not used", key)
    return out


def connection(args: argparse.Namespace, client_id: str) -> dict[str, Any]:
    """The kafka-python settings of a subcommand's connection options."""
    settings: dict[str, Any] = {
        "bootstrap_servers": getattr(args, "bootstrap_server", DEFAULT_BOOTSTRAP).split(","),
        "client_id": client_id,
        "bootstrap_timeout_ms": BOOTSTRAP_TIMEOUT_MS,
    }
    config = getattr(args, "command_config", None)
    if config:
        settings.update(client_settings(read_properties(config)))
    return settings


@contextlib.contextmanager
def admin_client(args: argparse.Namespace) -> Iterator[Any]:
    """A kafka-python admin client for the subcommand, closed afterwards."""
    from kafka.admin import KafkaAdminClient

    client = KafkaAdminClient(**connection(args, "rdmalog-cli"))
    try:
        yield client
    finally:
        client.close()


def describe_error(exc: BaseException) -> str:
    """One line for a client error: Kafka's error name and what it means, or the exception text."""
    from kafka import errors as kerr

    if isinstance(exc, kerr.BrokerResponseError):
        detail = ", ".join(str(a) for a in exc.args if a)
        text = f"{exc.message}: {exc.description}".rstrip(".")
        return f"{text} ({detail})" if detail else text
    if isinstance(exc, kerr.KafkaTimeoutError) and "bootstrap" in str(exc):
        return f"{exc.args[0] if exc.args else exc}: no broker answered"
    if isinstance(exc, kerr.KafkaError):
        return f"{type(exc).__name__}: {exc.args[0] if exc.args else ''}".rstrip(": ")
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")
    return str(exc) or type(exc).__name__


def error_for_code(code: int, what: str) -> CliError:
    """A CliError for Kafka error code `code` about `what`."""
    from kafka import errors as kerr

    return CliError(f"{what}: {describe_error(kerr.for_code(code)())}")


def parse_key_values(items: list[str], flag: str) -> dict[str, str]:
    """`k=v` items, each possibly a comma list (`k1=v1,k2=v2`, as kafka-configs.sh takes; a value
    with commas goes in brackets: `k=[a,b]`)."""
    out: dict[str, str] = {}
    for item in items:
        for part in re.findall(r"(?:[^,\[]|\[[^\]]*\])+", item):
            key, sep, value = part.partition("=")
            if not sep or not key.strip():
                raise CliError(f"{flag} expects key=value, got {part!r}", code=2)
            value = value.strip()
            if value.startswith("[") and value.endswith("]"):
                value = value[1:-1]
            out[key.strip()] = value
    return out


def split_list(items: list[str]) -> list[str]:
    """Comma lists given once or repeated, flattened."""
    return [x.strip() for item in items for x in item.split(",") if x.strip()]


def out(line: str = "") -> None:
    """One line of the subcommand's output (stdout)."""
    sys.stdout.write(line + "\n")
