"""Users, client quotas and ACLs of a cluster, kept in ZooKeeper as Kafka (ZooKeeper mode) keeps them:

    /config/users/<user>                        {"version":1,"config":{"SCRAM-SHA-256":"salt=..",
                                                  "producer_byte_rate":"1024"}}
    /config/users/<user>/clients/<client-id>    {"version":1,"config":{...}}
    /config/clients/<client-id>                 {"version":1,"config":{...}}
    /config/changes/config_change_<seq>         {"version":2,"entity_path":"users/alice"}
    /kafka-acl/<ResourceType>/<name>            {"version":1,"acls":[{"principal":"User:alice",
                                                  "permissionType":"Allow","operation":"Read",
                                                  "host":"*"}]}                     (literal)
    /kafka-acl-extended/prefixed/<ResourceType>/<name>                              (prefixed)
    /kafka-acl-changes/acl_changes_<seq>        "TOPIC:<name>"                      (literal)
    /kafka-acl-extended-changes/acl_changes_<seq>
                                                {"version":1,"resourceType":"TOPIC","name":..,
                                                  "patternType":"PREFIXED"}

User and client names in paths are sanitized as Kafka's Sanitizer does (URL-encoded; `<default>`
as is). `ZkEntityConfigs` and `ZkAclAuthorizer` keep the interfaces of the single-broker stores
(`EntityConfigs`, `AclAuthorizer`): every check reads an in-memory cache; a change is one ZooKeeper
transaction (every znode written at the version it was read at, with its change notifications), so
an admin request changes all it asked for or nothing; every broker reloads its cache when a change
notification appears (a children watch), so a change made through one broker holds at all.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from urllib.parse import quote, unquote

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.recipe.watchers import ChildrenWatch

from rdmalog.cluster.znodes import json_bytes, json_object
from rdmalog.errors import InvalidRequestError, KafkaError
from rdmalog.security.acls import read_acl_file
from rdmalog.security.authorizer import Acl, AclAuthorizer, Operation, PatternType, ResourceType
from rdmalog.security.entity_configs import DEFAULT, Entity, EntityConfigs

log = logging.getLogger("rdmalog.cluster.security")

CONFIG_USERS = "/config/users"
CONFIG_CLIENTS = "/config/clients"
CONFIG_CHANGES = "/config/changes"
ACL_ROOTS = {
    PatternType.LITERAL: "/kafka-acl",
    PatternType.PREFIXED: "/kafka-acl-extended/prefixed",
}
ACL_CHANGES = {
    PatternType.LITERAL: "/kafka-acl-changes",
    PatternType.PREFIXED: "/kafka-acl-extended-changes",
}
ACL_CHANGE_PREFIX = "acl_changes_"
CONFIG_CHANGE_PREFIX = "config_change_"
# Java's ResourceType.name (the change notifications name types so; the paths use the camel case)
_TYPE_NAMES = {
    ResourceType.TOPIC: "TOPIC",
    ResourceType.GROUP: "GROUP",
    ResourceType.CLUSTER: "CLUSTER",
    ResourceType.TRANSACTIONAL_ID: "TRANSACTIONAL_ID",
}
CHANGE_EXPIRATION_MS = 15 * 60 * 1000  # Kafka's: older change notifications are deleted
MAX_ATTEMPTS = 20  # a change read again and retried when another broker changed a znode meanwhile
_CONFLICTS = (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError)


class ConcurrentChangeError(KafkaError):
    """Other brokers kept changing the same znodes: the change was not made."""


# --- entity names and paths -----------------------------------------------------------------------


def sanitize(name: str) -> str:
    """Kafka's Sanitizer.sanitize (java.net.URLEncoder, with `*` and spaces percent-encoded)."""
    if name == DEFAULT:
        return name
    return quote(name, safe="").replace("~", "%7E")


def desanitize(name: str) -> str:
    return unquote(name)


def entity_path(entity: Entity) -> str:
    """`users/alice`, `clients/app`, `users/alice/clients/app` (the notification's entity_path)."""
    parts = []
    if entity.user is not None:
        parts.append(f"users/{sanitize(entity.user)}")
    if entity.client_id is not None:
        parts.append(f"clients/{sanitize(entity.client_id)}")
    return "/".join(parts)


def encode_entity_config(config: Mapping[str, str]) -> bytes:
    return json_bytes({"version": 1, "config": {k: str(v) for k, v in sorted(config.items())}})


