"""Test certificates made at test time with `cryptography`: a CA, a broker certificate for
127.0.0.1/localhost, and client certificates (for mTLS), as PEM files Kafka's PEM key stores take."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass
class Issued:
    cert: Path  # the certificate (and the CA's after it)
    key: Path  # the private key (PKCS#8, encrypted when a password was given)
    keystore: Path  # key then certificate chain: one file for ssl.keystore.location
    password: str | None


class TestCA:
    """A throwaway certificate authority in `directory`."""

    def __init__(self, directory: Path, name: str = "rdmalog test CA") -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.pem = self.dir / "ca.pem"
        self.pem.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        self,
        name: str,
        subject: list[tuple] | None = None,
        server: bool = False,
        password: str | None = None,
    ) -> Issued:
        """A certificate for `name` (CN), or for the given subject attributes (OID, value)."""
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = subject or [(NameOID.COMMON_NAME, name)]
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(o, v) for o, v in attrs]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
        )
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
        cert = builder.sign(self.key, hashes.SHA256())
        encryption = (
            serialization.BestAvailableEncryption(password.encode())
            if password
            else serialization.NoEncryption()
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
        )
        chain = cert.public_bytes(serialization.Encoding.PEM) + self.pem.read_bytes()
        out = Issued(
            self.dir / f"{name}.crt", self.dir / f"{name}.key", self.dir / f"{name}.pem", password
        )
        out.cert.write_bytes(chain)
        out.key.write_bytes(key_pem)
        out.keystore.write_bytes(key_pem + chain)
        return out
