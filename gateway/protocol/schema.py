"""Kafka message schemas, read once from kio's generated dataclasses into plain field specs.

kio is only the schema source: its classes carry every field's Kafka type, tag, nullability and
default per (API key, version). The compiler (`compiler.py`) turns these specs into fast codecs.
`legacy.py` derives the old versions kio no longer carries from these specs.
"""

from __future__ import annotations

import datetime
import enum
import functools
import uuid
from dataclasses import MISSING, dataclass, fields, is_dataclass

from kio.index import load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)
from kio.static.constants import EntityType

# Fixed-width Kafka types -> struct codes (big-endian). uuid is handled as 16s + conversion.
FIXED = {
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "q",
    "uint8": "B",
    "uint16": "H",
    "uint32": "I",
    "uint64": "Q",
    "float64": "d",
    "bool": "?",
    "error_code": "h",
    "timedelta_i32": "i",
    "timedelta_i64": "q",
    "datetime_i64": "q",
    "uuid": "16s",
}

ZERO_UUID = uuid.UUID(int=0)


@dataclass(slots=True)
class FieldSpec:
    """One field of an entity: `kind` is prim, struct, prim_array or struct_array."""

    name: str
    kind: str
    ktype: str | None
    nullable: bool
    tag: int | None
    default: object  # plain value (MISSING for struct defaults: built from the entity)
    entity: EntitySpec | None = None


@dataclass(slots=True)
class EntitySpec:
    """A struct of the protocol: its fields in wire order and whether it uses flexible encoding."""

    name: str
    flexible: bool
    fields: list[FieldSpec]


def _plain(value: object) -> object:
    """kio default values (phantom ints, enums, timedeltas, datetimes) as plain Python values."""
    if isinstance(value, enum.Enum):
        return int(value.value)
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bytes):
        return bytes(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def _implicit(kind: str, ktype: str | None, nullable: bool) -> object:
    if nullable:
        return None
    if kind in ("prim_array", "struct_array"):
        return []
    if kind == "struct":
        return MISSING
    if ktype == "string":
        return ""
    if ktype in ("bytes", "records"):
        return b""
    if ktype == "bool":
        return False
    if ktype == "float64":
        return 0.0
    if ktype == "uuid":
        return ZERO_UUID
    return 0


@functools.cache
def entity_spec(cls: type) -> EntitySpec:
    """The spec of one kio entity class (cached; nested entities are shared)."""
    specs = []
    for f in fields(cls):
        fc = classify_field(f)
        tag = get_field_tag(f)
        nullable = is_optional(f)
        if isinstance(fc, EntityTupleField):
            kind, ktype, sub = "struct_array", None, entity_spec(fc.type_)
        elif isinstance(fc, EntityField):
            kind, ktype, sub = "struct", None, entity_spec(fc.type_)
        else:
            kind = "prim_array" if isinstance(fc, PrimitiveTupleField) else "prim"
            ktype, sub = f.metadata["kafka_type"], None
        if f.default is not MISSING and not is_dataclass(f.default):
            default = _plain(f.default)
        else:
            default = _implicit(kind, ktype, nullable)
        specs.append(
            FieldSpec(
                f.name, kind, ktype, nullable, None if tag is None else int(tag), default, sub
            )
        )
    return EntitySpec(cls.__name__, bool(cls.__flexible__), specs)


def api_name(api_key: int) -> str | None:
    """kio's snake_case name of an API key, or None when the key is unknown."""
    return api_key_map.get(api_key)


def schema_versions(api_key: int) -> range:
    """The versions for which kio has a schema (empty when the key is unknown)."""
    name = api_key_map.get(api_key)
    if name is None:
        return range(0)
    versions = [v for v, kinds in schema_name_map[name].items() if EntityType.request in kinds]
    return range(min(versions), max(versions) + 1) if versions else range(0)


@functools.cache
def message_class(api_key: int, version: int, is_request: bool) -> type:
    """The kio class of a request or response body; raises KeyError when there is none."""
    try:
        if is_request:
            return load_request_schema(api_key, version)
        return load_response_schema(api_key, version)
    except Exception as exc:  # kio raises its own index errors
        raise KeyError((api_key, version, is_request)) from exc
