"""DescribeConfigs (key 32): topic and broker configs with their values, sources and synonyms.

A resource named again gets INVALID_REQUEST instead of its configs a second time (Kafka answers
every copy; here a request cannot make the answer a thousand times its size with one topic's name).
"""

from __future__ import annotations

from typing import Any

from gateway.broker import RequestContext
from gateway.handlers.answers import answer_each
from gateway.handlers.registry import api
from gateway.handlers.resources import (
    BROKER,
    PASSWORD,
    TOPIC,
    broker_resource_error,
    cluster_topic,
    config_type,
    resource_denied,
    unknown_resource,
)
from rdmalog.config import (
    BROKER_DEFS,
    ConfigEntry,
    ConfigSource,
    TopicConfig,
    _broker_synonyms,
    _to_str,
)
from rdmalog.dynamic_broker_config import DEFAULT_ENTITY, DYNAMIC_KEYS
from rdmalog.errors import INVALID_REQUEST, error_code_of
from rdmalog.security.authorizer import Operation
from rdmalog.store.adoption import SUSPENDED_CONFIG, SUSPENDED_DOC


def _synonyms(config: Any, row: ConfigEntry) -> list[dict]:
    """Kafka's synonyms of a row, most specific first (the row's own value leads)."""
    if isinstance(config, TopicConfig):
        rows = config.synonyms(row.name)
    else:
        rows = [r for key in _broker_synonyms(row.name) for r in config.layer_rows(key)]
        default = BROKER_DEFS[row.name].default
        if default is not None:
            rows.append(ConfigEntry(row.name, _to_str(default), True, ConfigSource.DEFAULT_CONFIG))
    return [{"name": r.name, "value": r.value, "source": int(r.source)} for r in rows]


def _entries(config: Any, keys: list[str] | None, synonyms: bool, broker: bool) -> list[dict]:
    """Rows of `config.describe()` as DescribeConfigs results (only `keys` when some are given:
    null and empty both mean every key, as in Kafka)."""
    wanted = set(keys) if keys else None
    out = []
    for row in config.describe():
        if wanted is not None and row.name not in wanted:
            continue
        kind = config_type(config, row.name)
        sensitive = kind == PASSWORD  # never shown, as Kafka hides passwords, keys and JAAS
        out.append(
            {
                "name": row.name,
                "value": None if sensitive else row.value,
                "read_only": broker and row.name not in DYNAMIC_KEYS,
                "is_default": row.is_default,
                "config_source": int(row.source),
                "is_sensitive": sensitive,
                "config_type": kind,
                "documentation": None,
                "synonyms": [] if sensitive or not synonyms else _synonyms(config, row),
            }
        )
    return out


def _describe(broker, res: dict, synonyms: bool) -> dict:
    rtype, name = res["resource_type"], res["resource_name"]
    keys = res.get("configuration_keys")
    result = {"resource_type": rtype, "resource_name": name, "error_code": 0, "configs": []}
    try:
        if rtype == TOPIC:
            topic = broker.topic(name) if broker.cluster is None else cluster_topic(broker, name)
            if topic is None:
                result.update(unknown_resource(name))
            else:
                result["configs"] = _entries(topic.config, keys, synonyms, broker=False)
                if topic.deletion_suspended and (not keys or SUSPENDED_CONFIG in keys):
                    result["configs"].append(_suspended_entry())
        elif rtype == BROKER:
            error = broker_resource_error(broker, name)
            if error:
                result.update(error)
            elif name == "":  # the cluster-wide dynamic defaults, as Kafka shows `<default>`
                result["configs"] = _default_entries(broker, keys)
            else:
                result["configs"] = _entries(broker.config, keys, synonyms, broker=True)
        else:
            result.update(
                error_code=INVALID_REQUEST, error_message=f"resource type {rtype} is not supported"
            )
    except Exception as exc:  # a store error on one resource must not fail the others
        result.update(error_code=error_code_of(exc), error_message=str(exc))
    return result


def _default_entries(broker, keys: list[str] | None) -> list[dict]:
    """The `<default>` entity's dynamic configs (none when the broker keeps none)."""
    store = broker.broker_configs
    stored = {} if store is None else store.entities().get(DEFAULT_ENTITY, {})
    return [
        {
            "name": key,
            "value": value,
            "read_only": False,
            "is_default": False,
            "config_source": int(ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            "is_sensitive": False,
            "config_type": config_type(broker.config, key),
            "documentation": None,
            "synonyms": [],
        }
        for key, value in sorted(stored.items())
        if not keys or key in keys
    ]


def _suspended_entry() -> dict:
    """The entry of a topic adopted with deletion suspended (rdmalog/store/adoption.py): shown
    as a topic override, so `kafka-configs.sh --describe` lists it."""
    return {
        "name": SUSPENDED_CONFIG,
        "value": "true",
        "read_only": True,
        "is_default": False,
        "config_source": int(ConfigSource.DYNAMIC_TOPIC_CONFIG),
        "is_sensitive": False,
        "config_type": 1,  # boolean
        "documentation": SUSPENDED_DOC,
        "synonyms": [],
    }


@api(32, 0, 4)
async def handle(ctx: RequestContext, request: dict) -> dict:
    """Describe each requested resource; unknown topics and other brokers get per-resource errors."""
    synonyms = bool(request.get("include_synonyms"))
    resources = request["resources"]
    seen: set[tuple[int, str]] = set()

    def describe(res: dict) -> dict:
        key = (res["resource_type"], res["resource_name"])
        if key in seen:
            return {
                "resource_type": res["resource_type"],
                "resource_name": res["resource_name"],
                "error_code": INVALID_REQUEST,
                "error_message": "Duplicate resource in request.",
                "configs": [],
            }
        seen.add(key)
        denied = resource_denied(ctx, res, Operation.DESCRIBE_CONFIGS)
        if denied is not None:
            return denied
        return _describe(ctx.broker, res, synonyms)

    results = await answer_each(ctx, ("results",), resources, describe)
    return {"throttle_time": 0, "results": results}
