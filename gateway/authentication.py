"""Who a connection is: its listener, its principal, and on SASL listeners the authentication
exchange Kafka's SaslServerAuthenticator runs.

On a SASL listener a connection starts unauthenticated: only ApiVersions and SaslHandshake are
served, then SaslAuthenticate (handshake v1), or raw SASL tokens without Kafka headers (the legacy
flow after handshake v0); anything else closes the connection, as Kafka does. Once authenticated the
principal is `User:<name>`. With `connections.max.reauth.ms` (KIP-368) the session has a lifetime:
SaslAuthenticate v1+ tells the client, which re-authenticates on the same connection (SaslHandshake
and SaslAuthenticate again, same principal); a request after the session expired closes the
connection. SSL connections are `User:<certificate subject>` (`ssl.principal.mapping.rules`), others
`User:ANONYMOUS`.
"""

from __future__ import annotations

import logging
import time

from rdmalog.security.authorizer import ANONYMOUS, Principal
from rdmalog.security.listeners import ListenerSecurity
from rdmalog.security.plain import PlainServer
from rdmalog.security.sasl import AuthenticationError, Credentials, SaslServer

log = logging.getLogger("gateway.authentication")

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36


class Session:
    """The security state of one connection."""

    def __init__(self, listener: ListenerSecurity, credentials: Credentials | None) -> None:
        self.listener = listener
        self.credentials = credentials
        self.principal: Principal = ANONYMOUS
        self.authenticated = not listener.spec.sasl
        self.mechanism: str | None = None
        self.exchange: PlainServer | SaslServer | None = None  # a SASL exchange in progress
        self.legacy = False  # SaslHandshake v0: the next frames are raw SASL tokens
        self.authenticate_version = -1  # the client's SaslAuthenticate version (1+: re-auth)
        self.expires_at: float | None = None  # monotonic end of the session (KIP-368)
        self.reauthenticating = False
        self.close_after_response = False  # an authentication failure is answered, then closed

    @property
    def expects_raw_token(self) -> bool:
        return self.legacy and self.exchange is not None

    def refusal(self, api_key: int, now: float | None = None) -> str | None:
        """Why a request with `api_key` may not be served now (the connection is then closed), or
        None."""
        if self.authenticated and not self.reauthenticating:
            expires = self.expires_at
            if api_key == SASL_HANDSHAKE:
                return None  # re-authentication, or an ILLEGAL_SASL_STATE answer
            if expires is not None and (now or time.monotonic()) > expires:
                return (
                    "the SASL session expired without re-authentication (connections.max.reauth.ms)"
                )
            return None
        if self.exchange is not None:  # after SaslHandshake v1: only SaslAuthenticate
            if api_key == SASL_AUTHENTICATE:
                return None
            return f"unexpected request (API key {api_key}) during SASL authentication"
        if api_key in (API_VERSIONS, SASL_HANDSHAKE) and not self.reauthenticating:
            return None
        return f"unexpected request (API key {api_key}) before SASL authentication"

    # --- SaslHandshake -------------------------------------------------------------------------

    def handshake(self, mechanism: str, version: int) -> str | None:
        """Start an exchange with `mechanism`; None, or why not (UNSUPPORTED_SASL_MECHANISM /
        ILLEGAL_SASL_STATE, then closed)."""
        if self.authenticated:
            if self.authenticate_version < 1 or version < 1:
                return "illegal"  # answered, the connection stays (KafkaApis does the same)
            if mechanism != self.mechanism:
                self.close_after_response = True
                return "unsupported"
            self.reauthenticating = True
        elif mechanism not in self.listener.mechanisms:
            self.close_after_response = True
            return "unsupported"
        self.mechanism = mechanism
        self.legacy = version == 0
        if mechanism == "PLAIN":
            self.exchange = PlainServer(self.listener.plain_users)
        else:
            self.exchange = SaslServer(mechanism, self.credentials)
        return None

    # --- SaslAuthenticate / raw tokens ---------------------------------------------------------

    def authenticate(self, token: bytes) -> bytes:
        """Feed the client's token; the server's answer. AuthenticationError when refused (the
        caller answers SASL_AUTHENTICATION_FAILED and closes)."""
        exchange = self.exchange
        if exchange is None:
            raise AuthenticationError("SaslAuthenticate before SaslHandshake")
        if len(token) > self.listener.max_receive:
            raise AuthenticationError(
                f"SASL token of {len(token)} bytes (sasl.server.max.receive.size="
                f"{self.listener.max_receive})"
            )
        try:
            answer = exchange.step(token)
        except AuthenticationError as exc:
            self._fail(exc)
            raise AuthenticationError(_failure_message(self.mechanism, exc)) from None
        if exchange.done:
            self._authenticated(exchange.principal)
        return answer

    def _authenticated(self, principal: Principal | None) -> None:
        assert principal is not None
        if self.reauthenticating and principal != self.principal:
            exc = AuthenticationError(f"re-authentication changed the principal to {principal}")
            self._fail(exc)
            raise AuthenticationError(str(exc))
        self.principal = principal
        self.authenticated = True
        self.reauthenticating = False
        self.exchange = None
        self.legacy = False
        lifetime = self.listener.reauth_ms
        self.expires_at = time.monotonic() + lifetime / 1000 if lifetime > 0 else None

    def _fail(self, exc: Exception) -> None:
        self.exchange = None
        self.close_after_response = True
        log.info(
            "SASL %s authentication failed on listener %s: %s",
            self.mechanism,
            self.listener.name,
            exc,
        )

    def session_lifetime_ms(self) -> int:
        """What SaslAuthenticate v1+ tells the client (0: no re-authentication needed)."""
        if self.expires_at is None:
            return 0
        return max(0, int((self.expires_at - time.monotonic()) * 1000))


def _failure_message(mechanism: str | None, exc: AuthenticationError) -> str:
    """The message a client sees, worded as Kafka words it."""
    if mechanism == "PLAIN":
        return str(exc)
    return (
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    )
