"""SASL authentication (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) over any request/reply channel.

A server-side exchange is `SaslServer.step(client_bytes) -> server_bytes`, repeated until `done`;
`principal` then names the client (`User:<name>`), as Kafka's SaslAuthenticate does. SCRAM is
`scramp`'s (RFC 5802/7677). Credentials live in a `Credentials` store that keeps SCRAM's salted
keys only, as Kafka keeps them; PLAIN is checked against the same salted keys, so no password is
stored anywhere. The RDMA service's control connection uses it (`rdmalog/rdma/control.py`); the
Kafka gateway can use the same store and mechanisms.
"""

from __future__ import annotations

import hmac
import threading
from typing import Protocol

import scramp

from rdmalog.security.authorizer import Principal

SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)
SCRAM_ITERATIONS = 4096  # Kafka's default (and minimum) for SCRAM credentials
MAX_NAME = 256  # bytes of a user name or password a client may send


class AuthenticationError(Exception):
    """The client's credentials were refused (Kafka's SASL_AUTHENTICATION_FAILED)."""


class Credentials(Protocol):
    def scram(self, mechanism: str, user: str) -> tuple[bytes, bytes, bytes, int] | None:
        """`user`'s SCRAM credential for `mechanism`: (salt, stored key, server key,
        iterations), as scramp's `make_auth_info` builds it; None for an unknown user."""
        ...


class UserStore:
    """Users and their salted SCRAM credentials (both SHA-256 and SHA-512), in memory."""

    def __init__(self, users: dict[str, str] | None = None):
        self._lock = threading.Lock()
        self._creds: dict[tuple[str, str], tuple[bytes, bytes, bytes, int]] = {}
        for user, password in (users or {}).items():
            self.set_password(user, password)

    def set_password(self, user: str, password: str) -> None:
        creds = {
            (m, user): scramp.ScramMechanism(m).make_auth_info(password, SCRAM_ITERATIONS)
            for m in SCRAM_MECHANISMS
        }
        with self._lock:
            self._creds.update(creds)

    def remove(self, user: str) -> None:
        with self._lock:
            for m in SCRAM_MECHANISMS:
                self._creds.pop((m, user), None)

    def scram(self, mechanism: str, user: str) -> tuple[bytes, bytes, bytes, int] | None:
        with self._lock:
            return self._creds.get((mechanism, user))


class SaslServer:
    """One client's authentication exchange with `mechanism`."""

    def __init__(self, mechanism: str, credentials: Credentials):
        if mechanism not in MECHANISMS:
            raise AuthenticationError(
                f"unsupported SASL mechanism {mechanism!r:.40}; enabled: {', '.join(MECHANISMS)}"
            )
        self.mechanism = mechanism
        self.credentials = credentials
        self.principal: Principal | None = None
        self.done = False
        self._user: str | None = None
        self._scram = None
        if mechanism in SCRAM_MECHANISMS:
            self._scram = scramp.ScramMechanism(mechanism).make_server(self._auth_info)

    def _auth_info(self, user: str):
        info = self.credentials.scram(self.mechanism, user)
        if info is None:
            raise scramp.ScramException("unknown user")
        self._user = user
        return info

    def step(self, data: bytes) -> bytes:
        """The client's next message; returns the server's answer. AuthenticationError when the
        credentials are refused (the caller closes the connection)."""
        if self.done:
            raise AuthenticationError("authentication already completed")
        if self._scram is None:
            return self._plain(data)
        try:
            if self._user is None:
                self._scram.set_client_first(data.decode())
                return self._scram.get_server_first().encode()
            self._scram.set_client_final(data.decode())
            final = self._scram.get_server_final().encode()
        except (scramp.ScramException, UnicodeDecodeError) as e:
            raise AuthenticationError(f"authentication failed: {e}") from None
        self._finish(self._user)
        return final

    def _plain(self, data: bytes) -> bytes:
        """RFC 4616: authzid NUL authcid NUL password; checked against the SCRAM-SHA-256 key."""
        parts = data.split(b"\0")
        if len(parts) != 3 or len(data) > 3 * MAX_NAME:
            raise AuthenticationError("malformed PLAIN message")
        authzid, user_b, password_b = parts
        try:
            user, password = user_b.decode(), password_b.decode()
        except UnicodeDecodeError:
            raise AuthenticationError("malformed PLAIN message") from None
        if authzid and authzid != user_b:
            raise AuthenticationError("PLAIN: an authorization id other than the user")
        info = self.credentials.scram("SCRAM-SHA-256", user)
        if info is None or not _password_matches(info, password):
            raise AuthenticationError(f"authentication failed for user {user!r:.64}")
        self._finish(user)
        return b""

    def _finish(self, user: str) -> None:
        self.principal = Principal("User", user)
        self.done = True


def _password_matches(info: tuple[bytes, bytes, bytes, int], password: str) -> bool:
    salt, stored_key, _, iterations = info
    mine = scramp.ScramMechanism("SCRAM-SHA-256").make_auth_info(password, iterations, salt=salt)
    return hmac.compare_digest(mine[1], stored_key)


class SaslClient:
    """The client's side of an exchange: `first()`, then `step(server_bytes)` until `done`."""

    def __init__(self, mechanism: str, user: str, password: str):
        if mechanism not in MECHANISMS:
            raise AuthenticationError(f"unsupported SASL mechanism {mechanism!r}")
        self.mechanism = mechanism
        self.done = False
        self._plain = f"\0{user}\0{password}".encode() if mechanism == "PLAIN" else None
        self._scram = None if self._plain else scramp.ScramClient([mechanism], user, password)
        self._sent_final = False

    def first(self) -> bytes:
        if self._plain is not None:
            return self._plain
        return self._scram.get_client_first().encode()

    def step(self, data: bytes) -> bytes | None:
        """The server's answer; returns the next message to send, None once authenticated."""
        if self._plain is not None or self._sent_final:
            if self._scram is not None:
                try:
                    self._scram.set_server_final(data.decode())
                except scramp.ScramException as e:  # the server did not know our password
                    raise AuthenticationError(f"the server's SCRAM proof is wrong: {e}") from None
            self.done = True
            return None
        self._scram.set_server_first(data.decode())
        self._sent_final = True
        return self._scram.get_client_final().encode()
