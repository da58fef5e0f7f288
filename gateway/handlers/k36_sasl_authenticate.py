"""SaslAuthenticate (key 36): one SASL token each way, framed as a Kafka request (after
SaslHandshake v1).

A refused token is answered SASL_AUTHENTICATION_FAILED with Kafka's message, after
`connection.failed.authentication.delay.ms`, and the connection is closed. v1+ answers carry the
session lifetime (KIP-368, `connections.max.reauth.ms`).
"""

from __future__ import annotations

import asyncio

from gateway.broker import RequestContext
from gateway.handlers.registry import api
from rdmalog.errors import ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED
from rdmalog.security.sasl import AuthenticationError


@api(36, 0, 2)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Step the connection's exchange with the client's token."""
    session = ctx.connection.session
    if session.authenticated and not session.reauthenticating:
        return {
            "error_code": ILLEGAL_SASL_STATE,
            "error_message": "SaslAuthenticate request received after successful authentication",
            "auth_bytes": b"",
            "session_lifetime": 0,
        }
    session.authenticate_version = ctx.api_version
    try:
        answer = session.authenticate(bytes(request["auth_bytes"]))
    except AuthenticationError as exc:
        delay = ctx.broker.config.get("connection.failed.authentication.delay.ms")
        if delay > 0:
            await asyncio.sleep(delay / 1000)  # slows down guessing, as Kafka does
        return {
            "error_code": SASL_AUTHENTICATION_FAILED,
            "error_message": str(exc),
            "auth_bytes": b"",
            "session_lifetime": 0,
        }
    return {
        "error_code": 0,
        "error_message": None,
        "auth_bytes": answer,
        "session_lifetime": session.session_lifetime_ms() if session.authenticated else 0,
    }