def decode_entity_config(data: bytes | None) -> dict[str, str]:
    return {str(k): str(v) for k, v in (json_object(data).get("config") or {}).items()}


# --- ACL paths and JSON ---------------------------------------------------------------------------


def acl_path(resource_type: ResourceType, pattern: PatternType, name: str) -> str:
    return f"{ACL_ROOTS[pattern]}/{resource_type.value}/{name}"


def encode_acls(acls: Iterable[Acl]) -> bytes:
    """Kafka's AclEntry.toJsonCompatibleMap: the entries of one resource pattern."""
    return json_bytes(
        {
            "version": 1,
            "acls": [
                {
                    "principal": a.principal,
                    "permissionType": "Allow" if a.allow else "Deny",
                    "operation": a.operation.value,
                    "host": a.host,
                }
                for a in acls
            ],
        }
    )


def decode_acls(
    data: bytes | None, resource_type: ResourceType, pattern: PatternType, name: str
) -> list[Acl]:
    out = []
    for entry in json_object(data).get("acls") or ():
        try:
            out.append(
                Acl(
                    entry["principal"],
                    Operation(entry["operation"]),
                    resource_type,
                    name,
                    pattern,
                    entry["host"],
                    entry["permissionType"] == "Allow",
                )
            )
        except (KeyError, ValueError, TypeError):
            log.warning(
                "ACL entry of %s/%s not understood, ignored: %r", resource_type, name, entry
            )
    return out


def encode_acl_change(resource_type: ResourceType, pattern: PatternType, name: str) -> bytes:
    """Literal: Kafka's legacy `TOPIC:name` string; others: ExtendedAclChangeEvent JSON."""
    if pattern == PatternType.LITERAL:
        return f"{_TYPE_NAMES[resource_type]}:{name}".encode()
    return json_bytes(
        {
            "version": 1,
            "resourceType": _TYPE_NAMES[resource_type],
            "name": name,
            "patternType": pattern.name,
        }
    )


# --- the shared parts -----------------------------------------------------------------------------


def _commit(zk: KazooClient, build: Callable[[object], bool], what: str) -> None:
    """Run `build(transaction)` (which reads, then adds versioned writes; False: nothing to do)
    and commit, again from a fresh read while another writer got in between."""
    for _ in range(MAX_ATTEMPTS):
        t = zk.transaction()
        if not build(t):
            return
        results = t.commit()
        failures = [r for r in results if isinstance(r, Exception)]
        if not failures:
            return
        if not any(isinstance(r, _CONFLICTS) for r in failures):
            raise failures[0]
    raise ConcurrentChangeError(f"{what}: changed concurrently {MAX_ATTEMPTS} times, not made")


def _retire(path: Path) -> None:
    """A data-dir store handed to ZooKeeper is renamed, so it is handed over once only."""
    try:
        os.replace(path, path.with_name(path.name + ".imported"))
    except OSError as exc:
        log.warning("cannot rename %s after importing it: %s", path, exc)


def purge_notifications(zk: KazooClient, path: str, expiration_ms: int) -> int:
    """Delete the change notifications under `path` older than `expiration_ms` (as Kafka's
    ZkNodeChangeNotificationListener does after a change); how many went."""
    now_ms = time.time() * 1000
    purged = 0
    try:
        for child in zk.get_children(path):
            try:
                stat = zk.exists(f"{path}/{child}")
                if stat is not None and now_ms - stat.ctime >= expiration_ms:
                    zk.delete(f"{path}/{child}")
                    purged += 1
            except NoNodeError:
                continue  # another broker purged it first
    except Exception as exc:  # the change itself is made: housekeeping waits for the next one
        log.warning("purging old change notifications under %s failed: %s", path, exc)
    return purged


class _NotificationWatch:
    """Calls `reload()` at start and whenever a change notification appears under any of
    `paths` (kazoo children watches; they re-register after a session loss)."""

    def __init__(self, zk: KazooClient, paths: Iterable[str], reload: Callable[[], None]) -> None:
        self.zk = zk
        self.paths = list(paths)
        self.reload = reload
        self._stopped = False
        self._seen: dict[str, set[str]] = {}  # the notifications seen, per path

    def start(self) -> None:
        for path in self.paths:
            self.zk.ensure_path(path)
        self.reload()
        for path in self.paths:
            ChildrenWatch(self.zk, path, lambda children, p=path: self._on_children(p, children))

    def _on_children(self, path: str, children: list[str]) -> bool | None:
        if self._stopped:
            return False
        seen = self._seen.get(path)
        self._seen[path] = set(children)
        if seen is not None and set(children) <= seen:
            return None  # notifications purged, none new
        try:
            self.reload()
        except Exception:
            log.exception("reloading after a change notification failed")
        return None

    def stop(self) -> None:
        self._stopped = True


