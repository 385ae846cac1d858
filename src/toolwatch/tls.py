"""TLS for the listeners: the certificate files, reloaded when they change, and what gRPC and
the HTTPS listeners are served from them.

``CertificateFiles`` holds the current set of files (certificate chain, key, client CA) and
re-reads them at most every ``tls.reload_seconds``. Each set is loaded once, and everything
is made from that one load: gRPC's certificate configuration (the PEM bytes) and the HTTPS
listeners' ``ssl.SSLContext`` per verify mode. A set that does not load (a half-written
rotation: the new certificate with the old key), or whose certificate is not valid now
(expired: a restored backup, a renewal job that wrote the old file; not valid yet: it is
taken at the first look once it is), keeps the previous set, is logged and counted; so gRPC
and HTTPS always serve the same, working set. Each set that becomes current is reported with
its certificate's and client CA's dates (``Certificates.dates``: the
``toolwatch_tls_certificate_expiry_timestamp_seconds`` and
``toolwatch_tls_certificate_not_before_timestamp_seconds`` gauges).

An HTTPS listener keeps serving the context it started with (``ServedContext.served``); that
context's SNI callback, called for every handshake (with or without SNI), hands each new
connection the current set's context. Nothing is ever loaded into a context in use: OpenSSL
loading into a live context that then fails has already dropped its key. Connections already
open keep the certificate they were made with. With a client CA, the HTTPS listeners speak
TLS 1.3 only and issue no session tickets, so that a client whose CA was taken out cannot
resume a session made before.

``FileWatch`` is the clock-driven look at files this and the token file share.

Threading: ``CertificateFiles`` is thread-safe (gRPC asks for certificates from its
threads); the SNI callback runs on the HTTPS listeners' event loop.
"""

from __future__ import annotations

import binascii
import datetime
import logging
import os
import re
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from toolwatch.certificate_dates import (
    CertificateDates,
    certificate_dates,
    first_to_expire,
    next_choice,
    utc_from_ns,
)
from toolwatch.config.security import TlsSettings
from toolwatch.model import Clock

__all__ = [
    "CertificateFiles",
    "Certificates",
    "FileWatch",
    "ServedContext",
    "server_credentials",
]

log = logging.getLogger(__name__)

_Signature = tuple[tuple[int, int, int], ...]


class FileWatch:
    """Files looked at no more than once every ``reload_seconds`` of ``clock`` time (so
    requests cause no file I/O in between). ``changed`` returns their state when a look
    finds that the inode, modification time or size of one of them differs from the state
    last ``accept``-ed, else ``None``; it raises ``OSError`` when one cannot be looked at."""

    __slots__ = ("_checked_ns", "_clock", "_paths", "_reload_ns", "_signature")

    def __init__(self, paths: Sequence[Path], reload_seconds: float, clock: Clock) -> None:
        self._paths = tuple(paths)
        self._reload_ns = int(reload_seconds * 1e9)
        self._clock = clock
        self._signature = self._stat()
        self._checked_ns = clock()

    def changed(self) -> _Signature | None:
        now = self._clock()
        if now - self._checked_ns < self._reload_ns:
            return None
        self._checked_ns = now
        signature = self._stat()
        return signature if signature != self._signature else None

    def accept(self, signature: _Signature) -> None:
        self._signature = signature

    def _stat(self) -> _Signature:
        return tuple(_file_state(path) for path in self._paths)


def _file_state(path: Path) -> tuple[int, int, int]:
    status = os.stat(path)
    return status.st_ino, status.st_mtime_ns, status.st_size


@dataclass(frozen=True, slots=True)
class Certificates:
    """One loaded set of TLS files as PEM bytes, and the HTTPS contexts made from it by
    verify mode; ``generation`` counts the sets loaded."""

    cert: bytes
    key: bytes
    client_ca: bytes | None
    generation: int
    contexts: Mapping[ssl.VerifyMode, ssl.SSLContext] = field(
        default_factory=dict, compare=False, repr=False
    )

    def dates(self, now: datetime.datetime | None = None) -> dict[str, CertificateDates]:
        """When the set stops working, and since when its certificates are valid, by file:
        ``certificate``, the served (leaf) certificate's; ``client_ca``, those of the client CA
        file's first CA to expire among those valid at ``now`` (the wall clock by default:
        ``certificate_dates.first_to_expire``). A file ``cryptography`` cannot read dates
        from, or no client CA, has none."""
        now = now or datetime.datetime.now(datetime.UTC)
        dates = {}
        served = certificate_dates(self.cert)
        if served is not None:
            dates["certificate"] = served
        ca = first_to_expire(self.client_ca, now) if self.client_ca is not None else None
        if ca is not None:
            dates["client_ca"] = ca
        return dates

    def client_ca_certificates(self) -> frozenset[bytes]:
        """The certificates of the client CA file, each the DER of its PEM block: what tells
        a set that took a client CA out from one that did not (``ListenerSecurity``). Every
        block a trust store reads counts, whether or not it is a CA (a client's own
        certificate pinned as one); a ``TRUSTED CERTIFICATE`` with OpenSSL's trust settings
        after it. Nothing is parsed: the TLS stack alone judges them. Empty without a client
        CA."""
        if self.client_ca is None:
            return frozenset()
        return frozenset(map(_decoded, _PEM_CERTIFICATE.findall(self.client_ca)))


