"""SaslHandshake (key 17): the client picks a SASL mechanism of its listener.

v0 starts Kafka's legacy flow (raw SASL tokens without Kafka headers follow), v1 the framed one
(SaslAuthenticate requests). An unknown mechanism is answered with UNSUPPORTED_SASL_MECHANISM and the
listener's mechanisms, then the connection is closed; a handshake on an authenticated connection
starts re-authentication (KIP-368) or is answered ILLEGAL_SASL_STATE.
"""

from __future__ import annotations

from gateway.broker import RequestContext
from gateway.handlers.registry import api
from rdmalog.errors import ILLEGAL_SASL_STATE, UNSUPPORTED_SASL_MECHANISM


@api(17, 0, 1)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Start the exchange of the requested mechanism on this connection."""
    session = ctx.connection.session
    problem = session.handshake(request["mechanism"], ctx.api_version)
    code = {None: 0, "unsupported": UNSUPPORTED_SASL_MECHANISM, "illegal": ILLEGAL_SASL_STATE}
    return {"error_code": code[problem], "mechanisms": list(session.listener.mechanisms)}
