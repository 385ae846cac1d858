"""The ``security:`` section: TLS and bearer-token authentication of the listeners, the checks
of the files they name (certificate, key, client CA, token file) and their certificates'
dates, and ``read_token_file``, which the running server's token checks share.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
import ssl
from pathlib import Path

from pydantic import Field, ValidationInfo, field_validator, model_validator

from toolwatch.certificate_dates import (
    CertificateDates,
    certificate_dates,
    expiry_warning,
    first_to_expire,
)
from toolwatch.config.errors import _not_utf8
from toolwatch.config.listen import LISTENERS, Listener
from toolwatch.sections import FilePath, Seconds
from toolwatch.sections import Section as _Section

__all__ = [
    "AuthSettings",
    "SecuritySettings",
    "TlsSettings",
    "read_token_file",
]


# RFC 6750 section 2.1: b64token = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
_BEARER_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


def read_token_file(path: Path) -> tuple[str, ...]:
    """The bearer tokens in ``path``, one per line (blank lines, ``#`` comment lines and
    surrounding whitespace ignored: ``#`` is no token character; several tokens let clients
    move to a new one before the old one is removed).
    Raises ``OSError`` when the file cannot be read and ``ValueError`` naming the file and
    line (never the token) when it holds no token or a line is not an RFC 6750 token."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(_not_utf8(path, exc)) from None
    tokens = []
    for number, line in enumerate(text.splitlines(), start=1):
        token = line.strip()
        if token.startswith("#"):
            continue
        if token and not _BEARER_TOKEN.fullmatch(token):
            raise ValueError(f"{path}: line {number} is not a bearer token (RFC 6750 b64token)")
        if token:
            tokens.append(token)
    if not tokens:
        raise ValueError(f"{path}: holds no bearer token (one per line)")
    return tuple(tokens)


#: The validation context key that, false, leaves the files ``security`` names unread
#: (``load_config``'s ``security_files``).
_SECURITY_FILES = "security_files"


def _reads_security_files(info: ValidationInfo) -> bool:
    """Whether this validation reads the files ``security`` names (``load_config``)."""
    context = info.context
    return not isinstance(context, dict) or context.get(_SECURITY_FILES, True) is not False


def _readable(path: Path) -> Path:
    try:
        with path.open("rb"):
            return path
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _dates(path: Path) -> CertificateDates | None:
    try:
        return certificate_dates(path.read_bytes())
    except OSError:  # said by the check that the files load
        return None


def _first_to_expire(path: Path, now: datetime.datetime) -> CertificateDates | None:
    try:
        return first_to_expire(path.read_bytes(), now)
    except OSError:  # as _dates
        return None


def _dates_unread(field: str, path: Path) -> str:
    # OpenSSL loads PEM that ``cryptography`` does not read, e.g. "TRUSTED CERTIFICATE".
    return (
        f"security.tls.{field} {path}: no certificate dates can be read from it (PEM that"
        " OpenSSL loads but cryptography does not, such as a TRUSTED CERTIFICATE block): it"
        " is served, but neither warned of before it expires nor reported in"
        " toolwatch_tls_certificate_expiry_timestamp_seconds; write it as plain CERTIFICATE"
        " blocks"
    )


def _ssl_reason(exc: ssl.SSLError | OSError) -> str:
    reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None)
    return str(reason or exc).replace("_", " ").lower()


def _no_password() -> bytes:
    # Without a callback OpenSSL would prompt on the terminal for an encrypted key.
    return b""


