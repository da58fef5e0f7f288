"""spark-sql-kafka's security options, `kafka.security.protocol`, `kafka.sasl.*` and `kafka.ssl.*`
with the Java client's names, as the Kafka transport's client (confluent-kafka) takes them.

A job written for spark-sql-kafka sets, e.g.

    kafka.security.protocol=SASL_SSL
    kafka.sasl.mechanism=SCRAM-SHA-512
    kafka.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required
        username="alice" password="...";
    kafka.ssl.truststore.type=PEM
    kafka.ssl.truststore.location=/etc/kafka/ca.pem

`client_security(conf)` turns those into librdkafka's settings (`sasl.username`/`sasl.password`
from the JAAS entry, `ssl.ca.location`, `ssl.certificate.location`/`ssl.key.location`, ...); what
has no equivalent (JKS stores, GSSAPI's Kerberos options, login callback classes) raises
OptionError naming the option rather than connecting with less security.
"""

from __future__ import annotations

from rdmalog.security import jaas

_JAAS_MODULES = (jaas.PLAIN_MODULE, jaas.SCRAM_MODULE)
_UNSUPPORTED = (
    "sasl.login.callback.handler.class",
    "sasl.client.callback.handler.class",
    "sasl.kerberos.",
    "sasl.oauthbearer.",
    "ssl.engine.factory.class",
    "ssl.keymanager.algorithm",
    "ssl.trustmanager.algorithm",
    "ssl.secure.random.implementation",
)


class SecurityOptionError(ValueError):
    """A security option with no equivalent; the message names it."""


def client_security(conf: dict[str, str]) -> dict[str, str]:
    """`conf` (the `kafka.*` options without the prefix) with the Java client's security names
    turned into librdkafka's; other settings pass through unchanged."""
    out: dict[str, str] = {}
    store_types = {
        "keystore": conf.get("ssl.keystore.type", "PEM").upper(),
        "truststore": conf.get("ssl.truststore.type", "PEM").upper(),
    }
    for name, value in conf.items():
        option = f"kafka.{name}"
        if name.startswith(_UNSUPPORTED):
            raise SecurityOptionError(f"option '{option}' has no equivalent in the Kafka transport")
        if name in (
            "ssl.keystore.type",
            "ssl.truststore.type",
            "ssl.protocol",
            "ssl.enabled.protocols",
        ):
            continue  # read with the locations below / librdkafka negotiates TLS 1.2 and 1.3
        if name == "sasl.jaas.config":
            out.update(_jaas(option, value))
        elif name == "ssl.truststore.location":
            _pem(option, store_types["truststore"], "ssl.truststore.type")
            out["ssl.ca.location"] = value
        elif name == "ssl.truststore.certificates":
            out["ssl.ca.pem"] = value
        elif name == "ssl.keystore.location":
            if store_types["keystore"] == "PKCS12":
                out["ssl.keystore.location"] = value
            else:
                _pem(option, store_types["keystore"], "ssl.keystore.type")
                out["ssl.certificate.location"] = value  # one PEM file: chain and key
                out["ssl.key.location"] = value
        elif name == "ssl.keystore.password":
            out["ssl.keystore.password"] = value
        elif name == "ssl.keystore.certificate.chain":
            out["ssl.certificate.pem"] = value
        elif name == "ssl.keystore.key":
            out["ssl.key.pem"] = value
        elif name == "ssl.truststore.password":
            continue  # PEM trust stores have none
        elif name == "ssl.endpoint.identification.algorithm":
            out[name] = value or "none"  # Java's empty value turns host name checks off
        else:  # the same name in both, or librdkafka's own (ssl.ca.location, sasl.username)
            out[name] = value
    return out


def _pem(option: str, kind: str, type_option: str) -> None:
    if kind != "PEM":
        raise SecurityOptionError(
            f"option '{option}': kafka.{type_option}={kind} is not readable by the Kafka transport; "
            "give PEM files (kafka.ssl.truststore.type=PEM / kafka.ssl.keystore.type=PEM)"
        )


def _jaas(option: str, text: str) -> dict[str, str]:
    try:
        entries = jaas.parse(text)
    except ValueError as exc:
        raise SecurityOptionError(f"option '{option}': cannot read the JAAS entry: {exc}") from None
    for entry in entries:
        if entry.module in _JAAS_MODULES:
            user, password = entry.options.get("username"), entry.options.get("password")
            if user is None or password is None:
                raise SecurityOptionError(f"option '{option}': username and password are needed")
            return {"sasl.username": user, "sasl.password": password}
    raise SecurityOptionError(
        f"option '{option}': only {', '.join(_JAAS_MODULES)} are supported by the Kafka transport"
    )
