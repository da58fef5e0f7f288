"""Schemas of the versions Kafka 3.9 accepts that kio (generated from Kafka 4.x, which dropped them,
KIP-896) does not carry: Produce v0-2, Fetch v0-3, ListOffsets v0, OffsetCommit v0-1, OffsetFetch v0,
CreateTopics v0-1, DeleteTopics v0, OffsetForLeaderEpoch v0-1, DescribeAcls / CreateAcls /
DeleteAcls v0 (no pattern types: literal), DescribeConfigs v0, DescribeLogDirs v0.

Each is derived from the oldest version kio has of its API, following the field version ranges of
Kafka 3.9's message JSON (clients/src/main/resources/common/message/*.json at the 3.9 branch): the
fields that old version lacks are dropped and the fields only old versions had are added where the
JSON places them. All of them are non-flexible, as their bases are.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

from .schema import EntitySpec, FieldSpec, entity_spec, message_class


def _int(name: str, ktype: str, default: object) -> FieldSpec:
    return FieldSpec(name, "prim", ktype, False, None, default)


class Derived(NamedTuple):
    """An old version as its base version (`base`) without the fields at the dotted paths `drop`,
    with the fields `add` inserted after the field each is paired with."""

    base: int
    drop: tuple[str, ...] = ()
    add: tuple[tuple[str, FieldSpec], ...] = ()


_PRODUCE_TIME = "responses.partition_responses.log_append_time"
_FETCH_V4 = ("responses.partitions.last_stable_offset", "responses.partitions.aborted_transactions")

# (api key, is request) -> {old version: how it derives from a kio version}
LEGACY: dict[tuple[int, bool], dict[int, Derived]] = {
    (0, True): {v: Derived(3, drop=("transactional_id",)) for v in (0, 1, 2)},
    (0, False): {
        0: Derived(3, drop=("throttle_time", _PRODUCE_TIME)),
        1: Derived(3, drop=(_PRODUCE_TIME,)),
        2: Derived(3),
    },
    (1, True): {
        **{v: Derived(4, drop=("max_bytes", "isolation_level")) for v in (0, 1, 2)},
        3: Derived(4, drop=("isolation_level",)),
    },
    (1, False): {
        0: Derived(4, drop=("throttle_time", *_FETCH_V4)),
        **{v: Derived(4, drop=_FETCH_V4) for v in (1, 2, 3)},
    },
    (2, True): {
        0: Derived(1, add=(("topics.partitions.timestamp", _int("max_num_offsets", "int32", 1)),)),
    },
    (2, False): {
        0: Derived(
            1,
            drop=("topics.partitions.timestamp", "topics.partitions.offset"),
            add=(
                (
                    "topics.partitions.error_code",
                    FieldSpec("old_style_offsets", "prim_array", "int64", False, None, []),
                ),
            ),
        ),
    },
    (8, True): {
        0: Derived(2, drop=("generation_id_or_member_epoch", "member_id", "retention_time")),
        1: Derived(
            2,
            drop=("retention_time",),
            add=(("topics.partitions.committed_offset", _int("commit_timestamp", "int64", -1)),),
        ),
    },
    (8, False): {0: Derived(2), 1: Derived(2)},
    (9, True): {0: Derived(1)},
    (9, False): {0: Derived(1)},
    (19, True): {0: Derived(2, drop=("validate_only",)), 1: Derived(2)},
    (19, False): {
        0: Derived(2, drop=("throttle_time", "topics.error_message")),
        1: Derived(2, drop=("throttle_time",)),
    },
    (20, True): {0: Derived(1)},
    (20, False): {0: Derived(1, drop=("throttle_time",))},
    (23, True): {v: Derived(2, drop=("topics.partitions.current_leader_epoch",)) for v in (0, 1)},
    (23, False): {
        0: Derived(2, drop=("throttle_time", "topics.partitions.leader_epoch")),
        1: Derived(2, drop=("throttle_time",)),
    },
    (29, True): {0: Derived(1, drop=("pattern_type_filter",))},
    (29, False): {0: Derived(1, drop=("resources.pattern_type",))},
    (30, True): {0: Derived(1, drop=("creations.resource_pattern_type",))},
    (30, False): {0: Derived(1)},
    (31, True): {0: Derived(1, drop=("filters.pattern_type_filter",))},
    (31, False): {0: Derived(1, drop=("filter_results.matching_acls.pattern_type",))},
    (32, True): {0: Derived(1, drop=("include_synonyms",))},
    (32, False): {
        0: Derived(
            1,
            drop=("results.configs.config_source", "results.configs.synonyms"),
            add=(("results.configs.read_only", _int("is_default", "bool", False)),),
        ),
    },
    (35, True): {0: Derived(1)},
    (35, False): {0: Derived(1)},
}


def legacy_versions(api_key: int) -> list[int]:
    """The old versions of `api_key` derived here (requests)."""
    return sorted(LEGACY.get((api_key, True), {}))


@functools.cache
def legacy_spec(api_key: int, version: int, is_request: bool) -> EntitySpec | None:
    """The spec of an old version derived here, or None when it is not one."""
    derived = LEGACY.get((api_key, is_request), {}).get(version)
    if derived is None:
        return None
    base = entity_spec(message_class(api_key, derived.base, is_request))
    drop = set(derived.drop)
    add = dict(derived.add)
    spec = _derive(base, "", drop, add)
    if drop or add:  # every path must name a field: a typo must not pass silently
        raise KeyError(f"api {api_key} v{version}: no field {sorted(drop | set(add))}")
    return spec


def _derive(base: EntitySpec, prefix: str, drop: set[str], add: dict[str, FieldSpec]) -> EntitySpec:
    fields = []
    for f in base.fields:
        path = prefix + f.name
        if path in drop:
            drop.discard(path)
            continue
        if f.entity is not None:
            f = dataclasses.replace(f, entity=_derive(f.entity, path + ".", drop, add))
        fields.append(f)
        if path in add:
            fields.append(add.pop(path))
    return EntitySpec(base.name, base.flexible, fields)
