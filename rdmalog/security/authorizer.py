"""The authorization hook every datapath checks: Kafka's model, reduced to what callers need.

A request is allowed when `Authorizer.authorize(principal, host, operation, resource)` says so.
`AllowAll` (the default: no authorizer configured) allows everything, as Kafka does without
`authorizer.class.name`. `AclAuthorizer` is a table of Kafka-style ACLs (principal, host, allow
or deny, operation, literal or prefixed resource pattern; deny wins; `super_users`;
`allow_everyone_if_no_acl_found`), enough to test with and to back the Kafka-side authorizer
later. Authorizers that change tell their listeners (`add_listener`), so holders of long-lived
grants (the RDMA service) can revoke what is no longer allowed.

Internal topics (`__consumer_offsets`, `__transaction_state`, any `__` name) are a separate
rule: `is_internal_topic`.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Principal:
    """Kafka's KafkaPrincipal: a type ("User") and a name."""

    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> Principal:
        """ "User:alice" -> Principal("User", "alice")."""
        kind, sep, name = text.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"a principal is TYPE:NAME, not {text!r}")
        return cls(kind, name)


ANONYMOUS = Principal("User", "ANONYMOUS")  # an unauthenticated client, as Kafka names it
WILDCARD = "*"  # any principal, any host, any resource name (Kafka's wildcards)


class Operation(enum.Enum):
    """Kafka's AclOperation (the ones rdmalog checks or may check)."""

    ALL = "All"
    READ = "Read"
    WRITE = "Write"
    CREATE = "Create"
    DELETE = "Delete"
    ALTER = "Alter"
    DESCRIBE = "Describe"
    CLUSTER_ACTION = "ClusterAction"
    DESCRIBE_CONFIGS = "DescribeConfigs"
    ALTER_CONFIGS = "AlterConfigs"
    IDEMPOTENT_WRITE = "IdempotentWrite"


# Kafka: an allowed READ, WRITE, DELETE or ALTER implies DESCRIBE; ALTER_CONFIGS implies
# DESCRIBE_CONFIGS.
_IMPLIED = {
    Operation.DESCRIBE: (Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER),
    Operation.DESCRIBE_CONFIGS: (Operation.ALTER_CONFIGS,),
}


class ResourceType(enum.Enum):
    TOPIC = "Topic"
    GROUP = "Group"
    CLUSTER = "Cluster"
    TRANSACTIONAL_ID = "TransactionalId"


CLUSTER_NAME = "kafka-cluster"  # the one cluster resource, as Kafka names it


@dataclass(frozen=True, slots=True)
class Resource:
    type: ResourceType
    name: str


class Authorizer(Protocol):
    def authorize(
        self, principal: Principal, host: str, operation: Operation, resource: Resource
    ) -> bool:
        """Whether `principal` connecting from `host` may do `operation` on `resource`."""
        ...

    def add_listener(self, callback: Callable[[], None]) -> None:
        """Call `callback()` (any thread) after every change of what is allowed."""
        ...


class AllowAll:
    """No authorizer configured: everything is allowed and nothing ever changes."""

    def authorize(self, principal, host, operation, resource) -> bool:
        return True

    def add_listener(self, callback: Callable[[], None]) -> None:
        pass


class PatternType(enum.Enum):
    LITERAL = "Literal"
    PREFIXED = "Prefixed"


@dataclass(frozen=True, slots=True)
class Acl:
    """One Kafka ACL binding: `principal` ("User:alice" or "User:*") from `host` ("*" or an
    address) is allowed (or denied) `operation` on resources of `resource_type` whose name is
    `name` (LITERAL; "*": all) or starts with it (PREFIXED)."""

    principal: str
    operation: Operation
    resource_type: ResourceType
    name: str
    pattern: PatternType = PatternType.LITERAL
    host: str = WILDCARD
    allow: bool = True

    def matches_resource(self, resource: Resource) -> bool:
        if self.resource_type != resource.type:
            return False
        if self.pattern == PatternType.PREFIXED:
            return resource.name.startswith(self.name)
        return self.name in (WILDCARD, resource.name)

    def matches(self, principal: Principal, host: str, op: Operation, resource: Resource) -> bool:
        if self.principal not in (str(principal), f"{principal.type}:{WILDCARD}"):
            return False
        if self.host not in (WILDCARD, host):
            return False
        if self.operation not in (Operation.ALL, op):
            return False
        return self.matches_resource(resource)


class AclAuthorizer:
    """Kafka's ACL rules over an in-memory table: a matching DENY wins over any ALLOW; a super
    user is allowed everything; a resource no ACL names is allowed to everyone only with
    `allow_everyone_if_no_acl_found`."""

    def __init__(
        self,
        acls: Iterable[Acl] = (),
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
    ):
        self._acls: list[Acl] = list(acls)
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []

    def authorize(
        self, principal: Principal, host: str, operation: Operation, resource: Resource
    ) -> bool:
        if str(principal) in self.super_users:
            return True
        with self._lock:
            acls = [a for a in self._acls if a.matches_resource(resource)]
        if not acls:
            return self.allow_everyone_if_no_acl_found
        ops = (operation, *_IMPLIED.get(operation, ()))
        if any(not a.allow and a.matches(principal, host, operation, resource) for a in acls):
            return False
        return any(a.allow and a.matches(principal, host, op, resource) for a in acls for op in ops)

    def acls(self) -> list[Acl]:
        with self._lock:
            return list(self._acls)

    def add(self, *acls: Acl) -> None:
        with self._lock:
            self._acls.extend(a for a in acls if a not in self._acls)
        self._changed()

    def remove(self, *acls: Acl) -> None:
        with self._lock:
            self._acls = [a for a in self._acls if a not in acls]
        self._changed()

    def add_listener(self, callback: Callable[[], None]) -> None:
        with self._lock:
            self._listeners.append(callback)

    def _changed(self) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for cb in listeners:
            cb()


def is_internal_topic(name: str) -> bool:
    """Kafka's internal topics (`__consumer_offsets`, `__transaction_state`) and any other
    `__`-prefixed name, which rdmalog keeps for its own use."""
    return name.startswith("__")
