"""Whether a client certificate, accepted at its handshake, still verifies against the client
CAs served now: what ends a findings stream whose client CA was taken out of
``tls.client_ca_file`` (``ListenerSecurity.still_trusted``, ``FindingsStreamServicer``).

A stream is one call for as long as its client runs, so unlike the other listeners'
connections (``toolwatch.connection_age``) it is never made again; its client certificate,
read from gRPC's auth context as it subscribes (``PeerCertificate``), is checked then and
again whenever the client CAs change (``ClientCas``).

The check asks what changed since the handshake accepted the certificate: whether one of the
client CAs served now still signs it, through the intermediates the client presented, every
certificate on the way valid now and each issuer a CA (its basicConstraints, if any, say
so, and its keyUsage, if any, allows signing certificates: OpenSSL's ``X509_check_ca``). A
CA anywhere on the way counts, as gRPC's verification takes a partial chain (an
intermediate in the client CA file trusts what it signed). A CA kept under the same name
with a new key signs nothing the old one did. It is not a second full verification: the
handshake made that, and ``cryptography``'s verifier (``x509.verification``) holds
certificates to the web PKI's profile, which refuses many that OpenSSL and gRPC accept (a
critical subjectAltName beside a subject, as trustme issues; no authorityKeyIdentifier), so
it would end streams whose CA is still trusted, at every reload.

What it cannot judge (a CA certificate OpenSSL loaded that ``cryptography`` cannot read, a
signature algorithm it does not support) it answers ``None``, and the caller keeps the
stream, and logs it: ending it would tell the client a refusal that may not be true.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm

__all__ = ["ClientCas", "PeerCertificate"]

#: The auth-context keys (gRPC core's ``GRPC_X509_PEM_CERT_PROPERTY_NAME`` and
#: ``GRPC_X509_PEM_CERT_CHAIN_PROPERTY_NAME``): the client's certificate, and the
#: intermediates it presented after it (the server side's peer chain holds no leaf).
_PEM_CERT = "x509_pem_cert"
_PEM_CERT_CHAIN = "x509_pem_cert_chain"
#: The most intermediates of a client's chain looked at (OpenSSL's default depth is 100; a
#: client CA rarely signs through more than two).
_MAX_PRESENTED = 16


@dataclass(frozen=True, slots=True)
class PeerCertificate:
    """A client's certificate and the intermediates it presented, as its handshake saw them;
    ``leaf`` is ``None`` when ``cryptography`` cannot read it (gRPC could)."""

    leaf: x509.Certificate | None
    presented: tuple[x509.Certificate, ...] = ()

    @classmethod
    def from_auth_context(
        cls, auth_context: Mapping[str, Iterable[bytes]]
    ) -> PeerCertificate | None:
        """The certificate a call's client presented (``context.auth_context()``), or
        ``None`` when it presented none (plaintext, or TLS without client certificates)."""
        leaf = list(auth_context.get(_PEM_CERT, ()))
        if not leaf:
            return None
        try:
            certificate = x509.load_pem_x509_certificate(leaf[0])
            chain = b"".join(auth_context.get(_PEM_CERT_CHAIN, ()))
            presented = x509.load_pem_x509_certificates(chain) if chain.strip() else []
        except ValueError:
            return cls(None)
        return cls(certificate, tuple(presented[:_MAX_PRESENTED]))


@dataclass(frozen=True, slots=True)
class ClientCas:
    """The client CA certificates served (``Certificates.client_cas``: DER, as OpenSSL
    loaded them), read by ``cryptography``; ``unread`` counts those it could not read.
    Equal sets are the same certificates, whatever their order in the file."""

    cas: frozenset[x509.Certificate]
    unread: int = 0

    @classmethod
    def from_der(cls, certificates: Sequence[bytes]) -> ClientCas:
        read: set[x509.Certificate] = set()
        unread = 0
        for der in certificates:
            try:
                read.add(x509.load_der_x509_certificate(der))
            except ValueError:
                unread += 1
        return cls(frozenset(read), unread)

    def verifies(self, peer: PeerCertificate, now: datetime.datetime) -> bool | None:
        """Whether one of these CAs signs ``peer``'s certificate at ``now`` (module doc);
        ``None`` when that cannot be told and none is found to."""
        if peer.leaf is None:
            return None
        if not _valid(peer.leaf, now):
            return False
        return self._anchored(peer.leaf, peer.presented, now, {peer.leaf})

    def _anchored(
        self,
        certificate: x509.Certificate,
        presented: tuple[x509.Certificate, ...],
        now: datetime.datetime,
        seen: set[x509.Certificate],
    ) -> bool | None:
        """Whether ``certificate`` (valid at ``now``) is one of the CAs or signed by one,
        directly or through ``presented``; each presented certificate is looked at once
        (``seen``)."""
        if certificate in self.cas:
            return True
        unknown = self.unread > 0
        for ca in self.cas:
            issued = _issued(certificate, ca)
            if issued and _valid(ca, now):
                return True
            unknown |= issued is None
        for parent in presented:
            if parent in seen:
                continue
            issued = _issued(certificate, parent)
            unknown |= issued is None
            if issued and _valid(parent, now):
                seen.add(parent)
                found = self._anchored(parent, presented, now, seen)
                if found:
                    return True
                unknown |= found is None
        return None if unknown else False


def _valid(certificate: x509.Certificate, now: datetime.datetime) -> bool:
    """Whether ``now`` is within the certificate's dates, both included (RFC 5280 4.1.2.5)."""
    return certificate.not_valid_before_utc <= now <= certificate.not_valid_after_utc


def _issued(certificate: x509.Certificate, issuer: x509.Certificate) -> bool | None:
    """Whether ``issuer``, a CA, signed ``certificate``; ``None`` when its signature cannot
    be checked (an algorithm or key ``cryptography`` does not support)."""
    if certificate.issuer != issuer.subject:
        return False
    try:
        if not _is_ca(issuer):
            return False
        certificate.verify_directly_issued_by(issuer)
    except InvalidSignature:
        return False
    except (ValueError, TypeError, UnsupportedAlgorithm):  # extensions it cannot read too
        return None
    return True


def _is_ca(certificate: x509.Certificate) -> bool:
    """Whether ``certificate`` may sign certificates, as OpenSSL's ``X509_check_ca`` has it:
    not when its basicConstraints say it is no CA, or its keyUsage leaves out keyCertSign
    (a certificate with neither, a v1 root, may)."""
    extensions = certificate.extensions
    try:
        if not extensions.get_extension_for_class(x509.BasicConstraints).value.ca:
            return False
    except x509.ExtensionNotFound:
        pass
    try:
        return extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    except x509.ExtensionNotFound:
        return True
