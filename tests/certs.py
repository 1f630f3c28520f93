"""Test certificates made at test time: a CA, a server certificate for 127.0.0.1/localhost,
a client certificate it signed, and a stranger's client certificate from another CA."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files."""

    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    stranger_cert: str
    stranger_key: str


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: str,
    issuer_key: ec.EllipticCurvePrivateKey,
    ca: bool = False,
    server: bool = False,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    elif not ca:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _write(
    directory: Path, name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> tuple[str, str]:
    cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(cert_path), str(key_path)


def make_pki(directory: Path) -> Pki:
    """Write the CA, server, client and stranger certificates under `directory`."""
    ca_key, other_key = (
        ec.generate_private_key(ec.SECP256R1()),
        ec.generate_private_key(ec.SECP256R1()),
    )
    ca = _cert("gpuprobe test CA", ca_key, "gpuprobe test CA", ca_key, ca=True)
    other_ca = _cert("stranger CA", other_key, "stranger CA", other_key, ca=True)
    ca_path, _ = _write(directory, "ca", ca, ca_key)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _write(
        directory,
        "server",
        _cert("agent", server_key, "gpuprobe test CA", ca_key, server=True),
        server_key,
    )
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _write(
        directory, "client", _cert("audit", client_key, "gpuprobe test CA", ca_key), client_key
    )
    stranger_key = ec.generate_private_key(ec.SECP256R1())
    stranger = _write(
        directory,
        "stranger",
        _cert("stranger", stranger_key, "stranger CA", other_key),
        stranger_key,
    )
    _write(directory, "stranger-ca", other_ca, other_key)
    return Pki(ca_path, *server, *client, *stranger)
