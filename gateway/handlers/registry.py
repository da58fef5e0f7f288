"""The API registry: `HANDLERS` lists every API this gateway implements and the `kNN_<api>.py` module
that declares its handler with `@api(...)`.

`load_all()` imports exactly those modules; one that fails to import, or does not register its key,
stops start-up (no API silently missing from ApiVersions). ApiVersions advertises what is registered
(`supported_apis()`). Adding an API is a new module and its line here.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

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


# API key -> the module of gateway/handlers/ implementing it.
HANDLERS: dict[int, str] = {
    0: "k00_produce",
    1: "k01_fetch",
    2: "k02_list_offsets",
    3: "k03_metadata",
    8: "k08_offset_commit",
    9: "k09_offset_fetch",
    10: "k10_find_coordinator",
    11: "k11_join_group",
    12: "k12_heartbeat",
    13: "k13_leave_group",
    14: "k14_sync_group",
    15: "k15_describe_groups",
    16: "k16_list_groups",
    17: "k17_sasl_handshake",
    18: "k18_api_versions",
    19: "k19_create_topics",
    20: "k20_delete_topics",
    21: "k21_delete_records",
    22: "k22_init_producer_id",
    23: "k23_offset_for_leader_epoch",
    24: "k24_add_partitions_to_txn",
    25: "k25_add_offsets_to_txn",
    26: "k26_end_txn",
    27: "k27_write_txn_markers",
    28: "k28_txn_offset_commit",
    29: "k29_describe_acls",
    30: "k30_create_acls",
    31: "k31_delete_acls",
    32: "k32_describe_configs",
    33: "k33_alter_configs",
    35: "k35_describe_log_dirs",
    36: "k36_sasl_authenticate",
    37: "k37_create_partitions",
    42: "k42_delete_groups",
    43: "k43_elect_leaders",
    44: "k44_incremental_alter_configs",
    45: "k45_alter_partition_reassignments",
    46: "k46_list_partition_reassignments",
    47: "k47_offset_delete",
    48: "k48_describe_client_quotas",
    49: "k49_alter_client_quotas",
    50: "k50_describe_user_scram_credentials",
    51: "k51_alter_user_scram_credentials",
    60: "k60_describe_cluster",
    61: "k61_describe_producers",
    65: "k65_describe_transactions",
    66: "k66_list_transactions",
}

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


def load_all(handlers: dict[int, str] = HANDLERS) -> dict[int, ApiEntry]:
    """Import the handler module of every API in `handlers` (idempotent) and return the registry.

    An import error propagates; a module that does not register its key raises RuntimeError.
    """
    for api_key, module in handlers.items():
        importlib.import_module(f"gateway.handlers.{module}")
        entry = REGISTRY.get(api_key)
        if entry is None or entry.name != f"gateway.handlers.{module}":
            raise RuntimeError(f"gateway.handlers.{module} does not register API key {api_key}")
    return REGISTRY


def supported_apis() -> list[dict]:
    """ApiVersions entries for every registered API."""
    return [
        {"api_key": e.api_key, "min_version": e.min_version, "max_version": e.max_version}
        for e in sorted(REGISTRY.values(), key=lambda e: e.api_key)
    ]
