"""ApiVersions (key 18): the versions of every API this gateway implements.

Unsupported ApiVersions versions never reach this handler: the server answers them with a v0
response carrying UNSUPPORTED_VERSION and the supported ranges, as Kafka does.
"""

from __future__ import annotations

import re

from gateway.broker import RequestContext
from gateway.handlers.registry import api, supported_apis
from rdmalog.errors import INVALID_REQUEST

# Kafka's rule for client software name and version (KIP-511).
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


@api(18, 0, 4, eager=True)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """List the registered APIs; v3+ checks and keeps the client software name and version."""
    code = 0
    if ctx.api_version >= 3:
        name = request.get("client_software_name", "")
        version = request.get("client_software_version", "")
        if not (_SOFTWARE.fullmatch(name) and _SOFTWARE.fullmatch(version)):
            code = INVALID_REQUEST
        elif ctx.connection is not None:
            ctx.connection.state["client_software"] = (name, version)
    return {"error_code": code, "api_keys": supported_apis(), "throttle_time": 0}
