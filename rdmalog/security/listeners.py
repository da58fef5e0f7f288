"""The broker's listeners and what each one serves, from Kafka's keys: `listeners`,
`advertised.listeners`, `listener.security.protocol.map`, `inter.broker.listener.name` /
`security.inter.broker.protocol`, and per listener (`listener.name.<listener>.<key>` over the
broker-wide key) its TLS settings and SASL mechanisms.

`listener_specs(config)` checks the listener keys as Kafka does; `secure(config, spec, ...)` builds
what a listener needs at run time (TLS context, SASL mechanisms with their users). Both fail closed:
a protocol or mechanism that is not built, a missing key file or an unreadable JAAS entry raises
InvalidConfigError naming the key, and the broker does not start.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass, field
from typing import Any

from rdmalog.config import SECURITY_PROTOCOLS, BrokerConfig
from rdmalog.config_text import parse_listeners
from rdmalog.errors import InvalidConfigError
from rdmalog.security import jaas
from rdmalog.security.tls import PrincipalMapper, server_context

log = logging.getLogger(__name__)

SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")  # what rdmalog serves


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    """One listener: its name, security protocol, bind address and advertised address (None:
    the bound one)."""

    name: str
    protocol: str
    host: str
    port: int
    advertised_host: str | None = None
    advertised_port: int | None = None

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")


def protocol_map(config: BrokerConfig) -> dict[str, str]:
    """`listener.security.protocol.map` as {listener name: security protocol}."""
    out: dict[str, str] = {}
    for item in (config.get("listener.security.protocol.map") or "").split(","):
        if not item.strip():
            continue
        name, sep, protocol = item.strip().partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name or protocol not in SECURITY_PROTOCOLS:
            raise InvalidConfigError(
                f"listener.security.protocol.map: {item.strip()!r} is not LISTENER:PROTOCOL with "
                f"a protocol of {', '.join(SECURITY_PROTOCOLS)}"
            )
        if name in out:
            raise InvalidConfigError(f"listener.security.protocol.map names {name} twice")
        out[name] = protocol
    return out


def listener_specs(config: BrokerConfig) -> list[ListenerSpec]:
    """The listeners, checked as Kafka checks them (unique names and ports, a protocol for each,
    advertised listeners among them)."""
    protocols = protocol_map(config)
    bound = parse_listeners(config.get("listeners"))
    names = [b.name for b in bound]
    for listener in bound:
        if names.count(listener.name) > 1:
            raise InvalidConfigError(
                f"listeners: each listener must have a different name: {listener.name}"
            )
        if listener.port and [b.port for b in bound].count(listener.port) > 1:
            raise InvalidConfigError(
                f"listeners: each listener must have a different port: {listener.port}"
            )
        if listener.name not in protocols:
            raise InvalidConfigError(
                f"listeners: no security protocol defined for listener {listener.name} "
                "(add it to listener.security.protocol.map)"
            )
    advertised = {}
    if config.get("advertised.listeners"):
        for adv in parse_listeners(config.get("advertised.listeners")):
            if adv.name not in names:
                raise InvalidConfigError(
                    f"advertised.listeners: {adv.name} is not among the listeners "
                    f"({', '.join(names)})"
                )
            advertised[adv.name] = adv
    specs = []
    for b in bound:
        adv = advertised.get(b.name)
        specs.append(
            ListenerSpec(
                b.name,
                protocols[b.name],
                b.host,
                b.port,
                (adv.host or None) if adv else None,
                (adv.port or None) if adv else None,
            )
        )
    inter_broker_listener(config, specs)
    return specs


def inter_broker_listener(config: BrokerConfig, specs: list[ListenerSpec] | None = None) -> str:
    """The listener brokers talk to each other on (`inter.broker.listener.name`, or the one named
    like `security.inter.broker.protocol`, PLAINTEXT by default). In cluster mode it must be one
    of this broker's listeners."""
    name = config.get("inter.broker.listener.name")
    protocol = config.get("security.inter.broker.protocol")
    if name and protocol:
        raise InvalidConfigError(
            "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set."
        )
    chosen = (name or protocol or "PLAINTEXT").upper()
    if name and chosen not in protocol_map(config):
        raise InvalidConfigError(
            f"inter.broker.listener.name={name}: not in listener.security.protocol.map"
        )
    if specs is not None and config.get("zookeeper.connect"):
        if chosen not in {s.name for s in specs}:
            key = "inter.broker.listener.name" if name else "security.inter.broker.protocol"
            raise InvalidConfigError(
                f"{key}: {chosen} must be a listener name defined in advertised.listeners"
            )
    return chosen


