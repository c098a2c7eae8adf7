"""Throwaway certificates for TLS tests: a CA, a server certificate for 127.0.0.1, client certificates.

Made with `cryptography` (a dev dependency) at test time, so no key material is committed and
nothing expires in the repository. EC P-256 keys: fast to generate, accepted by Go and OpenSSL.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

import bcrypt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pair:
    """A certificate and its key, as PEM files."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    """The files of one throwaway PKI: `ca` signs `server` and `client`; `stranger` has its own CA."""

    ca: Path
    server: Pair
    client: Pair
    stranger: Pair
    """A client certificate signed by another CA: must be refused."""


CA_KEY_USAGE = x509.KeyUsage(
    digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
    key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False,
)  # fmt: skip
"""A CA signs certificates (and CRLs); Go and OpenSSL check KeyUsage on a CA that has one."""


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(path: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey | None = None) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if key is not None:
        key_path = path.with_suffix(".key")
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
    return path


def _ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(CA_KEY_USAGE, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    cn: str,
    sans: list[x509.GeneralName],
    usage: x509.ObjectIdentifier,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    ca_cert, ca_key = ca
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()),  # type: ignore[arg-type]
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def make_pki(directory: Path, client_sans: tuple[str, ...] = ("scraper.example",)) -> Pki:
    """Write a CA, a server certificate for 127.0.0.1/localhost and two client certificates into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = _ca("gpuhealth test CA")
    server = _leaf(
        ca,
        "gpuhealth collector",
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
        ExtendedKeyUsageOID.SERVER_AUTH,
    )
    client = _leaf(ca, "prometheus", [x509.DNSName(s) for s in client_sans], ExtendedKeyUsageOID.CLIENT_AUTH)
    stranger = _leaf(_ca("another CA"), "stranger", [x509.DNSName("stranger.example")], ExtendedKeyUsageOID.CLIENT_AUTH)
    return Pki(
        ca=_write(directory / "ca.crt", ca[0]),
        server=Pair(_write(directory / "server.crt", *server), directory / "server.key"),
        client=Pair(_write(directory / "client.crt", *client), directory / "client.key"),
        stranger=Pair(_write(directory / "stranger.crt", *stranger), directory / "stranger.key"),
    )


def bcrypt_hash(password: str, cost: int = 4) -> str:
    """A bcrypt hash as htpasswd writes it ($2y$), at bcrypt's lowest cost so tests stay fast."""
    return "$2y$" + bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=cost)).decode()[4:]
