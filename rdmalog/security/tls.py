"""TLS for the SSL and SASL_SSL listeners, configured as Kafka configures it, from PEM files.

`server_context(settings)` builds an `ssl.SSLContext` from Kafka's keys (`ssl.keystore.type=PEM`,
`ssl.keystore.location` or `ssl.keystore.certificate.chain` + `ssl.keystore.key`,
`ssl.key.password`, `ssl.truststore.*`, `ssl.client.auth`, `ssl.enabled.protocols`,
`ssl.cipher.suites`); anything it cannot honour raises InvalidConfigError naming the key, so a
broker never serves weaker TLS than configured. `principal_name(peer_cert, rules)` is the SSL
principal Kafka derives from a client certificate: the subject's RFC 2253 name, mapped by
`ssl.principal.mapping.rules`.
"""

from __future__ import annotations

import contextlib
import os
import re
import ssl
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from rdmalog.errors import InvalidConfigError

_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
_CLIENT_AUTH = {
    "required": ssl.CERT_REQUIRED,
    "requested": ssl.CERT_OPTIONAL,
    "none": ssl.CERT_NONE,
}
# TLS 1.3 suites: OpenSSL enables all of these and Python's ssl module cannot narrow them.
_TLS13_SUITES = frozenset(
    {"TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_GCM_SHA256"}
)


class Settings(Protocol):
    """A listener's view of the broker config: `get(key)` the value, `key(name)` the key as the
    operator wrote it (with its `listener.name.<listener>.` prefix when set there)."""

    def get(self, name: str) -> Any: ...

    def key(self, name: str) -> str: ...


