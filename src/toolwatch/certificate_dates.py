"""When the served certificate is valid: its notBefore and notAfter dates.

OpenSSL loads a certificate whatever its dates, and clients refuse one that has expired or
is not valid yet: every handshake then fails. So the configuration refuses to start with an
expired certificate (``config.TlsSettings``), and a reload keeps the previous set rather than
take a certificate that is not valid now (``tls.CertificateFiles``). Only the server's own
certificate, the first of its chain, is read: the rest of the chain is the clients' to judge.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from cryptography import x509

__all__ = ["CertificateDates", "certificate_dates", "utc_from_ns"]


@dataclass(frozen=True, slots=True)
class CertificateDates:
    """A certificate's validity period, both ends included (RFC 5280 section 4.1.2.5)."""

    not_before: datetime.datetime
    not_after: datetime.datetime

    def problem(self, now: datetime.datetime) -> str | None:
        """Why the certificate is not valid at ``now``, with its dates; ``None`` when it is."""
        if now > self.not_after:
            return f"the certificate expired at {_shown(self.not_after)} ({self})"
        if now < self.not_before:
            return f"the certificate is not valid until {_shown(self.not_before)} ({self})"
        return None

    def __str__(self) -> str:
        return f"valid from {_shown(self.not_before)} to {_shown(self.not_after)}"


def certificate_dates(pem: bytes) -> CertificateDates | None:
    """The dates of the first certificate in ``pem`` (a chain starts with its leaf), or
    ``None`` when ``cryptography`` cannot read one there (OpenSSL judges the file)."""
    try:
        certificate = x509.load_pem_x509_certificate(pem)
        return CertificateDates(certificate.not_valid_before_utc, certificate.not_valid_after_utc)
    except ValueError:
        return None


def utc_from_ns(unix_ns: int) -> datetime.datetime:
    """A Unix time in nanoseconds as an aware UTC datetime."""
    return datetime.datetime.fromtimestamp(unix_ns / 1e9, datetime.UTC)


def _shown(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")
