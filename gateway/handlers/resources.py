"""Config resources shared by DescribeConfigs, AlterConfigs and IncrementalAlterConfigs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, NamedTuple

from gateway.broker import Broker, RequestContext
from gateway.handlers.answers import answer_each
from rdmalog import dynamic_broker_config as dbc
from rdmalog.config import TOPIC_DEFS, TopicConfig
from rdmalog.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    INVALID_REQUEST,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_OR_PARTITION,
    error_code_of,
)
from rdmalog.security.authorizer import CLUSTER_NAME, Operation, ResourceType

# ConfigResource.Type in Kafka's clients
TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8

# DescribeConfigs config_type values (ConfigDef.Type in Kafka)
_TYPES = {
    "boolean": 1,
    "string": 2,
    "int": 3,
    "short": 4,
    "long": 5,
    "double": 6,
    "list": 7,
    "password": 9,
}
PASSWORD = _TYPES["password"]


def config_type(config: Any, name: str) -> int:
    """The DescribeConfigs `config_type` of a config key (0 = unknown)."""
    definition = config._defs.get(name)
    return _TYPES.get(getattr(definition, "kind", ""), 0)


def resource_denied(ctx: RequestContext, res: dict, operation: Operation) -> dict | None:
    """The answer to a config resource the sender may not do `operation` (DESCRIBE_CONFIGS,
    ALTER_CONFIGS) on: a topic's on the topic, a broker's on the cluster; None when allowed."""
    rtype, name = res["resource_type"], res["resource_name"]
    if rtype == TOPIC:
        allowed, code = (
            ctx.authorize(operation, ResourceType.TOPIC, name),
            TOPIC_AUTHORIZATION_FAILED,
        )
    elif rtype in (BROKER, BROKER_LOGGER):
        allowed = ctx.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME)
        code = CLUSTER_AUTHORIZATION_FAILED
    else:
        return None
    if allowed:
        return None
    return {
        "resource_type": rtype,
        "resource_name": name,
        "error_code": code,
        "error_message": None,
        "configs": [],
    }


def unknown_resource(name: str) -> dict:
    return {
        "error_code": UNKNOWN_TOPIC_OR_PARTITION,
        "error_message": f"Topic {name} does not exist.",
    }


def broker_resource_error(broker: Broker, name: str) -> dict | None:
    """An error entry when a BROKER resource does not name this broker ("" is the default)."""
    if name in ("", str(broker.node_id)):
        return None
    return {
        "error_code": INVALID_REQUEST,
        "error_message": f"Unexpected broker id, expected {broker.node_id} but received {name}",
    }


class _CurrentBroker(NamedTuple):
    """What APPEND / SUBTRACT read a list key's current value from (as a topic's `config`)."""

    config: Any


async def _alter_broker(
    broker: Broker,
    res: dict,
    validate_only: bool,
    null_ok: list[bool],
    changes_of: Callable[[Any, list[dict]], dict[str, str | None]],
    replace: bool,
    out: dict,
) -> dict:
    """A BROKER resource: this broker's dynamic configs ("" names the cluster-wide `<default>`),
    checked whole (read-only keys, values, the resulting config and every topic's) and applied
    all or nothing; every broker's listeners then apply them live."""
    name, configs = res["resource_name"], res["configs"]
    error = broker_resource_error(broker, name) or request_error(
        [c["name"] for c in configs], [c["value"] for c in configs], null_ok
    )
    if error:
        out.update(error)
        return out
    store = broker.broker_configs
    if store is None:  # a bare Broker (tests): no place to keep them
        out.update(error_code=INVALID_REQUEST, error_message="no dynamic broker configs here")
        return out
    entity = dbc.entity_of(name, broker.node_id)

    def check(entities: dict[str, dict[str, str]]) -> None:
        broker.check_config(dbc.layered(broker.config.static, entities))

    try:
        changes = changes_of(_CurrentBroker(broker.config), configs)
        dbc.check_keys(list(changes))
        if validate_only:
            check(dbc.merged(store.entities(), entity, changes, replace))
        else:
            await broker.in_admin_thread(store.alter, entity, changes, replace, check)
    except Exception as exc:  # InvalidRequestError / InvalidConfigError carry Kafka's codes
        out.update(error_code=error_code_of(exc), error_message=str(exc))
    return out


def request_error(names: list[str], values: list[str | None], null_ok: list[bool]) -> dict | None:
    """Kafka's checks before altering a resource: no key twice, no null value (except a DELETE)."""
    dup = sorted(n for n, count in Counter(names).items() if count > 1)
    if dup:
        return {
            "error_code": INVALID_REQUEST,
            "error_message": f"Error due to duplicate config keys : {', '.join(dup)}",
        }
    for name, value, ok in zip(names, values, null_ok, strict=True):
        if value is None and not ok:
            return {
                "error_code": INVALID_REQUEST,
                "error_message": f"Null value not supported for : {name}",
            }
    return None


async def alter_resource(
    broker: Broker,
    res: dict,
    validate_only: bool,
    null_ok: list[bool],
    changes_of: Callable[[Any, list[dict]], dict[str, str | None]],
    replace: bool,
) -> dict:
    """One AlterConfigs / IncrementalAlterConfigs resource: checks shared by both APIs, then
    `changes_of(topic, configs)` -> {key: value or None} applied (or only validated) on the topic."""
    rtype, name = res["resource_type"], res["resource_name"]
    out = {"resource_type": rtype, "resource_name": name, "error_code": 0, "error_message": None}
    if rtype == BROKER:
        return await _alter_broker(broker, res, validate_only, null_ok, changes_of, replace, out)
    if rtype != TOPIC:
        out.update(
            error_code=INVALID_REQUEST, error_message=f"resource type {rtype} is not supported"
        )
        return out
    configs = res["configs"]
    invalid = request_error([c["name"] for c in configs], [c["value"] for c in configs], null_ok)
    if invalid:
        out.update(invalid)
        return out
    topic = broker.topic(name) if broker.cluster is None else cluster_topic(broker, name)
    if topic is None:
        out.update(unknown_resource(name))
        return out
    try:
        changes = changes_of(topic, configs)
        if validate_only:
            topic.config.altered(changes, replace=replace)
        elif broker.cluster is not None:  # ZooKeeper's /config/topics; every replica applies it
            await broker.in_admin_thread(
                _alter_in_zookeeper, broker, name, configs, changes_of, replace
            )
        else:
            await broker.in_admin_thread(broker.alter_topic_config, name, changes, replace)
    except Exception as exc:  # store errors carry their Kafka code
        out.update(error_code=error_code_of(exc), error_message=str(exc))
    return out


CONFIG_WRITE_ATTEMPTS = 10  # alters of one topic's configs racing at several brokers


def _alter_in_zookeeper(
    broker: Broker,
    name: str,
    configs: list[dict],
    changes_of: Callable[[Any, list[dict]], dict[str, str | None]],
    replace: bool,
) -> None:
    """Cluster mode (in the admin thread): the changes applied to /config/topics/<name> as read,
    written back at the version read, with the change notification, in one transaction: all of a
    resource's changes or none, and none lost to an alter at another broker (read again, applied
    again). Keys rdmalog does not know stay unless the request replaces every override."""
    from rdmalog.cluster.registry import StaleStateError

    registry = broker.cluster.registry
    for _ in range(CONFIG_WRITE_ATTEMPTS):
        stored, version = registry.versioned_topic_configs(name)
        known = {k: v for k, v in stored.items() if k in TOPIC_DEFS}
        topic = ClusterTopic(name, TopicConfig.from_overrides(broker.config, known))
        new = topic.config.altered(changes_of(topic, configs), replace=replace)
        kept = {} if replace else {k: v for k, v in stored.items() if k not in TOPIC_DEFS}
        try:
            registry.set_topic_configs(name, {**kept, **new.overrides}, version)
            return
        except StaleStateError:
            continue
    raise StaleStateError(f"the configs of {name} kept changing; try again")


class ClusterTopic(NamedTuple):
    """A topic's config as the cluster has it (in ZooKeeper), on any broker."""

    name: str
    config: TopicConfig
    deletion_suspended: bool = False  # what this broker's replica says, when it holds one


def cluster_topic(broker: Broker, name: str) -> ClusterTopic | None:
    """Cluster mode: the topic's config from ZooKeeper's /config/topics (None: no such topic)."""
    tv = broker.cluster.view.topic(name)
    if tv is None:
        return None
    known = {k: v for k, v in tv.configs.items() if k in TOPIC_DEFS}
    local = broker.topic(name)
    suspended = bool(getattr(local, "deletion_suspended", False))
    return ClusterTopic(name, TopicConfig.from_overrides(broker.config, known), suspended)


Alter = Callable[[Broker, dict, bool], Any]  # (broker, resource, validate_only) -> its answer


async def alter_each(ctx: RequestContext, request: dict, alter: Alter) -> dict:
    """AlterConfigs / IncrementalAlterConfigs: each resource authorized (ALTER_CONFIGS), then
    `alter(broker, resource, validate_only)`; the response of either API."""
    validate_only = bool(request.get("validate_only"))
    responses = await answer_each(
        ctx,
        ("responses",),
        request["resources"],
        lambda r: (
            resource_denied(ctx, r, Operation.ALTER_CONFIGS) or alter(ctx.broker, r, validate_only)
        ),
    )
    return {"throttle_time": 0, "responses": responses}