# --- entity configs -------------------------------------------------------------------------------


class ZkEntityConfigs(EntityConfigs):
    """`EntityConfigs` of a cluster: ZooKeeper's /config/users and /config/clients, cached."""

    def __init__(
        self,
        zk: KazooClient,
        import_from: Path | None = None,
        change_expiration_ms: int = CHANGE_EXPIRATION_MS,
    ) -> None:
        super().__init__(None)
        self.zk = zk
        self.import_from = import_from
        self.change_expiration_ms = change_expiration_ms
        self._watch = _NotificationWatch(zk, [CONFIG_CHANGES], self.reload)

    def start(self) -> ZkEntityConfigs:
        """Load the cache and follow changes; hand over the data dir's settings ZooKeeper lacks."""
        self.zk.ensure_path(CONFIG_USERS)
        self.zk.ensure_path(CONFIG_CLIENTS)
        self._watch.start()
        if self.import_from is not None and self.import_from.exists():
            local = EntityConfigs(self.import_from).entities()
            current = self.entities()
            missing = {
                e: {k: v for k, v in c.items() if k not in current.get(e, {})}
                for e, c in local.items()
            }
            missing = {e: c for e, c in missing.items() if c}
            if missing:
                log.info("user/client settings of %s handed to ZooKeeper: %s", self.import_from,
                         ", ".join(str(e) for e in missing))  # fmt: skip
                self.alter(missing, only_absent=True)
            _retire(self.import_from)
        return self

    def stop(self) -> None:
        self._watch.stop()

    def reload(self) -> None:
        """Read every user and client entity again; tell the listeners when anything changed."""
        configs: dict[Entity, dict[str, str]] = {}
        for user in self._children(CONFIG_USERS):
            name = desanitize(user)
            base = f"{CONFIG_USERS}/{user}"
            self._read_into(configs, Entity(name), base)
            for client in self._children(f"{base}/clients"):
                self._read_into(
                    configs, Entity(name, desanitize(client)), f"{base}/clients/{client}"
                )
        for client in self._children(CONFIG_CLIENTS):
            self._read_into(configs, Entity(None, desanitize(client)), f"{CONFIG_CLIENTS}/{client}")
        with self._lock:
            changed = configs != self._configs
            self._configs = configs
            listeners = list(self._listeners)
        if changed:
            for callback in listeners:
                callback()

    def _children(self, path: str) -> list[str]:
        try:
            return self.zk.get_children(path)
        except NoNodeError:
            return []

    def _read_into(self, configs: dict, entity: Entity, path: str) -> None:
        try:
            data, _ = self.zk.get(path)
        except NoNodeError:
            return
        try:
            config = decode_entity_config(data)
        except ValueError:
            log.warning("%s: not Kafka's config JSON, ignored", path)
            return
        if config:
            configs[entity] = config

    def alter(
        self, changes: Mapping[Entity, Mapping[str, str | None]], only_absent: bool = False
    ) -> None:
        """Set (None: remove) keys of entities in one ZooKeeper transaction (each entity's znode
        at the version read, one change notification each); then the cache is read again.
        `only_absent`: keys an entity already has are left as they are."""

        def build(t) -> bool:
            any_change = False
            for entity, items in changes.items():
                path = f"/config/{entity_path(entity)}"
                try:
                    data, stat = self.zk.get(path)
                    config, version = decode_entity_config(data), stat.version
                except NoNodeError:
                    config, version = {}, -1
                new = dict(config)
                for key, value in items.items():
                    if only_absent and key in config:
                        continue
                    if value is None:
                        new.pop(key, None)
                    else:
                        new[key] = value
                if new == config:  # nothing to write (an absent entity stays absent)
                    continue
                if version == -1:
                    self.zk.ensure_path(path.rsplit("/", 1)[0])
                    t.create(path, encode_entity_config(new))
                else:
                    t.set_data(path, encode_entity_config(new), version)
                t.create(
                    f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}",
                    json_bytes({"version": 2, "entity_path": entity_path(entity)}),
                    sequence=True,
                )
                any_change = True
            return any_change

        _commit(self.zk, build, "user/client settings")
        self.reload()
        purge_notifications(self.zk, CONFIG_CHANGES, self.change_expiration_ms)


