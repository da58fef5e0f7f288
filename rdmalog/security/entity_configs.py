"""Per-user and per-client-id settings, kept as Kafka keeps them under ZooKeeper `/config/users` and
`/config/clients`: SCRAM credentials (`SCRAM-SHA-256` -> `salt=...,stored_key=...,server_key=...,
iterations=...`) and client quotas (`producer_byte_rate`, `consumer_byte_rate`,
`request_percentage`).

A single broker keeps them in its data directory (`__rdmalog_metadata/security/entity-configs.json`,
owner-only, replaced atomically): entities are `Entity(user, client_id)` with Kafka's `<default>`
names for defaults. `ScramCredentials` reads the SCRAM entries as `rdmalog.security.sasl`'s
`Credentials` (salt, stored key, server key, iterations), so passwords are stored nowhere.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple

from rdmalog.errors import InvalidConfigError
from rdmalog.store.checkpoints import write_atomic

SECURITY_DIR = Path("__rdmalog_metadata") / "security"  # under the broker's (first) log dir
ENTITY_FILE = "entity-configs.json"
DEFAULT = "<default>"  # Kafka's name of the default user / client id entity
SCRAM_MECHANISMS = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
MIN_ITERATIONS = 4096  # Kafka's bounds for SCRAM iterations
MAX_ITERATIONS = 16384


class Entity(NamedTuple):
    """A quota / credential entity: a user, a client id, or both (None: not part of it)."""

    user: str | None = None
    client_id: str | None = None

    def __str__(self) -> str:
        parts = []
        if self.user is not None:
            parts.append(f"users/{self.user}")
        if self.client_id is not None:
            parts.append(f"clients/{self.client_id}")
        return "/".join(parts)


class ScramCredential(NamedTuple):
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def encode(self) -> str:
        """Kafka's ScramCredentialUtils.credentialToString."""
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )

    @classmethod
    def decode(cls, text: str) -> ScramCredential:
        fields = dict(item.split("=", 1) for item in text.split(","))
        return cls(
            base64.b64decode(fields["salt"]),
            base64.b64decode(fields["stored_key"]),
            base64.b64decode(fields["server_key"]),
            int(fields["iterations"]),
        )

    @classmethod
    def from_salted_password(
        cls, mechanism: str, salt: bytes, salted_password: bytes, iterations: int
    ) -> ScramCredential:
        """RFC 5802: StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey =
        HMAC(SaltedPassword, "Server Key") (what AlterUserScramCredentials sends)."""
        digest = SCRAM_MECHANISMS[mechanism]
        client_key = hmac.new(salted_password, b"Client Key", digest).digest()
        server_key = hmac.new(salted_password, b"Server Key", digest).digest()
        return cls(salt, digest(client_key).digest(), server_key, iterations)

    @classmethod
    def from_password(
        cls, mechanism: str, password: str, iterations: int = MIN_ITERATIONS
    ) -> ScramCredential:
        digest = SCRAM_MECHANISMS[mechanism]
        salt = os.urandom(32)
        salted = hashlib.pbkdf2_hmac(digest().name, password.encode(), salt, iterations)
        return cls.from_salted_password(mechanism, salt, salted, iterations)


def iterations_error(mechanism: str, iterations: int) -> str | None:
    """Why Kafka refuses a credential (UNACCEPTABLE_CREDENTIAL), or None."""
    if mechanism not in SCRAM_MECHANISMS:
        return f"Unknown SCRAM mechanism {mechanism}"
    if iterations < MIN_ITERATIONS:
        return f"Too few iterations: {iterations} (at least {MIN_ITERATIONS})"
    if iterations > MAX_ITERATIONS:
        return f"Too many iterations: {iterations} (at most {MAX_ITERATIONS})"
    return None


class EntityConfigs:
    """The entity settings of one broker, in memory and in `path` (None: memory only)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._configs: dict[Entity, dict[str, str]] = {}
        self._listeners: list[Callable[[], None]] = []
        if path is not None and path.exists():
            self._configs = _read(path)

    @classmethod
    def in_data_dir(cls, log_dir: Path) -> EntityConfigs:
        return cls(Path(log_dir) / SECURITY_DIR / ENTITY_FILE)

    def get(self, entity: Entity) -> dict[str, str]:
        with self._lock:
            return dict(self._configs.get(entity, {}))

    def entities(self) -> dict[Entity, dict[str, str]]:
        with self._lock:
            return {e: dict(c) for e, c in self._configs.items()}

    def alter(self, changes: Mapping[Entity, Mapping[str, str | None]]) -> None:
        """Set (None: remove) keys of entities, all at once, durably; then tell the listeners."""
        with self._lock:
            configs = {e: dict(c) for e, c in self._configs.items()}
            for entity, items in changes.items():
                config = configs.setdefault(entity, {})
                for key, value in items.items():
                    if value is None:
                        config.pop(key, None)
                    else:
                        config[key] = value
                if not config:
                    del configs[entity]
            if self.path is not None:
                _write(self.path, configs)
            self._configs = configs
            listeners = list(self._listeners)
        for callback in listeners:
            callback()

    def add_listener(self, callback: Callable[[], None]) -> None:
        with self._lock:
            self._listeners.append(callback)


class ScramCredentials:
    """SCRAM credentials of users, as `rdmalog.security.sasl.Credentials`."""

    def __init__(self, configs: EntityConfigs) -> None:
        self.configs = configs

    def credential(self, mechanism: str, user: str) -> ScramCredential | None:
        text = self.configs.get(Entity(user)).get(mechanism)
        return ScramCredential.decode(text) if text else None

    def scram(self, mechanism: str, user: str) -> tuple[bytes, bytes, bytes, int] | None:
        found = self.credential(mechanism, user)
        return None if found is None else tuple(found)  # type: ignore[return-value]

    def set(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        self.configs.alter({Entity(user): {mechanism: credential.encode()}})

    def users(self) -> dict[str, dict[str, int]]:
        """user -> {mechanism: iterations} for every user with a SCRAM credential."""
        out: dict[str, dict[str, int]] = {}
        for entity, config in self.configs.entities().items():
            if entity.user is None or entity.client_id is not None:
                continue
            for mechanism in SCRAM_MECHANISMS:
                if mechanism in config:
                    out.setdefault(entity.user, {})[mechanism] = ScramCredential.decode(
                        config[mechanism]
                    ).iterations
        return out


def _read(path: Path) -> dict[Entity, dict[str, str]]:
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        return {
            Entity(item["entity"].get("user"), item["entity"].get("client-id")): {
                str(k): str(v) for k, v in item["config"].items()
            }
            for item in body["entities"]
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InvalidConfigError(f"{path}: cannot read user and client settings: {exc}") from None


def _write(path: Path, configs: dict[Entity, dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    body = {
        "version": 1,
        "entities": [
            {"entity": {"user": e.user, "client-id": e.client_id}, "config": c}
            for e, c in sorted(configs.items(), key=lambda item: str(item[0]))
        ],
    }
    write_atomic(path, json.dumps(body, indent=1), mode=0o600)
