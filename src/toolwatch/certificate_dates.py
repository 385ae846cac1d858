"""When the served certificate is valid: its notBefore and notAfter dates.

OpenSSL loads a certificate whatever its dates, and clients refuse one that has expired or
is not valid yet: every handshake then fails. So the configuration refuses to start with an
expired certificate (``config.TlsSettings``), and a reload keeps the previous set rather than
take a certificate that is not valid now (``tls.CertificateFiles``). Only the server's own
certificate, the first of its chain, is read: the rest of the chain is the clients' to judge.

The certificate and the client CA are also warned of two weeks before they expire
(``EXPIRY_WARNING``, ``expiry_warning``): at start-up, by ``check-config``, and by the alerts
on ``toolwatch_tls_certificate_expiry_timestamp_seconds``.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from cryptography import x509

__all__ = [
    "EXPIRY_WARNING",
    "CertificateDates",
    "certificate_dates",
    "earliest_expiry",
    "expiry_warning",
    "utc_from_ns",
]

#: How long before it expires a certificate is warned of: ToolwatchCertificateExpiresSoon's
#: threshold (deploy/prometheus/toolwatch-rules.yaml).
EXPIRY_WARNING = datetime.timedelta(days=14)


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


def earliest_expiry(pem: bytes) -> datetime.datetime | None:
    """The earliest notAfter of the certificates in ``pem`` (a client CA file may hold several
    CAs: the first to expire is the first whose clients are refused), or ``None`` when
    ``cryptography`` reads none there."""
    try:
        certificates = x509.load_pem_x509_certificates(pem)
    except ValueError:
        return None
    return min(certificate.not_valid_after_utc for certificate in certificates)


def expiry_warning(not_after: datetime.datetime, now: datetime.datetime) -> str | None:
    """When ``not_after`` is less than ``EXPIRY_WARNING`` after ``now``: "expires at <date>, in
    <time left>" (or "expired at <date>"), else ``None``."""
    left = not_after - now
    if left >= EXPIRY_WARNING:
        return None
    if left < datetime.timedelta(0):
        return f"expired at {_shown(not_after)}"
    return f"expires at {_shown(not_after)}, in {left.days} days {left.seconds // 3600} hours"


def utc_from_ns(unix_ns: int) -> datetime.datetime:
    """A Unix time in nanoseconds as an aware UTC datetime."""
    return datetime.datetime.fromtimestamp(unix_ns / 1e9, datetime.UTC)


def _shown(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")
