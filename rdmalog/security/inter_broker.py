"""How this broker connects to the other brokers' inter-broker listener (follower fetches in cluster
mode), from Kafka's keys: the listener named by `inter.broker.listener.name` (or
`security.inter.broker.protocol`), its TLS settings as a client (the trust store checks the other
broker, the key store is this broker's certificate for `ssl.client.auth`), and for SASL
`sasl.mechanism.inter.broker.protocol` with the `username`/`password` of that mechanism's JAAS entry
(`listener.name.<listener>.<mechanism>.sasl.jaas.config`), as Kafka's brokers log in to each other.

`client_security(config)` fails closed like the listeners do: a mechanism that is not built or a
JAAS entry without credentials raises InvalidConfigError naming the key. `authenticate(request,
security)` runs SaslHandshake v1 and SaslAuthenticate v2 over any `request(api_key, version, body)
-> response` call (the cluster's Kafka-protocol client).
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from rdmalog.config import BrokerConfig
from rdmalog.errors import InvalidConfigError
from rdmalog.security import jaas
from rdmalog.security.listeners import (
    SASL_MECHANISMS,
    ListenerSettings,
    inter_broker_listener,
    protocol_map,
)
from rdmalog.security.sasl import AuthenticationError, SaslClient


@dataclass(frozen=True)
class ClientSecurity:
    """What a connection to another broker's inter-broker listener needs."""

    listener: str
    protocol: str
    ssl_context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None


def client_security(config: BrokerConfig) -> ClientSecurity:
    """The inter-broker listener's client side; InvalidConfigError names what is missing."""
    listener = inter_broker_listener(config)
    protocol = protocol_map(config).get(listener, "PLAINTEXT")
    settings = ListenerSettings(config, listener)
    context = _tls_client(settings) if protocol in ("SSL", "SASL_SSL") else None
    if not protocol.startswith("SASL_"):
        return ClientSecurity(listener, protocol, context)
    key = "sasl.mechanism.inter.broker.protocol"
    mechanism = (config.get(key) or "").upper()
    if mechanism not in SASL_MECHANISMS:
        raise InvalidConfigError(
            f"{key}={mechanism}: not built into rdmalog (it serves {', '.join(SASL_MECHANISMS)})"
        )
    scoped = f"{mechanism.lower()}.sasl.jaas.config"
    jaas_key = f"listener.name.{listener.lower()}.{scoped}"
    text = settings.get(scoped) or config.get("sasl.jaas.config")
    try:
        entries = jaas.parse(text or "")
    except ValueError as exc:
        raise InvalidConfigError(
            f"{jaas_key}: the inter-broker login ({mechanism}) needs a JAAS entry with username and "
            f"password: {exc}"
        ) from None
    options = next((e.options for e in entries if "username" in e.options), {})
    if "username" not in options or "password" not in options:
        raise InvalidConfigError(f"{jaas_key}: no username and password for the inter-broker login")
    return ClientSecurity(
        listener, protocol, context, mechanism, options["username"], options["password"]
    )


def _tls_client(settings: ListenerSettings) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    location = settings.get("ssl.truststore.location")
    certificates = settings.get("ssl.truststore.certificates")
    try:
        if location:
            context.load_verify_locations(cafile=location)
        elif certificates:
            context.load_verify_locations(cadata=certificates)
        keystore = settings.get("ssl.keystore.location")
        if keystore:
            password = settings.get("ssl.key.password")
            context.load_cert_chain(keystore, password=lambda: password or "")
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise InvalidConfigError(
            f"{settings.key('ssl.truststore.location')}: the inter-broker TLS client cannot load "
            f"its certificates: {exc}"
        ) from None
    if not settings.get("ssl.endpoint.identification.algorithm"):
        context.check_hostname = False  # Kafka's empty value turns host name checks off
    return context


Request = Callable[[int, int, dict], Awaitable[dict]]


async def authenticate(request: Request, security: ClientSecurity) -> None:
    """Log in to another broker on a fresh connection (nothing to do without SASL);
    AuthenticationError when it refuses."""
    if security.mechanism is None:
        return
    answer = await request(17, 1, {"mechanism": security.mechanism})
    if answer["error_code"]:
        raise AuthenticationError(
            f"{security.mechanism} refused by the other broker (error {answer['error_code']}; it "
            f"offers {answer.get('mechanisms')})"
        )
    client = SaslClient(security.mechanism, security.username or "", security.password or "")
    token: bytes | None = client.first()
    while token is not None:
        answer = await request(36, 2, {"auth_bytes": token})
        if answer["error_code"]:
            raise AuthenticationError(answer.get("error_message") or "authentication failed")
        token = client.step(bytes(answer["auth_bytes"]))