def server_context(settings: Settings) -> ssl.SSLContext:
    """The server side TLS context of one listener; InvalidConfigError names what is wrong."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _load_keystore(ctx, settings)
    _load_truststore(ctx, settings)
    ctx.verify_mode = _CLIENT_AUTH[settings.get("ssl.client.auth")]
    _set_protocols(ctx, settings)
    _set_ciphers(ctx, settings)
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    return ctx


def _pem_only(settings: Settings, type_key: str) -> None:
    kind = (settings.get(type_key) or "").upper()
    if kind != "PEM":
        raise InvalidConfigError(
            f"{settings.key(type_key)}={kind or '(unset)'}: rdmalog reads PEM key and trust "
            f"stores only; set {settings.key(type_key)}=PEM and give PEM files "
            "(convert JKS/PKCS12 with keytool and openssl)"
        )


def _load_keystore(ctx: ssl.SSLContext, settings: Settings) -> None:
    location = settings.get("ssl.keystore.location")
    key = settings.get("ssl.keystore.key")
    chain = settings.get("ssl.keystore.certificate.chain")
    if location and (key or chain):
        raise InvalidConfigError(
            f"both {settings.key('ssl.keystore.location')} and "
            f"{settings.key('ssl.keystore.key')}/{settings.key('ssl.keystore.certificate.chain')} "
            "are set: give the key store one way"
        )
    if not location and not (key and chain):
        missing = "ssl.keystore.certificate.chain" if key else "ssl.keystore.key" if chain else None
        what = settings.key(missing) if missing else settings.key("ssl.keystore.location")
        raise InvalidConfigError(f"{what} is not set: a TLS listener needs its key and certificate")
    _pem_only(settings, "ssl.keystore.type")
    if settings.get("ssl.keystore.password"):
        raise InvalidConfigError(
            f"{settings.key('ssl.keystore.password')}: PEM key stores take no store password; "
            f"an encrypted key's password is {settings.key('ssl.key.password')}"
        )
    password = settings.get("ssl.key.password")
    if location:
        path = Path(location)
        _readable(path, settings.key("ssl.keystore.location"))
        _load_chain(ctx, str(path), password, settings, settings.key("ssl.keystore.location"))
        return
    with _private_file(chain.strip() + "\n" + key.strip() + "\n") as path:
        _load_chain(ctx, path, password, settings, settings.key("ssl.keystore.key"))


def _load_chain(
    ctx: ssl.SSLContext, path: str, password: str | None, settings: Settings, what: str
) -> None:
    try:
        # a callable: an encrypted key without a password fails instead of prompting on a tty
        ctx.load_cert_chain(path, password=lambda: password or "")
    except ssl.SSLError as exc:
        hint = f" (is {settings.key('ssl.key.password')} right?)" if "PEM" in str(exc) else ""
        raise InvalidConfigError(
            f"{what}: cannot load the key and certificates: {exc}{hint}"
        ) from None


def _load_truststore(ctx: ssl.SSLContext, settings: Settings) -> None:
    location = settings.get("ssl.truststore.location")
    certificates = settings.get("ssl.truststore.certificates")
    if location and certificates:
        raise InvalidConfigError(
            f"both {settings.key('ssl.truststore.location')} and "
            f"{settings.key('ssl.truststore.certificates')} are set"
        )
    if not location and not certificates:
        if settings.get("ssl.client.auth") != "none":
            raise InvalidConfigError(
                f"{settings.key('ssl.client.auth')}={settings.get('ssl.client.auth')} needs the "
                f"certificates client certificates are checked against: set "
                f"{settings.key('ssl.truststore.location')} (PEM)"
            )
        return
    _pem_only(settings, "ssl.truststore.type")
    if settings.get("ssl.truststore.password"):
        raise InvalidConfigError(
            f"{settings.key('ssl.truststore.password')}: PEM trust stores take no password"
        )
    try:
        if location:
            _readable(Path(location), settings.key("ssl.truststore.location"))
            ctx.load_verify_locations(cafile=location)
        else:
            ctx.load_verify_locations(cadata=certificates)
    except (ssl.SSLError, ValueError) as exc:
        what = settings.key(
            "ssl.truststore.location" if location else "ssl.truststore.certificates"
        )
        raise InvalidConfigError(f"{what}: no certificates could be read: {exc}") from None


def _readable(path: Path, key: str) -> None:
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise InvalidConfigError(f"{key}={path}: cannot read it: {exc.strerror or exc}") from None


@contextlib.contextmanager
def _private_file(text: str) -> Iterator[str]:
    """A file only this user can read holding `text`, removed afterwards (ssl loads keys from
    files only)."""
    fd, path = tempfile.mkstemp(prefix="rdmalog-key-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        yield path
    finally:
        os.unlink(path)


def _set_protocols(ctx: ssl.SSLContext, settings: Settings) -> None:
    names = settings.get("ssl.enabled.protocols") or []
    unknown = [n for n in names if n not in _VERSIONS]
    if unknown or not names:
        raise InvalidConfigError(
            f"{settings.key('ssl.enabled.protocols')}={','.join(names)}: expected some of "
            f"{', '.join(_VERSIONS)}"
        )
    versions = sorted(_VERSIONS[n] for n in names)
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]


def _set_ciphers(ctx: ssl.SSLContext, settings: Settings) -> None:
    suites = settings.get("ssl.cipher.suites") or []
    if not suites:
        return
    key = settings.key("ssl.cipher.suites")
    tls13 = [s for s in suites if s in _TLS13_SUITES]
    if tls13 and len(tls13) < len(_TLS13_SUITES) and ctx.maximum_version >= ssl.TLSVersion.TLSv1_3:
        raise InvalidConfigError(
            f"{key}: TLS 1.3 suites cannot be narrowed here (Python's ssl module offers all of "
            f"{', '.join(sorted(_TLS13_SUITES))}); list all of them or leave TLSv1.3 out of "
            f"{settings.key('ssl.enabled.protocols')}"
        )
    older = [openssl_cipher_name(s) for s in suites if s not in _TLS13_SUITES]
    if not older:
        return
    try:
        ctx.set_ciphers(":".join(older))
    except ssl.SSLError:
        raise InvalidConfigError(f"{key}: none of {', '.join(suites)} is available") from None
    known = {c["name"] for c in ctx.get_ciphers()}
    missing = [s for s, o in zip(suites, older, strict=False) if o not in known]
    if missing:
        raise InvalidConfigError(f"{key}: not available in this OpenSSL: {', '.join(missing)}")


_IANA_KX = {"RSA": "", "ECDHE_RSA": "ECDHE-RSA", "ECDHE_ECDSA": "ECDHE-ECDSA", "DHE_RSA": "DHE-RSA"}


def openssl_cipher_name(name: str) -> str:
    """An IANA (Java) TLS 1.2 suite name as OpenSSL spells it (OpenSSL names pass through):
    TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 -> ECDHE-RSA-AES128-GCM-SHA256."""
    m = re.fullmatch(
        r"TLS_(\w+?)_WITH_(AES_(128|256)_(GCM|CBC)_(SHA\d*)|CHACHA20_POLY1305_SHA256)", name
    )
    if m is None or m.group(1) not in _IANA_KX:
        return name
    kx = _IANA_KX[m.group(1)]
    if m.group(2).startswith("CHACHA20"):
        cipher = "CHACHA20-POLY1305"
    elif m.group(4) == "GCM":
        cipher = f"AES{m.group(3)}-GCM-{m.group(5)}"
    else:
        cipher = f"AES{m.group(3)}-{m.group(5)}"
    return f"{kx}-{cipher}" if kx else cipher


# --- the SSL principal ----------------------------------------------------------------------------

# RFC 2253's attribute keywords; other attributes are written as OID=#hex, as Java's X500Principal does
_RFC2253_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
_OIDS = {"emailAddress": ("1.2.840.113549.1.9.1", 0x16)}  # IA5String


def subject_name(cert: dict) -> str:
    """The certificate subject as Java's `X500Principal.getName()` writes it (RFC 2253: the last
    RDN first, escaped)."""
    rdns = []
    for rdn in reversed(cert.get("subject", ())):
        avas = []
        for attr, value in rdn:
            keyword = _RFC2253_KEYWORDS.get(attr)
            if keyword is not None:
                avas.append(f"{keyword}={_escape(value)}")
            elif attr in _OIDS:
                oid, tag = _OIDS[attr]
                raw = value.encode()
                avas.append(f"{oid}=#{tag:02x}{len(raw):02x}{raw.hex()}")
            else:
                avas.append(f"{attr}={_escape(value)}")
        rdns.append("+".join(avas))
    return ",".join(rdns)


def _escape(value: str) -> str:
    out = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


class PrincipalMapper:
    """Kafka's `ssl.principal.mapping.rules`: `DEFAULT` (the name as is) and
    `RULE:pattern/replacement/[LU]` rules, the first that matches wins."""

    _RULE = re.compile(r"\s*(DEFAULT|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?))\s*(,|$)")

    def __init__(self, rules: str, key: str = "ssl.principal.mapping.rules") -> None:
        self.rules: list[tuple[re.Pattern[str], str, str] | None] = []
        pos, text = 0, (rules or "DEFAULT").strip()
        while pos < len(text):
            m = self._RULE.match(text, pos)
            if m is None or m.end() == pos:
                raise InvalidConfigError(f"{key}: cannot parse the rule at {text[pos:]!r}")
            if m.group(1) == "DEFAULT":
                self.rules.append(None)
            else:
                try:
                    pattern = re.compile(m.group(2))
                except re.error as exc:
                    raise InvalidConfigError(f"{key}: bad pattern {m.group(2)!r}: {exc}") from None
                replacement = re.sub(r"\$(\d+)", r"\\g<\1>", m.group(3))
                self.rules.append((pattern, replacement, m.group(4)))
            pos = m.end()

    def name(self, distinguished_name: str) -> str | None:
        """The principal name for a subject, None when no rule applies (Kafka then refuses the
        connection)."""
        for rule in self.rules:
            if rule is None:
                return distinguished_name
            pattern, replacement, case = rule
            if pattern.fullmatch(distinguished_name):
                out = pattern.sub(replacement, distinguished_name)
                return out.lower() if case == "L" else out.upper() if case == "U" else out
        return None