# --- ACLs -----------------------------------------------------------------------------------------


class ZkAclAuthorizer(AclAuthorizer):
    """`AclAuthorizer` of a cluster: bindings in /kafka-acl and /kafka-acl-extended, cached."""

    def __init__(
        self,
        zk: KazooClient,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
        import_from: Path | None = None,
        change_expiration_ms: int = CHANGE_EXPIRATION_MS,
    ) -> None:
        super().__init__((), super_users, allow_everyone_if_no_acl_found)
        self.zk = zk
        self.import_from = import_from
        self.change_expiration_ms = change_expiration_ms
        self._watch = _NotificationWatch(zk, ACL_CHANGES.values(), self.reload)

    def start(self) -> ZkAclAuthorizer:
        self._watch.start()
        if self.import_from is not None and self.import_from.exists():
            local = [a for a in read_acl_file(self.import_from) if a not in self.acls()]
            if local:
                log.info("%d ACLs of %s handed to ZooKeeper", len(local), self.import_from)
                self.add(*local)
            _retire(self.import_from)
        return self

    def stop(self) -> None:
        self._watch.stop()

    def reload(self) -> None:
        acls: list[Acl] = []
        for pattern, root in ACL_ROOTS.items():
            for type_name in self._children(root):
                try:
                    rtype = ResourceType(type_name)
                except ValueError:
                    continue  # a resource type rdmalog does not check (DelegationToken, User)
                for name in self._children(f"{root}/{type_name}"):
                    try:
                        data, _ = self.zk.get(f"{root}/{type_name}/{name}")
                        acls.extend(decode_acls(data, rtype, pattern, name))
                    except NoNodeError:
                        continue
                    except ValueError:
                        log.warning(
                            "%s/%s/%s: not Kafka's ACL JSON, ignored", root, type_name, name
                        )
        with self._lock:
            changed = set(acls) != set(self._acls)
            self._acls = acls
        if changed:
            self._changed()

    def _children(self, path: str) -> list[str]:
        try:
            return self.zk.get_children(path)
        except NoNodeError:
            return []

    def add(self, *acls: Acl) -> None:
        self._update(acls, ())

    def remove(self, *acls: Acl) -> None:
        self._update((), acls)

    def _update(self, added: Iterable[Acl], removed: Iterable[Acl]) -> None:
        """One transaction: each resource pattern's znode written at the version read (deleted
        when its last binding goes), with Kafka's change notification; then the cache reloads."""
        added, removed = list(added), list(removed)
        keys = list(dict.fromkeys((a.resource_type, a.pattern, a.name) for a in added + removed))
        for _, _, name in keys:
            if "/" in name or name in (".", ".."):  # not a znode name (Kafka's limit in ZK mode)
                raise InvalidRequestError(
                    f"A resource name cannot be stored in ZooKeeper: {name!r}"
                )

        def build(t) -> bool:
            any_change = False
            for rtype, pattern, name in keys:
                path = acl_path(rtype, pattern, name)
                try:
                    data, stat = self.zk.get(path)
                    current, version = decode_acls(data, rtype, pattern, name), stat.version
                except NoNodeError:
                    current, version = [], -1
                mine = [
                    a
                    for a in added
                    if (a.resource_type, a.pattern, a.name) == (rtype, pattern, name)
                ]
                new = [a for a in current if a not in removed] + [
                    a for a in dict.fromkeys(mine) if a not in current
                ]
                if new == current:
                    continue
                if version == -1:
                    self.zk.ensure_path(path.rsplit("/", 1)[0])
                    t.create(path, encode_acls(new))
                elif not new:
                    t.delete(path, version)
                else:
                    t.set_data(path, encode_acls(new), version)
                t.create(
                    f"{ACL_CHANGES[pattern]}/{ACL_CHANGE_PREFIX}",
                    encode_acl_change(rtype, pattern, name),
                    sequence=True,
                )
                any_change = True
            return any_change

        _commit(self.zk, build, "ACLs")
        self.reload()
        for path in ACL_CHANGES.values():
            purge_notifications(self.zk, path, self.change_expiration_ms)
