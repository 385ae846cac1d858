"""Transport security and bearer-token authentication of the listeners.

``ListenerSecurity`` turns the validated ``security`` section into what each server needs: gRPC
server credentials and an auth interceptor (OTLP/gRPC, findings stream), an ``ssl.SSLContext``
and an auth middleware (OTLP/HTTP, metrics); the certificates themselves are
``toolwatch.tls``'s, the bearer-token checks ``toolwatch.bearer_tokens``'. With
``tls.client_ca_file`` every listener requires a client certificate signed by that CA (mutual
TLS), except that the metrics listener lets a client without one finish the handshake and
answers it only on ``/healthz`` and ``/readyz`` (403 elsewhere, counted with
``PipelineMetrics.auth_failed(listener)``). A client refused at the handshake (no certificate
where one is required, an expired one, one the client CA did not sign) is refused by OpenSSL or
gRPC before any of this code runs: not counted; the HTTP listeners' sender log tells it
(``toolwatch.connection_gate``), nothing on the gRPC listeners (gRPC offers no hook on a failed
handshake); its own error says why. With ``tls.client_names`` too, the certificate must name
one of them (``toolwatch.client_certificates``' ``ClientNames``): any other is answered
PERMISSION_DENIED (gRPC) or 403 (HTTP), with no detail, before any request message or body is
read and whatever its bearer token or method (so it learns nothing of either), and counted with
``PipelineMetrics.auth_failed(listener)``.

Authentication follows RFC 6750: the client sends ``authorization: Bearer <token>``
(gRPC metadata or HTTP header). A missing or wrong token is answered UNAUTHENTICATED (gRPC)
or 401 with ``WWW-Authenticate: Bearer realm="toolwatch"`` (HTTP), with no detail saying
which, and counted with ``PipelineMetrics.auth_failed(listener)``. The gRPC health check
(``Check``; not ``Watch``, a stream) and the metrics listener's ``/healthz`` and ``/readyz``
stay open: kubelet probes cannot send a token.

Every refusal of these checks is also told to a ``toolwatch.senders.SenderLog`` (the
listener's, with the peer's address and its certificate's names; the reason
``unauthenticated`` or ``permission_denied``, and whether a token was sent, never the token):
a warning per reason and listener at most once a minute says who is refused.

Tokens live in a file (``toolwatch.bearer_tokens.TokenFile``), one per line so a new token can
be added before the old one is removed; the file is re-read when it changes, without a restart.
So are the certificate, its key and the client CA (``toolwatch.tls.CertificateFiles``): a
rotated certificate (by cert-manager, say) is served on new connections — gRPC takes it at the
next handshake, the HTTPS listeners at the next ``ListenerSecurity.refresh`` (the server's
tick); the connections open before it are closed at their age (``toolwatch.connection_age``;
not the findings stream's, whose calls are ended and connections closed, for their clients to
connect again, when a reload takes a client CA out: ``on_client_ca_removed``). A file that
changed and cannot be used (a certificate that is not valid now included) keeps the previous
one and is counted with ``PipelineMetrics.reload_failed``; the dates of the certificate and
client CA served (since when they are valid, when they expire) are reported at start-up and at
each reload that took a new set (``PipelineMetrics.certificates_served``).

Threading: the interceptors and middlewares run on the servers' event loop; ``TokenFile``
is not thread-safe.
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import grpc
from aiohttp.typedefs import Middleware

from toolwatch.bearer_tokens import (
    BearerTokenInterceptor,
    TokenFile,
    bearer_token_middleware,
    token_in,
)
from toolwatch.certificate_dates import utc_from_ns
from toolwatch.client_certificates import (
    ClientNameInterceptor,
    ClientNames,
    client_certificate_middleware,
    client_name_middleware,
)
from toolwatch.config.security import SecuritySettings
from toolwatch.metrics import PipelineMetrics
from toolwatch.model import Clock
from toolwatch.senders import SenderLog
from toolwatch.tls import (
    CertificateFiles,
    Certificates,
    ServedContext,
    server_credentials,
)

__all__ = ["ListenerSecurity"]

#: Asked of a long-lived call: is the token it opened with still accepted?
#: (``ListenerSecurity.still_accepted``)
StillAccepted = Callable[[], bool]


class ListenerSecurity:
    """What protects each listener (``grpc``, ``http``, ``metrics``, ``stream``), built once
    from ``settings``: every file is read here, so an unusable one stops start-up. Reloads
    are timed with ``clock``, a reloaded certificate's dates judged at ``wall_clock`` (Unix
    ns) time; refusals are counted on ``metrics`` and told, with their senders, to ``senders``
    (the app's, on its clock, shared with the receivers)."""

    def __init__(
        self,
        settings: SecuritySettings,
        clock: Clock,
        metrics: PipelineMetrics,
        wall_clock: Callable[[], int] = time.time_ns,
        *,
        senders: SenderLog,
    ) -> None:
        self._settings = settings
        self._metrics = metrics
        self._senders = senders
        tls, auth = settings.tls, settings.auth
        # HTTPS contexts by verify mode. With a client CA the metrics listener lets a client
        # without a certificate finish the handshake, so that probes (which have none) reach
        # /healthz and /readyz; ``client_certificate_middleware`` refuses it every other path.
        modes = [self._verify_mode(listener) for listener in tls.listeners] if tls else []
        self._wall_clock = wall_clock
        # The client CAs of every set served since ``refresh`` last looked (``_served``),
        # and those of the set current then, of its generation.
        self._served_lock = threading.Lock()
        self._served_client_cas: set[bytes] = set()
        self._client_cas: tuple[int, frozenset[bytes]] = (-1, frozenset())
        self._certificates = (
            CertificateFiles(
                tls,
                clock,
                lambda: metrics.reload_failed("certificate"),
                modes,
                wall_clock,
                on_served=self._served,
            )
            if tls is not None
            else None
        )
        files = self._certificates
        self._contexts = {mode: ServedContext(files, mode) for mode in modes} if files else {}
        self._names = (
            ClientNames(tls.client_names) if tls is not None and tls.client_names else None
        )
        self._context_generation = 0
        self._on_client_ca_removed: list[Callable[[], object]] = []
        self._tokens = (
            TokenFile(
                auth.bearer_token_file,
                auth.reload_seconds,
                clock,
                lambda: metrics.reload_failed("tokens"),
            )
            if auth is not None
            else None
        )

    def refresh(self) -> None:
        """Reload the token file and the TLS files if they changed (a token file is also
        looked at when a call is checked; a stream that sends nothing is not), and have the
        HTTPS listeners' new connections take the set gRPC serves (a removed client CA is no
        longer trusted there); when a client CA of a set served since the last look is not
        in the set served now, the lasting calls' clients are told to connect again
        (``on_client_ca_removed``). Call it on the event loop that serves them (the server's
        tick does)."""
        if self._tokens is not None:
            self._tokens.refresh()
        files = self._certificates
        if files is None:
            return
        files.refresh()
        current = files.current  # gRPC's handshakes may have taken it since the last look
        if current.generation != self._context_generation:
            for served in self._contexts.values():
                served.follow(current)
            self._context_generation = current.generation
        with self._served_lock:
            # The set current now read under the lock: one a handshake takes meanwhile is
            # either in it (its ``_served`` came first) or noted for the next look.
            now = self._client_cas_of(files.current)
            served_since, self._served_client_cas = self._served_client_cas, set(now)
        if served_since - now:
            for callback in self._on_client_ca_removed:
                callback()

    def _client_cas_of(self, current: Certificates) -> frozenset[bytes]:
        """``current``'s client CA certificates, read once for each set (``refresh`` asks at
        every tick)."""
        generation, client_cas = self._client_cas
        if generation != current.generation:
            client_cas = current.client_ca_certificates()
            self._client_cas = current.generation, client_cas
        return client_cas

    def _served(self, served: Certificates) -> None:
        """``CertificateFiles``' ``on_served``: a set becomes current, on whichever thread
        reloaded it (the tick's, or one of gRPC's, whose certificate fetcher reloads the
        files before a handshake). Its dates are reported, and its client CAs noted, so that
        ``refresh`` finds a CA taken out whichever sets were served in between: one added
        and taken out again between two ticks let clients in all the same."""
        self._metrics.certificates_served(served.dates(utc_from_ns(self._wall_clock())))
        with self._served_lock:
            self._served_client_cas |= served.client_ca_certificates()

    def _verify_mode(self, listener: str) -> ssl.VerifyMode:
        tls = self._settings.tls
        if tls is None or tls.client_ca_file is None:
            return ssl.CERT_NONE
        return ssl.CERT_OPTIONAL if listener == "metrics" else ssl.CERT_REQUIRED

    def grpc_credentials(self, listener: str) -> grpc.ServerCredentials | None:
        """Credentials for a secure port, or ``None`` for plaintext."""
        files = self._certificates
        return server_credentials(files) if files and self._settings.uses_tls(listener) else None

    def grpc_interceptors(self, listener: str) -> tuple[grpc.aio.ServerInterceptor, ...]:
        # The name first: it wraps what the token check returns, its refusal included.
        interceptors: list[grpc.aio.ServerInterceptor] = []
        if self._names is not None and self._settings.uses_tls(listener):
            interceptors.append(
                ClientNameInterceptor(self._names, self._metrics, listener, senders=self._senders)
            )
        if self._tokens is not None and self._settings.uses_auth(listener):
            interceptors.append(
                BearerTokenInterceptor(self._tokens, self._metrics, listener, senders=self._senders)
            )
        return tuple(interceptors)

    def still_accepted(
        self, listener: str, metadata: Iterable[tuple[str, Any]] | None
    ) -> StillAccepted | None:
        """For a call that lasts (a findings stream): whether the token it opened with, in its
        ``metadata``, is still accepted (``auth_failed`` counts what the caller ends). The
        caller asks it before each message and whenever the tokens change
        (``on_tokens_changed``), so taking a token out of the file ends the streams it
        opened, not only new calls. ``None`` when ``listener`` takes no token."""
        tokens = self._tokens
        if tokens is None or not self._settings.uses_auth(listener):
            return None
        token = token_in(metadata)
        return lambda: tokens.accepts(token)

    def on_client_ca_removed(self, listener: str, callback: Callable[[], object]) -> None:
        """Call ``callback`` at each ``refresh`` that finds the client CA file of the set
        served now lacking a certificate of a set served since the last ``refresh`` (the
        one served then, and any gRPC's handshakes took in between), compared by DER: one
        added, the same ones written again or in another order, or another file changed, is
        no removal. Only when ``listener`` takes client certificates. Its lasting calls
        (findings streams) were accepted by a handshake against the CAs served then: the
        callback ends them and closes their connections, and their clients' new handshakes
        decide with the CAs served now."""
        tls = self._settings.tls
        if tls is not None and tls.client_ca_file is not None and self._settings.uses_tls(listener):
            self._on_client_ca_removed.append(callback)

    def on_tokens_changed(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when a reload changes the accepted tokens (at ``refresh``, or
        when a call is checked)."""
        if self._tokens is not None:
            self._tokens.on_change(callback)

    def auth_failed(self, listener: str) -> None:
        """Count a call ``listener`` ended for its token."""
        self._metrics.auth_failed(listener)

    def ssl_context(self, listener: str) -> ssl.SSLContext | None:
        if not self._settings.uses_tls(listener):
            return None
        return self._contexts[self._verify_mode(listener)].served

    def http_middlewares(
        self, listener: str, open_paths: frozenset[str] = frozenset()
    ) -> tuple[Middleware, ...]:
        middlewares: list[Middleware] = []
        tls = self._settings.uses_tls(listener)
        if tls and self._verify_mode(listener) is ssl.CERT_OPTIONAL:
            middlewares.append(
                client_certificate_middleware(
                    self._metrics, listener, open_paths, senders=self._senders
                )
            )
        if tls and self._names is not None:
            middlewares.append(
                client_name_middleware(
                    self._names, self._metrics, listener, open_paths, senders=self._senders
                )
            )
        if self._tokens is not None and self._settings.uses_auth(listener):
            middlewares.append(
                bearer_token_middleware(
                    self._tokens, self._metrics, listener, open_paths, senders=self._senders
                )
            )
        return tuple(middlewares)