class ListenerSettings:
    """The broker config as one listener sees it (`tls.Settings`)."""

    def __init__(self, config: BrokerConfig, listener: str) -> None:
        self.config = config
        self.listener = listener.lower()

    def get(self, name: str) -> Any:
        return self.config.for_listener(self.listener, name)

    def key(self, name: str) -> str:
        """The key as to name it in a message: with the listener prefix when set there."""
        if self.config.set_for_listener(self.listener, name):
            return f"listener.name.{self.listener}.{name}"
        return name


@dataclass
class ListenerSecurity:
    """What one listener serves: its TLS context (SSL, SASL_SSL), its SASL mechanisms and PLAIN's
    users (SASL_*), how SSL principals are named, and the session lifetime (KIP-368)."""

    spec: ListenerSpec
    ssl_context: ssl.SSLContext | None = None
    mechanisms: tuple[str, ...] = ()
    plain_users: dict[str, str] = field(default_factory=dict)
    principal_mapper: PrincipalMapper | None = None
    max_receive: int = 524288  # sasl.server.max.receive.size
    reauth_ms: int = 0  # connections.max.reauth.ms (0: sessions do not expire)

    @property
    def name(self) -> str:
        return self.spec.name


def secure(config: BrokerConfig, spec: ListenerSpec) -> ListenerSecurity:
    """Build what `spec` needs to serve its protocol, or raise InvalidConfigError naming the key."""
    settings = ListenerSettings(config, spec.name)
    out = ListenerSecurity(spec)
    if spec.tls:
        try:
            out.ssl_context = server_context(settings)
        except InvalidConfigError as exc:
            raise InvalidConfigError(f"listener {spec.name} ({spec.protocol}): {exc}") from None
        out.principal_mapper = PrincipalMapper(
            settings.get("ssl.principal.mapping.rules"), settings.key("ssl.principal.mapping.rules")
        )
    if spec.sasl:
        out.mechanisms = _mechanisms(settings, spec)
        out.max_receive = settings.get("sasl.server.max.receive.size")
        out.reauth_ms = settings.get("connections.max.reauth.ms")
        for mechanism in out.mechanisms:
            entries = _jaas(settings, spec, mechanism)
            if mechanism == "PLAIN":
                out.plain_users = jaas.plain_users(entries)
                if not out.plain_users:
                    log.warning(
                        "listener %s: PLAIN has no users (no user_<name> options): no client can "
                        "authenticate with it",
                        spec.name,
                    )
    return out


def _mechanisms(settings: ListenerSettings, spec: ListenerSpec) -> tuple[str, ...]:
    key = settings.key("sasl.enabled.mechanisms")
    names = [m.strip().upper() for m in settings.get("sasl.enabled.mechanisms") or []]
    if not names:
        raise InvalidConfigError(
            f"{key} is empty: listener {spec.name} ({spec.protocol}) needs one"
        )
    missing = [m for m in names if m not in SASL_MECHANISMS]
    if missing:
        raise InvalidConfigError(
            f"{key}={','.join(names)} on listener {spec.name} ({spec.protocol}): "
            f"{', '.join(missing)} is not built into rdmalog (it serves {', '.join(SASL_MECHANISMS)})"
            + ("; Kafka's default is GSSAPI, so set the key" if "GSSAPI" in missing else "")
        )
    return tuple(dict.fromkeys(names))


def _jaas(settings: ListenerSettings, spec: ListenerSpec, mechanism: str) -> list[jaas.LoginModule]:
    """The JAAS entries of a mechanism on a listener: `listener.name.<l>.<mechanism>.sasl.jaas.config`,
    else `sasl.jaas.config`. PLAIN needs one (its users are there); SCRAM's is optional."""
    scoped = f"{mechanism.lower()}.sasl.jaas.config"
    key = f"listener.name.{settings.listener}.{scoped}"
    text = settings.get(scoped)
    if text is None:
        text, key = settings.config.get("sasl.jaas.config"), "sasl.jaas.config"
    if text is None:
        if mechanism == "PLAIN":
            raise InvalidConfigError(
                f"listener.name.{settings.listener}.{scoped} is not set: PLAIN on listener "
                f"{spec.name} takes its users from a PlainLoginModule entry there"
            )
        return []
    try:
        entries = jaas.parse(text)
        if mechanism == "PLAIN":
            jaas.plain_users(entries)
    except ValueError as exc:
        raise InvalidConfigError(f"{key}: cannot read the JAAS entry: {exc}") from None
    return entries