class TlsSettings(_Section):
    """TLS on the listeners named in ``listeners`` (all four by default). PEM files, checked
    for changes at most every ``reload_seconds`` and reloaded when they changed (new
    connections get the new certificate; a set that does not load, or whose certificate is
    not valid then, keeps the previous one). An expired certificate is refused at start-up
    and by check-config (``check_certificate``), not when a reload validates the file again:
    security is restart-only, and the running set is kept whatever the file's dates
    (``tls.CertificateFiles`` refuses an expired one itself). One not valid yet, or one or a
    client CA with less than 14 days and less than a third of its lifetime left, is warned of
    (``Config.warnings``).
    The private key must not be encrypted. ``client_ca_file`` turns on mutual TLS: those
    listeners then accept only clients whose certificate that CA signed. ``client_names``
    narrows that to certificates naming one of them
    (``toolwatch.client_certificates.ClientNames``): a CA shared with other services signs
    their certificates too."""

    cert_file: FilePath
    key_file: FilePath
    client_ca_file: FilePath | None = None
    client_names: tuple[str, ...] = ()
    listeners: tuple[Listener, ...] = LISTENERS
    # Above 240, ToolwatchSecurityFilesNotReloaded may miss a failure (Config.warnings).
    reload_seconds: Seconds = Field(60.0, gt=0, le=3600)

    @field_validator("listeners")
    @classmethod
    def _some_listener(cls, listeners: tuple[Listener, ...]) -> tuple[Listener, ...]:
        return _named_listeners(listeners, "TLS")

    @field_validator("client_names")
    @classmethod
    def _client_names(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            if not name or name != name.strip():
                raise ValueError(
                    f"{name!r}: a client name is a certificate's common name, DNS name, URI"
                    " or email address, written as in the certificate (no blanks around it)"
                )
            try:
                ipaddress.ip_address(name)
            except ValueError:
                continue
            raise ValueError(
                f"{name!r} is an IP address: a client is named by its certificate's common"
                " name or a DNS, URI or email subject alternative name, not by an address"
            )
        return tuple(dict.fromkeys(names))

    @field_validator("cert_file", "key_file", "client_ca_file")
    @classmethod
    def _file(cls, path: Path | None, info: ValidationInfo) -> Path | None:
        if path is None or not _reads_security_files(info):
            return path
        return _readable(path)

    def expired(self, now: datetime.datetime) -> str | None:
        """Why the certificate cannot start a server at ``now``: it has expired, and every
        client would refuse it; else ``None``. One not valid yet is only warned of
        (``not_valid_yet``): a clock a little behind the CA's must not stop start-up."""
        dates = _dates(self.cert_file)
        if dates is None or now <= dates.not_after:
            return None
        return (
            f"{self.cert_file}: {dates.problem(now)}: every client would refuse it; install a"
            " renewed certificate"
        )

    def not_valid_yet(self, now: datetime.datetime) -> str | None:
        """What to warn of when the certificate is not valid yet at ``now``, else ``None``."""
        dates = _dates(self.cert_file)
        if dates is None or now >= dates.not_before:
            return None
        return (
            f"security.tls.cert_file {self.cert_file}: {dates.problem(now)}: until then clients"
            " whose clocks agree with this machine's refuse it"
        )

    def expiring(self, now: datetime.datetime) -> list[str]:
        """What to warn of when the certificate, or the first CA of the client CA file to
        expire, has less than 14 days and less than a third of its lifetime left at ``now``
        (``certificate_dates.expiry_warning``); or when the dates of either cannot be read."""
        said = []
        dates = _dates(self.cert_file)
        if dates is None:
            said.append(_dates_unread("cert_file", self.cert_file))
        when = expiry_warning(dates, now) if dates is not None else None
        if when is not None:
            said.append(
                f"security.tls.cert_file {self.cert_file}: the certificate {when}: every client"
                " refuses it from then on; renew it (toolwatch takes the renewed file within"
                " tls.reload_seconds, without a restart)"
            )
        ca = self.client_ca_file
        first = _first_to_expire(ca, now) if ca is not None else None
        if ca is not None and first is None:
            said.append(_dates_unread("client_ca_file", ca))
        when = expiry_warning(first, now) if first is not None else None
        if when is not None:
            said.append(
                f"security.tls.client_ca_file {ca}: a CA certificate in it {when}: the client"
                " certificates it signed are refused from then on; renew it, and them"
            )
        return said

    @model_validator(mode="after")
    def _names_need_a_client_ca(self) -> TlsSettings:
        if self.client_names and self.client_ca_file is None:
            raise ValueError(
                "client_names needs client_ca_file: without mutual TLS no client shows a"
                " certificate to take a name from"
            )
        return self

    @model_validator(mode="after")
    def _files_load(self, info: ValidationInfo) -> TlsSettings:
        if not _reads_security_files(info):
            return self
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(self.cert_file, self.key_file, password=_no_password)
        except (ssl.SSLError, OSError) as exc:
            raise ValueError(
                f"{self.cert_file} with key {self.key_file}: not a PEM certificate chain and "
                f"its unencrypted private key ({_ssl_reason(exc)})"
            ) from None
        if self.client_ca_file is not None:
            try:
                context.load_verify_locations(cafile=self.client_ca_file)
            except (ssl.SSLError, OSError) as exc:
                raise ValueError(
                    f"{self.client_ca_file}: not a PEM CA certificate ({_ssl_reason(exc)})"
                ) from None
        return self


def _named_listeners(listeners: tuple[Listener, ...], what: str) -> tuple[Listener, ...]:
    if not listeners:
        raise ValueError(
            f"names no listener, so {what} would guard none: name some of"
            f" {', '.join(LISTENERS)}, or leave the section out"
        )
    return listeners


class AuthSettings(_Section):
    """Bearer tokens (RFC 6750) required on the listeners named in ``listeners``.

    ``bearer_token_file`` holds the accepted tokens, one per line; it is checked for changes
    at most every ``reload_seconds`` and re-read when it changed. ``/metrics`` needs the
    token only when ``metrics`` is listed; ``/healthz``, ``/readyz`` and the gRPC health
    check (``Check``; its ``Watch`` stream does) never do (kubelet probes cannot send one).
    """

    bearer_token_file: FilePath
    reload_seconds: Seconds = Field(10.0, gt=0, le=3600)  # as TlsSettings.reload_seconds
    listeners: tuple[Listener, ...] = ("grpc", "http", "stream")

    @field_validator("listeners")
    @classmethod
    def _some_listener(cls, listeners: tuple[Listener, ...]) -> tuple[Listener, ...]:
        return _named_listeners(listeners, "bearer tokens")

    @field_validator("bearer_token_file")
    @classmethod
    def _has_tokens(cls, path: Path, info: ValidationInfo) -> Path:
        if not _reads_security_files(info):
            return path
        try:
            read_token_file(path)
        except OSError as exc:
            raise ValueError(f"{path}: cannot read: {exc.strerror or exc}") from None
        return path


class SecuritySettings(_Section):
    """TLS and bearer-token authentication of the listeners; both off by default (the
    default listeners are loopback-only)."""

    tls: TlsSettings | None = None
    auth: AuthSettings | None = None

    def uses_tls(self, listener: str) -> bool:
        return self.tls is not None and listener in self.tls.listeners

    def uses_auth(self, listener: str) -> bool:
        return self.auth is not None and listener in self.auth.listeners

    def exposure(self, listener: str) -> str | None:
        """What is wrong with ``listener`` if it is reachable beyond loopback, or ``None``.
        The metrics listener may go without client authentication (scrapes often do)."""
        tls, auth = self.uses_tls(listener), self.uses_auth(listener)
        if not tls and not auth:
            return "without TLS or authentication"
        if not tls:
            return "without TLS: its bearer tokens cross the network in clear text"
        mutual = self.tls is not None and self.tls.client_ca_file is not None
        if not auth and not mutual and listener != "metrics":
            return "with TLS but no client authentication: any client that reaches it is served"
        return None
