"""The text forms a configuration arrives in: Java `.properties` files (Kafka's `server.properties`,
checkpoint files) and Kafka's listener lists (`PLAINTEXT://127.0.0.1:9092,SSL://[::1]:9093`)."""

from __future__ import annotations

import re
from typing import NamedTuple

from rdmalog.errors import InvalidConfigError


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java `.properties` text: `k=v`, `k: v`, `k v`, `#`/`!` comments, `\\` continuations."""
    out: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip()
        i += 1
        if not line or line[0] in "#!":
            continue
        # A line ending in an odd number of backslashes continues on the next line.
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1 and i <= len(lines):
            line = line[:-1] + (lines[i].lstrip() if i < len(lines) else "")
            i += 1
        key_chars: list[str] = []
        j = 0
        while j < len(line):
            c = line[j]
            if c == "\\" and j + 1 < len(line):
                key_chars.append(line[j : j + 2])
                j += 2
                continue
            if c in "=: \t\f":
                break
            key_chars.append(c)
            j += 1
        rest = line[j:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        out[_unescape("".join(key_chars))] = _unescape(rest)
    return out


def _unescape(s: str) -> str:
    if "\\" not in s:
        return s
    simple = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}

    def repl(m: re.Match[str]) -> str:
        c = m.group(1)
        if c.startswith("u"):
            return chr(int(c[1:], 16))
        return simple.get(c, c)

    return re.sub(r"\\(u[0-9a-fA-F]{4}|.)", repl, s)


class Listener(NamedTuple):
    """One entry of `listeners`: security protocol / listener name, host ('' = all), port."""

    name: str
    host: str
    port: int


def parse_listeners(value: str | None) -> list[Listener]:
    """Parse `PLAINTEXT://127.0.0.1:9092,SSL://[::1]:9093` into Listener tuples."""
    out = []
    for item in (value or "").split(","):
        item = item.strip()
        if not item:
            continue
        m = re.fullmatch(r"([A-Za-z0-9_]+)://(\[[^\]]*\]|[^:/]*):(-?\d+)", item)
        if not m:
            raise InvalidConfigError(f"Invalid listener {item!r}: expected NAME://host:port")
        port = int(m.group(3))
        if not 0 <= port <= 65535:
            raise InvalidConfigError(f"Invalid listener {item!r}: port out of range")
        out.append(Listener(m.group(1).upper(), m.group(2).strip("[]"), port))
    return out


def listener_host_port(value: str) -> tuple[str, int]:
    """`PLAINTEXT://127.0.0.1:9092` -> ('127.0.0.1', 9092) (the first listener)."""
    listeners = parse_listeners(value)
    if not listeners:
        raise InvalidConfigError(f"Invalid listener {value!r}: empty")
    return listeners[0].host, listeners[0].port
