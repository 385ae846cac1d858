"""Whether a client certificate still verifies against the client CAs served
(``toolwatch.client_ca``): certificates made at run time, judged at an injected time."""

from __future__ import annotations

import base64
import datetime
from pathlib import Path

import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from toolwatch.client_ca import ClientCas, PeerCertificate
from toolwatch.config import TlsSettings
from toolwatch.model import ManualClock
from toolwatch.tls import CertificateFiles

NOW = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
DAY = datetime.timedelta(days=1)
Key = ec.EllipticCurvePrivateKey


def _certificate(
    subject: str,
    key: Key,
    issuer: tuple[str, Key] | None = None,
    *,
    ca: bool | None = True,
    not_before: datetime.datetime = NOW - DAY,
    not_after: datetime.datetime = NOW + DAY,
) -> x509.Certificate:
    """A certificate for ``subject``'s ``key``, signed by ``issuer`` (name, key; itself when
    ``None``), with basicConstraints saying ``ca`` (none when ``None``)."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    issuer_name, issuer_key = issuer or (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_name)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
    )
    if ca is not None:
        builder = builder.add_extension(x509.BasicConstraints(ca, None), critical=True)
    return builder.sign(issuer_key, hashes.SHA256())


def _key() -> Key:
    return ec.generate_private_key(ec.SECP256R1())


def _cas(*certificates: x509.Certificate) -> ClientCas:
    return ClientCas.from_der([c.public_bytes(serialization.Encoding.DER) for c in certificates])


class Pki:
    """A root, an intermediate it signed, and a client certificate the intermediate signed."""

    def __init__(self, root_name: str = "root") -> None:
        self.root_key, self.intermediate_key = _key(), _key()
        self.root = _certificate(root_name, self.root_key)
        self.intermediate = _certificate(
            "intermediate", self.intermediate_key, (root_name, self.root_key)
        )
        self.leaf = _certificate("agent", _key(), ("intermediate", self.intermediate_key), ca=False)

    def peer(self, *presented: x509.Certificate) -> PeerCertificate:
        return PeerCertificate(self.leaf, presented)


def test_a_client_is_verified_through_the_intermediates_it_presented() -> None:
    pki = Pki()
    assert _cas(pki.root).verifies(pki.peer(pki.intermediate), NOW) is True
    assert _cas(pki.root).verifies(pki.peer(), NOW) is False  # nothing links it to the root


def test_an_intermediate_in_the_client_ca_file_trusts_what_it_signed() -> None:
    """gRPC takes a partial chain: the root may be taken out while the intermediate stays."""
    pki = Pki()
    assert _cas(pki.intermediate).verifies(pki.peer(), NOW) is True
    assert _cas(pki.intermediate).verifies(pki.peer(pki.intermediate), NOW) is True


def test_a_client_whose_ca_was_taken_out_no_longer_verifies() -> None:
    pki, other = Pki(), Pki("another root")
    assert _cas(other.root).verifies(pki.peer(pki.intermediate), NOW) is False
    assert _cas(other.root, pki.root).verifies(pki.peer(pki.intermediate), NOW) is True


def test_a_ca_renewed_under_its_name_with_a_new_key_signs_nothing_of_the_old_one() -> None:
    """A rotation that keeps the CA's name (cert-manager's CA issuer, say) with a new key:
    the old clients' certificates name it as their issuer and are no longer trusted."""
    pki = Pki()
    renewed = _certificate("root", _key())
    assert _cas(renewed).verifies(pki.peer(pki.intermediate), NOW) is False
    same_key = _certificate("root", pki.root_key, not_after=NOW + 400 * DAY)
    assert _cas(same_key).verifies(pki.peer(pki.intermediate), NOW) is True