#: A PEM certificate block of a label OpenSSL and BoringSSL (gRPC's) read a trusted
#: certificate from (``PEM_read_bio_X509_AUX``), and its base64 body.
_PEM_CERTIFICATE = re.compile(
    rb"-----BEGIN ((?:X509 |TRUSTED )?CERTIFICATE)-----(.*?)-----END \1-----", re.DOTALL
)


def _decoded(block: tuple[bytes, bytes]) -> bytes:
    """The DER of a PEM block (label, body); the body itself when it is no base64 (a file
    OpenSSL loaded holds none such: still, no input makes a reload raise)."""
    body = block[1]
    try:
        return binascii.a2b_base64(body)
    except binascii.Error:
        return body


class CertificateFiles:
    """The certificate chain, its key and the client CA of ``tls``, re-read when they change.

    ``refresh`` looks at the files no more than once every ``tls.reload_seconds`` of
    ``clock`` time and reloads them when one changed, making a server context for each of
    ``verify_modes`` (at least the default one: the check that the files load). A set that
    does not load, or whose certificate is not valid at ``wall_clock`` (Unix ns) time, keeps
    the previous set (``current``); the failure is logged and reported to ``on_failure``, and
    the set is tried again at the next look. Each set that becomes ``current``, the first at
    construction, is handed to ``on_served`` (under the lock: calls come in order, from
    whichever thread refreshed), and handed again at the first ``refresh`` after one of its
    client CAs expires or becomes valid, which changes its dates without changing a file.
    Raises ``OSError`` or ``ssl.SSLError`` at construction when the files do not load (their
    dates are the configuration's to check then: ``TlsSettings``). Thread-safe.
    """

    def __init__(
        self,
        tls: TlsSettings,
        clock: Clock,
        on_failure: Callable[[], None] = lambda: None,
        verify_modes: Iterable[ssl.VerifyMode] = (),
        wall_clock: Callable[[], int] = time.time_ns,
        *,
        on_served: Callable[[Certificates], None] = lambda _: None,
    ) -> None:
        self._tls = tls
        self._on_failure = on_failure
        self._on_served = on_served
        self._wall_clock = wall_clock
        self._modes = tuple(dict.fromkeys(verify_modes)) or (_default_mode(tls),)
        self._paths = [p for p in (tls.cert_file, tls.key_file, tls.client_ca_file) if p]
        self._lock = threading.Lock()
        self._watch = FileWatch(self._paths, tls.reload_seconds, clock)
        self.current = self._load(0)
        self._choice_changes_ns: int | None = None
        self._serve(self.current)

    def refresh(self) -> bool:
        """Reload the files if they changed; whether a new set is now ``current``."""
        with self._lock:
            try:
                signature = self._watch.changed()
                if signature is None:
                    self._serve_again_when_due()
                    return False
                loaded = self._load(self.current.generation + 1)
                self._check_dates(loaded.cert)
            except (OSError, ssl.SSLError, ValueError) as exc:
                log.error("keeping the previous TLS certificate: %s", exc)
                self._on_failure()
                return False
            self._watch.accept(signature)
            self.current = loaded
            self._serve(loaded)
        log.info("reloaded the TLS certificate %s", self._tls.cert_file)
        return True

    def _serve(self, served: Certificates) -> None:
        """Hand ``served`` to ``on_served``, and note when the client CA its dates name may
        change without the files changing (``certificate_dates.next_choice``)."""
        self._on_served(served)
        changes = (
            next_choice(served.client_ca, utc_from_ns(self._wall_clock()))
            if served.client_ca is not None
            else None
        )
        # A second after it: certificates are dated to the second, and valid through notAfter.
        due = None if changes is None else (int(changes.timestamp()) + 1) * 10**9
        self._choice_changes_ns = due

    def _serve_again_when_due(self) -> None:
        """Hand the current set to ``on_served`` again once the client CA its dates named may
        have changed: an old CA kept beside its successor expires while the files stay as
        they are, and its date would be reported (and page) until they changed."""
        due = self._choice_changes_ns
        if due is not None and self._wall_clock() >= due:
            self._serve(self.current)

    def _load(self, generation: int) -> Certificates:
        """The files' bytes, once OpenSSL has loaded those very bytes as server contexts."""
        tls = self._tls
        read = [path.read_bytes() for path in self._paths]
        # Raises on a certificate that is not the key's, or bad PEM.
        contexts = {mode: _server_context(tls, mode) for mode in self._modes}
        if [path.read_bytes() for path in self._paths] != read:
            raise OSError(f"{tls.cert_file} or its key changed while being read")
        client_ca = read[2] if len(read) > 2 else None
        return Certificates(read[0], read[1], client_ca, generation, contexts)

    def _check_dates(self, cert: bytes) -> None:
        """Raises ``ValueError`` naming the file and the dates when the certificate is not
        valid now: every client would refuse it."""
        dates = certificate_dates(cert)
        problem = dates.problem(utc_from_ns(self._wall_clock())) if dates else None
        if problem is not None:
            raise ValueError(f"{self._tls.cert_file}: {problem}")


