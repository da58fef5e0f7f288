"""The API registry: each `kNN_<api>.py` module declares its handler with `@api(...)`.

Dropping a new `kNN_<name>.py` file into `gateway/handlers/` is enough to add an API: `load_all()`
imports every such module, and ApiVersions advertises exactly what is registered.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("gateway.handlers")

Handler = Callable[[Any, dict], Awaitable[dict | None]]


@dataclass(frozen=True, slots=True)
class ApiEntry:
    """One implemented API: its key, version range and handler coroutine function.

    The handler is `async def handle(ctx: RequestContext, request: dict) -> dict | None`; None means
    "send no response" (Produce with acks=0). `eager` handlers start running inside the read
    callback, before any Task exists (saves a loop iteration per request); they must not need
    `asyncio.current_task()` (e.g. `asyncio.timeout`) before their first await.
    """

    api_key: int
    min_version: int
    max_version: int
    handler: Handler
    name: str
    eager: bool = False


REGISTRY: dict[int, ApiEntry] = {}


def api(
    api_key: int, min_version: int, max_version: int, *, eager: bool = False
) -> Callable[[Handler], Handler]:
    """Decorator registering a handler for `api_key` at versions min..max (inclusive)."""

    def register(fn: Handler) -> Handler:
        existing = REGISTRY.get(api_key)
        if existing is not None and existing.handler is not fn:
            raise RuntimeError(
                f"API key {api_key} registered twice ({existing.name}, {fn.__module__})"
            )
        REGISTRY[api_key] = ApiEntry(api_key, min_version, max_version, fn, fn.__module__, eager)
        return fn

    return register


def load_all() -> dict[int, ApiEntry]:
    """Import every `gateway.handlers.kNN_*` module (idempotent) and return the registry.

    A module that fails to import is logged and left out (its API is then not advertised), so one
    broken handler never takes the whole gateway down.
    """
    from gateway import handlers

    for info in pkgutil.iter_modules(handlers.__path__):
        if info.name[:1] == "k" and info.name[1:3].isdigit():
            try:
                importlib.import_module(f"gateway.handlers.{info.name}")
            except Exception:
                log.exception("handler module %s failed to import; its API is disabled", info.name)
    return REGISTRY
