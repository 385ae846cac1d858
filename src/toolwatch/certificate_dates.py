"""When the served certificate is valid: its notBefore and notAfter dates.

OpenSSL loads a certificate whatever its dates, and clients refuse one that has expired or
is not valid yet: every handshake then fails. So ``serve`` refuses to start with an expired
certificate (``config.check_certificate``, also ``check-config``'s), and a reload of the
files keeps the previous set rather than take a certificate that is not valid now
(``tls.CertificateFiles``). Only the server's own certificate, the first of its chain, is
read: the rest of the chain is the clients' to judge.

The certificate and the client CA are also warned of before they expire (``expiry_warning``):
at start-up, by ``check-config``, and by the alerts on
``toolwatch_tls_certificate_expiry_timestamp_seconds`` and
``toolwatch_tls_certificate_not_before_timestamp_seconds``. The warning comes when less than
``EXPIRY_WARNING`` (14 days) and less than ``EXPIRY_WARNING_SHARE`` (a third) of the lifetime
is left: cert-manager renews at 2/3 of the lifetime by default, so a certificate past that
point was not renewed, while a short-lived one (a mesh's, for a day) is always under 14 days.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from cryptography import x509

__all__ = [
    "EXPIRY_WARNING",
    "EXPIRY_WARNING_SHARE",
    "CertificateDates",
    "certificate_dates",
    "expiry_warning",
    "first_to_expire",
    "utc_from_ns",
]

#: How long before it expires a certificate is warned of at most: ToolwatchCertificateExpiresSoon's
#: threshold (deploy/prometheus/toolwatch-rules.yaml) is the smaller of this ...
EXPIRY_WARNING = datetime.timedelta(days=14)
#: ... and this share of its lifetime (notBefore to notAfter): what is left when cert-manager
#: renews, by default.
EXPIRY_WARNING_SHARE = 1 / 3


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

    def warned_within(self) -> datetime.timedelta:
        """How long before ``not_after`` the certificate is warned of: ``EXPIRY_WARNING``, or
        ``EXPIRY_WARNING_SHARE`` of its lifetime when that is shorter."""
        return min(EXPIRY_WARNING, (self.not_after - self.not_before) * EXPIRY_WARNING_SHARE)

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


def first_to_expire(pem: bytes, now: datetime.datetime) -> CertificateDates | None:
    """The dates of the certificate in ``pem`` that stops working first after ``now``: of
    those valid at ``now``, the one with the earliest notAfter (a client CA file may hold
    several CAs: the first to expire is the first whose clients are refused). A CA that has
    expired beside a valid one verifies no one and is left out: a rotation keeps the old CA in
    the file. With none valid, the first to expire of those not valid yet, else the one that
    expired last. ``None`` when ``cryptography`` reads none there."""
    try:
        certificates = x509.load_pem_x509_certificates(pem)
    except ValueError:
        return None
    dates = [
        CertificateDates(certificate.not_valid_before_utc, certificate.not_valid_after_utc)
        for certificate in certificates
    ]
    valid = [d for d in dates if d.problem(now) is None]
    not_yet = [d for d in dates if now < d.not_before and now <= d.not_after]
    if valid or not_yet:
        return min(valid or not_yet, key=lambda d: d.not_after)
    return max(dates, key=lambda d: d.not_after)


def next_choice(pem: bytes, now: datetime.datetime) -> datetime.datetime | None:
    """The first moment after ``now`` at which ``first_to_expire`` may choose another of the
    certificates in ``pem``: the earliest of their notBefore and notAfter dates still to
    come (an old CA beside its successor expires, a new one becomes valid). ``None`` when no
    date is to come, or ``cryptography`` reads none."""
    try:
        certificates = x509.load_pem_x509_certificates(pem)
    except ValueError:
        return None
    coming = [
        moment
        for certificate in certificates
        for moment in (certificate.not_valid_before_utc, certificate.not_valid_after_utc)
        if moment > now
    ]
    return min(coming, default=None)


def expiry_warning(dates: CertificateDates, now: datetime.datetime) -> str | None:
    """When less than ``dates.warned_within()`` is left after ``now``: "expires at <date>, in
    <time left>" (or "expired at <date>"), else ``None``."""
    not_after = dates.not_after
    left = not_after - now
    if left >= dates.warned_within():
        return None
    if left < datetime.timedelta(0):
        return f"expired at {_shown(not_after)}"
    return f"expires at {_shown(not_after)}, in {_time_left(left)}"


def utc_from_ns(unix_ns: int) -> datetime.datetime:
    """A Unix time in nanoseconds as an aware UTC datetime."""
    return datetime.datetime.fromtimestamp(unix_ns / 1e9, datetime.UTC)


def _shown(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _time_left(left: datetime.timedelta) -> str:
    # Hours and minutes under a day: a certificate issued for an hour is warned of at 20 minutes.
    hours, minutes = left.seconds // 3600, left.seconds // 60 % 60
    return f"{left.days} days {hours} hours" if left.days else f"{hours} hours {minutes} minutes"
