"""Client certificates with the names a test needs, signed by a trustme CA: trustme issues
no URI name, no second common name and no name with a NUL byte in it."""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from pathlib import Path

import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, ExtensionOID, NameOID

AltName = x509.DNSName | x509.UniformResourceIdentifier | x509.RFC822Name | x509.IPAddress


def alt_names(*names: str) -> list[AltName]:
    """Subject alternative names: ``dns:``, ``uri:``, ``email:`` or ``ip:`` and the value."""
    made: list[AltName] = []
    for name in names:
        kind, _, value = name.partition(":")
        if kind == "dns":
            made.append(x509.DNSName(value))
        elif kind == "uri":
            made.append(x509.UniformResourceIdentifier(value))
        elif kind == "email":
            made.append(x509.RFC822Name(value))
        else:
            made.append(x509.IPAddress(ipaddress.ip_address(value)))
    return made


def with_edi_party_name(dns_name: str) -> x509.UnrecognizedExtension:
    """A subject alternative name extension holding ``dns_name`` and an ediPartyName, which
    OpenSSL accepts and ``cryptography`` cannot read (nor write: the DER is put together
    here). Pass it as ``alternative``."""
    encoded = dns_name.encode()
    names = b"\x82" + bytes([len(encoded)]) + encoded + bytes.fromhex("a505a1030c0178")
    return x509.UnrecognizedExtension(
        ExtensionOID.SUBJECT_ALTERNATIVE_NAME, b"\x30" + bytes([len(names)]) + names
    )


def client_certificate(
    ca: trustme.CA,
    common_names: Sequence[str] = (),
    alternative: Sequence[AltName] | x509.UnrecognizedExtension = (),
) -> tuple[bytes, bytes]:
    """A client certificate signed by ``ca`` and its key, both PEM: its subject has these
    common names in this order, and these subject alternative names (or that extension)."""
    ca_key = serialization.load_pem_private_key(ca.private_key_pem.bytes(), password=None)
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem.bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn) for cn in common_names])
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    )
    if isinstance(alternative, x509.UnrecognizedExtension):
        builder = builder.add_extension(alternative, critical=False)
    elif alternative:
        builder = builder.add_extension(x509.SubjectAlternativeName(alternative), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def write_client_certificate(
    ca: trustme.CA,
    cert_path: Path,
    key_path: Path,
    common_names: Sequence[str] = (),
    alternative: Sequence[AltName] | x509.UnrecognizedExtension = (),
) -> None:
    cert, key = client_certificate(ca, common_names, alternative)
    cert_path.write_bytes(cert)
    key_path.write_bytes(key)


def ca_certificate(
    name: str, not_after: datetime.datetime, not_before: datetime.datetime | None = None
) -> bytes:
    """A self-signed CA certificate (PEM) named ``name`` valid from ``not_before`` (default:
    a year before ``not_after``) to ``not_after``: trustme's CAs all expire in the year 3000."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before or not_after - datetime.timedelta(days=365))
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def not_after(pem: bytes) -> float:
    """The notAfter of the first certificate in ``pem``, Unix seconds, as ``cryptography``
    reads it."""
    return x509.load_pem_x509_certificate(pem).not_valid_after_utc.timestamp()


def not_before(pem: bytes) -> float:
    """The notBefore of the first certificate in ``pem``, Unix seconds, as ``cryptography``
    reads it."""
    return x509.load_pem_x509_certificate(pem).not_valid_before_utc.timestamp()


def install_certificate(
    ca: trustme.CA,
    cert_path: Path,
    key_path: Path,
    *,
    key: bool = True,
    not_before: datetime.datetime | None = None,
    not_after: datetime.datetime | None = None,
) -> None:
    """Put a new certificate (and, with ``key``, its key) for 127.0.0.1 in place as a
    rotation does: written beside, then renamed over the served files."""
    issued = ca.issue_cert("127.0.0.1", "localhost", not_before=not_before, not_after=not_after)
    staged_cert, staged_key = cert_path.with_suffix(".new"), key_path.with_suffix(".new")
    for pem in issued.cert_chain_pems:
        pem.write_to_path(str(staged_cert), append=True)
    os.replace(staged_cert, cert_path)
    if key:
        issued.private_key_pem.write_to_path(str(staged_key))
        os.replace(staged_key, key_path)
