"""Kafka's ACL authorizer, stored: `authorizer.class.name` set to one of Kafka's ACL authorizers turns
it on, with `super.users` and `allow.everyone.if.no.acl.found`.

The rules are `rdmalog.security.authorizer.AclAuthorizer`'s (deny wins, implied DESCRIBE, literal,
wildcard and prefixed patterns); this module keeps its bindings durably in the data directory
(`__rdmalog_metadata/security/acls.json`, in the shape of Kafka's ZooKeeper `/kafka-acl` nodes:
per resource pattern a list of {principal, permissionType, operation, host}), and translates
between bindings and the wire codes of CreateAcls / DescribeAcls / DeleteAcls (filters included).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rdmalog.config import BrokerConfig
from rdmalog.errors import InvalidConfigError
from rdmalog.security.authorizer import (
    CLUSTER_NAME,
    WILDCARD,
    Acl,
    AclAuthorizer,
    Operation,
    PatternType,
    Principal,
    ResourceType,
)
from rdmalog.security.entity_configs import SECURITY_DIR
from rdmalog.store.checkpoints import write_atomic

ACL_FILE = "acls.json"
ACL_AUTHORIZERS = (
    "kafka.security.authorizer.AclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
)

# Wire codes (org.apache.kafka.common.resource / acl)
RESOURCE_CODES = {
    ResourceType.TOPIC: 2,
    ResourceType.GROUP: 3,
    ResourceType.CLUSTER: 4,
    ResourceType.TRANSACTIONAL_ID: 5,
}
PATTERN_CODES = {PatternType.LITERAL: 3, PatternType.PREFIXED: 4}
OPERATION_CODES = {
    Operation.ALL: 2,
    Operation.READ: 3,
    Operation.WRITE: 4,
    Operation.CREATE: 5,
    Operation.DELETE: 6,
    Operation.ALTER: 7,
    Operation.DESCRIBE: 8,
    Operation.CLUSTER_ACTION: 9,
    Operation.DESCRIBE_CONFIGS: 10,
    Operation.ALTER_CONFIGS: 11,
    Operation.IDEMPOTENT_WRITE: 12,
}
# The operations that apply to each resource type (Kafka's authorized-operations answers)
_O = Operation
RESOURCE_OPERATIONS = {
    ResourceType.TOPIC: (
        _O.READ, _O.WRITE, _O.CREATE, _O.DELETE, _O.ALTER, _O.DESCRIBE, _O.DESCRIBE_CONFIGS,
        _O.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (_O.READ, _O.DELETE, _O.DESCRIBE),
    ResourceType.CLUSTER: (
        _O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS, _O.IDEMPOTENT_WRITE,
        _O.ALTER, _O.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (_O.WRITE, _O.DESCRIBE),
}  # fmt: skip
ANY, MATCH = 1, 2  # filter codes: any value / (patterns) what applies to a name
DENY, ALLOW = 2, 3
_BY_CODE = {
    "resource": {v: k for k, v in RESOURCE_CODES.items()},
    "pattern": {v: k for k, v in PATTERN_CODES.items()},
    "operation": {v: k for k, v in OPERATION_CODES.items()},
}


class StoredAclAuthorizer(AclAuthorizer):
    """An `AclAuthorizer` whose bindings live in `path` (None: memory only)."""

    def __init__(
        self,
        path: Path | None,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
    ) -> None:
        super().__init__(read_acl_file(path), super_users, allow_everyone_if_no_acl_found)
        self.path = path
        self._write_lock = threading.Lock()  # one durable change at a time, in order

    def add(self, *acls: Acl) -> None:
        with self._write_lock:
            current = self.acls()
            self._save(current + [a for a in acls if a not in current])
            super().add(*acls)

    def remove(self, *acls: Acl) -> None:
        with self._write_lock:
            self._save([a for a in self.acls() if a not in acls])
            super().remove(*acls)

    def _save(self, acls: list[Acl]) -> None:
        if self.path is not None:
            _write(self.path, acls)


def acl_file(log_dir: Path) -> Path:
    """Where a single broker keeps its ACLs."""
    return Path(log_dir) / SECURITY_DIR / ACL_FILE


def authorizer_from_config(config: BrokerConfig, log_dir: Path) -> StoredAclAuthorizer | None:
    """The authorizer `authorizer.class.name` asks for (None when unset), kept in `log_dir`."""
    settings = authorizer_settings(config)
    if settings is None:
        return None
    return StoredAclAuthorizer(acl_file(log_dir), *settings)


def authorizer_settings(config: BrokerConfig) -> tuple[list[str], bool] | None:
    """(super users, allow.everyone.if.no.acl.found) of the authorizer `authorizer.class.name`
    asks for, None when unset; an authorizer rdmalog does not have stops start-up (never serve
    without the checks asked for)."""
    name = (config.get("authorizer.class.name") or "").strip()
    if not name:
        return None
    if name not in ACL_AUTHORIZERS:
        raise InvalidConfigError(
            f"authorizer.class.name={name}: rdmalog has Kafka's ACL authorizer only "
            f"({', '.join(ACL_AUTHORIZERS[:2])})"
        )
    supers = []
    for item in (config.get("super.users") or "").split(";"):
        if item.strip():
            try:
                supers.append(str(Principal.parse(item.strip())))
            except ValueError as exc:
                raise InvalidConfigError(f"super.users: {exc}") from None
    return supers, bool(config.get("allow.everyone.if.no.acl.found"))


# --- wire form ------------------------------------------------------------------------------------


def binding_error(b: dict) -> str | None:
    """Why CreateAcls refuses a creation (INVALID_REQUEST), as Kafka checks it; None when fine."""
    if b["resource_type"] not in _BY_CODE["resource"]:
        return f"Unsupported resource type {b['resource_type']}"
    if b["resource_pattern_type"] not in _BY_CODE["pattern"]:
        return f"Invalid pattern type {b['resource_pattern_type']}"
    if b["operation"] not in _BY_CODE["operation"]:
        return f"Invalid operation {b['operation']}"
    if b["permission_type"] not in (DENY, ALLOW):
        return f"Invalid permission type {b['permission_type']}"
    if not b["resource_name"]:
        return "Resource name should not be empty"
    rtype = _BY_CODE["resource"][b["resource_type"]]
    if rtype == ResourceType.CLUSTER and b["resource_name"] != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if (
        b["resource_pattern_type"] == PATTERN_CODES[PatternType.PREFIXED]
        and b["resource_name"] == WILDCARD
    ):
        return "A prefixed pattern cannot be the wildcard"
    try:
        Principal.parse(b["principal"] or "")
    except ValueError as exc:
        return str(exc)
    if not b["host"]:
        return "Host should not be empty (use * for any host)"
    return None


def acl_of(b: dict) -> Acl:
    """A CreateAcls creation (checked by `binding_error`) as a binding."""
    return Acl(
        b["principal"],
        _BY_CODE["operation"][b["operation"]],
        _BY_CODE["resource"][b["resource_type"]],
        b["resource_name"],
        _BY_CODE["pattern"][b["resource_pattern_type"]],
        b["host"],
        b["permission_type"] == ALLOW,
    )


def wire(acl: Acl) -> dict[str, Any]:
    """A binding in DescribeAcls / DeleteAcls fields."""
    return {
        "resource_type": RESOURCE_CODES[acl.resource_type],
        "resource_name": acl.name,
        "pattern_type": PATTERN_CODES[acl.pattern],
        "principal": acl.principal,
        "host": acl.host,
        "operation": OPERATION_CODES[acl.operation],
        "permission_type": ALLOW if acl.allow else DENY,
    }


def filter_error(f: dict) -> str | None:
    """Why a DescribeAcls / DeleteAcls filter is invalid (INVALID_REQUEST), or None."""
    if f["resource_type_filter"] != ANY and f["resource_type_filter"] not in _BY_CODE["resource"]:
        return f"Unsupported resource type {f['resource_type_filter']}"
    if f["pattern_type_filter"] not in (ANY, MATCH, *_BY_CODE["pattern"]):
        return f"Invalid pattern type {f['pattern_type_filter']}"
    if f["operation"] != ANY and f["operation"] not in _BY_CODE["operation"]:
        return f"Invalid operation {f['operation']}"
    if f["permission_type"] not in (ANY, DENY, ALLOW):
        return f"Invalid permission type {f['permission_type']}"
    return None


def matches(f: dict, acl: Acl) -> bool:
    """Kafka's AclBindingFilter.matches: each null / ANY field matches anything; a MATCH pattern
    filter matches every pattern that applies to its name (literal, wildcard, prefixes)."""
    rtype = f["resource_type_filter"]
    if rtype != ANY and _BY_CODE["resource"].get(rtype) != acl.resource_type:
        return False
    name, ptype = f["resource_name_filter"], f["pattern_type_filter"]
    if ptype not in (ANY, MATCH) and _BY_CODE["pattern"].get(ptype) != acl.pattern:
        return False
    if name is not None:
        if ptype == MATCH:
            if acl.pattern == PatternType.PREFIXED:
                if not name.startswith(acl.name):
                    return False
            elif acl.name not in (name, WILDCARD):
                return False
        elif name != acl.name:
            return False
    if f["principal_filter"] is not None and f["principal_filter"] != acl.principal:
        return False
    if f["host_filter"] is not None and f["host_filter"] != acl.host:
        return False
    op = f["operation"]
    if op != ANY and _BY_CODE["operation"].get(op) != acl.operation:
        return False
    perm = f["permission_type"]
    return perm == ANY or (perm == ALLOW) == acl.allow


# --- the file -------------------------------------------------------------------------------------


def read_acl_file(path: Path | None) -> list[Acl]:
    if path is None or not path.exists():
        return []
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        return [
            Acl(
                a["principal"],
                Operation(a["operation"]),
                ResourceType(r["resourceType"]),
                r["name"],
                PatternType(r["patternType"]),
                a["host"],
                a["permissionType"] == "Allow",
            )
            for r in body["resources"]
            for a in r["acls"]
        ]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InvalidConfigError(f"{path}: cannot read the ACLs: {exc}") from None


def _write(path: Path, acls: list[Acl]) -> None:
    resources: dict[tuple[str, str, str], list[dict]] = {}
    for a in acls:
        key = (a.resource_type.value, a.pattern.value, a.name)
        resources.setdefault(key, []).append(
            {
                "principal": a.principal,
                "permissionType": "Allow" if a.allow else "Deny",
                "operation": a.operation.value,
                "host": a.host,
            }
        )
    body = {
        "version": 1,
        "resources": [
            {"resourceType": t, "patternType": p, "name": n, "acls": items}
            for (t, p, n), items in sorted(resources.items())
        ],
    }
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomic(path, json.dumps(body, indent=1), mode=0o600)