class ServedContext:
    """What an HTTPS listener serves for one verify mode: ``served``, the context it started
    with, whose SNI callback hands each new connection the context of ``files``' current
    set. ``follow`` makes it take the current set (call it on the listener's loop)."""

    def __init__(self, files: CertificateFiles, verify_mode: ssl.VerifyMode) -> None:
        self._mode = verify_mode
        self.served = files.current.contexts[verify_mode]
        self._live = self.served
        self.served.sni_callback = self._select

    def follow(self, certificates: Certificates) -> None:
        self._live = certificates.contexts[self._mode]

    def _select(
        self, connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, served: Any
    ) -> None:
        if self._live is not served:
            connection.context = self._live


def _default_mode(tls: TlsSettings) -> ssl.VerifyMode:
    return ssl.CERT_REQUIRED if tls.client_ca_file is not None else ssl.CERT_NONE


def _server_context(tls: TlsSettings, verify_mode: ssl.VerifyMode) -> ssl.SSLContext:
    """A TLS 1.2+ server context from the files (TLS 1.3 with a client CA). Raises
    ``OSError``/``ssl.SSLError`` when they do not load."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(tls.cert_file, tls.key_file, password=lambda: b"")
    context.verify_mode = verify_mode
    if tls.client_ca_file is not None:
        context.load_verify_locations(cafile=tls.client_ca_file)
        # No resumption: a resumed session skips the client certificate's check, which a
        # client CA taken out would then not stop. TLS 1.3 resumes only with tickets, and
        # none are issued. TLS 1.2 also resumes by session id from the cache of the context
        # the listener started with, which a reload cannot reach and Python cannot turn
        # off: so no TLS 1.2 with a client CA.
        context.minimum_version = ssl.TLSVersion.TLSv1_3
        context.num_tickets = 0
    context.set_alpn_protocols(["http/1.1"])  # aiohttp serves HTTP/1.1 only
    return context


def _certificate_configuration(certificates: Certificates) -> Any:
    return grpc.ssl_server_certificate_configuration(
        [(certificates.key, certificates.cert)], root_certificates=certificates.client_ca
    )


class _CertificateFetcher:
    """gRPC's ``certificate_configuration_fetcher``: called before every TLS handshake of a
    new connection, it returns the new configuration when the files changed, else ``None``
    (keep the current one)."""

    def __init__(self, files: CertificateFiles) -> None:
        self._files = files
        self._served = files.current.generation

    def __call__(self) -> Any:
        self._files.refresh()
        current = self._files.current
        if current.generation == self._served:
            return None
        self._served = current.generation
        return _certificate_configuration(current)


def server_credentials(files: CertificateFiles) -> grpc.ServerCredentials:
    """gRPC server credentials that follow ``files``; client certificates are required when
    there is a client CA."""
    current = files.current
    return grpc.dynamic_ssl_server_credentials(
        _certificate_configuration(current),
        _CertificateFetcher(files),
        require_client_authentication=current.client_ca is not None,
    )
