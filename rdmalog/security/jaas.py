"""JAAS configuration values as Kafka reads `sasl.jaas.config`:

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-pw";

One or more `<login module class> <flag> <option>=<value> ... ;` entries; values are quoted strings
(with backslash escapes) or bare words. `parse` raises ValueError saying what it could not read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
FLAGS = ("required", "requisite", "sufficient", "optional")

_TOKEN = re.compile(r'\s*(?:(;)|(=)|"((?:\\.|[^"\\])*)"|([^\s;="]+))')


@dataclass
class LoginModule:
    """One entry: the class, its control flag and its options."""

    module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


def parse(text: str) -> list[LoginModule]:
    """The login modules of a JAAS configuration value (at least one)."""
    tokens = _tokens(text)
    entries: list[LoginModule] = []
    i = 0
    while i < len(tokens):
        kind, value = tokens[i]
        if kind != "word":
            raise ValueError(f"expected a login module class, found {value!r}")
        if i + 1 >= len(tokens) or tokens[i + 1][0] != "word" or tokens[i + 1][1] not in FLAGS:
            raise ValueError(f"{value}: expected a control flag ({', '.join(FLAGS)})")
        entry = LoginModule(value, tokens[i + 1][1])
        i += 2
        while i < len(tokens) and tokens[i][0] != ";":
            if (
                i + 2 >= len(tokens)
                or tokens[i][0] != "word"
                or tokens[i + 1][0] != "="
                or tokens[i + 2][0] not in ("word", "quoted")
            ):
                raise ValueError(f"{entry.module}: expected option=value near {tokens[i][1]!r}")
            entry.options[tokens[i][1]] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise ValueError(f"{entry.module}: the entry does not end with ';'")
        entries.append(entry)
        i += 1
    if not entries:
        raise ValueError("no login module")
    return entries


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"cannot read {text[pos : pos + 20]!r}")
        if m.group(1):
            out.append((";", ";"))
        elif m.group(2):
            out.append(("=", "="))
        elif m.group(3) is not None:
            out.append(("quoted", re.sub(r"\\(.)", r"\1", m.group(3))))
        else:
            out.append(("word", m.group(4)))
        pos = m.end()
    return out


def plain_users(entries: list[LoginModule]) -> dict[str, str]:
    """PLAIN's users: the `user_<name>="<password>"` options of its PlainLoginModule entry."""
    for entry in entries:
        if entry.module == PLAIN_MODULE:
            return {k[5:]: v for k, v in entry.options.items() if k.startswith("user_") and k[5:]}
    raise ValueError(f"no {PLAIN_MODULE} entry")
