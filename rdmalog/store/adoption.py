"""The configs of a topic adopted from partition directories the broker did not create (a Kafka log dir).

Retention must not delete what the topic's own configs would keep, so an adopted topic takes its
configs from the copied log dir's KRaft metadata log (`kraft_metadata.py`): its overrides, and the
dynamic broker defaults Kafka applied to it where it had none (`log.retention.*`,
`log.cleanup.policy` become the topic's `retention.ms`, `retention.bytes`, `cleanup.policy`). When
they cannot be known (no metadata log, as after a ZooKeeper-mode Kafka; no record of the topic; a
deletion config rdmalog cannot apply) the topic is adopted with deletion suspended: retention (and
compaction) delete nothing until an operator sets its configs with AlterConfigs or
IncrementalAlterConfigs. The topic record keeps the suspension across restarts.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from rdmalog.config import TOPIC_DEFS, BrokerConfig, TopicConfig
from rdmalog.errors import InvalidConfigError
from rdmalog.store.kraft_metadata import ClusterMetadata

# The topic configs that decide what retention deletes.
DELETION_CONFIGS = ("retention.ms", "retention.bytes", "cleanup.policy")
# What DescribeConfigs shows for a topic whose deletion is suspended (rdmalog's own, read-only).
SUSPENDED_CONFIG = "rdmalog.deletion.suspended"
SUSPENDED_DOC = (
    "true: the broker adopted this topic's partition directories without knowing its configs, so "
    "retention and compaction delete nothing until its configs are set with AlterConfigs or "
    "IncrementalAlterConfigs"
)
_RETENTION_BY_UNIT = (("log.retention.ms", 1), ("log.retention.minutes", 60_000))
_RETENTION_BY_UNIT += (("log.retention.hours", 3_600_000),)


@dataclass
class Adoption:
    """The configs an adopted topic gets, why deletion stays suspended (None: it does not), and
    the configs of its Kafka record rdmalog left out."""

    topic_id: uuid.UUID | None
    configs: dict[str, str] = field(default_factory=dict)
    suspended_because: str | None = None
    dropped: dict[str, str] = field(default_factory=dict)


def _broker_deletion_defaults(dynamic: dict[str, str], static: BrokerConfig) -> dict[str, str]:
    """Kafka's dynamic broker defaults for deletion, as the topic configs they stand for."""
    out = {}
    if any(key in dynamic for key, _ in _RETENTION_BY_UNIT):
        for key, unit in _RETENTION_BY_UNIT:  # Kafka: ms over minutes over hours
            value = dynamic.get(key, static.get(key))
            if value is not None:
                out["retention.ms"] = str(int(value) * unit)
                break
    if "log.retention.bytes" in dynamic:
        out["retention.bytes"] = dynamic["log.retention.bytes"]
    if "log.cleanup.policy" in dynamic:
        out["cleanup.policy"] = dynamic["log.cleanup.policy"]
    return out


def adopt(
    name: str,
    topic_id: uuid.UUID | None,
    metadata: ClusterMetadata | None,
    unreadable: str | None,
    broker: BrokerConfig,
    node_id: int,
) -> Adoption:
    """The configs of topic `name` (`topic_id` from its partition.metadata, if any) from the
    metadata log, or why they are not known (`unreadable`: why the log could not be read)."""
    if metadata is None:
        why = unreadable or "the log directory has no KRaft metadata log (__cluster_metadata-0)"
        return Adoption(topic_id, suspended_because=why)
    known_id = metadata.topic_ids.get(name)
    if known_id is None:
        return Adoption(topic_id, suspended_because="the KRaft metadata log has no record of it")
    if topic_id is not None and topic_id != known_id:
        why = f"its partition.metadata names topic id {topic_id}, the metadata log {known_id}"
        return Adoption(topic_id, suspended_because=why)
    wanted = {
        **_broker_deletion_defaults(metadata.broker_defaults(node_id), broker),
        **metadata.topic_configs.get(name, {}),
    }
    adoption = Adoption(known_id)
    for key, value in wanted.items():
        try:
            if key not in TOPIC_DEFS:
                raise InvalidConfigError(f"Unknown topic config name: {key}")
            TopicConfig.from_overrides(broker, {key: value})
            adoption.configs[key] = value
        except InvalidConfigError:
            adoption.dropped[key] = value
    lost = sorted(set(adoption.dropped) & set(DELETION_CONFIGS))
    if lost:
        adoption.suspended_because = (
            "its Kafka configs " + ", ".join(f"{k}={adoption.dropped[k]}" for k in lost)
            + " cannot be applied here"
        )  # fmt: skip
    return adoption
