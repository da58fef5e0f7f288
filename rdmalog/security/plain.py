"""SASL/PLAIN's server side (RFC 4616) against the users of a PlainLoginModule JAAS entry, as
Kafka's PlainServerCallbackHandler checks them."""

from __future__ import annotations

import hmac

from rdmalog.security.authorizer import Principal
from rdmalog.security.sasl import AuthenticationError

MAX_MESSAGE = 3 * 1024  # authzid, user name and password with their separators


class PlainServer:
    """One PLAIN exchange: a single client message, an empty answer (same shape as
    `rdmalog.security.sasl.SaslServer`: `step`, `done`, `principal`)."""

    mechanism = "PLAIN"

    def __init__(self, users: dict[str, str]) -> None:
        self.users = users
        self.principal: Principal | None = None
        self.done = False

    def step(self, data: bytes) -> bytes:
        if self.done:
            raise AuthenticationError("authentication already completed")
        parts = data.split(b"\0")
        if len(parts) != 3 or len(data) > MAX_MESSAGE:
            raise AuthenticationError("Invalid SASL/PLAIN response: expected 3 tokens")
        authzid, user_b, password_b = parts
        try:
            user, password = user_b.decode(), password_b.decode()
        except UnicodeDecodeError:
            raise AuthenticationError("Invalid SASL/PLAIN response: not UTF-8") from None
        if not user:
            raise AuthenticationError("Authentication failed: username not specified")
        if not password:
            raise AuthenticationError("Authentication failed: password not specified")
        if authzid and authzid != user_b:
            raise AuthenticationError(
                "Authentication failed: Client requested an authorization id that is different "
                "from username"
            )
        expected = self.users.get(user)
        # compared in constant time, and also for unknown users (no timing hint of who exists)
        ok = hmac.compare_digest((expected or "\0").encode(), password_b)
        if expected is None or not ok:
            raise AuthenticationError("Authentication failed: Invalid username or password")
        self.principal = Principal("User", user)
        self.done = True
        return b""
