"""Client quota entities as DescribeClientQuotas / AlterClientQuotas name them: components
(entity type "user" or "client-id", a name or null for the default) to and from `Entity`."""

from __future__ import annotations

from rdmalog.security.entity_configs import DEFAULT, Entity

USER, CLIENT_ID = "user", "client-id"
# quota keys Kafka takes for user / client-id entities (controller_mutation_rate is stored only)
KEYS = frozenset(
    {"producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate"}
)
EXACT, DEFAULT_MATCH, ANY_MATCH = 0, 1, 2


def entity_of(components: list[dict]) -> Entity | str:
    """The entity the components name, or why they name none (INVALID_REQUEST)."""
    user = client = None
    seen = set()
    for c in components:
        kind, name = c["entity_type"], c["entity_name"]
        if kind in seen:
            return f"Duplicate entity type {kind}"
        seen.add(kind)
        if kind == USER:
            user = DEFAULT if name is None else name
        elif kind == CLIENT_ID:
            client = DEFAULT if name is None else name
        else:
            return f"Unsupported quota entity type {kind}"
    if not seen:
        return "No entity components"
    return Entity(user, client)


def components_of(entity: Entity) -> list[dict]:
    out = []
    if entity.user is not None:
        out.append({"entity_type": USER, "entity_name": _name(entity.user)})
    if entity.client_id is not None:
        out.append({"entity_type": CLIENT_ID, "entity_name": _name(entity.client_id)})
    return out


def _name(value: str) -> str | None:
    return None if value == DEFAULT else value


def matches(entity: Entity, filters: list[dict], strict: bool) -> bool:
    """DescribeClientQuotas' filter: each component EXACT (a name), DEFAULT or ANY (specified);
    `strict`: the entity has no other components."""
    values = {USER: entity.user, CLIENT_ID: entity.client_id}
    for f in filters:
        value = values.get(f["entity_type"])
        if value is None:
            return False
        if f["match_type"] == EXACT and value != f["match"]:
            return False
        if f["match_type"] == DEFAULT_MATCH and value != DEFAULT:
            return False
    if strict:
        named = {f["entity_type"] for f in filters}
        return all(v is None or k in named for k, v in values.items())
    return True


def format_value(value: float) -> str:
    """A quota value as Kafka stores it (integral byte rates without a fraction)."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))