def test_every_certificate_on_the_way_is_judged_at_the_time_given() -> None:
    pki = Pki()
    cas = _cas(pki.root)
    assert cas.verifies(pki.peer(pki.intermediate), NOW + 2 * DAY) is False  # all expired
    expired_root = _certificate("root", pki.root_key, not_after=NOW - DAY / 2)
    assert _cas(expired_root).verifies(pki.peer(pki.intermediate), NOW) is False
    expired_leaf = _certificate(
        "agent", _key(), ("intermediate", pki.intermediate_key), not_after=NOW - DAY / 2
    )
    assert cas.verifies(PeerCertificate(expired_leaf, (pki.intermediate,)), NOW) is False


def test_an_issuer_that_is_no_ca_signs_nothing() -> None:
    """basicConstraints saying it is no CA (OpenSSL's ``X509_check_ca``); a certificate with
    none, as a v1 root, may sign."""
    key = _key()
    leaf = _certificate("agent", _key(), ("server", key), ca=False)
    assert _cas(_certificate("server", key, ca=False)).verifies(PeerCertificate(leaf), NOW) is False
    assert _cas(_certificate("server", key, ca=None)).verifies(PeerCertificate(leaf), NOW) is True


def test_what_cannot_be_read_cannot_be_told_unless_another_ca_signs_it() -> None:
    pki = Pki()
    unread = ClientCas.from_der([b"\x30\x03\x02\x01\x00"])
    assert unread.unread == 1
    assert unread.verifies(pki.peer(pki.intermediate), NOW) is None
    both = ClientCas(_cas(pki.root).cas, unread=1)
    assert both.verifies(pki.peer(pki.intermediate), NOW) is True
    assert _cas(pki.root).verifies(PeerCertificate(None), NOW) is None


def test_the_certificate_is_read_from_grpcs_auth_context() -> None:
    """A trustme certificate (a critical subjectAltName, no authorityKeyIdentifier on
    ``tests.certificates``'): ``cryptography``'s web-PKI verifier refuses such certificates,
    gRPC accepts them, and so does this check."""
    ca = trustme.CA()
    intermediate = ca.create_child_ca()
    leaf = intermediate.issue_cert("agent.example")
    pems = [pem.bytes() for pem in leaf.cert_chain_pems]
    peer = PeerCertificate.from_auth_context(
        {"x509_pem_cert": [pems[0]], "x509_pem_cert_chain": [b"".join(pems[1:])]}
    )
    assert peer is not None and len(peer.presented) == 1
    cas = ClientCas.from_der(
        [
            x509.load_pem_x509_certificate(ca.cert_pem.bytes()).public_bytes(
                serialization.Encoding.DER
            )
        ]
    )
    assert cas.verifies(peer, NOW) is True
    assert PeerCertificate.from_auth_context({"transport_security_type": [b"ssl"]}) is None
    assert PeerCertificate.from_auth_context({"x509_pem_cert": [b"junk"]}) == PeerCertificate(None)


def test_the_client_cas_served_include_trusted_certificate_blocks(tmp_path: Path) -> None:
    """OpenSSL and gRPC trust a ``TRUSTED CERTIFICATE`` block (a certificate and OpenSSL's
    trust settings); ``cryptography`` skips it: the CAs are taken as OpenSSL loaded them."""
    server, plain, trusted = trustme.CA(), trustme.CA(), trustme.CA()
    issued = server.issue_cert("127.0.0.1")
    cert, key, client_ca = tmp_path / "tls.crt", tmp_path / "tls.key", tmp_path / "ca.pem"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    der = x509.load_pem_x509_certificate(trusted.cert_pem.bytes()).public_bytes(
        serialization.Encoding.DER
    )
    block = base64.encodebytes(der + b"\x30\x00").decode()  # no trust settings
    client_ca.write_text(
        plain.cert_pem.bytes().decode()
        + f"-----BEGIN TRUSTED CERTIFICATE-----\n{block}-----END TRUSTED CERTIFICATE-----\n"
    )
    files = CertificateFiles(
        TlsSettings(cert_file=cert, key_file=key, client_ca_file=client_ca), ManualClock()
    )
    served = ClientCas.from_der(files.current.client_cas())
    assert served.unread == 0
    assert x509.load_der_x509_certificate(der) in served.cas
    assert len(served.cas) == 2
